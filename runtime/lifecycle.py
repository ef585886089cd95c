"""The daemon lifecycle shared by the agent and the controller.

A daemon is ``asyncio.run(main())`` where ``main`` installs :func:`stop_event`, fails fast on
bad config and missing prerequisites, then hands its components to :func:`run_components`::

    with lifecycle.stop_event() as stop:
        await lifecycle.run_components([reporter, exporter], stop, restarts_metric=counter)

Each component runs under :func:`supervise`: ordinary exceptions are logged (the traceback
once, then "still failing" at most once per backoff window, then "recovered"), counted in
``koordpy_component_restarts_total{component}`` and followed by a jittered :class:`Backoff`
sleep and a restart. ``CancelledError`` and fatal errors (:class:`Fatal`, which includes
``ConfigError``) go straight through and tear the whole group down.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import logging
import math
import os
import random
import resource
import signal
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from typing import Final, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry, Counter

__all__ = [
    "LARGE_HEAP_GC_THRESHOLDS",
    "Backoff",
    "Component",
    "Fatal",
    "Ticker",
    "notify",
    "notify_ready",
    "notify_stopping",
    "raise_open_files_limit",
    "restarts_counter",
    "run_components",
    "settle_heap",
    "stop_event",
    "supervise",
]

_log = logging.getLogger(__name__)

RESTARTS_METRIC = "koordpy_component_restarts"


class Fatal(Exception):  # noqa: N818 - a marker base, not an error of its own
    """Marker base of errors no restart can fix: ``supervise()`` lets them through."""


@runtime_checkable
class Component(Protocol):
    """A long-running part of a daemon: runs until cancelled."""

    @property
    def name(self) -> str: ...

    async def run(self) -> None: ...


def restarts_counter(registry: CollectorRegistry | None = None) -> Counter:
    """The ``koordpy_component_restarts_total{component}`` counter, in ``registry``.

    ``None`` registers nothing globally: the counter lives in a private registry (tests, and
    embedded runs that export no metrics).
    """
    return Counter(
        RESTARTS_METRIC,
        "Restarts of a daemon component after it failed.",
        ["component"],
        registry=registry if registry is not None else CollectorRegistry(),
    )


# --- stop and reload --------------------------------------------------------------------------


@contextlib.contextmanager
def stop_event(
    *,
    reload: asyncio.Event | None = None,
    signals: Iterable[signal.Signals] = (signal.SIGTERM, signal.SIGINT),
) -> Iterator[asyncio.Event]:
    """An Event set by SIGTERM/SIGINT (and ``reload`` set by SIGHUP when given).

    Must be entered in the main thread with a running loop; the handlers are removed on exit.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    installed: list[signal.Signals] = []

    def on_stop(signum: signal.Signals) -> None:
        if stop.is_set():
            _log.info("received %s while stopping", signum.name)
            return
        _log.info("received %s, stopping", signum.name)
        stop.set()

    def on_reload() -> None:
        _log.info("received SIGHUP, reloading")
        if reload is not None:
            reload.set()

    try:
        for signum in signals:
            loop.add_signal_handler(signum, on_stop, signum)
            installed.append(signum)
        if reload is not None:
            loop.add_signal_handler(signal.SIGHUP, on_reload)
            installed.append(signal.SIGHUP)
        yield stop
    finally:
        for signum in installed:
            loop.remove_signal_handler(signum)


