"""Anomaly detection: a node over its high threshold becomes a source only once it has stayed
there for a while (controller-spec §6.4 step 5).

Our rule, exactly (``N`` = ``consecutiveAbnormalities``, ``M`` = ``consecutiveNormalities``,
both defaulted when zero, see :mod:`~controller.descheduler.plugins.lownodeload.args`):

* Every node of a pool with a usable NodeMetric gets one mark per cycle and pool: *abnormal*
  when it is over its high threshold (a candidate source), *reset* when it is underutilized,
  *normal* otherwise. The prod pass keeps a second, separate detector per node, marked the same
  way against the prod thresholds.
* A detector starts ``OK``. An abnormal mark adds one to the consecutive-abnormal count and
  clears the normal count; a normal mark does the reverse. When the abnormal count **reaches**
  ``N`` the node turns ``Anomaly``: with the default 5 a node is a source on its 5th
  consecutive over-threshold cycle, not on the 6th as upstream (whose test is "greater than").
  ``N = 1`` makes every over-threshold node a source at once.
* An ``Anomaly`` node turns ``OK`` again when ``timeout`` has passed since it turned
  ``Anomaly`` (checked when it is next marked, before the mark counts), or when its normal
  count **reaches** ``M``. Every change of state clears both counts.
* A reset (the node is underutilized, or an eviction brought it below its high threshold)
  forces ``OK`` with both counts cleared.
* After a pool's eviction pass every source still ``Anomaly`` gets one normal mark.
* Only nodes in ``Anomaly`` after this cycle's mark are sources.

Detectors are keyed by (pool, node), so a node that belongs to two pools is counted once per
pool and cycle, not twice. They live in a cache: an entry unmarked for
``detectorCacheTimeout`` is forgotten (a forgotten node starts again from ``OK``). A normal mark
or a reset of a node without a detector creates none (it would be a fresh ``OK`` detector).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime, timedelta

from controller.descheduler.plugins.lownodeload.args import Anomaly

__all__ = ["Detector", "DetectorCache", "State"]


class State(enum.StrEnum):
    OK = "OK"
    ANOMALY = "Anomaly"


@dataclass(slots=True)
class Detector:
    """One node's state (runtime only, never serialised)."""

    rule: Anomaly
    state: State = State.OK
    #: Consecutive abnormal / normal marks since the last change of state.
    abnormal: int = 0
    normal: int = 0
    #: When the node turned ``Anomaly`` (None while ``OK``).
    since: datetime | None = None

    def _become(self, state: State, now: datetime) -> None:
        self.state = state
        self.abnormal = 0
        self.normal = 0
        self.since = now if state is State.ANOMALY else None

    def mark(self, *, normal: bool, now: datetime) -> State:
        """Count one cycle's verdict; the state after it."""
        timeout = self.rule.timeout
        if (
            self.state is State.ANOMALY
            and timeout is not None
            and self.since is not None
            and now - self.since >= timeout
        ):
            self._become(State.OK, now)
        if normal:
            self.normal += 1
            self.abnormal = 0
        else:
            self.abnormal += 1
            self.normal = 0
        if self.state is State.OK and self.abnormal >= self.rule.consecutive_abnormalities:
            self._become(State.ANOMALY, now)
        elif self.state is State.ANOMALY and self.normal >= self.rule.consecutive_normalities:
            self._become(State.OK, now)
        return self.state

    def reset(self) -> None:
        """Back to ``OK``, counts cleared."""
        self.state = State.OK
        self.abnormal = 0
        self.normal = 0
        self.since = None


class DetectorCache:
    """Detectors by key, each forgotten ``ttl`` after its last mark."""

    def __init__(self, ttl: timedelta) -> None:
        self._ttl = ttl
        #: key -> (detector, when it expires).
        self._entries: dict[tuple[str, str], tuple[Detector, datetime]] = {}

    def __len__(self) -> int:
        return len(self._entries)

    def _live(self, key: tuple[str, str], now: datetime) -> Detector | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if entry[1] <= now:
            del self._entries[key]
            return None
        return entry[0]

    def mark(self, key: tuple[str, str], rule: Anomaly, *, normal: bool, now: datetime) -> State:
        """Mark ``key``'s detector (made when an abnormal mark finds none); its state after."""
        detector = self._live(key, now)
        if detector is None:
            if normal:
                return State.OK
            detector = Detector(rule)
        self._entries[key] = (detector, now + self._ttl)
        return detector.mark(normal=normal, now=now)

    def reset(self, key: tuple[str, str], now: datetime) -> None:
        detector = self._live(key, now)
        if detector is not None:
            detector.reset()

    def state(self, key: tuple[str, str], now: datetime) -> State:
        detector = self._live(key, now)
        return State.OK if detector is None else detector.state

    def sweep(self, now: datetime) -> None:
        """Forget every expired detector."""
        for key in [key for key, (_, expires) in self._entries.items() if expires <= now]:
            del self._entries[key]
