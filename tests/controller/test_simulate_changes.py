"""``koordpy simulate``'s change report: what differs between two object sets, who changed it,
how it prints, and a simulation started from objects a server stored (``--from-cluster``)."""

from __future__ import annotations

import argparse
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml

from apis.codec import decode_documents
from apis.core import Node, Pod
from apis.meta import Object
from controller import simulate as sim
from controller import whatif
from controller.errors import StoreError
from controller.kube.snapshot import ClusterSnapshot

BEFORE = """
apiVersion: v1
kind: Node
metadata: {name: n1, resourceVersion: "10", uid: u-n1, labels: {pool: a}}
status: {allocatable: {cpu: "4"}}
---
apiVersion: v1
kind: Node
metadata: {name: n2, resourceVersion: "11", uid: u-n2, labels: {pool: a}}
status: {allocatable: {cpu: "4"}}
---
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: ns, resourceVersion: "20", uid: u-web}
spec: {containers: [{name: c, image: nginx}]}
status: {phase: Pending}
---
apiVersion: v1
kind: Pod
metadata: {name: old, namespace: ns, resourceVersion: "21", uid: u-old}
spec: {nodeName: n1, containers: [{name: c, image: nginx}]}
status: {phase: Running}
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: ns, resourceVersion: "22", uid: u-big}
spec: {containers: [{name: c, image: nginx}]}
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: QueueUnit
metadata: {name: job, namespace: ns, resourceVersion: "30", uid: u-qu}
spec: {queue: team-a}
status: {phase: Enqueued}
---
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata: {name: r1, resourceVersion: "40", uid: u-r1}
spec:
  template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
  owners: [{object: {name: web, namespace: ns}}]
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: team-a, namespace: ns, resourceVersion: "50", uid: u-eq}
spec: {max: {cpu: "8"}}
"""

#: The what-if: n1 drained (what ``applied`` holds before the loops run).
DRAINED = """
apiVersion: v1
kind: Node
metadata: {name: n1, resourceVersion: "60", uid: u-n1, labels: {pool: a}}
spec: {unschedulable: true}
status: {allocatable: {cpu: "4"}}
"""

#: What the loops left: web bound to n2, old evicted, big pending, the unit admitted, the
#: Reservation available, a NodeSLO made, the quota written again unchanged (a new version
#: only), a condition's timestamps moved.
AFTER_CHANGED = """
apiVersion: v1
kind: Pod
metadata: {name: web, namespace: ns, resourceVersion: "70", uid: u-web}
spec: {nodeName: n2, containers: [{name: c, image: nginx}]}
status:
  phase: Running
  conditions:
  - {type: PodScheduled, status: "True", lastTransitionTime: "2026-01-01T00:00:00Z"}
---
apiVersion: v1
kind: Pod
metadata: {name: big, namespace: ns, resourceVersion: "71", uid: u-big}
spec: {containers: [{name: c, image: nginx}]}
status:
  phase: Pending
  conditions:
  - type: PodScheduled
    status: "False"
    reason: Unschedulable
    message: "0/2 nodes are available: 1 Insufficient cpu, 1 node(s) were unschedulable."
    lastTransitionTime: "2026-01-01T00:00:00Z"
---
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: QueueUnit
metadata: {name: job, namespace: ns, resourceVersion: "72", uid: u-qu}
spec: {queue: team-a}
status: {phase: Dequeued}
---
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata: {name: r1, resourceVersion: "73", uid: u-r1}
spec:
  template: {spec: {containers: [{name: c, resources: {requests: {cpu: "1"}}}]}}
  owners: [{object: {name: web, namespace: ns}}]
status: {phase: Available, nodeName: n2}
---
apiVersion: slo.koordinator.sh/v1alpha1
kind: NodeSLO
metadata: {name: n2, resourceVersion: "74", uid: u-slo}
spec: {}
---
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata: {name: team-a, namespace: ns, resourceVersion: "75", uid: u-eq}
spec: {max: {cpu: "8"}}
---
apiVersion: v1
kind: Event
metadata: {name: old.1, namespace: ns}
involvedObject: {kind: Pod, namespace: ns, name: old, uid: u-old}
reason: Evicted
message: node n1 is drained
type: Normal
lastTimestamp: "2026-01-01T00:00:05Z"
---
apiVersion: v1
kind: Event
metadata: {name: web.1, namespace: ns}
involvedObject: {kind: Pod, namespace: ns, name: web, uid: u-web}
reason: Scheduled
message: Successfully assigned ns/web to n2
type: Normal
"""


