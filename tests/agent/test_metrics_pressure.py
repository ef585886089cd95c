"""PSI files: what the kernel writes, and what it writes on older or odd kernels."""

from __future__ import annotations

import pytest

from agent.metrics.pressure import parse_pressure
from agent.metrics.snapshot import Pressure


def test_some_and_full() -> None:
    text = (
        "some avg10=0.12 avg60=3.40 avg300=15.00 total=123456\n"
        "full avg10=0.00 avg60=1.25 avg300=2.50 total=99\n"
    )
    assert parse_pressure(text) == Pressure(some=(0.12, 3.4, 15.0), full=(0.0, 1.25, 2.5))


def test_cpu_before_linux_5_13_has_no_full_line() -> None:
    text = "some avg10=1.00 avg60=2.00 avg300=3.00 total=7\n"
    assert parse_pressure(text) == Pressure(some=(1.0, 2.0, 3.0), full=None)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=x avg60=0.00 avg300=0.00 total=0\n",
        "some avg10=1.00 avg300=0.00 total=0\n",
    ],
    ids=["empty", "no-some", "not-a-number", "missing-average"],
)
def test_unusable_files_are_no_figure(text: str) -> None:
    assert parse_pressure(text) is None


def test_a_malformed_full_line_counts_as_absent() -> None:
    text = "some avg10=1.00 avg60=2.00 avg300=3.00 total=7\nfull avg10=?\n"
    assert parse_pressure(text) == Pressure(some=(1.0, 2.0, 3.0), full=None)


def test_this_machine() -> None:
    try:
        with open("/proc/pressure/cpu", encoding="ascii") as file:
            text = file.read()
    except OSError:
        pytest.skip(reason="this kernel exposes no /proc/pressure (CONFIG_PSI off or psi=0)")
    parsed = parse_pressure(text)
    assert parsed is not None
    assert all(0.0 <= value <= 100.0 for value in parsed.some)
