"""Koordinator v1.8 user manual "Load Aware Descheduling" (``load-aware-descheduling.md``).

The page's cluster: three 4-core 16 GiB nodes and a one-replica ``stress-demo`` whose pod runs on
one of them; ``kubectl top node`` then shows that node at 2105m CPU / 3594Mi and the two others
near idle. The NodeMetrics here say the same, measured where the pod runs at each report (the
agent's report every minute: the stress pod uses 1900m and 1600Mi, each node's system the
rest), and the page's ``koord-descheduler-config`` (LowNodeLoad, low cpu 20 / memory 30, high
cpu 50 / memory 60, every 60s) is applied once the pod runs (step 4). ``stress-demo`` is the
page's Deployment, applied as the page gives it; the cluster is played step by step
(:class:`~tests.manuals.replay.Cluster`): the agents' reports each minute, the user's
configuration. The page's ``MigrationControllerArgs`` are elided (``....``); a one-replica
workload passes v1.8's expected-replicas gate only with ``skipCheckExpectedReplicas`` (which
this test sets), as the page's eviction of its one pod needs.

What the page shows: the pod is evicted from the hot node through a PodMigrationJob (Events
``Evicting`` and ``EvictComplete``; the page's older ``Try to evict Pod`` message is v1.8's
``Pod ... evicted from node ... by the reason ...``) and its replacement, a new pod of the
Deployment's ReplicaSet (``kubectl get pod -w``: another name), runs on another node.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from apis import codec
from apis.core import Pod
from apis.scheduling import PodMigrationJob
from tests.manuals.replay import Cluster, Outcome, node, node_metric

# The page's stress-demo Deployment is the one load-aware-scheduling's page shows too.
from tests.manuals.test_load_aware_scheduling import STRESS_DEMO_DEPLOYMENT as STRESS_DEMO

NODES = ("cn-beijing.10.0.3.110", "cn-beijing.10.0.3.111", "cn-beijing.10.0.3.112")


#: The page's ConfigMap, its elisions (``...``) left out, plus ``skipCheckExpectedReplicas``.
DESCHEDULER_CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: koord-descheduler-config
  namespace: koordinator-system
data:
  koord-descheduler-config: |
    apiVersion: descheduler/v1alpha2
    kind: DeschedulerConfiguration
    # Execute the LowNodeLoad plugin every 60s
    deschedulingInterval: 60s
    profiles:
      - name: koord-descheduler
        plugins:
          deschedule:
            disabled:
              - name: "*"
          balance:
            enabled:
              - name: LowNodeLoad  # Configure to enable the LowNodeLoad plugin
        pluginConfig:
        - name: MigrationController
          args:
            apiVersion: descheduler/v1alpha2
            kind: MigrationControllerArgs
            skipCheckExpectedReplicas: true
        - name: LowNodeLoad
          args:
            apiVersion: descheduler/v1alpha2
            kind: LowNodeLoadArgs
            evictableNamespaces:
            # include and exclude are mutually exclusive, only one of them can be configured.
            # include indicates that only the namespace configured below will be processed
            # include:
            #   - test-namespace
              # exclude means to only process namespaces other than those configured below
              exclude:
                - "kube-system"
                - "koordinator-system"
            # lowThresholds defines the low usage threshold of resources
            lowThresholds:
              cpu: 20
              memory: 30
            # highThresholds defines the target usage threshold of resources
            highThresholds:
              cpu: 50
              memory: 60
"""

#: ``kubectl top node`` without the stress pod (cpu m, memory Mi): the node the pod runs on
#: first (the page's cn-beijing.10.0.3.112), then the two others.
SYSTEM = ((205, 1994), (92, 1158), (77, 1162))
#: The stress pod's usage (cpu m, memory Mi): with its node's own, the page's 2105m / 3594Mi.
STRESS = (1900, 1600)


def running(outcome: Outcome) -> Pod | None:
    """The pod of stress-demo that runs (the old one until it is gone, then the new one)."""
    return next(
        (
            p
            for p in outcome.pods(app="stress-demo")
            if p.spec.node_name
            and p.status.phase == "Running"
            and p.metadata.deletion_timestamp is None
        ),
        None,
    )


@dataclass(frozen=True)
class Page:
    """The page's cluster as it went: where the pod ran first (the hot node), the pods seen."""

    outcome: Outcome
    hot: str
    first: Pod
    #: Every pod of stress-demo that ran, by name.
    seen: dict[str, Pod]


def reports(cluster: Cluster, system: dict[str, tuple[int, int]]) -> list[str]:
    """Each node's NodeMetric now: its own usage (``system``), plus the stress pod's where that
    pod runs."""
    pod = running(cluster.outcome())
    docs = []
    for name, (cpu, memory) in system.items():
        here = pod is not None and pod.spec.node_name == name
        pods = {pod.metadata.name: (f"{STRESS[0]}m", f"{STRESS[1]}Mi")} if pod and here else {}
        used = (cpu + STRESS[0], memory + STRESS[1]) if here else (cpu, memory)
        docs.append(
            node_metric(
                name,
                cpu=f"{used[0]}m",
                memory=f"{used[1]}Mi",
                updated=codec.to_builtins(cluster.now),
                pods=pods,
                system=(f"{cpu}m", f"{memory}Mi"),
            )
        )
    return docs


