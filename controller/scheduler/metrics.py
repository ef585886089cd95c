"""The scheduler's Prometheus metrics, under kube-scheduler's and koord-scheduler's names (§7.1).

:class:`SchedulerMetrics` registers, on the controller's registry (served on ``:9317``):

==========================================================  ====================================
``scheduler_schedule_attempts_total{result,profile}``       attempts: ``scheduled``,
                                                            ``unschedulable`` or ``error``
``scheduler_scheduling_attempt_duration_seconds``           one attempt, from taking the pod to
``{result,profile}``                                        handing its binding on
``scheduler_scheduling_algorithm_duration_seconds``         the scheduling cycle (PreFilter to
                                                            Permit)
``scheduler_pod_scheduling_attempts``                       attempts a pod took until placed
``scheduler_pending_pods{queue}``                           pods waiting: ``active``,
                                                            ``backoff``, ``unschedulable``,
                                                            ``gated``
``scheduler_queue_incoming_pods_total{queue,event}``        pods entering a queue: ``PodAdd``,
                                                            ``ScheduleAttemptFailure``,
                                                            ``ClusterChange`` (released by a
                                                            cluster change)
``scheduler_unschedulable_pods{plugin,profile}``            parked pods, by rejecting plugin
``scheduler_preemption_attempts_total``                     PostFilter runs
``scheduler_framework_extension_point_duration_seconds``    one extension point of one attempt
``{extension_point,status,profile}``
``scheduler_plugin_execution_duration_seconds``             one plugin at one point
``{plugin,extension_point,status}``
``scheduler_reservation_status_phase{name,phase}``          1 for each reservation's phase
``scheduler_reservation_resource{type,name,resource,unit}`` reservations' allocatable,
                                                            allocated, utilization
==========================================================  ====================================

The extension-point and plugin durations are measured on one attempt in ten (kube-scheduler
samples its plugin metrics the same way), so the other attempts pay nothing for them: for a
sampled attempt :meth:`SchedulerMetrics.start_attempt` hands the loop a twin of the profile
whose plugins are timing proxies. The reservation gauges are rebuilt from the snapshot when the
reservations changed, and exported as they were at the end of the last pass.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from apis.kinds import default_registry
from apis.scheduling import Reservation
from controller.reservations.controller import MetricSample, metric_samples
from controller.scheduler import framework as fw
from controller.scheduler.scheduling_queue import Where

if TYPE_CHECKING:
    from controller.scheduler.cycle import Decision
    from controller.scheduler.profile import Profile
    from controller.scheduler.scheduling_queue import QueuedPod, SchedulingQueue
    from controller.store.snapshots import Snapshot

__all__ = ["PLUGIN_SAMPLE_EVERY", "SchedulerMetrics", "status_name"]

#: One attempt in this many is timed per extension point and plugin.
PLUGIN_SAMPLE_EVERY: Final = 10

SCHEDULED: Final = "scheduled"
UNSCHEDULABLE: Final = "unschedulable"
ERROR: Final = "error"

_STATUS_NAMES: Final[Mapping[fw.Code, str]] = {
    fw.Code.SUCCESS: "Success",
    fw.Code.ERROR: "Error",
    fw.Code.UNSCHEDULABLE: "Unschedulable",
    fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable",
    fw.Code.WAIT: "Wait",
    fw.Code.SKIP: "Skip",
}

#: kube-scheduler's buckets: attempts and the cycle 1 ms .. ~16 s; points and plugins finer.
_ATTEMPT_BUCKETS: Final = tuple(0.001 * 2**i for i in range(15))
_POINT_BUCKETS: Final = tuple(0.0001 * 2**i for i in range(12))
_PLUGIN_BUCKETS: Final = tuple(0.00001 * 1.5**i for i in range(20))
_ATTEMPTS_BUCKETS: Final = tuple(float(2**i) for i in range(5))


def status_name(code: fw.Code) -> str:
    """kube-scheduler's name of a status code (``Success``, ``Unschedulable``...)."""
    return _STATUS_NAMES[code]