def _objects(text: str) -> list[Object]:
    return decode_documents(text)


def _keyed(text: str) -> dict[tuple[str, str, str], Object]:
    return {(o.kind, o.metadata.namespace, o.metadata.name): o for o in _objects(text)}


def _states() -> tuple[list[Object], list[Object], list[Object]]:
    """(before, applied, after): the cluster, the what-if on top, what the loops left."""
    before = _keyed(BEFORE)
    applied = {**before, **_keyed(DRAINED)}
    after = {**applied}
    del after[("Pod", "ns", "old")]
    after.update(_keyed(AFTER_CHANGED))
    return list(before.values()), list(applied.values()), list(after.values())


@pytest.fixture
def found() -> whatif.Changes:
    before, applied, after = _states()
    return whatif.changes(before, after, applied=applied)


def test_bound_admitted_removed_available_and_pending(found: whatif.Changes) -> None:
    assert found.bindings == (whatif.PodBinding(namespace="ns", name="web", node="n2"),)
    assert found.admitted == (
        whatif.QueueUnitAdmission(namespace="ns", name="job", queue="team-a", phase="Dequeued"),
    )
    assert found.removed == (
        whatif.PodRemoval(
            namespace="ns", name="old", node="n1", reason="Evicted", message="node n1 is drained"
        ),
    )
    assert found.reservations == (whatif.ReservationAvailable(name="r1", node="n2"),)
    assert [(p.name, p.reason) for p in found.pending] == [("big", "Unschedulable")]
    assert "1 node(s) were unschedulable" in found.pending[0].message
    assert found.events == 2


def test_objects_by_kind_namespace_name_and_who_changed_them(found: whatif.Changes) -> None:
    rows = [(c.action, c.kind, c.namespace, c.name, c.by) for c in found.objects]
    # The kind table's order (pods, nodes, ..., reservations, node SLOs, ..., queue units);
    # the quota written again with only a new resourceVersion is no change.
    assert rows == [
        ("changed", "Pod", "ns", "big", ("loops",)),
        ("deleted", "Pod", "ns", "old", ("loops",)),
        ("changed", "Pod", "ns", "web", ("loops",)),
        ("changed", "Node", "", "n1", ("what-if",)),
        ("changed", "Reservation", "", "r1", ("loops",)),
        ("created", "NodeSLO", "", "n2", ("loops",)),
        ("changed", "QueueUnit", "ns", "job", ("loops",)),
    ]


def test_fields_of_a_change(found: whatif.Changes) -> None:
    by_name = {(c.kind, c.name): c for c in found.objects}
    node = by_name[("Node", "n1")]
    assert node.fields == (whatif.FieldChange(path="spec.unschedulable", after=True),)
    web = {f.path: (f.before, f.after) for f in by_name[("Pod", "web")].fields}
    assert web["spec.nodeName"] == (None, "n2")
    assert web["status.phase"] == ("Pending", "Running")
    # A condition is keyed by its type; its timestamps are left out.
    assert web["status.conditions[PodScheduled].status"] == (None, "True")
    assert not any("lastTransitionTime" in path for path in web)
    # A deleted object shows its summary fields as they were.
    old = by_name[("Pod", "old")]
    assert {f.path: f.before for f in old.fields} == {
        "spec.nodeName": "n1",
        "status.phase": "Running",
    }
    assert all(f.after is None for f in old.fields)


def test_map_keys_with_dots_are_bracketed() -> None:
    before = _objects(BEFORE)
    after = [
        o
        if o.metadata.name != "team-a"
        else decode_documents(
            "apiVersion: scheduling.sigs.k8s.io/v1alpha1\nkind: ElasticQuota\n"
            "metadata: {name: team-a, namespace: ns, resourceVersion: '51', uid: u-eq,"
            ' annotations: {quota.scheduling.koordinator.sh/runtime: \'{"cpu":"8"}\'}}\n'
            "spec: {max: {cpu: '8'}}\n"
        )[0]
        for o in before
    ]
    (change,) = whatif.changes(before, after).objects
    assert change.by == ()  # no `applied`: who made it is not known
    assert [f.path for f in change.fields] == [
        "metadata.annotations[quota.scheduling.koordinator.sh/runtime]"
    ]


