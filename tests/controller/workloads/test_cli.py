"""``koordpy apply`` and ``koordpy get`` with apps/v1 workloads against a running API."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.controller.test_cli import Koordpy, ServerThread
from tests.controller.workloads.test_scenarios import APP_DEMO, WEB


@pytest.fixture
def koordpy(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[Koordpy]:
    with ServerThread(tmp_path / "api.sock") as running:
        yield Koordpy(running, capsys)


def test_apply_and_get_workloads_by_their_kubectl_names(koordpy: Koordpy, tmp_path: Path) -> None:
    manifest = tmp_path / "apps.yaml"
    manifest.write_text(APP_DEMO + "---\n" + WEB.replace("{cpu}", "100m"))
    code, out, err = koordpy("apply", "-f", str(manifest))
    assert (code, err) == (0, "")
    assert out.splitlines() == [
        "deployment.apps/app-demo created",
        "statefulset.apps/web created",
    ]
    code, out, _ = koordpy("get", "deploy")
    assert code == 0
    header, row = out.splitlines()
    assert header.split() == ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    assert row.split()[:4] == ["app-demo", "0/2", "0", "0"]
    code, out, _ = koordpy("get", "sts", "web")
    assert code == 0
    assert out.splitlines()[1].split()[:2] == ["web", "0/3"]
    code, out, _ = koordpy("get", "rs,ds")
    assert code == 0


def test_a_refused_workload_names_the_field_and_stores_nothing(
    koordpy: Koordpy, tmp_path: Path
) -> None:
    manifest = tmp_path / "bad.yaml"
    good = APP_DEMO.replace("name: app-demo\n", "name: fine\n", 1)
    bad = APP_DEMO.replace(
        "      labels:\n        app: app-demo", "      labels:\n        app: other"
    )
    manifest.write_text(good + "---\n" + bad)
    code, out, err = koordpy("apply", "-f", str(manifest))
    assert code != 0
    assert out == ""
    assert f"{manifest}: document 1" in err
    assert "spec.template.metadata.labels" in err
    assert '"app=other"' in err
    code, out, _ = koordpy("get", "deployments")
    assert code == 0
    assert "fine" not in out
