"""Every manifest in ``examples/`` and every manifest of the v1.8 release notes loads."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from apis.codec import decode_documents
from apis.core import Pod
from apis.errors import DecodeError
from apis.kinds import default_registry
from apis.queueing import Queue
from apis.scheduling import Reservation

NOTES = "seed/koordinator-v1.8-release-notes.zh.txt"


def _example_files(repo_root: Path) -> list[Path]:
    return sorted((repo_root / "examples").glob("*.yaml"))


def _notes_manifests(shared_dir: Path) -> list[str]:
    """YAML blocks of the notes: from an ``apiVersion:`` line to the next blank line."""
    text = (shared_dir / NOTES).read_text(encoding="utf-8")
    return [block.rstrip() + "\n" for block in re.findall(r"(?ms)^apiVersion:.*?(?=^\s*$)", text)]


def test_examples_folder_has_the_promised_files(repo_root: Path) -> None:
    names = {path.name for path in _example_files(repo_root)}
    assert {
        "queue.yaml",
        "reservation.yaml",
        "scheduling-hint.yaml",
        "metax-sgpu.yaml",
        "elastic-quota.yaml",
        "batch-job.yaml",
        "pytorchjob.yaml",
    } <= names
    readme = (repo_root / "examples" / "README.md").read_text()
    for name in names:
        assert f"`{name}`" in readme, name


def test_every_example_loads_and_names_are_unique(repo_root: Path) -> None:
    registry = default_registry()
    seen: set[tuple[str, str, str]] = set()
    for path in _example_files(repo_root):
        objects = decode_documents(path.read_text(), source=str(path))
        assert objects, path
        for obj in objects:
            kind = registry.for_object(obj)
            namespace = (obj.namespace or "default") if kind.namespaced else ""
            identity = (kind.key, namespace, obj.name)
            assert obj.name, path
            assert identity not in seen, f"{identity} defined twice"
            seen.add(identity)
    kinds = {key for key, _, _ in seen}
    assert {
        "scheduling.x-k8s.io/Queue",
        "scheduling.koordinator.sh/Reservation",
        "Pod",
        "scheduling.sigs.k8s.io/ElasticQuota",
        "batch/Job",
        "kubeflow.org/PyTorchJob",
    } <= kinds


def test_example_reservation_is_ready_for_pre_allocation(repo_root: Path) -> None:
    [rsv] = decode_documents((repo_root / "examples" / "reservation.yaml").read_text())
    assert isinstance(rsv, Reservation)
    assert rsv.name == "pre-alloc-cluster"
    assert rsv.spec.pre_allocation
    assert rsv.spec.pre_allocation_policy is not None
    assert rsv.spec.pre_allocation_policy.mode == "Cluster"
    assert rsv.spec.pre_allocation_policy.enable_multiple
    assert rsv.spec.allocate_policy == "Restricted"
    assert rsv.spec.allocate_once is False
    assert rsv.spec.ttl is not None
    assert rsv.spec.template.spec.scheduler_name == "koord-scheduler"
    assert any(owner.label_selector is not None for owner in rsv.spec.owners)


def test_the_notes_hold_the_four_manifests(shared_dir: Path) -> None:
    kinds = [re.search(r"(?m)^kind: (\w+)", block) for block in _notes_manifests(shared_dir)]
    assert [m.group(1) for m in kinds if m] == ["Queue", "Reservation", "Pod", "Pod"]


def test_every_complete_manifest_of_the_notes_loads(shared_dir: Path) -> None:
    loaded = []
    for block in _notes_manifests(shared_dir):
        if "kind: Reservation" in block:
            continue  # a fragment; see the next test
        [obj] = decode_documents(block, source=NOTES)
        loaded.append(obj)
    queue, hint_pod, sgpu_pod = loaded
    assert isinstance(queue, Queue)
    assert (queue.namespace, queue.name, queue.spec.queue_policy) == (
        "koord-queue",
        "team-a-queue",
        "Priority",
    )
    assert isinstance(hint_pod, Pod)
    assert "internal.scheduling.koordinator.sh/scheduling-hint" in hint_pod.annotations
    assert isinstance(sgpu_pod, Pod)
    assert sgpu_pod.annotations["metax-tech.com/sgpu-qos-policy"] == "fixed-share"
    assert sgpu_pod.spec.containers[0].resources.requests["metax-tech.com/sgpu"] == 1


def test_the_reservation_fragment_loads_once_completed(shared_dir: Path, repo_root: Path) -> None:
    [fragment] = [b for b in _notes_manifests(shared_dir) if "kind: Reservation" in b]
    with pytest.raises(DecodeError, match="missing required field"):
        decode_documents(fragment, source=NOTES)
    completion = """\
  template:
    spec:
      schedulerName: koord-scheduler
      containers:
        - name: reserve
          resources:
            requests: {cpu: "4", memory: 16Gi}
  owners:
    - labelSelector:
        matchLabels: {app: inference-server}
  allocatePolicy: Restricted
  allocateOnce: false
  ttl: 2h
"""
    [completed] = decode_documents(fragment + completion, source=NOTES)
    [example] = decode_documents((repo_root / "examples" / "reservation.yaml").read_text())
    assert isinstance(completed, Reservation)
    assert isinstance(example, Reservation)
    assert completed.name == example.name
    assert completed.spec.pre_allocation_policy == example.spec.pre_allocation_policy
    assert completed.spec.owners == example.spec.owners
