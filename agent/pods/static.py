"""Pods from a file: for nodes without a kubelet (systemd hosts) and for ``agent plan``.

The file is YAML (JSON is YAML too): a ``v1`` ``PodList`` (or ``List``), or one or more Pod
documents separated by ``---``. It is re-read whenever its identity, size, mtime or ctime
changes (checked every ``interval`` seconds, a ``stat`` call). Every pod in the file counts:
the file describes this node.

* a missing file means no pods (logged once); the source is synced with an empty list;
* a file that does not parse keeps the previous pods and is logged; a single pod that does not
  decode is skipped and logged, the others are used.
"""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path
from typing import Any

from agent.errors import ConfigError, TransientError
from agent.pods.base import PodListError, PollingSource, decode_pods, pod_list_items
from apis.codec import load_yaml_documents
from apis.core import Pod
from apis.errors import DecodeError

__all__ = ["StaticPodSource", "read_pods_file"]

_log = logging.getLogger(__name__)

_Signature = tuple[int, int, int, int, int]


def _documents_to_items(documents: list[Any], source: str) -> list[Any]:
    items: list[Any] = []
    for document in documents:
        items.extend(pod_list_items(document, source=source))
    return items


def parse_pods_text(text: str, *, source: str) -> tuple[Pod, ...]:
    """Pods of a pods file's text; :class:`PodListError` when it is not a pod list."""
    try:
        documents = load_yaml_documents(text, source=source)
    except DecodeError as err:
        raise PodListError(str(err)) from None
    return decode_pods(_documents_to_items(documents, source), source=source)


def read_pods_file(path: str | Path) -> tuple[Pod, ...]:
    """Every pod of a pods file, once; :class:`ConfigError` if it is unreadable or not a pod
    list (``koordpy agent plan --pods-file``)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise ConfigError(f"pods file {path}: {err.strerror or err}") from None
    try:
        return parse_pods_text(text, source=str(path))
    except PodListError as err:
        raise ConfigError(str(err)) from None


class StaticPodSource(PollingSource):
    """Watches one pods file (see the module docstring)."""

    def __init__(self, path: str | Path, *, interval: float = 1.0, name: str = "pods/file") -> None:
        super().__init__(name, interval=interval)
        if interval <= 0:
            raise ConfigError(f"pods file check interval must be positive, got {interval}")
        self.path = Path(path)
        self._seen: _Signature | None = None
        #: Why the file with signature ``_seen`` could not be used (not retried until it changes).
        self._error: str | None = None
        self._missing_logged = False

    def _signature(self) -> _Signature | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as err:
            raise TransientError(f"{self.path}: {err.strerror or err}") from err
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _read(self) -> tuple[Pod, ...]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return ()
        except (OSError, UnicodeDecodeError) as err:
            raise TransientError(f"{self.path}: {err}") from err
        try:
            return parse_pods_text(text, source=str(self.path))
        except PodListError as err:
            raise TransientError(str(err)) from err

    async def refresh(self) -> bool:
        """Re-read the file if it changed; ``True`` when the pods changed.

        Raises :class:`TransientError` when the file cannot be read or parsed (the previous
        pods stay, and the same content is not retried until the file changes again).
        """
        signature = self._signature()
        if signature is None:
            if not self._missing_logged:
                _log.warning("%s: %s does not exist; no pods", self.name, self.path)
                self._missing_logged = True
            self._seen = None
            self._error = None
            return self._replace(())
        self._missing_logged = False
        if signature == self._seen:
            if self._error is not None:
                raise TransientError(self._error)
            if self.synced.is_set():
                return False
        self._seen = signature
        self._error = None
        try:
            pods = await asyncio.to_thread(self._read)
        except TransientError as err:
            self._error = str(err)
            raise
        changed = self._replace(pods)
        if changed:
            _log.info("%s: %d pods from %s", self.name, len(pods), self.path)
        return changed
