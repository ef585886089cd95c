"""Simulated device profiles: Koordinator-valid Device objects with the spec's figures."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from agent.devices import base, simulated
from agent.errors import ConfigError
from apis.codec import decode_json, encode_json
from apis.core import Node
from apis.meta import ObjectMeta
from apis.scheduling import Device
from tests.crdschema import schema_errors, validator

MIB = 1 << 20


@pytest.fixture(scope="module")
def device_schema(shared_dir: Path) -> jsonschema.Draft7Validator:
    return validator(shared_dir, "scheduling.koordinator.sh/Device")


async def device_of(profile: str, node: str = "sim-1") -> Device:
    probe = simulated.SimulatedProbe((simulated.PROFILES[profile],), node)
    return base.build_device(Node(metadata=ObjectMeta(name=node, uid="u-1")), [await probe.probe()])


@pytest.mark.parametrize("profile", sorted(simulated.PROFILES))
async def test_every_profile_validates_against_the_crd(
    profile: str, device_schema: jsonschema.Draft7Validator
) -> None:
    device = await device_of(profile)
    assert schema_errors(device_schema, json.loads(encode_json(device))) == []
    assert decode_json(encode_json(device), Device) == device
    assert len(device.spec.devices) == 8
    assert [d.minor for d in device.spec.devices] == list(range(8))
    assert all(d.health and d.type == "gpu" for d in device.spec.devices)
    assert len({d.id for d in device.spec.devices}) == 8


def test_the_schema_check_can_fail(device_schema: jsonschema.Draft7Validator) -> None:
    broken = {"apiVersion": "x", "kind": "Device", "spec": {"devices": [{"health": "yes"}]}}
    assert schema_errors(device_schema, broken) != []


async def test_nvidia_h100() -> None:
    device = await device_of("nvidia-h100")
    assert device.metadata.labels == {
        base.LABEL_GPU_VENDOR: "nvidia",
        base.LABEL_GPU_MODEL: "H100-80GB-HBM3",
    }
    for gpu in device.spec.devices:
        assert gpu.id.startswith("GPU-")
        assert dict(gpu.resources) == {
            "koordinator.sh/gpu-core": 100,
            "koordinator.sh/gpu-memory": 81559 * MIB,
            "koordinator.sh/gpu-memory-ratio": 100,
        }
    numa = [d.topology.node_id for d in device.spec.devices if d.topology is not None]
    assert numa == [0, 0, 0, 0, 1, 1, 1, 1]
    sockets = {d.topology.socket_id for d in device.spec.devices if d.topology is not None}
    assert sockets == {0, 1}
    pcie = [d.topology.pcie_id for d in device.spec.devices if d.topology is not None]
    assert len(set(pcie)) == 4
    assert pcie[0] == pcie[1] != pcie[2]


async def test_uuids_are_deterministic_per_node() -> None:
    first = await device_of("nvidia-h100", "a")
    again = await device_of("nvidia-h100", "a")
    other = await device_of("nvidia-h100", "b")
    assert [d.id for d in first.spec.devices] == [d.id for d in again.spec.devices]
    assert not {d.id for d in first.spec.devices} & {d.id for d in other.spec.devices}


async def test_metax_c500_in_sgpu_mode() -> None:
    device = await device_of("metax-c500-sgpu")
    assert device.metadata.labels[base.LABEL_GPU_VENDOR] == "metax"
    assert device.metadata.labels[base.LABEL_GPU_MODEL] == "C500"
    policies = device.metadata.annotations[simulated.ANNOTATION_SGPU_QOS_POLICIES]
    assert policies.split(",") == ["fixed-share", "best-effort", "burst-share"]
    for card in device.spec.devices:
        assert card.resources["metax-tech.com/sgpu"] == 16
        assert card.resources["koordinator.sh/gpu-memory"] == 65536 * MIB
        assert card.resources["koordinator.sh/gpu-core"] == 100
        assert card.topology is not None
        assert card.topology.node_id == 0


async def test_ascend_910b3() -> None:
    device = await device_of("ascend-910b3")
    assert device.metadata.labels[base.LABEL_GPU_VENDOR] == "huawei"
    assert device.metadata.labels[base.LABEL_GPU_MODEL] == "Ascend-910B3"
    for npu in device.spec.devices:
        assert dict(npu.resources) == {
            "huawei.com/npu-core": 20,
            "huawei.com/npu-cpu": 7,
            "huawei.com/npu-dvpp": 100,
            "koordinator.sh/gpu-memory": 65536 * MIB,
            "koordinator.sh/gpu-memory-ratio": 100,
        }
        assert npu.topology is not None
        assert npu.topology.node_id == -1, "NUMA placement is unknown, not invented"


async def test_ascend_310p3_300i_duo_has_two_chips_per_card() -> None:
    device = await device_of("ascend-310p3-300i-duo")
    assert device.metadata.labels[base.LABEL_GPU_MODEL] == "Ascend-310P3-300I-DUO"
    buses = [d.topology.bus_id for d in device.spec.devices if d.topology is not None]
    assert len(set(buses)) == 4
    assert buses[0] == buses[1] != buses[2] == buses[3]
    for chip in device.spec.devices:
        assert chip.resources["koordinator.sh/gpu-memory"] == 24576 * MIB
        assert chip.resources["huawei.com/npu-core"] == 8
    total = sum(chip.resources["koordinator.sh/gpu-memory"] for chip in device.spec.devices[:2])
    assert total == 48 * 1024 * MIB, "48 GB per card"


async def test_several_profiles_share_one_minor_sequence() -> None:
    probe = simulated.SimulatedProbe(
        (simulated.PROFILES["nvidia-h100"], simulated.PROFILES["ascend-910b3"]), "mixed"
    )
    result = await probe.probe()
    assert [d.minor for d in result.devices] == list(range(16))
    assert result.labels[base.LABEL_GPU_VENDOR] == "nvidia"


async def test_probe_for_names_profiles() -> None:
    probe = simulated.probe_for("sim-9", "ascend-910b3")
    assert probe.node == "sim-9"
    assert [p.name for p in probe.profiles] == ["ascend-910b3"]
    with pytest.raises(ConfigError, match="unknown simulated device profile"):
        simulated.probe_for("sim-9", "gpu-9000")
