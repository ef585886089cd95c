"""Koordinator v1.8 user manual ``capacity-scheduling`` ("Hierarchical Elastic Quota"),
replayed through ``koordpy simulate``.

Replayed: "Quick Start by Label" and "Quick Start by Namespace" (the quota's ``status.used``
and its runtime/request/shared-weight annotations once the pod runs), "Advanced
Configurations" (a child of a parent group with its own shared weight), the five "WebHook
Verify" refusals (each names its field and value, and what was stored before stays), "used >
runtime revoke" (the page's ``koord-scheduler-config`` with ``monitorAllQuotas``: a quota that
borrowed the min of another gives its lowest-priority pods back once that quota's pods come,
after ``delayEvictTime``; the non-preemptible pod of the page stays, and is held to the quota's
min), and "multi quota tree" from step 2 on: the tree's root quota as the page shows it,
applied as a manifest (the ElasticQuotaProfile of step 1, which writes it in Koordinator, is not
served by koordpy), then its child, with the page's empty ``annotations:`` key (no annotations,
as Kubernetes reads it), and the child's pod, with the ``child-request`` the page shows.

The page writes some label values as bare YAML booleans (``is-parent: true``); Kubernetes
refuses those (a label value is a string) and so does koordpy, naming the field: the tests
quote them, as a manifest Kubernetes accepts must. The page's scheduler configuration is a
``kubescheduler.config.k8s.io/v1beta2`` document, a version koord-scheduler v1.8 no longer
reads: koordpy refuses it naming the field, and the revocation is replayed with the same
document at ``v1``. The page elides the rest of its profile (``filter: ...``); the test leaves
that line out and names the profile ``koord-scheduler``, as the chart does. Not replayed: the
quota debug API (a scheduler HTTP endpoint) and the RBAC rules (koordpy has no RBAC).
"""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from apis import codec
from apis.errors import DecodeError
from apis.quota import ElasticQuota
from controller import simulate as sim
from controller.errors import Invalid, StoreError
from controller.store.sqlite import Store
from tests.manuals.replay import Cluster, Outcome, node, replay

QUOTA_BY_LABEL = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: quota-example
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/parent: ""
    quota.scheduling.koordinator.sh/is-parent: "false"
spec:
  max:
    cpu: 40
    memory: 40Gi
  min:
    cpu: 10
    memory: 20Mi
"""

POD_BY_LABEL = """
apiVersion: v1
kind: Pod
metadata:
  name: pod-example
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/name: "quota-example"
spec:
  schedulerName: koord-scheduler
  containers:
  - command:
    - sleep
    - 365d
    image: busybox
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 40m
        memory: 40Mi
      requests:
        cpu: 40m
        memory: 40Mi
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  restartPolicy: Always
"""

QUOTA_BY_NAMESPACE = QUOTA_BY_LABEL.replace("namespace: default", "namespace: quota-example")
POD_BY_NAMESPACE = POD_BY_LABEL.replace("namespace: default", "namespace: quota-example").replace(
    '  labels:\n    quota.scheduling.koordinator.sh/name: "quota-example"\n', ""
)

PARENT = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: quota-parent-example
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/is-parent: "true"
spec:
  max:
    cpu: 40
    memory: 40Gi
  min:
    cpu: 10
    memory: 20Mi
"""


def child(min_cpu: int = 10, *, extra_max: str = "") -> str:
    return f"""
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: quota-example
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/is-parent: "false"
    quota.scheduling.koordinator.sh/parent: "quota-parent-example"
spec:
  max:
    cpu: 40
    memory: 40Gi{extra_max}
  min:
    cpu: {min_cpu}
    memory: 20Mi
"""


def annotation(outcome_quota: Any, key: str) -> Any:
    return json.loads(
        outcome_quota["metadata"]["annotations"][f"quota.scheduling.koordinator.sh/{key}"]
    )


def assert_quota_shows_the_pod(quota: Any) -> None:
    """What step 3 of both quick starts shows of ``quota-example``."""
    assert quota["status"]["used"] == {"cpu": "40m", "memory": "40Mi"}
    assert annotation(quota, "request") == {"cpu": "40m", "memory": "40Mi"}
    assert annotation(quota, "runtime") == {"cpu": "40m", "memory": "40Mi"}
    assert annotation(quota, "shared-weight") == {"cpu": "40", "memory": "40Gi"}
    # Not on the page's v0.7 output; v1.8 writes it: what the quota's pods ask.
    assert annotation(quota, "child-request") == {"cpu": "40m", "memory": "40Mi"}
    labels = quota["metadata"]["labels"]
    assert labels["quota.scheduling.koordinator.sh/parent"] == "koordinator-root-quota"
    assert labels["quota.scheduling.koordinator.sh/is-parent"] == "false"
    assert quota["spec"] == {
        "min": {"cpu": "10", "memory": "20Mi"},
        "max": {"cpu": "40", "memory": "40Gi"},
    }


