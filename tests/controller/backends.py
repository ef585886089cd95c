"""The store backends the store's own tests run over, in one list (a new backend joins it).

``memory`` is :class:`~controller.store.memory.MemoryStore` (``koordpy simulate``); ``sqlite``
is :class:`~controller.store.sqlite.Store` with its state file in the test's temporary folder
(``koordpy up``). The control loops' suites run over :data:`tests.controller.delayed.BACKENDS`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller.store.memory import MemoryStore
from controller.store.sqlite import Store

__all__ = ["STORE_BACKENDS", "open_backend"]

STORE_BACKENDS = ("memory", "sqlite")


def open_backend(backend: str, folder: Path, **kwargs: Any) -> MemoryStore:
    """A store of ``backend`` (one of :data:`STORE_BACKENDS`), its files under ``folder``."""
    if backend == "memory":
        return MemoryStore(**kwargs)
    if backend == "sqlite":
        return Store(path=folder / "store.db", **kwargs)
    raise ValueError(f"unknown store backend {backend!r}")
