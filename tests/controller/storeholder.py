"""Opens a store and holds it until its stdin closes: ``python -m tests.controller.storeholder
STATE_FILE``. Prints ``open RESOURCE_VERSION`` once open, or ``refused MESSAGE`` (exit 3)."""

from __future__ import annotations

import sys
from pathlib import Path

from controller.errors import StoreError
from controller.store.sqlite import Store
from tests.controller.storekinds import REGISTRY, widget


def main(path: Path) -> int:
    try:
        store = Store(path=path, registry=REGISTRY)
    except StoreError as err:
        print(f"refused {err}", flush=True)
        return 3
    with store:
        store.create(widget(f"w{store.resource_version}"))
        print(f"open {store.resource_version}", flush=True)
        sys.stdin.read()
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
