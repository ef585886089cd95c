"""Shared fixtures: the repository root, the shared spec folder, and a task-leak guard."""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The shared specs beside the checkout (``$KOORDPY_SHARED`` points elsewhere).
SHARED_DIR = Path(os.environ.get("KOORDPY_SHARED") or REPO_ROOT.parent / "shared")


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The project's shared specs (CRD schemas, release notes, vendor fixtures).

    CI always has it; a user's clone may not, and then the test skips with this reason.
    """
    if not (SHARED_DIR / "koordinator-crds").is_dir():
        pytest.skip(reason=f"shared specs not found at {SHARED_DIR} (present in CI checkouts)")
    return SHARED_DIR


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    """Fail any async test that leaves tasks running behind it."""
    before = asyncio.all_tasks()
    yield
    current = asyncio.current_task()
    leaked = [t for t in asyncio.all_tasks() - before if t is not current and not t.done()]
    for task in leaked:
        task.cancel()
    if leaked:
        pytest.fail(f"test leaked asyncio tasks: {[t.get_name() for t in leaked]}")


@pytest.fixture(autouse=True)
def _restore_root_logger() -> Iterator[None]:
    """Daemons configure logging; put the root logger back after each test."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for handler in list(root.handlers):
        if handler not in handlers:
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)