def run(minutes: int, config: str = DESCHEDULER_CONFIG) -> Page:
    """Steps 1-5: stress-demo runs; its node is the page's hot node from then on; the agents
    report each minute and ``config`` comes with the first report; ``minutes`` of that."""
    with Cluster(*(node(n, cpu="4", memory="16Gi") for n in NODES), STRESS_DEMO) as cluster:
        cluster.run_until(lambda outcome: running(outcome) is not None, within=timedelta(minutes=1))
        first = running(cluster.outcome())
        assert first is not None
        others = [n for n in NODES if n != first.spec.node_name]
        system = dict(zip([first.spec.node_name, *others], SYSTEM, strict=True))
        seen = {first.metadata.name: first}
        cluster.apply(*reports(cluster, system), config)
        for _ in range(minutes):
            cluster.run(timedelta(minutes=1))
            cluster.apply(*reports(cluster, system))
            now = running(cluster.outcome())
            if now is not None:
                seen.setdefault(now.metadata.name, now)
        cluster.run(timedelta(seconds=30))
        return Page(cluster.outcome(), first.spec.node_name, first, seen)


def test_the_hot_nodes_pod_is_migrated_to_an_idle_node() -> None:
    """The hot node (53% cpu, over the high threshold of 50%) is relieved after LowNodeLoad
    has seen it over for ``consecutiveAbnormalities`` (5) cycles: a PodMigrationJob evicts its
    pod; the ReplicaSet's new pod runs on an idle node, and stays there (that node then uses
    49%)."""
    page = run(minutes=9)
    outcome, hot, old = page.outcome, page.hot, page.first.metadata.name
    [pod] = outcome.pods(app="stress-demo")
    assert pod.metadata.name != old
    assert pod.metadata.name.rsplit("-", 1)[0] == old.rsplit("-", 1)[0]  # the same ReplicaSet
    assert pod.status.phase == "Running"
    assert pod.spec.node_name not in ("", hot)
    assert list(page.seen) == [old, pod.metadata.name]  # moved once
    [job] = outcome.all("PodMigrationJob")
    assert isinstance(job, PodMigrationJob)
    assert job.status.phase == "Succeeded"
    assert job.spec.pod_ref.name == old
    assert job.status.pod_ref is not None
    assert (job.status.pod_ref.name, job.status.pod_ref.uid) == (
        pod.metadata.name,
        pod.metadata.uid,
    )
    assert job.metadata.annotations["koordinator.sh/evict-trigger"] == "LowNodeLoad"
    reason = job.metadata.annotations["koordinator.sh/evict-reason"]
    assert reason == "node is overutilized, node cpu usage(52.62%)>threshold(50.00%)"
    events = [
        (e.reason, e.message)
        for e in outcome.events()
        if e.involved_object.kind == "PodMigrationJob" and e.reason in ("Evicting", "EvictComplete")
    ]
    assert events == [
        ("Evicting", f'Pod "default/{old}" evicted from node "{hot}" by the reason "{reason}"'),
        ("EvictComplete", f'Pod "default/{old}" has been evicted'),
    ]


def test_nothing_moves_before_the_node_has_been_hot_for_five_cycles() -> None:
    """Four cycles over the threshold (at 0 to 3 minutes) are not yet an anomaly: the pod
    stays; the fifth (at 4 minutes) moves it."""
    page = run(minutes=3)
    [pod] = page.outcome.pods(app="stress-demo")
    assert pod.metadata.uid == page.first.metadata.uid
    assert pod.spec.node_name == page.hot
    assert page.outcome.all("PodMigrationJob") == []
    moved = run(minutes=4)
    assert len(moved.outcome.all("PodMigrationJob")) == 1


def test_low_thresholds_above_the_high_ones_are_refused() -> None:
    """``lowThresholds.cpu: 70`` over ``highThresholds.cpu: 50``: the configuration is refused
    with a Warning naming the field and both values, and nothing is descheduled."""
    bad = DESCHEDULER_CONFIG.replace("              cpu: 20\n", "              cpu: 70\n")
    page = run(minutes=9, config=bad)
    assert page.outcome.all("PodMigrationJob") == []
    [pod] = page.outcome.pods(app="stress-demo")
    assert pod.metadata.uid == page.first.metadata.uid
    assert pod.spec.node_name == page.hot
    [warning] = page.outcome.events("InvalidConfiguration")
    assert warning.message == (
        "invalid descheduler configuration (descheduling is off): profiles[0].pluginConfig[1]"
        ".args.lowThresholds.cpu: 70.0 is above highThresholds.cpu (50.0)"
    )