def _result(code: fw.Code) -> str:
    if code in (fw.Code.SUCCESS, fw.Code.WAIT):
        return SCHEDULED
    if code.rejects:
        return UNSCHEDULABLE
    return ERROR


class _ReservationCollector(Collector):
    """The reservation gauges, as the last pass left them."""

    def __init__(self) -> None:
        self.samples: tuple[MetricSample, ...] = ()

    def collect(self) -> Iterable[Metric]:
        phase = GaugeMetricFamily(
            "scheduler_reservation_status_phase",
            "The current phase of each reservation (1), the other phases (0)",
            labels=("name", "phase"),
        )
        resource = GaugeMetricFamily(
            "scheduler_reservation_resource",
            "Allocatable, allocated and utilization of each reservation's resources",
            labels=("type", "name", "resource", "unit"),
        )
        samples = self.samples  # one read: a pass may swap the tuple meanwhile
        for sample in samples:
            family = phase if sample.name == phase.name else resource
            family.add_metric(tuple(sample.labels.values()), sample.value)
        return (phase, resource)


class SchedulerMetrics:
    """See the module docstring; one per scheduler loop."""

    def __init__(
        self,
        registry: CollectorRegistry,
        *,
        sample_every: int = PLUGIN_SAMPLE_EVERY,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._clock = clock
        self._sample_every = max(1, sample_every)
        self.attempts = Counter(
            "scheduler_schedule_attempts",
            "Scheduling attempts by result",
            ("result", "profile"),
            registry=registry,
        )
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds",
            ("result", "profile"),
            buckets=_ATTEMPT_BUCKETS,
            registry=registry,
        )
        self.algorithm_duration = Histogram(
            "scheduler_scheduling_algorithm_duration_seconds",
            "Scheduling cycle latency in seconds",
            buckets=_ATTEMPT_BUCKETS,
            registry=registry,
        )
        self.pod_attempts = Histogram(
            "scheduler_pod_scheduling_attempts",
            "Attempts a pod took until it was placed",
            buckets=_ATTEMPTS_BUCKETS,
            registry=registry,
        )
        self.pending = Gauge(
            "scheduler_pending_pods", "Pending pods by queue", ("queue",), registry=registry
        )
        self.incoming = Counter(
            "scheduler_queue_incoming_pods",
            "Pods added to a scheduling queue, by event",
            ("queue", "event"),
            registry=registry,
        )
        self.unschedulable = Gauge(
            "scheduler_unschedulable_pods",
            "Unschedulable pods by the plugins that rejected them",
            ("plugin", "profile"),
            registry=registry,
        )
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts",
            "Preemption attempts (PostFilter runs)",
            registry=registry,
        )
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency of an extension point in a (sampled) scheduling attempt",
            ("extension_point", "status", "profile"),
            buckets=_POINT_BUCKETS,
            registry=registry,
        )
        self.plugin_duration = Histogram(
            "scheduler_plugin_execution_duration_seconds",
            "Latency of a plugin at an extension point in a (sampled) scheduling attempt",
            ("plugin", "extension_point", "status"),
            buckets=_PLUGIN_BUCKETS,
            registry=registry,
        )
        self._reservations = _ReservationCollector()
        registry.register(self._reservations)
        for queue in ("active", "backoff", "unschedulable", "gated"):
            self.pending.labels(queue).set(0)
        #: id(profile) -> (the profile, its timing twin); the profile is kept so that its id
        #: is not reused by a profile of a later configuration.
        self._twins: dict[int, tuple[Profile, Profile]] = {}
        self._count = 0
        self._started = 0.0
        #: The attempt under way: its profile name and result, once known.
        self._current: tuple[str, str] | None = None
        #: Extension point -> (seconds, worst status) in the sampled attempt under way.
        self._points: dict[str, tuple[float, fw.Code]] = {}
        self._point_profile = ""
        #: Parked pod key -> (profile, rejecting plugins).
        self._parked: dict[str, tuple[str, tuple[str, ...]]] = {}
        self._unschedulable_labels: set[tuple[str, str]] = set()
        self._reservation_view: Sequence[object] | None = None

    # -- attempts ----------------------------------------------------------------------------

    def start_attempt(self, profile: Profile) -> Profile:
        """An attempt begins: the profile to run it with (a timing twin when sampled)."""
        self._finish_attempt()
        self._started = self._clock()
        self._count += 1
        if (self._count - 1) % self._sample_every:
            return profile
        self._point_profile = profile.scheduler_name
        known = self._twins.get(id(profile))
        if known is not None and known[0] is profile:
            return known[1]
        twin = _timed_profile(profile, self)
        self._twins[id(profile)] = (profile, twin)
        return twin

    def attempted(self, profile: Profile, entry: QueuedPod, decision: Decision) -> None:
        """The scheduling cycle of ``entry`` ended with ``decision``."""
        elapsed = self._clock() - self._started
        self.algorithm_duration.observe(elapsed)
        code = decision.status.code
        result = _result(code)
        name = profile.scheduler_name
        self.attempts.labels(result, name).inc()
        self._current = (name, result)
        if result == SCHEDULED:
            self.pod_attempts.observe(entry.attempts)
            self._parked.pop(entry.key, None)
        elif result == UNSCHEDULABLE and decision.diagnosis is not None:
            plugins = tuple(
                sorted(p for p, reasons in decision.diagnosis.counts.items() if reasons)
            )
            if decision.status.plugin and decision.status.plugin not in plugins:
                plugins = (*plugins, decision.status.plugin)
            self._parked[entry.key] = (name, plugins)
            self.incoming.labels("unschedulable", "ScheduleAttemptFailure").inc()
            if profile.post_filter:
                self.preemption_attempts.inc()
        else:
            self.incoming.labels("backoff", "ScheduleAttemptFailure").inc()

    def pod_added(self) -> None:
        """A new pending pod entered the queue."""
        self.incoming.labels("active", "PodAdd").inc()

    def moved(self, count: int) -> None:
        """A cluster change released ``count`` unschedulable pods."""
        if count:
            self.incoming.labels("active", "ClusterChange").inc(count)

    def _finish_attempt(self) -> None:
        if self._current is not None:
            name, result = self._current
            self.attempt_duration.labels(result, name).observe(self._clock() - self._started)
            self._current = None
        if self._points:
            for point, (seconds, code) in self._points.items():
                self.extension_point_duration.labels(
                    point, status_name(code), self._point_profile
                ).observe(seconds)
            self._points.clear()

    def _timed(self, plugin: str, point: str, seconds: float, code: fw.Code) -> None:
        self.plugin_duration.labels(plugin, point, status_name(code)).observe(seconds)
        total, worst = self._points.get(point, (0.0, fw.Code.SUCCESS))
        if code is not fw.Code.SUCCESS and worst is fw.Code.SUCCESS:
            worst = code
        self._points[point] = (total + seconds, worst)

    # -- end of a pass -------------------------------------------------------------------------

    def pass_done(self, queue: SchedulingQueue, snapshot: Snapshot) -> None:
        """The pass ended: queue gauges, parked pods by plugin, reservation gauges."""
        self._finish_attempt()
        counts = queue.counts()
        self.pending.labels("active").set(counts[Where.ACTIVE] + counts[Where.IN_FLIGHT])
        self.pending.labels("backoff").set(counts[Where.BACKOFF])
        self.pending.labels("unschedulable").set(counts[Where.UNSCHEDULABLE])
        for key in [k for k in self._parked if queue.where(k) is not Where.UNSCHEDULABLE]:
            del self._parked[key]
        by_plugin: dict[tuple[str, str], int] = {}
        for profile, plugins in self._parked.values():
            for plugin in plugins:
                by_plugin[(plugin, profile)] = by_plugin.get((plugin, profile), 0) + 1
        for labels in self._unschedulable_labels - by_plugin.keys():
            self.unschedulable.labels(*labels).set(0)
        for labels, count in by_plugin.items():
            self.unschedulable.labels(*labels).set(count)
        self._unschedulable_labels = set(by_plugin)
        self._sync_reservations(snapshot)

    def _sync_reservations(self, snapshot: Snapshot) -> None:
        view = snapshot.objects(default_registry().for_type(Reservation))
        if view is self._reservation_view:
            return
        self._reservation_view = view
        reservations = [r for r in view if isinstance(r, Reservation)]
        self._reservations.samples = tuple(metric_samples(reservations))


