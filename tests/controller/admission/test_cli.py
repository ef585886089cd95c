"""``koordpy apply -f`` meeting admission, as a user of ``koordpy up`` sees it: the refused
object is named with its field and value, as the API server words it, and the objects before
it in the file are created."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.test_cli import Koordpy, ServerThread
from tests.manuals.test_capacity_scheduling import PARENT, child


@pytest.fixture
def koordpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Koordpy]:
    with ServerThread(tmp_path / "api.sock") as server:
        yield Koordpy(server, capsys)


def test_apply_names_the_refused_quota_and_keeps_the_parent(
    koordpy: Koordpy, tmp_path: Path
) -> None:
    manifest = tmp_path / "quota-example.yaml"
    manifest.write_text(PARENT + "---" + child(min_cpu=20), encoding="utf-8")
    code, out, err = koordpy("apply", "-f", str(manifest))
    assert code != 0
    assert "quota-parent-example created" in out
    assert (
        'ElasticQuota.scheduling.sigs.k8s.io "quota-example" is invalid: spec.min: Invalid'
        ' value: "cpu:20,memory:20Mi"'
    ) in err
    code, out, _ = koordpy("get", "eq", "-A", "-o", "name")
    assert code == 0
    assert out.split() == ["elasticquota.scheduling.sigs.k8s.io/quota-parent-example"]


def test_apply_names_a_missing_priority_class(koordpy: Koordpy, tmp_path: Path) -> None:
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {name: web}\n"
        "spec:\n  priorityClassName: gold\n  containers: [{name: c, image: busybox}]\n",
        encoding="utf-8",
    )
    code, _, err = koordpy("apply", "-f", str(manifest))
    assert code != 0
    assert 'pods "web" is forbidden: no PriorityClass with name gold was found' in err