def test_quick_start_by_label() -> None:
    """The pod labelled with the quota's name runs and is counted in the quota."""
    out = replay(node("node-1"), QUOTA_BY_LABEL, POD_BY_LABEL)
    pod = out.wire("Pod", "pod-example", "default")
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == "node-1"
    assert pod["spec"]["priority"] == 0
    assert_quota_shows_the_pod(out.wire("ElasticQuota", "quota-example", "default"))


def test_quick_start_by_namespace() -> None:
    """A pod without the label is charged to the quota named like its namespace (the page's
    ``kubectl create ns`` has no manifest: koordpy's namespaces exist as objects name them)."""
    out = replay(node("node-1"), QUOTA_BY_NAMESPACE, POD_BY_NAMESPACE)
    assert out.wire("Pod", "pod-example", "quota-example")["status"]["phase"] == "Running"
    assert_quota_shows_the_pod(out.wire("ElasticQuota", "quota-example", "quota-example"))


def test_a_finished_pod_is_no_longer_used() -> None:
    """``status.used`` counts assigned pods that have not terminated."""
    done = (
        POD_BY_LABEL.replace(
            "  restartPolicy: Always\n", "  restartPolicy: Never\n  nodeName: node-1\n"
        )
        + "status:\n  phase: Succeeded\n"
    )
    out = replay(node("node-1"), QUOTA_BY_LABEL, done)
    quota = out.wire("ElasticQuota", "quota-example", "default")
    assert quota["status"].get("used", {}) in ({}, {"cpu": "0", "memory": "0"})


def test_advanced_configuration_keeps_its_labels_and_shared_weight() -> None:
    """The "Advanced Configurations" quota, below a parent group named ``parent``."""
    parent = PARENT.replace("name: quota-parent-example", "name: parent")
    advanced = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: quota-example
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/is-parent: "false"
    quota.scheduling.koordinator.sh/parent: "parent"
    quota.scheduling.koordinator.sh/allow-lent-resource: "true"
  annotations:
    quota.scheduling.koordinator.sh/shared-weight: '{"cpu":"40","memory":"40Gi"}'
spec:
  max:
    cpu: 40
    memory: 40Gi
  min:
    cpu: 10
    memory: 20Mi
"""
    out = replay(node("node-1"), parent, advanced, POD_BY_LABEL)
    quota = out.wire("ElasticQuota", "quota-example", "default")
    assert quota["metadata"]["labels"]["quota.scheduling.koordinator.sh/parent"] == "parent"
    assert annotation(quota, "shared-weight") == {"cpu": "40", "memory": "40Gi"}
    assert quota["status"]["used"] == {"cpu": "40m", "memory": "40Mi"}
    parent_quota = out.wire("ElasticQuota", "parent", "default")
    assert parent_quota["status"]["used"] == {"cpu": "40m", "memory": "40Mi"}
    assert annotation(parent_quota, "child-request") == {"cpu": "40m", "memory": "40Mi"}


def test_a_bare_boolean_label_is_refused_naming_the_field() -> None:
    """The page's ``is-parent: true`` unquoted is not a Kubernetes label value."""
    with pytest.raises(DecodeError, match=r"metadata\.labels"):
        sim.scenario_objects(PARENT.replace('"true"', "true"), source="quota.yaml")


# --- WebHook Verify ------------------------------------------------------------------------------


def refused_after(first: str, second: str) -> Invalid:
    """Apply ``first`` then ``second`` as ``koordpy apply`` does; ``second`` must be refused
    and ``first`` stay as it was stored. Then the same through ``simulate``."""
    store = Store()
    stored = [store.apply(obj)[0] for obj in sim.scenario_objects(first)]
    before = store.resource_version
    (incoming,) = sim.scenario_objects(second)
    with pytest.raises(Invalid) as caught:
        store.apply(incoming)
    assert store.resource_version == before
    for obj in stored:
        kind = store.registry.for_object(obj)
        assert store.get(kind, obj.metadata.name, obj.metadata.namespace) == obj
    with pytest.raises(StoreError) as simulated:
        replay(first, second)
    assert str(simulated.value) == str(caught.value)
    return caught.value


