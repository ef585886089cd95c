"""``examples/slo-controller-config.yaml``: accepted with the rest of ``examples/`` and rendered
into NodeSLOs for the demo's nodes, in ``koordpy simulate`` and in a running ``koordpy up``."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest

from apis import codec
from apis.slo import COLOCATION_EXTENSION
from koordpy.up import DEMO_CAPACITY_TYPES, load_examples
from tests.controller.slo.slohelpers import valid_nodeslos
from tests.koordpy.daemons import cli, running_up
from tests.manuals.replay import Outcome, node
from tests.manuals.replay import replay as simulate

EXAMPLES = Path(__file__).parents[3] / "examples"
CAPACITY_TYPE = "karpenter.sh/capacity-type"


def _demo_nodes() -> list[str]:
    return [node(name, labels={CAPACITY_TYPE: kind}) for name, kind in DEMO_CAPACITY_TYPES.items()]


def _examples() -> list[str]:
    return [codec.dump_yaml(codec.to_builtins(obj)) for obj in load_examples(EXAMPLES)]


def _suppress(out: Outcome, name: str) -> int:
    threshold = out.wire("NodeSLO", name)["spec"]["resourceUsedThresholdWithBE"]
    percent: int = threshold["cpuSuppressThresholdPercent"]
    return percent


def test_the_examples_render_a_nodeslo_per_demo_node(shared_dir: Path) -> None:
    out = simulate(*_examples(), *_demo_nodes())
    assert list(out.events("SLOCfgUnmarshalFailed")) == []
    assert list(out.events("SLOCfgInvalid")) == []
    assert valid_nodeslos(shared_dir, out) == len(DEMO_CAPACITY_TYPES)
    for name, kind in DEMO_CAPACITY_TYPES.items():
        assert _suppress(out, name) == (55 if kind == "reserved" else 65)
        colocation = out.wire("NodeSLO", name)["spec"]["extensions"][COLOCATION_EXTENSION]
        assert colocation["enable"] is True
        assert colocation["cpuReclaimThresholdPercent"] == (50 if kind == "on-demand" else 60)


@pytest.mark.slow
def test_koordpy_up_renders_the_nodeslo_of_its_host(tmp_path: Path) -> None:
    with running_up(tmp_path) as up:
        applied = cli(up.api, "apply", "-f", str(EXAMPLES / "slo-controller-config.yaml"))
        assert applied.returncode == 0, applied.stderr
        assert "created" in applied.stdout
        deadline = time.monotonic() + 30
        items: list[dict[str, object]] = []
        while time.monotonic() < deadline:
            got = cli(up.api, "get", "nodeslos", "-o", "json")
            assert got.returncode == 0, got.stderr
            items = json.loads(got.stdout)["items"]
            if items:
                break
            time.sleep(0.2)
        assert [item["metadata"]["name"] for item in items] == ["test-host"]
        spec = items[0]["spec"]
        assert isinstance(spec, dict)
        assert spec["resourceUsedThresholdWithBE"]["cpuSuppressThresholdPercent"] == 65
        assert spec["cpuBurstStrategy"]["policy"] == "auto"
        assert up.stop(signal.SIGTERM) == 0