# --- timing proxies -----------------------------------------------------------------------------


class _TimedPlugin:
    """Stands for one plugin in a sampled attempt: every call is timed into the metrics.

    Anything else is read from the plugin itself (its name, its other methods)."""

    def __init__(self, plugin: fw.Plugin, metrics: SchedulerMetrics) -> None:
        self._plugin = plugin
        self._metrics = metrics
        self.name = plugin.name

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._plugin, attr)

    def _call(self, point: str, method: str, *args: Any) -> Any:
        clock = self._metrics._clock
        started = clock()
        try:
            answer = getattr(self._plugin, method)(*args)
        except Exception:
            self._metrics._timed(self.name, point, clock() - started, fw.Code.ERROR)
            raise
        self._metrics._timed(self.name, point, clock() - started, _code_of(answer))
        return answer

    def pre_filter(self, *args: Any) -> Any:
        return self._call("PreFilter", "pre_filter", *args)

    def filter(self, *args: Any) -> Any:
        return self._call("Filter", "filter", *args)

    def post_filter(self, *args: Any) -> Any:
        return self._call("PostFilter", "post_filter", *args)

    def pre_score(self, *args: Any) -> Any:
        return self._call("PreScore", "pre_score", *args)

    def score(self, *args: Any) -> Any:
        return self._call("Score", "score", *args)

    def normalize(self, *args: Any) -> Any:
        return self._call("NormalizeScore", "normalize", *args)

    def reserve(self, *args: Any) -> Any:
        return self._call("Reserve", "reserve", *args)

    def unreserve(self, *args: Any) -> Any:
        return self._call("Unreserve", "unreserve", *args)

    def permit(self, *args: Any) -> Any:
        return self._call("Permit", "permit", *args)

    def pre_bind(self, *args: Any) -> Any:
        return self._call("PreBind", "pre_bind", *args)

    def bind(self, *args: Any) -> Any:
        return self._call("Bind", "bind", *args)