# --- backoff and timers -----------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class Backoff:
    """Exponential backoff with full jitter: delay ~ U(0, min(cap, initial * factor**n)).

    ``stable`` is how long (loop clock, seconds) a component must run without failing for the
    backoff to start over from ``initial``.
    """

    initial: float = 0.5
    cap: float = 60.0
    factor: float = 2.0
    stable: float = 60.0
    rng: random.Random = dataclasses.field(default_factory=random.Random, repr=False)
    attempts: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.initial <= self.cap:
            raise ValueError(f"backoff needs 0 < initial <= cap, got {self.initial}, {self.cap}")
        if self.factor < 1:
            raise ValueError(f"backoff factor must be >= 1, got {self.factor}")

    @property
    def ceiling(self) -> float:
        """Upper bound of the next delay."""
        if self.factor == 1:
            return self.initial
        # Compare exponents, not powers, so huge attempt counts never overflow.
        limit = math.log(self.cap / self.initial, self.factor)
        if self.attempts >= limit:
            return self.cap
        return min(self.cap, self.initial * self.factor**self.attempts)

    def next_delay(self) -> float:
        """Draw the next delay and count the attempt."""
        delay = self.rng.uniform(0.0, self.ceiling)
        self.attempts += 1
        return delay

    def reset(self) -> None:
        self.attempts = 0

    async def sleep(self) -> float:
        delay = self.next_delay()
        await asyncio.sleep(delay)
        return delay