def test_verify_1_children_min_add_up_to_at_most_the_parent_min() -> None:
    err = refused_after(PARENT, child(min_cpu=20))
    assert str(err).startswith(
        'ElasticQuota.scheduling.sigs.k8s.io "quota-example" is invalid: spec.min: Invalid'
        ' value: "cpu:20,memory:20Mi": the min of the children of quota-parent-example would'
        " add up to cpu:20,memory:20Mi, more than its min (cpu:10,memory:20Mi) in cpu"
    )


def test_verify_2_parent_and_child_name_the_same_resources() -> None:
    err = refused_after(PARENT, child(extra_max="\n    test: 200"))
    assert err.field == "spec.max"
    assert err.value == "cpu:40,memory:40Gi,test:200"
    assert "the parent quota quota-parent-example (cpu,memory)" in str(err)


def test_verify_3_a_parent_group_cannot_run_pods() -> None:
    err = refused_after(PARENT, POD_BY_LABEL.replace('"quota-example"', '"quota-parent-example"'))
    assert str(err) == (
        'Pod "pod-example" is invalid: metadata.labels[quota.scheduling.koordinator.sh/name]:'
        ' Invalid value: "quota-parent-example": pods cannot be charged to quota'
        " quota-parent-example: it is a parent group"
    )


def test_verify_4_the_parent_must_be_a_parent_group() -> None:
    not_parent = PARENT.replace('is-parent: "true"', 'is-parent: "false"')
    err = refused_after(not_parent, child(extra_max="\n    test: 200"))
    assert err.field == "metadata.labels[quota.scheduling.koordinator.sh/parent]"
    assert err.value == "quota-parent-example"
    assert "quota quota-parent-example is not a parent group" in str(err)


def test_verify_5_is_parent_cannot_be_changed() -> None:
    err = refused_after(PARENT, PARENT.replace('is-parent: "true"', 'is-parent: "false"'))
    assert err.field == "metadata.labels[quota.scheduling.koordinator.sh/is-parent]"
    assert err.value == "false"


def test_verify_a_valid_child_is_accepted_and_its_pod_runs() -> None:
    """The same parent with a child whose min fits: the child's pod runs in the tree."""
    out = replay(node("node-1"), PARENT, child(min_cpu=10), POD_BY_LABEL)
    assert out.wire("Pod", "pod-example", "default")["status"]["phase"] == "Running"
    for name in ("quota-example", "quota-parent-example"):
        used = out.wire("ElasticQuota", name, "default")["status"]["used"]
        assert used == {"cpu": "40m", "memory": "40Mi"}


def test_simulate_prints_the_refusal_as_the_api_server_words_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``koordpy simulate -f`` of the first "WebHook Verify" pair exits 1 naming the field."""
    scenario = tmp_path / "quota-example.yaml"
    scenario.write_text(PARENT + "---" + child(min_cpu=20), encoding="utf-8")
    args = argparse.Namespace(filename=str(scenario), output="yaml", max_time="1h")
    assert sim.main(args) == 1
    assert capsys.readouterr().err.startswith(
        'error: ElasticQuota.scheduling.sigs.k8s.io "quota-example" is invalid: spec.min:'
    )


# --- used > runtime revoke -----------------------------------------------------------------------


def test_a_non_preemptible_pod_is_held_to_the_quota_min() -> None:
    """A pod labelled ``preemptible: "false"`` may not use more than the quota's min."""
    small = QUOTA_BY_LABEL.replace("cpu: 10\n", "cpu: 1\n")
    pinned = (
        POD_BY_LABEL.replace(
            '    quota.scheduling.koordinator.sh/name: "quota-example"\n',
            '    quota.scheduling.koordinator.sh/name: "quota-example"\n'
            '    quota.scheduling.koordinator.sh/preemptible: "false"\n',
        )
        .replace("cpu: 40m", "cpu: 2")
        .replace("memory: 40Mi", "memory: 10Mi")
    )
    fits = pinned.replace("name: pod-example", "name: fits").replace("cpu: 2", "cpu: 500m")
    out = replay(node("node-1"), small, pinned, fits)
    assert out.wire("Pod", "pod-example", "default")["status"].get("phase", "Pending") == "Pending"
    assert out.wire("Pod", "fits", "default")["status"]["phase"] == "Running"
    quota = out.get("ElasticQuota", "quota-example", "default")
    assert isinstance(quota, ElasticQuota)
    assert annotation(codec.to_builtins(quota), "non-preemptible-used") == {
        "cpu": "500m",
        "memory": "10Mi",
    }