def _code_of(answer: object) -> fw.Code:
    if isinstance(answer, fw.Status):
        return answer.code
    if isinstance(answer, fw.NodeSubset | fw.PostFilterResult | fw.PreBindResult):
        return answer.status.code
    if isinstance(answer, fw.FilterResult) and answer.rejections:
        return answer.rejections[0].code
    return fw.Code.SUCCESS


def _timed_profile(profile: Profile, metrics: SchedulerMetrics) -> Profile:
    proxies: dict[str, _TimedPlugin] = {}

    def timed(plugins: Iterable[fw.Plugin]) -> tuple[Any, ...]:
        out = []
        for plugin in plugins:
            proxy = proxies.get(plugin.name)
            if proxy is None:
                proxy = proxies[plugin.name] = _TimedPlugin(plugin, metrics)
            out.append(proxy)
        return tuple(out)

    scores = tuple(
        dataclasses.replace(
            entry,
            plugin=timed((entry.plugin,))[0],
            normalizer=timed((entry.normalizer,))[0] if entry.normalizer is not None else None,
        )
        for entry in profile.score
    )
    return dataclasses.replace(
        profile,
        pre_filter=timed(profile.pre_filter),
        filter=timed(profile.filter),
        post_filter=timed(profile.post_filter),
        pre_score=timed(profile.pre_score),
        score=scores,
        reserve=timed(profile.reserve),
        permit=timed(profile.permit),
        pre_bind=timed(profile.pre_bind),
        bind=timed(profile.bind),
    )