def test_nothing_changed() -> None:
    objects = _objects(BEFORE)
    found = whatif.changes(objects, objects, applied=objects)
    assert found == whatif.Changes()
    assert found.empty
    assert "No object would change." in whatif.render_table(found)


def test_a_pod_replaced_under_the_same_name_counts_as_removed() -> None:
    before = _objects(BEFORE)
    after = [
        o
        if o.metadata.name != "old"
        else decode_documents(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: old, namespace: ns, uid: u-new}\n"
            "spec: {containers: [{name: c, image: nginx}]}\n"
        )[0]
        for o in before
    ]
    found = whatif.changes(before, after)
    assert found.removed == (whatif.PodRemoval(namespace="ns", name="old", node="n1"),)
    (change,) = found.objects
    assert change.action == "changed"
    assert ("metadata.uid", "u-old", "u-new") in [
        (f.path, f.before, f.after) for f in change.fields
    ]


def test_table(found: whatif.Changes) -> None:
    text = whatif.render_table(found, header=["Simulated 5m from 2026-01-01T00:00:00Z."])
    blocks = text.split("\n\n")
    assert blocks[0] == "Simulated 5m from 2026-01-01T00:00:00Z."
    bound = blocks[1].splitlines()
    assert bound[0] == "Pods bound:"
    assert bound[1].split() == ["POD", "NODE"]
    assert bound[2].split() == ["ns/web", "n2"]
    assert any(b.startswith("QueueUnits admitted:") and "ns/job" in b for b in blocks)
    assert any(b.startswith("Pods removed:") and "Evicted" in b for b in blocks)
    assert any(b.startswith("Reservations available:") and "r1" in b for b in blocks)
    assert any(b.startswith("Pods left pending:") and "ns/big" in b for b in blocks)
    objects = blocks[-1].splitlines()
    assert objects[0] == "Objects:"
    assert objects[1].split() == ["CHANGE", "KIND", "NAME", "BY", "FIELDS"]
    node = next(line for line in objects if " Node " in line)
    assert node.split() == [
        "changed",
        "Node",
        "n1",
        "what-if",
        "spec.unschedulable:",
        "<none>",
        "->",
        "true",
    ]
    # One line per field; a field's line holds only the field.
    web = objects.index(next(line for line in objects if "ns/web" in line))
    assert objects[web + 1].strip().startswith(("spec.", "status."))


# --- a simulation over objects a server stored ----------------------------------------------

CLUSTER = """
apiVersion: v1
kind: Node
metadata:
  name: n1
  resourceVersion: "1201"
  uid: 5b9a3c36-0000-4000-8000-000000000001
  creationTimestamp: "2026-05-04T10:00:00Z"
  labels: {pool: sim}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Node
metadata:
  name: n2
  resourceVersion: "1202"
  uid: 5b9a3c36-0000-4000-8000-000000000002
  creationTimestamp: "2026-05-04T10:00:01Z"
  labels: {pool: sim}
status: {allocatable: {cpu: "4", memory: 8Gi, pods: "110"}}
---
apiVersion: v1
kind: Pod
metadata:
  name: web
  namespace: ns
  resourceVersion: "1300"
  uid: 5b9a3c36-0000-4000-8000-000000000003
  creationTimestamp: "2026-05-04T10:02:00Z"
spec:
  schedulerName: koord-scheduler
  nodeSelector: {pool: sim}
  containers: [{name: c, image: nginx, resources: {requests: {cpu: "1"}}}]
status: {phase: Pending}
"""

WHATIF = """
apiVersion: v1
kind: Node
metadata: {name: n1, labels: {pool: sim}}
spec: {unschedulable: true}
"""


