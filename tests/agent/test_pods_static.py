"""The pods file source: PodList or Pod documents, re-read when the file changes."""

from __future__ import annotations

import asyncio
import logging
import os
from pathlib import Path

import pytest

from agent.errors import ConfigError, TransientError
from agent.pods import static
from agent.pods.base import PodSource

POD_LIST = """
apiVersion: v1
kind: PodList
items:
  - metadata: {name: web, namespace: default, uid: uid-web}
    spec:
      containers:
        - name: app
          resources: {requests: {cpu: 500m}, limits: {cpu: "1"}}
  - apiVersion: v1
    kind: Pod
    metadata: {name: batch, namespace: default, uid: uid-batch,
               labels: {koordinator.sh/qosClass: BE}}
    spec:
      containers: [{name: worker}]
"""

POD_DOCUMENTS = """
apiVersion: v1
kind: Pod
metadata: {name: one, uid: uid-1}
---
apiVersion: v1
kind: Pod
metadata: {name: two, uid: uid-2}
"""


def _write(path: Path, text: str, *, tick: int) -> None:
    """Write ``text`` and give the file a distinct mtime (``tick`` seconds after epoch 1e9),
    so a change is seen even within the filesystem's timestamp granularity."""
    path.write_text(text)
    stamp = (1_000_000_000 + tick) * 10**9
    os.utime(path, ns=(stamp, stamp))


def _names(source: static.StaticPodSource) -> list[str]:
    return [p.metadata.name for p in source.pods]


async def test_pod_list_file(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_LIST, tick=1)
    source = static.StaticPodSource(path)
    assert isinstance(source, PodSource)
    assert await source.refresh() is True
    assert _names(source) == ["web", "batch"]
    web = source.pods[0]
    assert web.spec.containers[0].resources.requests == {"cpu": 500}
    assert source.pods[1].labels["koordinator.sh/qosClass"] == "BE"
    assert source.synced.is_set()


async def test_multi_document_file_and_change_detection(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_DOCUMENTS, tick=1)
    source = static.StaticPodSource(path)
    assert await source.refresh() is True
    assert _names(source) == ["one", "two"]
    assert await source.refresh() is False, "an unchanged file is not read again"
    generation = source.generation

    _write(path, POD_LIST, tick=2)
    assert await source.refresh() is True
    assert _names(source) == ["web", "batch"]
    assert source.generation == generation + 1


async def test_rewritten_with_the_same_content_is_no_change(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_DOCUMENTS, tick=1)
    source = static.StaticPodSource(path)
    await source.refresh()
    generation = source.generation
    _write(path, POD_DOCUMENTS, tick=2)
    assert await source.refresh() is False
    assert source.generation == generation


async def test_missing_file_is_no_pods(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "absent.yaml"
    source = static.StaticPodSource(path)
    with caplog.at_level(logging.WARNING):
        await source.refresh()
        await source.refresh()
    assert source.pods == ()
    assert source.synced.is_set()
    assert caplog.text.count("does not exist") == 1

    _write(path, POD_DOCUMENTS, tick=1)
    assert await source.refresh() is True
    assert _names(source) == ["one", "two"]
    path.unlink()
    assert await source.refresh() is True
    assert source.pods == ()


async def test_broken_file_keeps_the_previous_pods(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_DOCUMENTS, tick=1)
    source = static.StaticPodSource(path)
    await source.refresh()

    _write(path, "items: [unclosed", tick=2)
    with pytest.raises(TransientError, match="invalid YAML"):
        await source.refresh()
    assert _names(source) == ["one", "two"]
    # still broken, same file: the error stays without re-reading
    with pytest.raises(TransientError, match="invalid YAML"):
        await source.refresh()

    _write(path, "apiVersion: v1\nkind: Node\nmetadata: {name: n}\n", tick=3)
    with pytest.raises(TransientError, match="expected kind PodList"):
        await source.refresh()
    assert _names(source) == ["one", "two"]

    _write(path, POD_LIST, tick=4)
    assert await source.refresh() is True
    assert _names(source) == ["web", "batch"]


async def test_one_bad_pod_is_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = tmp_path / "pods.yaml"
    bad = "---\napiVersion: v1\nkind: Pod\nmetadata: {name: bad, uid: u}\nspec: {containers: 7}\n"
    _write(path, POD_DOCUMENTS + bad, tick=1)
    source = static.StaticPodSource(path)
    with caplog.at_level(logging.WARNING):
        await source.refresh()
    assert _names(source) == ["one", "two"]
    assert "/bad skipped" in caplog.text


async def test_run_follows_the_file(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_DOCUMENTS, tick=1)
    source = static.StaticPodSource(path, interval=0.02)
    task = asyncio.create_task(source.run(), name="static-source")
    try:
        await asyncio.wait_for(source.synced.wait(), 10)
        assert _names(source) == ["one", "two"]
        await asyncio.to_thread(_write, path, POD_LIST, tick=2)
        for _ in range(500):
            if _names(source) == ["web", "batch"]:
                break
            await asyncio.sleep(0.02)
        assert _names(source) == ["web", "batch"]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_read_pods_file(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_LIST, tick=1)
    assert [p.metadata.name for p in static.read_pods_file(path)] == ["web", "batch"]
    with pytest.raises(ConfigError, match=r"absent\.yaml"):
        static.read_pods_file(tmp_path / "absent.yaml")
    _write(path, "kind: Secret\n", tick=2)
    with pytest.raises(ConfigError, match="expected kind PodList"):
        static.read_pods_file(path)


async def test_unchanged_pods_keep_their_objects_across_reads(tmp_path: Path) -> None:
    path = tmp_path / "pods.yaml"
    _write(path, POD_LIST, tick=1)
    source = static.StaticPodSource(path)
    await source.refresh()
    web, batch = source.pods
    changed = POD_LIST.replace("name: worker", "name: worker2")
    _write(path, changed, tick=2)
    assert await source.refresh() is True
    assert source.pods[0] is web, "an equal pod keeps its object (identity memos stay valid)"
    assert source.pods[1] is not batch
    assert source.pods[1].spec.containers[0].name == "worker2"
