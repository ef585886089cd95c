"""Revocation of borrowed quota (controller.quota.revoke): when a quota over its runtime is due,
which of its pods go, and the control loop that evicts them."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec
import pytest

from apis.core import ConfigMap, Event, Node, NodeStatus, Pod
from apis.duration import Duration
from apis.meta import Object, ObjectMeta
from apis.resources import ResourceList
from controller.loops import LOOPS, LoopContext, build_loops
from controller.quota.args import ElasticQuotaArgs
from controller.quota.revoke import (
    QuotaRevokeLoop,
    QuotaView,
    observe,
    pods_to_revoke,
    quota_views,
)
from controller.scheduler.config import CONFIG_KEY, CONFIG_NAME, CONFIG_NAMESPACE
from controller.store.sqlite import Store
from tests.controller.quota.builders import T0, pod, quota, res

DELAY = timedelta(seconds=120)


def view(used: ResourceList, runtime: ResourceList, pods: Sequence[Pod] = ()) -> QuotaView:
    return QuotaView(name="q", used=used, runtime=runtime, pods=tuple(pods))


def names(pods: Sequence[Pod]) -> list[str]:
    return [p.metadata.name for p in pods]


# --- observe: when a quota is due -------------------------------------------------------------


OVER = {"q": view(res(cpu=3000), res(cpu=2000))}
UNDER = {"q": view(res(cpu=2000), res(cpu=2000))}


def test_a_quota_within_its_runtime_is_never_due() -> None:
    seen = observe({"q": T0 - timedelta(hours=1)}, UNDER, T0, DELAY)
    assert seen.over == ()
    assert seen.due == ()
    assert seen.since == {"q": T0}


def test_a_quota_first_seen_over_starts_its_wait_then() -> None:
    seen = observe({}, OVER, T0, DELAY)
    assert seen.over == ("q",)
    assert seen.due == ()
    assert seen.since == {"q": T0}


def test_a_quota_is_due_only_once_over_for_longer_than_the_delay() -> None:
    assert observe({"q": T0}, OVER, T0 + DELAY, DELAY).due == ()
    later = T0 + DELAY + timedelta(seconds=1)
    seen = observe({"q": T0}, OVER, later, DELAY)
    assert seen.due == ("q",)
    # Its wait starts again: the next revocation needs another delay over the runtime.
    assert seen.since == {"q": later}


def test_being_within_the_runtime_once_restarts_the_wait() -> None:
    back = observe({"q": T0}, UNDER, T0 + timedelta(seconds=60), DELAY)
    seen = observe(back.since, OVER, T0 + DELAY + timedelta(seconds=1), DELAY)
    assert seen.due == ()


def test_a_quota_gone_is_forgotten() -> None:
    assert observe({"q": T0, "gone": T0}, UNDER, T0, DELAY).since.keys() == {"q"}


# --- pods_to_revoke: which pods go ------------------------------------------------------------


def running(
    name: str,
    cpu: int,
    *,
    priority: int = 0,
    started: int = 0,
    non_preemptible: bool = False,
    extra: dict[str, int] | None = None,
) -> Pod:
    return pod(
        name,
        cpu=cpu,
        node="n1",
        priority=priority,
        started=started,
        non_preemptible=non_preemptible,
        extra=extra,
    )


def test_nothing_goes_while_used_fits_the_runtime() -> None:
    pods = [running("a", 2000)]
    assert pods_to_revoke(view(res(cpu=2000), res(cpu=2000), pods)) == ()


def test_lowest_priority_goes_first_until_used_fits() -> None:
    pods = [
        running("high", 1000, priority=100),
        running("low", 1000, priority=1),
        running("mid", 1000, priority=50),
    ]
    assert names(pods_to_revoke(view(res(cpu=3000), res(cpu=2000), pods))) == ["low"]
    assert names(pods_to_revoke(view(res(cpu=3000), res(cpu=1000), pods))) == ["low", "mid"]


def test_of_equal_priority_the_later_started_goes_first() -> None:
    pods = [running("early", 1000, started=1), running("late", 1000, started=5)]
    assert names(pods_to_revoke(view(res(cpu=2000), res(cpu=1000), pods))) == ["late"]


def test_a_dropped_pod_that_fits_again_is_taken_back() -> None:
    """Dropping ``small`` then ``big`` brings used to 4; ``big`` does not fit back, ``small``
    does: only ``big`` goes."""
    pods = [
        running("small", 1000, priority=1),
        running("big", 5000, priority=2),
        running("top", 4000, priority=3),
    ]
    assert names(pods_to_revoke(view(res(cpu=10000), res(cpu=5000), pods))) == ["big"]


def test_non_preemptible_pods_stay_even_if_used_cannot_fit() -> None:
    """With the pinned pod alone above the runtime every other pod goes, the pinned one stays."""
    pods = [running("pinned", 3000, non_preemptible=True), running("a", 1000, priority=5)]
    assert names(pods_to_revoke(view(res(cpu=4000), res(cpu=2000), pods))) == ["a"]


def test_only_the_runtimes_resources_are_compared() -> None:
    """A resource the runtime does not name (not in the quota's max) is not over."""
    pods = [running("a", 1000, extra={"pods": 1})]
    used = ResourceList({"cpu": 1000, "pods": 1})
    assert view(used, res(cpu=1000)).exceeded == ()
    assert pods_to_revoke(view(used, res(cpu=1000), pods)) == ()


# --- quota_views: the figures -----------------------------------------------------------------


def node(cpu: int) -> Node:
    return Node(metadata=ObjectMeta(name="n1"), status=NodeStatus(allocatable=res(cpu=cpu)))


def sharing(name: str) -> object:
    return quota(name, min=res(cpu=2000), max=res(cpu=4000))


def borrowing_pods(pending_lender: int = 2) -> list[Pod]:
    """``borrower`` runs 4 pods of 1 CPU on a 4-CPU node; ``lender`` has pending pods."""
    pods = [
        pod(f"b{i}", cpu=1000, node="n1", quota="borrower", priority=i, started=0) for i in range(4)
    ]
    pods += [pod(f"l{i}", cpu=1000, quota="lender") for i in range(pending_lender)]
    return pods


def test_views_show_the_borrowers_runtime_shrunk_by_the_lenders_demand() -> None:
    quotas = [quota("borrower", min=res(cpu=2000), max=res(cpu=4000))]
    quotas.append(quota("lender", min=res(cpu=2000), max=res(cpu=4000)))
    views = quota_views(borrowing_pods(), quotas, res(cpu=4000), ElasticQuotaArgs())
    borrower = views["borrower"]
    assert borrower.used == res(cpu=4000)
    assert borrower.runtime == res(cpu=2000)
    assert borrower.exceeded == ("cpu",)
    assert len(borrower.pods) == 4
    assert views["lender"].runtime == res(cpu=2000)
    assert views["lender"].pods == ()
    assert "koordinator-root-quota" not in views
    assert "koordinator-system-quota" not in views
    # Without the lender's demand the borrower keeps all it borrowed.
    idle = quota_views(borrowing_pods(0), quotas, res(cpu=4000), ElasticQuotaArgs())
    assert idle["borrower"].runtime == res(cpu=4000)
    assert idle["borrower"].exceeded == ()


# --- the loop ----------------------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def cluster(*extra: Object) -> tuple[Store, LoopContext, Clock]:
    store = Store()
    for obj in (
        node(4000),
        quota("borrower", min=res(cpu=2000), max=res(cpu=4000)),
        quota("lender", min=res(cpu=2000), max=res(cpu=4000)),
        *borrowing_pods(),
        *extra,
    ):
        store.apply(obj)
    clock = Clock()
    return store, LoopContext(store=store, now=clock), clock


def pods_left(store: Store) -> list[str]:
    return sorted(
        p.metadata.name for p in store.list(store.registry.for_type(Pod))[0] if isinstance(p, Pod)
    )


def evicted(store: Store) -> list[Event]:
    events = [e for e in store.list(store.registry.for_type(Event))[0] if isinstance(e, Event)]
    return [e for e in events if e.reason == "Evicted"]


ON = ElasticQuotaArgs(monitor_all_quotas=True)


@pytest.mark.parametrize(
    "args",
    [ElasticQuotaArgs(), ElasticQuotaArgs(monitor_all_quotas=True, enable_runtime_quota=False)],
    ids=["monitorAllQuotas off", "enableRuntimeQuota off"],
)
def test_the_loop_does_nothing_unless_monitoring_with_runtime_quota(
    args: ElasticQuotaArgs,
) -> None:
    store, ctx, clock = cluster()
    loop = QuotaRevokeLoop(args)
    assert loop.reconcile(ctx) is None
    clock.now += timedelta(hours=1)
    assert loop.reconcile(ctx) is None
    assert len(pods_left(store)) == 6


def test_the_loop_revokes_after_the_delay_and_then_rests() -> None:
    store, ctx, clock = cluster()
    loop = QuotaRevokeLoop(ON)
    assert loop.reconcile(ctx) == 1.0  # over: checked every revokePodInterval
    clock.now = T0 + timedelta(seconds=0.5)
    assert loop.reconcile(ctx) == 0.5  # before the next check: nothing looked at
    clock.now = T0 + DELAY
    assert loop.reconcile(ctx) == 1.0
    assert len(pods_left(store)) == 6
    clock.now = T0 + DELAY + timedelta(seconds=1)
    assert loop.reconcile(ctx) == 1.0
    # The two lowest priorities of the borrower go.
    assert pods_left(store) == ["b2", "b3", "l0", "l1"]
    (first, second) = evicted(store)
    assert {first.involved_object.name, second.involved_object.name} == {"b0", "b1"}
    assert first.type == "Warning"
    assert first.source.component == "koord-scheduler"
    assert first.message == (
        "revoked by koord-scheduler: quota borrower used cpu:4 above its runtime cpu:2"
        " (in cpu) for longer than delayEvictTime 120s"
    )
    clock.now += timedelta(seconds=1)
    assert loop.reconcile(ctx) is None  # nothing over any more: converged


def test_the_loop_follows_the_scheduler_configuration() -> None:
    """``monitorAllQuotas`` and the durations come from ``koord-scheduler-config``, read once
    for the scheduler and this loop (the loops :func:`build_loops` makes share it)."""
    document = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: koord-scheduler
  pluginConfig:
  - name: ElasticQuota
    args:
      monitorAllQuotas: true
      revokePodInterval: 5s
      delayEvictTime: 10s
"""
    config = ConfigMap(
        metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
        data={CONFIG_KEY: document},
    )
    store, ctx, clock = cluster(config)
    (loop,) = [
        loop
        for loop in build_loops({"scheduler": LOOPS["scheduler"], "revoke": QuotaRevokeLoop})
        if isinstance(loop, QuotaRevokeLoop)
    ]
    assert loop.reconcile(ctx) == 5.0
    assert loop.args.delay_evict_time == Duration.from_seconds(10)
    clock.now = T0 + timedelta(seconds=15)
    loop.reconcile(ctx)
    assert pods_left(store) == ["b2", "b3", "l0", "l1"]


def test_a_configuration_without_monitor_all_quotas_stops_the_loop() -> None:
    document = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: koord-scheduler
  pluginConfig:
  - name: ElasticQuota
    args:
      monitorAllQuotas: {on}
      delayEvictTime: 10s
"""
    config = ConfigMap(
        metadata=ObjectMeta(name=CONFIG_NAME, namespace=CONFIG_NAMESPACE),
        data={CONFIG_KEY: document.format(on="true")},
    )
    store, ctx, clock = cluster(config)
    loop = QuotaRevokeLoop()
    assert loop.reconcile(ctx) == 1.0
    kind = store.registry.for_type(ConfigMap)
    current = store.get(kind, CONFIG_NAME, CONFIG_NAMESPACE)
    assert isinstance(current, ConfigMap)
    store.update(msgspec.structs.replace(current, data={CONFIG_KEY: document.format(on="false")}))
    clock.now = T0 + timedelta(seconds=30)
    assert loop.reconcile(ctx) is None
    assert len(pods_left(store)) == 6
