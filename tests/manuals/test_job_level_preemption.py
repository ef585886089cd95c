"""Koordinator user manual ``job-level-preemption`` (Koordinator >= 1.7; the page has no
v1.8-versioned copy, the current one is replayed), through ``koordpy simulate``.

Replayed as the page runs it: two nodes of 4 CPUs; the two PriorityClasses; two
``low-priority`` pods taking 4 CPUs each (one per node); then the ``hp-training-job``
PodGroup (minMember 2) with two ``high-priority`` workers of 3 CPUs each. The whole gang
cannot fit, so both low-priority pods are preempted, one per node, and both workers run.
The first stage is simulated to its end and what it left is applied again, with the job, as
a second scenario (the page's second ``kubectl apply``).
"""

from __future__ import annotations

from apis import codec
from apis.core import Pod
from tests.manuals.replay import Outcome, node, replay

PRIORITY_CLASSES = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: high-priority
value: 1000000
preemptionPolicy: PreemptLowerPriority
description: "Used for critical AI training jobs that can preempt others."
---
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: low-priority
value: 1000
preemptionPolicy: PreemptLowerPriority
globalDefault: false
description: "Used for non-critical jobs that can be preempted."
"""


def low_priority_pod(name: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
spec:
  schedulerName: koord-scheduler
  priorityClassName: low-priority
  containers:
  - command:
    - sleep
    - 365d
    image: busybox
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 4
        memory: 40Mi
      requests:
        cpu: 4
        memory: 40Mi
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  restartPolicy: Always
"""


POD_GROUP = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: hp-training-job
  namespace: default
spec:
  minMember: 2
  scheduleTimeoutSeconds: 300
"""


def worker(name: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels:
    pod-group.scheduling.sigs.k8s.io: hp-training-job
spec:
  schedulerName: koord-scheduler
  priorityClassName: high-priority
  preemptionPolicy: PreemptLowerPriority
  containers:
  - command:
    - sleep
    - 365d
    image: busybox
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 3
        memory: 40Mi
      requests:
        cpu: 3
        memory: 40Mi
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  restartPolicy: Always
"""


NODES = (node("cn-beijing.1", cpu="4", memory="16Gi"), node("cn-beijing.2", cpu="4", memory="16Gi"))
FIRST_STAGE = (*NODES, PRIORITY_CLASSES, low_priority_pod("lp-pod-1"), low_priority_pod("lp-pod-2"))
JOB = (POD_GROUP, worker("hp-worker-1"), worker("hp-worker-2"))


def carried(outcome: Outcome) -> list[str]:
    """What a simulation left, as manifests to apply again (classes first, as created)."""
    docs = []
    for obj in sorted(outcome.result.objects, key=lambda o: o.kind != "PriorityClass"):
        if obj.kind == "Event":
            continue
        wire = codec.to_builtins(obj)
        for server_owned in ("uid", "resourceVersion", "generation"):
            wire["metadata"].pop(server_owned, None)
        docs.append(codec.dump_yaml(wire))
    return docs


def pods(outcome: Outcome) -> dict[str, Pod]:
    return {p.metadata.name: p for p in outcome.all("Pod") if isinstance(p, Pod)}


def test_the_low_priority_pods_fill_both_nodes() -> None:
    first = pods(replay(*FIRST_STAGE))
    assert {p.spec.priority for p in first.values()} == {1000}
    assert {p.status.phase for p in first.values()} == {"Running"}
    assert {p.spec.node_name for p in first.values()} == {"cn-beijing.1", "cn-beijing.2"}


def test_the_high_priority_job_preempts_one_pod_per_node_and_runs_whole() -> None:
    out = replay(*carried(replay(*FIRST_STAGE)), *JOB)
    after = pods(out)
    assert "lp-pod-1" not in after
    assert "lp-pod-2" not in after
    workers = [after["hp-worker-1"], after["hp-worker-2"]]
    assert {w.spec.priority for w in workers} == {1_000_000}
    assert {w.status.phase for w in workers} == {"Running"}
    assert {w.spec.node_name for w in workers} == {"cn-beijing.1", "cn-beijing.2"}
    preempted = sorted(e.message for e in out.events("Preempted"))
    assert len(preempted) == 2
    assert preempted[0].endswith("on node cn-beijing.1")
    assert preempted[1].endswith("on node cn-beijing.2")


def test_without_the_classes_resolved_no_one_would_be_preempted() -> None:
    """The job's pods outrank the victims only through their PriorityClass: at equal
    priority (both classes ``low-priority``) the gang waits and the first pods keep running."""
    equal = tuple(doc.replace("high-priority\n", "low-priority\n") for doc in JOB)
    after = pods(replay(*carried(replay(*FIRST_STAGE)), *equal))
    assert after["lp-pod-1"].status.phase == "Running"
    assert after["lp-pod-2"].status.phase == "Running"
    assert not after["hp-worker-1"].spec.node_name
    assert not after["hp-worker-2"].spec.node_name