def test_simulate_holds_a_servers_objects_with_their_metadata() -> None:
    cluster = _objects(CLUSTER)
    result = sim.simulate(_objects(WHATIF), base=cluster)
    assert result.started == datetime(2026, 5, 4, 10, 2, tzinfo=UTC)  # the newest creation
    nodes = {o.metadata.name: o for o in result.loaded if isinstance(o, Node)}
    assert nodes["n2"] is next(o for o in cluster if o.metadata.name == "n2")  # held as it was
    assert nodes["n1"].spec.unschedulable is True  # the what-if replaced the cluster's n1
    assert nodes["n1"].metadata.uid == cluster[0].metadata.uid
    pods = {o.metadata.name: o for o in result.objects if isinstance(o, Pod)}
    assert pods["web"].spec.node_name == "n2"
    assert pods["web"].metadata.uid == cluster[2].metadata.uid
    found = whatif.changes(cluster, result.objects, applied=result.loaded)
    assert found.bindings == (whatif.PodBinding(namespace="ns", name="web", node="n2"),)
    drained = next(c for c in found.objects if c.kind == "Node" and c.name == "n1")
    assert drained.by == ("what-if",)


def test_a_cluster_objects_version_is_not_a_create_precondition() -> None:
    # Without `base`, a stored object's resourceVersion makes its create invalid (as before).
    with pytest.raises(StoreError, match="resourceVersion"):
        sim.simulate(_objects(CLUSTER), loops={})


def _args(path: Path, output: str | None) -> argparse.Namespace:
    return argparse.Namespace(
        filename=str(path),
        output=output,
        max_time="1h",
        from_cluster=True,
        kubeconfig="kubeconfig.yaml",
        context=None,
    )


@pytest.fixture
def from_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The what-if file; the cluster read is CLUSTER (one object left out)."""
    snapshot = ClusterSnapshot(
        server="https://cluster.example:6443",
        objects=tuple(_objects(CLUSTER)),
        kinds=("Pod", "Node"),
        left_out=1,
    )
    seen: list[argparse.Namespace] = []

    def read(args: argparse.Namespace) -> ClusterSnapshot:
        seen.append(args)
        return snapshot

    monkeypatch.setattr(sim, "_read_cluster", read)
    whatif = tmp_path / "whatif.yaml"
    whatif.write_text(WHATIF)
    return whatif


def test_cli_from_cluster_prints_a_table_by_default(
    from_cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sim.main(_args(from_cluster, None)) == 0
    captured = capsys.readouterr()
    assert "1 objects of the cluster did not decode" in captured.err
    out = captured.out
    assert out.startswith("Simulated ")
    assert "over 3 objects of https://cluster.example:6443 and 1 of the what-if" in out
    assert "Pods bound:" in out
    assert any(line.split() == ["ns/web", "n2"] for line in out.splitlines())


def test_cli_from_cluster_json_and_yaml_are_the_changes(
    from_cluster: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert sim.main(_args(from_cluster, "json")) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["cluster"] == {
        "server": "https://cluster.example:6443",
        "objects": 3,
        "leftOut": 1,
    }
    assert document["started"] == "2026-05-04T10:02:00Z"
    assert document["bindings"] == [{"namespace": "ns", "name": "web", "node": "n2"}]
    drained = next(c for c in document["objects"] if c["kind"] == "Node")
    assert drained == {
        "action": "changed",
        "apiVersion": "v1",
        "kind": "Node",
        "namespace": "",
        "name": "n1",
        "by": ["what-if"],
        "fields": [{"path": "spec.unschedulable", "after": True}],
    }
    assert sim.main(_args(from_cluster, "yaml")) == 0
    assert yaml.safe_load(capsys.readouterr().out)["bindings"] == document["bindings"]


def test_cli_table_without_a_cluster_shows_what_the_loops_changed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(
        "apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n"
        "status: {allocatable: {cpu: '4', memory: 8Gi, pods: '110'}}\n---\n"
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web, namespace: ns}\n"
        "spec: {schedulerName: koord-scheduler, containers: [{name: c, image: nginx}]}\n"
    )
    args = argparse.Namespace(filename=str(scenario), output="table", max_time="1h")
    assert sim.main(args) == 0
    out = capsys.readouterr().out
    assert "over 2 objects of the scenario" in out
    assert any(line.split() == ["ns/web", "n1"] for line in out.splitlines())