# --- multi quota tree ----------------------------------------------------------------------------

#: The page's total-resource of the cn-hangzhou-k tree (what its profile's nodes have).
TOTAL_RESOURCE = {
    "cpu": "7800m",
    "ephemeral-storage": "227102691772",
    "hugepages-1Gi": "0",
    "hugepages-2Mi": "0",
    "kubernetes.io/batch-cpu": "4458",
    "kubernetes.io/batch-memory": "13451995003",
    "kubernetes.io/mid-cpu": "0",
    "kubernetes.io/mid-memory": "0",
    "memory": "26264816Ki",
    "pods": "46",
}
SHARED_WEIGHT = {"cpu": "4611686018427387", "memory": "4611686018427387"}

TREE_ROOT = f"""
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  annotations:
    quota.scheduling.koordinator.sh/shared-weight: '{json.dumps(SHARED_WEIGHT)}'
    quota.scheduling.koordinator.sh/total-resource: '{json.dumps(TOTAL_RESOURCE)}'
  labels:
    quota.scheduling.koordinator.sh/is-parent: "true"
    quota.scheduling.koordinator.sh/is-root: "true"
    quota.scheduling.koordinator.sh/parent: koordinator-root-quota
    quota.scheduling.koordinator.sh/profile: cn-hangzhou-k-nodepool
    quota.scheduling.koordinator.sh/tree-id: "18340441938858026940"
    topology.kubernetes.io/region: cn-hangzhou
    topology.kubernetes.io/zone: cn-hangzhou-k
  name: cn-hangzhou-k-root-quota
  namespace: kube-system
spec:
  max:
    cpu: "4611686018427387"
    memory: "4611686018427387"
  min:
    cpu: 7800m
    memory: 26264816Ki
status: {{}}
"""

TEST_CHILD = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  annotations:
  labels:
    quota.scheduling.koordinator.sh/parent: cn-hangzhou-k-root-quota
  name: test-child
  namespace: kube-system
spec:
  max:
    cpu: 3
    memory: 6Gi
  min:
    cpu: 3
    memory: 6Gi
"""

TREE_POD = """
apiVersion: v1
kind: Pod
metadata:
  name: pod-example
  namespace: kube-system
  labels:
    quota.scheduling.koordinator.sh/name: "test-child"
spec:
  schedulerName: koord-scheduler
  containers:
  - command:
    - sleep
    - 365d
    image: busybox
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 1
        memory: 2Gi
      requests:
        cpu: 1
        memory: 2Gi
"""


def test_multi_quota_tree_child_takes_the_tree_id_and_counts_its_pod() -> None:
    zone = {
        "topology.kubernetes.io/region": "cn-hangzhou",
        "topology.kubernetes.io/zone": "cn-hangzhou-k",
    }
    nodes = [
        node(name, cpu="3900m", memory="12.52Gi", labels=zone)
        for name in ("cn-hangzhou.192.168.14.209", "cn-hangzhou.192.168.14.210")
    ]
    out = replay(*nodes, TREE_ROOT, TEST_CHILD, TREE_POD)
    assert out.wire("Pod", "pod-example", "kube-system")["status"]["phase"] == "Running"
    quota = out.wire("ElasticQuota", "test-child", "kube-system")
    labels = quota["metadata"]["labels"]
    assert labels["quota.scheduling.koordinator.sh/tree-id"] == "18340441938858026940"
    assert labels["quota.scheduling.koordinator.sh/parent"] == "cn-hangzhou-k-root-quota"
    assert annotation(quota, "shared-weight") == {"cpu": "3", "memory": "6Gi"}
    assert annotation(quota, "child-request") == {"cpu": "1", "memory": "2Gi"}
    assert annotation(quota, "request") == {"cpu": "1", "memory": "2Gi"}
    assert annotation(quota, "runtime") == {"cpu": "1", "memory": "2Gi"}
    assert quota["status"]["used"] == {"cpu": "1", "memory": "2Gi"}
    root = out.wire("ElasticQuota", "cn-hangzhou-k-root-quota", "kube-system")
    assert root["status"]["used"] == {"cpu": "1", "memory": "2Gi"}
    # A parent's child-request sums what its children ask of it.
    assert annotation(root, "child-request") == {"cpu": "1", "memory": "2Gi"}


def test_multi_quota_tree_child_in_another_tree_is_refused() -> None:
    """A child that names a tree-id other than its parent's."""
    other = TEST_CHILD.replace(
        "    quota.scheduling.koordinator.sh/parent: cn-hangzhou-k-root-quota\n",
        "    quota.scheduling.koordinator.sh/parent: cn-hangzhou-k-root-quota\n"
        '    quota.scheduling.koordinator.sh/tree-id: "8589367430557242040"\n',
    )
    err = refused_after(TREE_ROOT, other)
    assert err.field == "metadata.labels[quota.scheduling.koordinator.sh/tree-id]"
    assert err.value == "8589367430557242040"


