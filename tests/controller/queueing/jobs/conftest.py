"""Fixtures of the job extension tests: a settable clock and a memory store stamped by it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from controller.store.sqlite import Store
from tests.controller.delayed import BACKENDS, open_store
from tests.controller.queueing.jobs import Clock


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=BACKENDS)
def store(
    request: pytest.FixtureRequest, clock: Clock, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Store]:
    """Every test runs over the memory store and the delayed-visibility one."""
    with open_store(request.param, monkeypatch, clock=clock) as opened:
        yield opened
