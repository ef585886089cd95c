"""Leader election on a ``coordination.k8s.io/v1`` Lease, as Kubernetes components do it.

Koordinator's components each hold a Lease in ``koordinator-system``: ``koord-scheduler``,
``koord-descheduler`` (and ``koordinator-manager``). koordpy takes the same Leases, so that two
koordpy replicas, or koordpy and a real koord-scheduler, never both act: whoever holds the
Lease acts, the others wait.

The rules (those of client-go's leader election, so the two interoperate):

- The Lease names its holder (``spec.holderIdentity``), for how long it holds it
  (``leaseDurationSeconds``) and when it last renewed (``renewTime``). A candidate takes a
  Lease that is missing, has no holder, or whose record has not changed for the lease
  duration *as this candidate observed it* (its own monotonic clock from the moment it last
  saw the record change, never the holder's timestamps: clocks of two hosts need not agree).
- Every write is an update conditional on the resourceVersion read, so of two candidates
  only one wins; taking the Lease from another holder counts ``leaseTransitions`` up.
- The holder renews every ``retry_period``; if it has not renewed for ``renew_deadline``
  (shorter than the lease duration, so it stops before anyone else may start), it has lost
  the Lease and stops acting.
- Stepping down (the process stopping) releases the Lease (holder emptied), so a standby
  takes over at its next try instead of after the lease duration.

:class:`Elected` runs a set of components only while the Lease is held: it campaigns, runs
them once elected, cancels them when the Lease is lost and campaigns again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

import msgspec
from prometheus_client import Counter

from controller.errors import AlreadyExists, Conflict, ControllerError, NotFound, TransientError
from controller.kube.client import KubeClient
from runtime import lifecycle

__all__ = [
    "DEFAULT_LEASE_DURATION",
    "DEFAULT_RENEW_DEADLINE",
    "DEFAULT_RETRY_PERIOD",
    "Elected",
    "LeaseElector",
    "default_identity",
]

log = logging.getLogger(__name__)

#: client-go's (and Koordinator's) defaults, seconds.
DEFAULT_LEASE_DURATION: Final = 15.0
DEFAULT_RENEW_DEADLINE: Final = 10.0
DEFAULT_RETRY_PERIOD: Final = 2.0

_LEASES: Final = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"


def default_identity() -> str:
    """``hostname_pid``: unique per process (the pod's name is the hostname in Kubernetes)."""
    return f"{socket.gethostname()}_{os.getpid()}"


def _micro_time(at: datetime) -> str:
    """A ``metav1.MicroTime`` on the wire."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class _LeaseSpec(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    holder_identity: str = ""
    lease_duration_seconds: int = 0
    acquire_time: str = ""
    renew_time: str = ""
    lease_transitions: int = 0


class _LeaseMeta(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    name: str = ""
    namespace: str = ""
    resource_version: str = ""


class _Lease(msgspec.Struct, frozen=True, rename="camel", omit_defaults=True):
    """The part of a Lease election reads and writes (other fields are ignored)."""

    metadata: _LeaseMeta = _LeaseMeta()
    spec: _LeaseSpec = _LeaseSpec()
    api_version: str = "coordination.k8s.io/v1"
    kind: str = "Lease"


_DECODE: Final = msgspec.json.Decoder(_Lease)


class LeaseElector:
    """One candidate for one Lease; see the module docstring.

    :meth:`try_acquire_or_renew` is one round (what a candidate and a holder do every
    ``retry_period``); :meth:`release` steps down. ``clock`` is monotonic seconds (tests may
    pass their own)."""

    def __init__(
        self,
        client: KubeClient,
        name: str,
        *,
        namespace: str = "koordinator-system",
        identity: str = "",
        lease_duration: float = DEFAULT_LEASE_DURATION,
        renew_deadline: float = DEFAULT_RENEW_DEADLINE,
        retry_period: float = DEFAULT_RETRY_PERIOD,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                "leader election needs 0 < retry_period < renew_deadline < lease_duration,"
                f" got {retry_period}, {renew_deadline}, {lease_duration}"
            )
        self.client = client
        self.name = name
        self.namespace = namespace
        self.identity = identity or default_identity()
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._path = _LEASES.format(namespace=namespace)
        #: the record last seen (holder, renewTime, transitions) and when it was first seen
        self._observed: tuple[str, str, int] | None = None
        self._observed_at = 0.0
        #: when this candidate last renewed as holder (monotonic), None when not holding
        self.renewed_at: float | None = None
        #: leaderships won so far
        self.terms = 0

    def __repr__(self) -> str:
        return f"LeaseElector({self.namespace}/{self.name} as {self.identity})"

    @property
    def holding(self) -> bool:
        return self.renewed_at is not None

    def _now(self) -> float:
        return asyncio.get_running_loop().time()

    def _spec(self, *, acquired: str, transitions: int) -> _LeaseSpec:
        return _LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=max(1, round(self.lease_duration)),
            acquire_time=acquired,
            renew_time=_micro_time(datetime.now(UTC)),
            lease_transitions=transitions,
        )

    def _observe(self, lease: _Lease) -> None:
        spec = lease.spec
        record = (spec.holder_identity, spec.renew_time, spec.lease_transitions)
        if record != self._observed:
            self._observed = record
            self._observed_at = self._now()

    async def _read(self) -> _Lease | None:
        try:
            body = await self.client.get(f"{self._path}/{self.name}")
        except NotFound:
            return None
        return _DECODE.decode(body)

    async def try_acquire_or_renew(self) -> bool:
        """One round: take or renew the Lease if this candidate may; whether it holds it now.
        A failed request is logged and counts as not renewed (the holder's deadline runs)."""
        try:
            held = await self._round()
        except (TransientError, Conflict, AlreadyExists) as err:
            log.debug("%r: %s", self, err)
            held = False
        except ControllerError as err:
            log.warning("%r: %s", self, err)
            held = False
        if held:
            if self.renewed_at is None:
                self.terms += 1
                log.info("%r: became the leader", self)
            self.renewed_at = self._now()
        return held

    async def _round(self) -> bool:
        now = datetime.now(UTC)
        lease = await self._read()
        if lease is None:
            fresh = _Lease(
                metadata=_LeaseMeta(name=self.name, namespace=self.namespace),
                spec=self._spec(acquired=_micro_time(now), transitions=0),
            )
            await self.client.post(self._path, msgspec.json.encode(fresh))
            return True
        self._observe(lease)
        spec = lease.spec
        mine = spec.holder_identity == self.identity
        if not mine and spec.holder_identity:
            duration = spec.lease_duration_seconds or self.lease_duration
            if self._now() - self._observed_at < duration:
                return False  # someone else holds it and renews
        transitions = spec.lease_transitions + (0 if mine else 1)
        acquired = spec.acquire_time if mine and spec.acquire_time else _micro_time(now)
        updated = msgspec.structs.replace(
            lease, spec=self._spec(acquired=acquired, transitions=transitions)
        )
        body = await self.client.put(f"{self._path}/{self.name}", msgspec.json.encode(updated))
        self._observe(_DECODE.decode(body))
        return True

    def lost(self) -> bool:
        """Whether a holder has gone ``renew_deadline`` without renewing."""
        renewed = self.renewed_at
        return renewed is None or self._now() - renewed > self.renew_deadline

    async def release(self) -> None:
        """Step down: empty the holder (only if this candidate still holds the Lease)."""
        if self.renewed_at is None:
            return
        self.renewed_at = None
        try:
            lease = await self._read()
            if lease is None or lease.spec.holder_identity != self.identity:
                return
            released = msgspec.structs.replace(
                lease,
                spec=msgspec.structs.replace(
                    lease.spec, holder_identity="", lease_duration_seconds=1
                ),
            )
            await self.client.put(f"{self._path}/{self.name}", msgspec.json.encode(released))
            log.info("%r: released", self)
        except ControllerError as err:
            log.warning("%r: could not release: %s", self, err)


class Elected:
    """A component running ``components`` only while ``elector`` holds its Lease.

    Campaigns every ``retry_period``; once elected runs the components (each supervised, as
    the daemon supervises its own) and renews; when a renewal deadline passes, cancels them
    and campaigns again. Cancelled (the daemon stopping), it stops them and releases the
    Lease."""

    def __init__(
        self,
        elector: LeaseElector,
        components: Sequence[lifecycle.Component],
        *,
        name: str = "",
        restarts_metric: Counter | None = None,
    ) -> None:
        self.elector = elector
        self.components = list(components)
        self.name = name or f"leader-{elector.name}"
        self._restarts = (
            restarts_metric if restarts_metric is not None else lifecycle.restarts_counter(None)
        )
        #: set while the components run (tests and the daemon's log read it)
        self.leading = asyncio.Event()

    async def run(self) -> None:
        elector = self.elector
        try:
            while True:
                await self._campaign()
                await self._lead()
                log.warning("%r: lost the lease; the components stopped", elector)
        finally:
            self.leading.clear()
            with contextlib.suppress(Exception):
                await asyncio.shield(elector.release())

    async def _campaign(self) -> None:
        """Return once elected, trying every ``retry_period``."""
        elector = self.elector
        while True:
            if await elector.try_acquire_or_renew():
                return
            await asyncio.sleep(elector.retry_period)

    async def _lead(self) -> None:
        """Run the components until the Lease is lost (returns) or cancelled (raises)."""
        elector = self.elector
        stop = asyncio.Event()
        self.leading.set()
        runner = asyncio.create_task(
            lifecycle.run_components(self.components, stop, restarts_metric=self._restarts),
            name=f"{self.name}-components",
        )
        try:
            while not runner.done():
                await asyncio.wait({runner}, timeout=elector.retry_period)
                if runner.done():
                    break
                if not await elector.try_acquire_or_renew() and elector.lost():
                    break
        finally:
            self.leading.clear()
            stop.set()
            if not runner.done():
                runner.cancel()
            await asyncio.wait({runner})  # the components' own end, whatever it was
        elector.renewed_at = None
        if not runner.cancelled() and (failure := runner.exception()) is not None:
            raise failure  # a fatal error of a component ends the daemon, as without election
