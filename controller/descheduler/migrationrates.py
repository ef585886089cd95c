"""The rates the ``migration`` loop keeps: evictions per second and migrations per object.

Two kinds of token bucket (:class:`~.evictor.TokenBucket`, a bucket starts full), both from
``MigrationControllerArgs`` (controller-spec §6.2):

- **evictQPS / evictBurst**: one bucket of ``evictQPS`` tokens a second holding at most
  ``evictBurst``; every eviction the loop performs (ReservationFirst once the reservation is
  scheduled, EvictDirectly) takes a token. ``evictQPS`` 0 turns it off.
- **objectLimiters**: per ``workload`` (the pod's controller uid; a bare pod has none) and
  per ``namespace``, a bucket of ``maxMigrating`` tokens per ``duration`` holding at most
  ``burst`` (0: 1); a PodMigrationJob takes one from each bucket of its pod when it starts.
  ``maxMigrating`` 0 is the workload's ``maxMigratingPerWorkload`` (as arbitration works it
  out) for ``workload`` and no limit for ``namespace``; a ``0s`` duration, or
  ``objectLimiters: {}``, turns a limiter off. These are the rules of the descheduler's
  :class:`~.evictor.CycleEvictor` (``_rate_allows``), which applies the same limiters when
  it asks for a migration: its buckets pace the jobs it creates, these the jobs that start,
  whoever created them.

A refused take says when the next token is due, so the loop can ask to run again then.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Final, Protocol

from apis.core import Pod
from apis.duration import Duration

if TYPE_CHECKING:  # evictor imports migration, which imports this module
    from controller.descheduler.evictor import TokenBucket

__all__ = [
    "DEFAULT_OBJECT_RATES",
    "OBJECT_KINDS",
    "MigrationRates",
    "ObjectLimiterArgs",
    "ObjectRate",
    "object_rates",
]

WORKLOAD: Final = "workload"
NAMESPACE: Final = "namespace"
#: The object limiter types ``objectLimiters`` may name.
OBJECT_KINDS: Final = (WORKLOAD, NAMESPACE)


@dataclass(frozen=True, slots=True)
class ObjectRate:
    """One object limiter: at most ``max_migrating`` starts per ``duration`` per object of
    ``kind`` (0: see the module docstring), ``burst`` at once (0: 1)."""

    kind: str
    duration: timedelta = timedelta(minutes=5)
    max_migrating: int = 0
    burst: int = 0

    def __post_init__(self) -> None:
        if self.kind not in OBJECT_KINDS:
            raise ValueError(f"objectLimiters: {self.kind!r} is not one of {list(OBJECT_KINDS)}")
        if self.duration < timedelta(0):
            raise ValueError(
                f"objectLimiters.{self.kind}.duration: {self.duration} must not be negative"
            )
        for name, value in (("maxMigrating", self.max_migrating), ("burst", self.burst)):
            if isinstance(value, bool) or value < 0:
                raise ValueError(f"objectLimiters.{self.kind}.{name}: {value!r} must be >= 0")

    @property
    def enabled(self) -> bool:
        return self.duration > timedelta(0)


#: ``objectLimiters`` when the args give none: per workload, 5 minutes.
DEFAULT_OBJECT_RATES: Final = (ObjectRate(WORKLOAD),)


class ObjectLimiterArgs(Protocol):
    """The fields of an ``objectLimiters`` entry (``evictor.ObjectLimiter``)."""

    @property
    def duration(self) -> Duration: ...
    @property
    def max_migrating(self) -> int: ...
    @property
    def burst(self) -> int: ...


def object_rates(limiters: Mapping[str, ObjectLimiterArgs]) -> tuple[ObjectRate, ...]:
    """The :class:`ObjectRate` of each ``objectLimiters`` entry, by kind (bad values: a
    ``ValueError`` naming the field)."""
    return tuple(
        ObjectRate(
            kind,
            duration=timedelta(microseconds=limiter.duration.nanoseconds // 1000),
            max_migrating=limiter.max_migrating,
            burst=limiter.burst,
        )
        for kind, limiter in sorted(limiters.items())
    )


def _bucket(rate: float, burst: int) -> TokenBucket:
    # evictor imports migration, which imports this module: import when first needed
    from controller.descheduler.evictor import TokenBucket

    return TokenBucket(rate=rate, burst=burst)


def _due(bucket: TokenBucket, now: datetime) -> datetime:
    """When ``bucket`` (just refilled at ``now``, short of a token) has one again."""
    missing = max(0.0, 1.0 - bucket.tokens)
    return now + timedelta(seconds=missing / bucket.rate) + timedelta(microseconds=1)


class EvictionBuckets:
    """The ``evictQPS``/``evictBurst`` token buckets of one controller, by rate: the
    descheduler loop's direct evictions and the ``migration`` loop's evictions of
    PodMigrationJobs draw on one bucket when their ``MigrationControllerArgs`` give the same
    rate, so that together they keep to it (as koord-descheduler's one evictor does)."""

    def __init__(self) -> None:
        self._buckets: dict[tuple[float, int], TokenBucket] = {}

    def get(self, qps: float, burst: int) -> TokenBucket | None:
        """The bucket of ``qps`` tokens a second holding ``burst``; None when ``qps`` is 0
        (no limit)."""
        if qps <= 0:
            return None
        found = self._buckets.get((qps, burst))
        if found is None:
            found = self._buckets[(qps, burst)] = _bucket(qps, burst)
        return found


class MigrationRates:
    """The buckets of one ``migration`` loop (they live as long as its configuration; the
    ``evictQPS`` one as long as ``evictions``, when given)."""

    def __init__(
        self,
        *,
        qps: float,
        burst: int,
        objects: Iterable[ObjectRate] = DEFAULT_OBJECT_RATES,
        evictions: EvictionBuckets | None = None,
    ) -> None:
        self.qps = qps
        self.burst = burst
        self.objects = tuple(o for o in objects if o.enabled)
        self._evictions = (evictions or EvictionBuckets()).get(qps, burst)
        self._by_object: dict[tuple[str, str], TokenBucket] = {}

    def take_eviction(self, now: datetime) -> datetime | None:
        """Take an eviction token: None when taken, else when the next one is due."""
        bucket = self._evictions
        if bucket is None or bucket.take(now):
            return None
        return _due(bucket, now)

    def take_start(
        self, pod: Pod, workload: str, workload_max: int, now: datetime
    ) -> tuple[str, datetime] | None:
        """Take a token from each object bucket of ``pod`` (``workload``: its controller uid,
        ``workload_max``: its ``maxMigratingPerWorkload``): None when every bucket had one
        (all are taken), else the field of a limiter without one and when it is due (none
        taken)."""
        buckets: list[TokenBucket] = []
        for limiter in self.objects:
            if limiter.kind == WORKLOAD:
                key, most = workload, limiter.max_migrating or workload_max
            else:
                key, most = pod.metadata.namespace, limiter.max_migrating
            if not key or most <= 0:
                continue
            bucket = self._by_object.get((limiter.kind, key))
            if bucket is None:
                seconds = limiter.duration.total_seconds()
                bucket = _bucket(most / seconds, limiter.burst or 1)
                self._by_object[(limiter.kind, key)] = bucket
            if not bucket.available(now):
                return f"objectLimiters.{limiter.kind}", _due(bucket, now)
            buckets.append(bucket)
        for bucket in buckets:
            bucket.take(now)
        return None
