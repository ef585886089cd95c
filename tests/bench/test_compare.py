"""bench.compare pairs an old run's lines with a new run's and prints each figure with its
ratio, so a regression is read off one table."""

from __future__ import annotations

import pytest

from bench.compare import main, pair_lines


def test_lines_that_agree_but_for_their_numbers_are_paired_with_ratios() -> None:
    old = ["queueing baseline: 3,257 admissions/s (target 3,000) PASS", "shape: 30 queues"]
    new = ["queueing baseline: 3,714 admissions/s (target 3,000) PASS", "shape: 30 queues"]
    first, second = pair_lines(old, new)
    assert first.startswith(new[0])
    assert first.endswith("| 3257 -> 3714 (1.14x), 3000 -> 3000 (1.00x)")
    assert second == "shape: 30 queues"


def test_lines_that_differ_are_printed_from_both_sides() -> None:
    assert pair_lines(["target missed: FAIL 7"], ["all targets met", "extra 2"]) == [
        "old| target missed: FAIL 7",
        "new| all targets met",
        "new| extra 2",
    ]


def test_bad_rounds_exit_2_naming_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["HEAD", "--rounds", "0"])
    assert exited.value.code == 2
    assert "--rounds must be at least 1, got 0" in capsys.readouterr().err
