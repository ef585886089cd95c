"""The shared daemon lifecycle: backoff, ticker, supervision, stop, systemd readiness."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import random
import resource
import signal
import socket
import subprocess
import sys
import textwrap
import uuid
import weakref
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from runtime import lifecycle
from runtime.configfile import ConfigError

METRIC = "koordpy_component_restarts_total"


def restarts(registry: CollectorRegistry, component: str) -> float:
    return registry.get_sample_value(METRIC, {"component": component}) or 0.0


class Flaky:
    """Fails ``failures`` times, then runs until cancelled (or returns when ``finish``)."""

    def __init__(self, name: str, failures: int, *, finish: bool = False) -> None:
        self.name = name
        self.failures = failures
        self.finish = finish
        self.runs = 0
        self.cancelled = False
        self.running = asyncio.Event()

    async def run(self) -> None:
        self.runs += 1
        if self.runs <= self.failures:
            raise RuntimeError(f"{self.name} failure {self.runs}")
        if self.finish:
            return
        self.running.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled = True
            raise


class Raises:
    def __init__(self, name: str, error: BaseException) -> None:
        self.name = name
        self.error = error
        self.runs = 0

    async def run(self) -> None:
        self.runs += 1
        await asyncio.sleep(0)
        raise self.error


class SetOnMessage(logging.Handler):
    """Sets ``event`` when a record containing ``text`` is logged."""

    def __init__(self, text: str, event: asyncio.Event) -> None:
        super().__init__()
        self.text = text
        self.event = event

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.event.set()


def quick(
    *, initial: float = 0.001, cap: float = 0.002, stable: float = 3600.0
) -> lifecycle.Backoff:
    return lifecycle.Backoff(initial=initial, cap=cap, stable=stable, rng=random.Random(7))


# --- Backoff --------------------------------------------------------------------------------


def test_backoff_delays_stay_within_the_exponential_ceiling() -> None:
    backoff = lifecycle.Backoff(rng=random.Random(1))
    for attempt in range(30):
        ceiling = min(60.0, 0.5 * 2**attempt)
        assert backoff.ceiling == ceiling
        delay = backoff.next_delay()
        assert 0.0 <= delay <= ceiling
    assert backoff.ceiling == 60.0


def test_backoff_jitter_spreads_delays() -> None:
    backoff = lifecycle.Backoff(rng=random.Random(2))
    backoff.attempts = 20
    delays = {round(backoff.next_delay(), 6) for _ in range(50)}
    assert len(delays) > 40
    assert max(delays) <= 60.0


def test_backoff_reset_starts_over() -> None:
    backoff = lifecycle.Backoff(rng=random.Random(3))
    for _ in range(8):
        backoff.next_delay()
    assert backoff.ceiling == 60.0
    backoff.reset()
    assert backoff.ceiling == 0.5
    assert backoff.next_delay() <= 0.5


def test_backoff_survives_huge_attempt_counts() -> None:
    backoff = lifecycle.Backoff(attempts=100_000)
    assert backoff.ceiling == 60.0
    assert 0 <= backoff.next_delay() <= 60.0


@pytest.mark.parametrize(
    ("initial", "cap", "factor"), [(0.0, 1.0, 2.0), (2.0, 1.0, 2.0), (0.5, 60.0, 0.5)]
)
def test_backoff_rejects_nonsense(initial: float, cap: float, factor: float) -> None:
    with pytest.raises(ValueError, match="backoff"):
        lifecycle.Backoff(initial=initial, cap=cap, factor=factor)


# --- Ticker ---------------------------------------------------------------------------------


class FakeTime:
    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


async def test_ticker_keeps_its_grid_and_skips_missed_ticks() -> None:
    time = FakeTime()
    ticker = lifecycle.Ticker(10.0, clock=time.clock, sleep=time.sleep)
    assert await ticker.wait() == 0
    assert await ticker.wait() == 1
    assert time.now == 10.0
    time.now += 3.0  # work took 3 s: the next tick is still at 20, not 23
    assert await ticker.wait() == 2
    assert time.now == 20.0
    time.now += 25.0  # work overran ticks 3 and 4 (t=30, t=40): one tick now, no burst
    slept = len(time.slept)
    assert await ticker.wait() == 4
    assert len(time.slept) == slept
    assert await ticker.wait() == 5
    assert time.now == 50.0


async def test_ticker_wakeup_does_not_consume_the_tick() -> None:
    ticker = lifecycle.Ticker(3600.0)
    wakeup = asyncio.Event()
    assert await ticker.wait(wakeup) == 0
    wakeup.set()
    assert await ticker.wait(wakeup) is None
    wakeup.clear()
    waiter = asyncio.create_task(ticker.wait(wakeup))
    await asyncio.sleep(0)
    wakeup.set()
    assert await waiter is None


def test_ticker_rejects_a_non_positive_interval() -> None:
    with pytest.raises(ValueError, match="positive"):
        lifecycle.Ticker(0)


# --- supervise ------------------------------------------------------------------------------


async def test_supervise_restarts_and_counts(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    component = Flaky("flaky", failures=3, finish=True)
    caplog.set_level(logging.INFO, logger="runtime.lifecycle")
    await lifecycle.supervise(
        component,
        quick(cap=3600.0),
        restarts_metric=lifecycle.restarts_counter(registry),
    )
    assert component.runs == 4
    assert restarts(registry, "flaky") == 3
    tracebacks = [r for r in caplog.records if r.exc_info]
    assert len(tracebacks) == 1, "the traceback is logged once per failure streak"
    assert "flaky failure 1" in caplog.text
    assert "still failing" not in caplog.text, "at most once per backoff window (1 h here)"


async def test_supervise_says_still_failing_once_per_window(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    component = Flaky("flaky", failures=3, finish=True)
    caplog.set_level(logging.INFO, logger="runtime.lifecycle")
    # A window (the cap) shorter than the time between failures: every later failure is reported.
    await lifecycle.supervise(
        component,
        lifecycle.Backoff(initial=0.001, cap=0.001, stable=3600.0),
        restarts_metric=lifecycle.restarts_counter(registry),
    )
    assert caplog.text.count("still failing") >= 1
    assert len([r for r in caplog.records if r.exc_info]) == 1


async def test_supervise_logs_recovery_and_resets_backoff(
    caplog: pytest.LogCaptureFixture,
) -> None:
    registry = CollectorRegistry()
    component = Flaky("shaky", failures=2)
    backoff = quick(stable=0.05)
    caplog.set_level(logging.INFO, logger="runtime.lifecycle")
    recovered = asyncio.Event()
    watcher = SetOnMessage("recovered", recovered)
    logging.getLogger("runtime.lifecycle").addHandler(watcher)
    task = asyncio.create_task(
        lifecycle.supervise(
            component, backoff, restarts_metric=lifecycle.restarts_counter(registry)
        )
    )
    try:
        async with asyncio.timeout(10):
            await recovered.wait()
    finally:
        logging.getLogger("runtime.lifecycle").removeHandler(watcher)
    assert "shaky recovered after 2 failures" in caplog.text
    assert backoff.attempts == 0
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert component.cancelled
    assert restarts(registry, "shaky") == 2


async def test_supervise_resets_backoff_only_after_stable_runs() -> None:
    registry = lifecycle.restarts_counter(CollectorRegistry())
    unstable = quick()
    await lifecycle.supervise(
        Flaky("a", failures=5, finish=True), unstable, restarts_metric=registry
    )
    assert unstable.attempts == 5
    always_stable = quick(stable=0.0)
    await lifecycle.supervise(
        Flaky("b", failures=5, finish=True), always_stable, restarts_metric=registry
    )
    assert always_stable.attempts <= 1


@pytest.mark.parametrize(
    "error",
    [
        ConfigError("unknown key 'foo' in [agent]"),
        lifecycle.Fatal("disk gone"),
        ExceptionGroup("inner", [ValueError("x"), lifecycle.Fatal("y")]),
    ],
    ids=["config-error", "fatal", "group-with-fatal"],
)
async def test_supervise_lets_fatal_errors_through(error: Exception) -> None:
    registry = CollectorRegistry()
    component = Raises("doomed", error)
    with pytest.raises(type(error)):
        await lifecycle.supervise(
            component, quick(), restarts_metric=lifecycle.restarts_counter(registry)
        )
    assert component.runs == 1
    assert restarts(registry, "doomed") == 0


async def test_supervise_lets_cancellation_through() -> None:
    registry = CollectorRegistry()
    component = Flaky("idle", failures=0)
    task = asyncio.create_task(
        lifecycle.supervise(
            component, quick(), restarts_metric=lifecycle.restarts_counter(registry)
        )
    )
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert component.runs == 1
    assert restarts(registry, "idle") == 0


# --- run_components -------------------------------------------------------------------------


async def test_run_components_stops_on_the_stop_event_and_leaves_no_task() -> None:
    stop = asyncio.Event()
    components = [Flaky(f"c{i}", failures=i) for i in range(3)]
    before = asyncio.all_tasks()
    runner = asyncio.create_task(
        lifecycle.run_components(
            components,
            stop,
            restarts_metric=lifecycle.restarts_counter(),
            backoff=lambda: quick(),
        )
    )
    async with asyncio.timeout(10):
        for component in components:
            await component.running.wait()
    names = {t.get_name() for t in asyncio.all_tasks()}
    assert {"c0", "c1", "c2"} <= names, "component tasks are named after the components"
    stop.set()
    async with asyncio.timeout(5):
        await runner
    assert all(c.cancelled for c in components)
    assert asyncio.all_tasks() - before - {asyncio.current_task()} == set()


async def test_run_components_returns_when_every_component_finished() -> None:
    stop = asyncio.Event()
    async with asyncio.timeout(5):
        await lifecycle.run_components(
            [Flaky("done", failures=0, finish=True)],
            stop,
            restarts_metric=lifecycle.restarts_counter(),
        )
    assert not stop.is_set()


async def test_run_components_raises_a_fatal_error_as_itself() -> None:
    stop = asyncio.Event()
    bystander = Flaky("bystander", failures=0)
    with pytest.raises(ConfigError, match="bad"):
        async with asyncio.timeout(5):
            await lifecycle.run_components(
                [bystander, Raises("broken", ConfigError("bad"))],
                stop,
                restarts_metric=lifecycle.restarts_counter(),
            )
    assert bystander.cancelled


async def test_run_components_wants_unique_names() -> None:
    with pytest.raises(ValueError, match="unique"):
        await lifecycle.run_components(
            [Flaky("same", 0), Flaky("same", 0)],
            asyncio.Event(),
            restarts_metric=lifecycle.restarts_counter(),
        )


# --- signals --------------------------------------------------------------------------------

DAEMON = textwrap.dedent(
    """
    import asyncio, logging, sys
    from runtime import lifecycle
    class Spin:
        name = "spin"
        async def run(self):
            while True:
                await asyncio.sleep(0.05)

    async def main():
        with lifecycle.stop_event() as stop:
            print("ready", flush=True)
            await lifecycle.run_components(
                [Spin()], stop, restarts_metric=lifecycle.restarts_counter()
            )
        print("stopped", flush=True)

    logging.basicConfig(level=logging.INFO, stream=sys.stderr)
    asyncio.run(main())
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_stops_a_daemon_cleanly(
    tmp_path: Path, repo_root: Path, signum: signal.Signals
) -> None:
    script = tmp_path / "daemon.py"
    script.write_text(DAEMON, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=repo_root,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped" in out
    assert f"received {signum.name}, stopping" in err


async def test_sighup_sets_the_reload_event() -> None:
    reload = asyncio.Event()
    with lifecycle.stop_event(reload=reload) as stop:
        os.kill(os.getpid(), signal.SIGHUP)
        async with asyncio.timeout(5):
            await reload.wait()
        assert not stop.is_set()


# --- systemd notify -------------------------------------------------------------------------


def test_notify_without_a_socket_does_nothing() -> None:
    assert lifecycle.notify_ready(environ={}) is False


def test_notify_sends_ready_and_stopping_to_a_unix_datagram_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind(str(path))
        server.settimeout(5)
        assert lifecycle.notify_ready(environ={"NOTIFY_SOCKET": str(path)})
        assert server.recv(64) == b"READY=1"
        assert lifecycle.notify_stopping(environ={"NOTIFY_SOCKET": str(path)})
        assert server.recv(64) == b"STOPPING=1"


def test_notify_supports_abstract_sockets() -> None:
    name = f"koordpy-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as server:
        server.bind("\0" + name)
        server.settimeout(5)
        assert lifecycle.notify_ready(environ={"NOTIFY_SOCKET": "@" + name})
        assert server.recv(64) == b"READY=1"


def test_notify_failure_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "gone.sock"
    assert lifecycle.notify_ready(environ={"NOTIFY_SOCKET": str(missing)}) is False
    assert "cannot notify systemd" in caplog.text


def test_the_open_files_limit_is_raised_to_the_hard_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        lowered = min(soft, 256)
        resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
        raised = lifecycle.raise_open_files_limit()
        now = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        assert raised == now
        assert now == (lowered if hard == resource.RLIM_INFINITY else hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_settle_heap_hides_the_loaded_heap_and_still_collects_cycles() -> None:
    thresholds = gc.get_threshold()
    loaded = [{"node": str(i)} for i in range(1000)]  # what start-up loaded
    try:
        lifecycle.settle_heap()
        assert gc.get_freeze_count() >= len(loaded)
        assert gc.get_threshold() == lifecycle.LARGE_HEAP_GC_THRESHOLDS

        class Cycle:
            other: Cycle | None = None

        first, second = Cycle(), Cycle()
        first.other, second.other = second, first
        gone = weakref.ref(first)
        del first, second
        gc.collect()
        assert gone() is None, "cyclic garbage made after settling is still collected"
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