# --- used > runtime revoke: the revocation -------------------------------------------------------

#: The page's ``koord-scheduler-config`` ConfigMap, ``{{ .Values.installation.namespace }}`` as the
#: chart installs it. The page elides the rest of the profile (``filter: ...``); the line is left
#: out, and the profile is named ``koord-scheduler`` as the chart's is (the page's pods name it).
SCHEDULER_CONFIG = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: koord-scheduler-config
  namespace: koordinator-system
data:
  koord-scheduler-config: |
    apiVersion: kubescheduler.config.k8s.io/v1beta2
    kind: KubeSchedulerConfiguration
    leaderElection:
      leaderElect: true
      resourceLock: leases
      resourceName: koord-scheduler
      resourceNamespace: koordinator-system
    profiles:
      - schedulerName: koord-scheduler
        pluginConfig:
        - name: ElasticQuota
          args:
            apiVersion: kubescheduler.config.k8s.io/v1beta2
            kind: ElasticQuotaArgs
            quotaGroupNamespace: koordinator-system
            enableCheckParentQuota: true
            monitorAllQuotas: true
            revokePodInterval: 60s
            delayEvictTime: 300s
        plugins:
          queueSort:
            disabled:
              - name: "*"
            enabled:
              - name: Coscheduling
          preFilter:
            enabled:
              - name: NodeNUMAResource
              - name: DeviceShare
              - name: Reservation
              - name: Coscheduling
              - name: ElasticQuota
"""
#: The same at ``kubescheduler.config.k8s.io/v1``, the version koord-scheduler v1.8 reads
#: (``v1beta2`` left Kubernetes in 1.28).
SCHEDULER_CONFIG_V1 = SCHEDULER_CONFIG.replace("config.k8s.io/v1beta2", "config.k8s.io/v1")

PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: low
value: 100
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high
value: 1000
"""


def sharing_quota(name: str) -> str:
    """A quota of the root with a guaranteed half of the 4-CPU node and all of it as max."""
    return f"""
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: {name}
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/parent: ""
    quota.scheduling.koordinator.sh/is-parent: "false"
spec:
  max:
    cpu: 4
    memory: 16Gi
  min:
    cpu: 2
    memory: 8Gi
"""


def quota_pod(name: str, quota: str, *, priority_class: str = "", pinned: bool = False) -> str:
    """The page's ``pod-example`` in ``quota``, asking 1 CPU and 1Gi."""
    text = POD_BY_LABEL.replace("name: pod-example", f"name: {name}").replace(
        '"quota-example"', f'"{quota}"'
    )
    text = text.replace("cpu: 40m", "cpu: 1").replace("memory: 40Mi", "memory: 1Gi")
    if pinned:
        text = text.replace(
            f'    quota.scheduling.koordinator.sh/name: "{quota}"\n',
            f'    quota.scheduling.koordinator.sh/name: "{quota}"\n'
            '    quota.scheduling.koordinator.sh/preemptible: "false"\n',
        )
    if priority_class:
        text = text.replace(
            "  schedulerName: koord-scheduler\n",
            f"  schedulerName: koord-scheduler\n  priorityClassName: {priority_class}\n",
        )
    return text


#: Quota ``borrower`` runs 4 CPUs of pods on the 4-CPU node (its min is 2: it borrows the min
#: ``lender`` does not use yet): one non-preemptible, one of priority ``high``, two ``low``.
BORROWER_PODS = (
    quota_pod("pinned", "borrower", pinned=True),
    quota_pod("important", "borrower", priority_class="high"),
    quota_pod("batch-1", "borrower", priority_class="low"),
    quota_pod("batch-2", "borrower", priority_class="low"),
)


