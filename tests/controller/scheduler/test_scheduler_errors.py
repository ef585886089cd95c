"""An attempt that fails with an error, as kube-scheduler reports and retries it.

kube-scheduler writes ``PodScheduled=False`` reason ``SchedulerError`` with the error text,
records a ``FailedScheduling`` Warning Event, and puts the pod in the backoff queue
(``podInitialBackoffSeconds`` 1 s doubling up to ``podMaxBackoffSeconds`` 10 s). A Reserve
plugin's rejection is a one-node FitError with reason ``Unschedulable``.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import msgspec
import pytest

from apis import constants as k
from apis.core import Event, Pod
from apis.meta import Object
from controller.loops import LoopContext
from controller.scheduler import framework as fw
from controller.scheduler.conditions import POD_SCHEDULED
from controller.scheduler.explain import DIAGNOSIS_ANNOTATION
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.nodetable import NodeTable
from controller.scheduler.podinfo import PodInfo
from controller.scheduler.profile import DEFAULT_CONFIG, PLUGINS, PluginSpec, build_profile
from controller.scheduler.scheduling_queue import Where
from controller.scheduler.schedulinghint import HintError, parse_scheduling_hint
from controller.simulate import scenario_objects, simulate
from controller.store.sqlite import Store
from tests.controller.scheduler import GI, Clock, make_node, make_pod

BAD_HINT = '{"nodeNames": ["n1"'


def _error_text() -> str:
    error = parse_scheduling_hint({k.ANNOTATION_SCHEDULING_HINT: BAD_HINT})
    assert isinstance(error, HintError)
    return error.message


def _with_hint(pod: Pod, hint: str) -> Pod:
    annotations = {**pod.metadata.annotations, k.ANNOTATION_SCHEDULING_HINT: hint}
    return msgspec.structs.replace(
        pod, metadata=msgspec.structs.replace(pod.metadata, annotations=annotations)
    )


def _pod(store: Store, name: str) -> Pod:
    pod = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(pod, Pod)
    return pod


def _condition(pod: Pod) -> tuple[str, str, str] | None:
    for c in pod.status.conditions:
        if c.type == POD_SCHEDULED:
            return (c.status, c.reason, c.message)
    return None


def _failed_scheduling(objects: list[Object] | tuple[Object, ...], name: str) -> list[Event]:
    return [
        o
        for o in objects
        if isinstance(o, Event)
        and o.reason == "FailedScheduling"
        and o.involved_object.name == name
    ]


def _events(store: Store, name: str) -> list[Event]:
    return _failed_scheduling(store.list(store.registry.for_type(Event))[0], name)


def _attempts(store: Store, name: str) -> int:
    return sum(e.count or 1 for e in _events(store, name))


def test_an_error_writes_scheduler_error_and_a_warning_event(store: Store, clock: Clock) -> None:
    """The SchedulingHint's JSON decoding error (controller-spec §9 item 7): the pod stays
    unbound with ``PodScheduled=False``/``SchedulerError`` and the error as message."""
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(_with_hint(make_pod("broken", cpu=100), BAD_HINT))
    SchedulerLoop().reconcile(LoopContext(store=store, now=clock))

    pod = _pod(store, "broken")
    assert pod.spec.node_name == ""
    assert _condition(pod) == ("False", "SchedulerError", _error_text())
    assert DIAGNOSIS_ANNOTATION not in pod.metadata.annotations
    (event,) = _events(store, "broken")
    assert (event.type, event.message) == ("Warning", _error_text())


def test_an_error_replaces_an_earlier_unschedulable_diagnosis(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=1000, memory=8 * GI))
    store.create(make_pod("p", cpu=2000))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    before = _pod(store, "p")
    condition = _condition(before)
    assert condition is not None
    assert condition[:2] == ("False", "Unschedulable")
    assert DIAGNOSIS_ANNOTATION in before.metadata.annotations
    since = before.status.conditions[-1].last_transition_time

    store.update(_with_hint(before, BAD_HINT))  # a changed pod is tried again
    clock.now += timedelta(seconds=1)
    loop.reconcile(ctx)
    after = _pod(store, "p")
    assert _condition(after) == ("False", "SchedulerError", _error_text())
    assert DIAGNOSIS_ANNOTATION not in after.metadata.annotations
    # Still False: the condition keeps the time it turned False.
    assert after.status.conditions[-1].last_transition_time == since


def test_an_error_backs_off_one_second_doubling_to_ten(store: Store, clock: Clock) -> None:
    """No retry before the backoff ends, and each pass says when the next retry is due."""
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(_with_hint(make_pod("broken", cpu=100), BAD_HINT))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    waits = []
    for attempt in range(1, 8):
        wait = loop.reconcile(ctx)
        assert _attempts(store, "broken") == attempt
        assert loop.queue.where("default/broken") is Where.BACKOFF
        assert wait is not None
        waits.append(wait)
        # Passes before the backoff ends do not try again.
        clock.now += timedelta(seconds=wait / 2)
        assert loop.reconcile(ctx) == pytest.approx(wait / 2)
        assert _attempts(store, "broken") == attempt
        clock.now += timedelta(seconds=wait / 2)
    assert waits == pytest.approx([1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0])


def test_the_condition_is_written_once_while_the_error_stays_the_same(
    store: Store, clock: Clock
) -> None:
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(_with_hint(make_pod("broken", cpu=100), BAD_HINT))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    version = _pod(store, "broken").metadata.resource_version
    for _ in range(3):
        clock.now += timedelta(seconds=10)
        loop.reconcile(ctx)
    assert _attempts(store, "broken") == 4
    pod = _pod(store, "broken")
    assert _condition(pod) == ("False", "SchedulerError", _error_text())
    assert pod.metadata.resource_version == version


def test_a_fixed_pod_is_bound_after_its_backoff(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(_with_hint(make_pod("broken", cpu=100), BAD_HINT))
    loop = SchedulerLoop()
    ctx = LoopContext(store=store, now=clock)
    loop.reconcile(ctx)
    store.update(_with_hint(_pod(store, "broken"), '{"nodeNames": ["n1"]}'))
    loop.reconcile(ctx)
    assert _pod(store, "broken").spec.node_name == ""  # the backoff is not over
    clock.now += timedelta(seconds=1)
    loop.reconcile(ctx)
    pod = _pod(store, "broken")
    assert pod.spec.node_name == "n1"
    assert _condition(pod) == ("True", "", "")


SCENARIO = f"""
apiVersion: v1
kind: Node
metadata: {{name: n1}}
status:
  allocatable: {{cpu: "4", memory: 8Gi, pods: "110"}}
  conditions: [{{type: Ready, status: "True"}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: broken
  namespace: default
  annotations:
    {k.ANNOTATION_SCHEDULING_HINT}: '{BAD_HINT}'
spec:
  schedulerName: koord-scheduler
  containers: [{{name: main, image: busybox, resources: {{requests: {{cpu: "1"}}}}}}]
"""


def test_simulate_retries_on_the_backoff_schedule_and_ends() -> None:
    """Attempts at 0, 1, 3, 7, 15, 25, 35, 45 and 55 s: nine in the first minute."""
    result = simulate(scenario_objects(SCENARIO), max_time=timedelta(seconds=60))
    pod = next(o for o in result.objects if isinstance(o, Pod) and o.metadata.name == "broken")
    assert _condition(pod) == ("False", "SchedulerError", _error_text())
    (event,) = _failed_scheduling(result.objects, "broken")
    assert event.count == 9
    assert result.ended - result.started == timedelta(seconds=55)


@dataclass
class RejectingReserve:
    """A Reserve plugin that turns every pod away."""

    name: str = "Rejecting"
    reason: str = "node(s) reserve says no"

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        return fw.Status.of(fw.Code.UNSCHEDULABLE, self.reason)

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        return None


@dataclass
class FailingReserve:
    """A Reserve plugin that raises."""

    name: str = "Failing"

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        raise RuntimeError("the reserve backend is down")

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        return None


def _loop_with_reserve(plugin: RejectingReserve | FailingReserve) -> SchedulerLoop:
    registry = {**PLUGINS, plugin.name: PluginSpec(fw.NoArgs, lambda _args: plugin)}
    config = msgspec.structs.replace(DEFAULT_CONFIG, reserve=(*DEFAULT_CONFIG.reserve, plugin.name))
    return SchedulerLoop([build_profile(config, registry)])


def test_a_plugin_that_raises_is_a_scheduler_error(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(make_pod("p", cpu=100))
    loop = _loop_with_reserve(FailingReserve())
    assert loop.reconcile(LoopContext(store=store, now=clock)) == pytest.approx(1.0)
    message = "running Failing: the reserve backend is down"
    assert _condition(_pod(store, "p")) == ("False", "SchedulerError", message)
    assert [e.message for e in _events(store, "p")] == [message]
    assert loop.queue.where("default/p") is Where.BACKOFF
    assert loop.table.placed("default/p") is None  # unreserved and forgotten


def test_a_reserve_rejection_is_a_one_node_fit_error(store: Store, clock: Clock) -> None:
    store.create(make_node("n1", cpu=4000, memory=8 * GI))
    store.create(make_node("n2", cpu=4000, memory=8 * GI))
    store.create(make_pod("p", cpu=100))
    loop = _loop_with_reserve(RejectingReserve())
    loop.reconcile(LoopContext(store=store, now=clock))
    message = "0/1 nodes are available: 1 node(s) reserve says no."
    assert _condition(_pod(store, "p")) == ("False", "Unschedulable", message)
    assert [e.message for e in _events(store, "p")] == [message]
    # Unschedulable: it waits for a cluster event, not for a backoff.
    assert loop.queue.where("default/p") is Where.UNSCHEDULABLE


GPU_SCENARIO = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Device
metadata:
  name: gpu-node
spec:
  devices:
  - health: true
    id: GPU-0
    minor: 0
    resources:
      koordinator.sh/gpu-core: "100"
      koordinator.sh/gpu-memory: 16Gi
      koordinator.sh/gpu-memory-ratio: "100"
    type: gpu
---
apiVersion: v1
kind: Node
metadata: {name: gpu-node}
status:
  allocatable:
    cpu: "8"
    memory: 16Gi
    pods: "110"
    koordinator.sh/gpu.shared: "100"
    koordinator.sh/gpu-core: "100"
    koordinator.sh/gpu-memory: 16Gi
    koordinator.sh/gpu-memory-ratio: "100"
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata:
  name: hami
  namespace: default
  labels: {koordinator.sh/gpu-isolation-provider: HAMi-core}
spec:
  schedulerName: koord-scheduler
  containers:
  - name: main
    image: cuda
    resources:
      limits: {koordinator.sh/gpu.shared: 1, koordinator.sh/gpu-core: 50,
               koordinator.sh/gpu-memory-ratio: 50}
      requests: {koordinator.sh/gpu.shared: 1, koordinator.sh/gpu-core: 50,
                 koordinator.sh/gpu-memory-ratio: 50}
"""


def test_a_hami_pod_on_a_node_without_hami_core_is_a_scheduler_error() -> None:
    """DeviceShare's Error (controller-spec §9 item 8, §10): a pod asking HAMi-core isolation
    and a node not labelled with that provider."""
    result = simulate(scenario_objects(GPU_SCENARIO), max_time=timedelta(seconds=30))
    pod = next(o for o in result.objects if isinstance(o, Pod) and o.metadata.name == "hami")
    message = "GPUIsolationProviderHAMICore not found on the node"
    assert pod.spec.node_name == ""
    assert _condition(pod) == ("False", "SchedulerError", message)
    (event,) = _failed_scheduling(result.objects, "hami")
    assert (event.type, event.message) == ("Warning", message)