class Ticker:
    """A non-sliding interval: ticks at start + k * interval, skipping missed ones.

    Work that overruns a tick makes the next :meth:`wait` return at once, for the latest
    missed tick only (no burst), and the schedule stays on its grid. The first ``wait`` returns
    immediately (tick 0). ``clock`` and ``sleep`` default to the running loop's (an injected
    ``sleep`` serves waits without a ``wakeup`` event; waits with one use the loop's timer).
    """

    def __init__(
        self,
        interval: float,
        *,
        clock: Callable[[], float] | None = None,
        sleep: Callable[[float], Awaitable[None]] | None = None,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"ticker interval must be positive, got {interval}")
        self.interval = interval
        self._clock = clock
        self._sleep = sleep or asyncio.sleep
        self._start: float | None = None
        self._index = 0

    def _now(self) -> float:
        if self._clock is not None:
            return self._clock()
        return asyncio.get_running_loop().time()

    async def wait(self, wakeup: asyncio.Event | None = None) -> int | None:
        """Wait for the next tick and return its index; ``None`` when ``wakeup`` came first.

        A wakeup does not consume the tick; the caller clears the event.
        """
        now = self._now()
        if self._start is None:
            self._start = now
            self._index = 1
            return 0
        due = self._start + self._index * self.interval
        if now >= due:
            latest = int((now - self._start) // self.interval)
            self._index = latest + 1
            return latest
        if wakeup is None:
            await self._sleep(due - now)
        else:
            if wakeup.is_set():
                return None
            try:
                async with asyncio.timeout(due - now):
                    await wakeup.wait()
            except TimeoutError:
                pass
            else:
                return None
        index = self._index
        self._index += 1
        return index


# --- supervision ------------------------------------------------------------------------------


def _is_fatal(err: BaseException) -> bool:
    if isinstance(err, Fatal):
        return True
    if isinstance(err, BaseExceptionGroup):
        return any(_is_fatal(inner) for inner in err.exceptions)
    return False


@dataclasses.dataclass(slots=True)
class _Streak:
    """Failures of one component since it last ran stably."""

    failures: int = 0
    last_logged: float = -math.inf


async def supervise(
    component: Component,
    backoff: Backoff,
    *,
    restarts_metric: Counter,
    logger: logging.Logger = _log,
) -> None:
    """Run ``component`` until it returns, restarting it after ordinary exceptions."""
    loop = asyncio.get_running_loop()
    streak = _Streak()
    name = component.name

    def stable() -> None:
        if streak.failures:
            logger.info(
                "component %s recovered after %d failures",
                name,
                streak.failures,
                extra={"component": name},
            )
        streak.failures = 0
        streak.last_logged = -math.inf
        backoff.reset()

    while True:
        started = loop.time()
        timer = loop.call_later(backoff.stable, stable)
        try:
            await component.run()
        except Exception as err:
            if _is_fatal(err):
                raise
            now = loop.time()
            if now - started >= backoff.stable:
                stable()
            streak.failures += 1
            restarts_metric.labels(component=name).inc()
            if streak.failures == 1:
                logger.exception("component %s failed", name, extra={"component": name})
                streak.last_logged = now
            elif now - streak.last_logged >= backoff.cap:
                logger.warning(
                    "component %s still failing (%d failures): %s",
                    name,
                    streak.failures,
                    err,
                    extra={"component": name},
                )
                streak.last_logged = now
        else:
            logger.info("component %s finished", name, extra={"component": name})
            return
        finally:
            timer.cancel()
        await backoff.sleep()


async def run_components(
    components: Iterable[Component],
    stop: asyncio.Event,
    *,
    restarts_metric: Counter,
    backoff: Callable[[], Backoff] = Backoff,
) -> None:
    """Run each component supervised in one TaskGroup until ``stop`` is set.

    Returns once ``stop`` is set (or every component has finished), after cancelling and
    awaiting every task. A fatal error in one component cancels the others and is raised as
    itself (an ``ExceptionGroup`` only when several failed together).
    """
    items = list(components)
    names = [c.name for c in items]
    if len(set(names)) != len(names):
        raise ValueError(f"component names must be unique, got {names}")
    try:
        async with asyncio.TaskGroup() as group:
            tasks = {
                group.create_task(
                    supervise(c, backoff(), restarts_metric=restarts_metric), name=c.name
                )
                for c in items
            }
            waiter = group.create_task(stop.wait(), name="stop-wait")
            pending = set(tasks)
            while pending and not stop.is_set():
                done, _ = await asyncio.wait(
                    {waiter, *pending}, return_when=asyncio.FIRST_COMPLETED
                )
                pending -= done
            for task in (*pending, waiter):
                task.cancel()
    except BaseExceptionGroup as group_error:
        if len(group_error.exceptions) == 1:
            raise group_error.exceptions[0] from None
        raise


# --- systemd readiness ------------------------------------------------------------------------


def notify(state: str, *, environ: Mapping[str, str] | None = None) -> bool:
    """Send ``state`` to systemd's ``$NOTIFY_SOCKET``; a no-op (False) without one.

    Abstract sockets (``@name``) are supported. A failure to send is logged, never raised.
    """
    env = os.environ if environ is None else environ
    address = env.get("NOTIFY_SOCKET", "")
    if not address:
        return False
    if address.startswith("@"):
        address = "\0" + address[1:]
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            sock.connect(address)
            sock.sendall(state.encode())
    except OSError as err:
        _log.warning("cannot notify systemd at %s: %s", env.get("NOTIFY_SOCKET"), err)
        return False
    return True


def notify_ready(*, environ: Mapping[str, str] | None = None) -> bool:
    return notify("READY=1", environ=environ)


def notify_stopping(*, environ: Mapping[str, str] | None = None) -> bool:
    return notify("STOPPING=1", environ=environ)


def raise_open_files_limit() -> int:
    """Raise the soft limit of open files to the hard limit; the new soft limit.

    The agent keeps the cgroup files it reads every tick open (a few thousand on a busy
    node); the usual soft limit of 1024 would make it reopen them on every read.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError) as err:
            _log.warning("cannot raise the open files limit from %d to %d: %s", soft, hard, err)
            return soft
        return hard
    return soft


#: Cycle-collector thresholds for a daemon whose heap is large and acyclic (the controller's
#: store: thousands of nodes' objects, each replaced at every report). With Python's defaults
#: the full collections that such churn triggers rescan the whole heap every second or two and
#: take a quarter of the controller's CPU; reference counting frees these objects anyway.
LARGE_HEAP_GC_THRESHOLDS: Final = (50_000, 20, 10)


def settle_heap() -> None:
    """Once start-up has loaded everything: collect what loading left, move every survivor
    out of the collector's sight (:func:`gc.freeze`) and make collections rarer
    (:data:`LARGE_HEAP_GC_THRESHOLDS`). Cyclic garbage is still collected, less often."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*LARGE_HEAP_GC_THRESHOLDS)
