"""Fixtures of the scheduler tests: a settable clock and a memory store stamped by it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.store.sqlite import Store
from tests.controller.scheduler import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def store(clock: Clock) -> Iterator[Store]:
    with Store(clock=clock) as opened:
        yield opened
