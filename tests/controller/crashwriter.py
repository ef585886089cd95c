"""Writes objects through a group commit and prints every acknowledged write, until killed.

Used by the crash test: ``python -m tests.controller.crashwriter STATE_FILE CALLERS LIMIT``.
Each line is ``NAME RESOURCE_VERSION``, printed only after the create was acknowledged, i.e.
committed. Every object is written once, so its acknowledged version is final.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
from pathlib import Path

from controller.api.groupcommit import GroupCommit
from controller.store.sqlite import Store
from tests.controller.storekinds import REGISTRY, creating, widget


def _ack(name: str, version: str) -> None:
    sys.stdout.write(f"{name} {version}\n")
    sys.stdout.flush()


async def main(path: Path, callers: int, limit: int) -> None:
    store = Store(path=path, registry=REGISTRY)
    commits = GroupCommit(store)
    numbers = itertools.count()

    async def writer() -> None:
        for i in numbers:
            if i >= limit:
                return
            name = f"w{i}"
            created = await commits.submit(creating(widget(name, size=i)))
            _ack(name, created.metadata.resource_version)

    try:
        await asyncio.gather(*(writer() for _ in range(callers)))
    finally:
        await commits.aclose()
        store.close()


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