def lender_comes_back(config: str | None) -> Outcome:
    """The borrower's pods run; then the lender's two pods of 1 CPU arrive, so the lender's
    runtime grows back to its min and the borrower's shrinks to 2 CPUs below the 4 it uses."""
    first = [node("node-1", cpu="4", memory="16Gi"), PRIORITY_CLASSES]
    first += [sharing_quota("borrower"), sharing_quota("lender"), *BORROWER_PODS]
    if config is not None:
        first.append(config)
    lender = [quota_pod("lender-1", "lender"), quota_pod("lender-2", "lender")]
    with Cluster(*first) as cluster:
        cluster.run_until(
            lambda out: all(
                phase(out, name) == "Running"
                for name in ("pinned", "important", "batch-1", "batch-2")
            )
        )
        cluster.apply(*lender)
        cluster.run(timedelta(hours=2))
        return cluster.outcome()


def phase(out: Outcome, name: str) -> str:
    """The pod's phase; "gone" once it was deleted."""
    if not any(p.metadata.name == name for p in out.all("Pod")):
        return "gone"
    return str(out.wire("Pod", name, "default")["status"].get("phase", "Pending"))


def test_used_above_runtime_is_revoked_from_low_to_high_priority() -> None:
    """ "used > runtime revoke" with the page's configuration (``monitorAllQuotas: true``,
    ``revokePodInterval: 60s``, ``delayEvictTime: 300s``): once the lender's pods want its min
    back, the borrower's ``low`` pods are evicted, the ``high`` and the non-preemptible pod
    stay, and the lender's pods run in the room freed."""
    out = lender_comes_back(SCHEDULER_CONFIG_V1)
    phases = {
        name: phase(out, name)
        for name in ("pinned", "important", "batch-1", "batch-2", "lender-1", "lender-2")
    }
    assert phases == {
        "pinned": "Running",
        "important": "Running",
        "batch-1": "gone",
        "batch-2": "gone",
        "lender-1": "Running",
        "lender-2": "Running",
    }
    evicted = list(out.events("Evicted"))
    assert sorted(e.involved_object.name for e in evicted) == ["batch-1", "batch-2"]
    assert {e.source.component for e in evicted} == {"koord-scheduler"}
    assert "quota borrower used cpu:4," in evicted[0].message
    assert "above its runtime cpu:2," in evicted[0].message
    # Revoked at the first check (every 60 s) after 300 s above the runtime.
    arrived = out.get("Pod", "lender-1", "default").metadata.creation_timestamp
    assert arrived is not None
    for event in evicted:
        assert event.last_timestamp is not None
        assert event.last_timestamp - arrived == timedelta(seconds=360)
    borrower = out.wire("ElasticQuota", "borrower", "default")
    assert borrower["status"]["used"] == {"cpu": "2", "memory": "2Gi"}
    assert annotation(borrower, "runtime")["cpu"] == "2"
    lender = out.wire("ElasticQuota", "lender", "default")
    assert lender["status"]["used"] == {"cpu": "2", "memory": "2Gi"}


def test_without_monitor_all_quotas_nothing_is_revoked() -> None:
    """``monitorAllQuotas`` defaults to false: the borrower keeps its pods and the lender's wait."""
    out = lender_comes_back(None)
    assert [phase(out, n) for n in ("batch-1", "batch-2")] == ["Running", "Running"]
    assert [phase(out, n) for n in ("lender-1", "lender-2")] == ["Pending", "Pending"]
    assert not list(out.events("Evicted"))


def test_the_pages_v1beta2_configuration_is_refused_naming_the_field() -> None:
    """The page's document as written is ``kubescheduler.config.k8s.io/v1beta2``, which
    koord-scheduler v1.8 no longer reads: the ConfigMap gets a Warning Event naming the field
    and the value, and the shipped configuration (no revocation) stays in force."""
    out = lender_comes_back(SCHEDULER_CONFIG)
    (refused,) = out.events("InvalidConfiguration")
    assert refused.involved_object.name == "koord-scheduler-config"
    assert "apiVersion: 'kubescheduler.config.k8s.io/v1beta2'" in refused.message
    assert not list(out.events("Evicted"))
