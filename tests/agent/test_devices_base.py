"""Device probes and the Device object built from their results."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from agent.config import AgentConfig, DevicesSection
from agent.devices import base, simulated
from agent.errors import ConfigError, TransientError, Unsupported
from apis.codec import decode_json, encode_json
from apis.core import Node
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from apis.scheduling import Device, DeviceInfo


@pytest.fixture(scope="module")
def device_schema(shared_dir: Path) -> dict[str, Any]:
    crd = yaml.safe_load(
        (shared_dir / "koordinator-crds" / "scheduling.koordinator.sh_devices.yaml").read_text()
    )
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def node(name: str = "gpu-1", uid: str = "1f0c") -> Node:
    return Node(metadata=ObjectMeta(name=name, uid=uid))


def gpu(minor: int, *, type_: str = "gpu") -> DeviceInfo:
    return DeviceInfo(
        type=type_,
        id=f"dev-{type_}-{minor}",
        minor=minor,
        health=True,
        resources=ResourceList({"koordinator.sh/gpu-core": 100}),
    )


class Fixed:
    def __init__(self, name: str, result: base.ProbeResult) -> None:
        self.name = name
        self.result = result
        self.calls = 0

    async def probe(self) -> base.ProbeResult:
        self.calls += 1
        return self.result


class Missing:
    name = "missing"

    async def probe(self) -> base.ProbeResult:
        raise Unsupported("no library")


class Hangs:
    name = "hangs"

    async def probe(self) -> base.ProbeResult:
        await asyncio.Event().wait()
        return base.ProbeResult()


def test_device_is_named_after_and_owned_by_the_node() -> None:
    device = base.build_device(node(), [base.ProbeResult(devices=(gpu(0),))])
    assert device.metadata.name == "gpu-1"
    (owner,) = device.metadata.owner_references
    assert (owner.api_version, owner.kind, owner.name, owner.uid) == ("v1", "Node", "gpu-1", "1f0c")
    assert owner.controller is True
    assert owner.block_owner_deletion is True


def test_devices_are_sorted_by_type_then_minor() -> None:
    results = [
        base.ProbeResult(devices=(gpu(3), gpu(1, type_="rdma"))),
        base.ProbeResult(devices=(gpu(0, type_="rdma"), gpu(2), gpu(10))),
    ]
    device = base.build_device(node(), results)
    assert [(d.type, d.minor) for d in device.spec.devices] == [
        ("gpu", 2),
        ("gpu", 3),
        ("gpu", 10),
        ("rdma", 0),
        ("rdma", 1),
    ]


def test_labels_and_annotations_merge_later_results_winning() -> None:
    device = base.build_device(
        node(),
        [
            base.ProbeResult(labels={base.LABEL_GPU_VENDOR: "nvidia", "a": "1"}),
            base.ProbeResult(labels={"a": "2"}, annotations={"note": "x"}),
        ],
    )
    assert device.metadata.labels == {base.LABEL_GPU_VENDOR: "nvidia", "a": "2"}
    assert device.metadata.annotations == {"note": "x"}


def test_no_device_is_an_empty_valid_device(device_schema: dict[str, Any]) -> None:
    device = base.build_device(node(), [])
    assert device.spec.devices == ()
    jsonschema.validate(json.loads(encode_json(device)), device_schema)
    assert decode_json(encode_json(device), Device) == device


async def test_probe_all_leaves_out_unsupported_probes() -> None:
    found = Fixed("fixed", base.ProbeResult(devices=(gpu(0),)))
    results = await base.probe_all([Missing(), found], limit=5)
    assert results == [found.result]


async def test_a_probe_that_hangs_is_a_transient_error() -> None:
    with pytest.raises(TransientError, match=r"hangs took longer than 0\.01s"):
        await base.run_probe(Hangs(), limit=0.01)


async def test_threaded_probe_runs_the_function_in_a_thread() -> None:
    main = asyncio.get_running_loop()

    def blocking() -> base.ProbeResult:
        with pytest.raises(RuntimeError):
            asyncio.get_running_loop()  # no loop in a worker thread
        return base.ProbeResult(devices=(gpu(1),))

    probe = base.ThreadedProbe("sysfs", blocking)
    assert isinstance(probe, base.DeviceProbe)
    assert (await base.run_probe(probe, limit=5)).devices == (gpu(1),)
    assert asyncio.get_running_loop() is main


def test_probe_table_and_selection() -> None:
    assert "simulated" in base.PROBES
    assert base.probes_for(AgentConfig(), "gpu-1") == []
    cfg = AgentConfig(devices=DevicesSection(simulate=("nvidia-h100",)))
    (probe,) = base.probes_for(cfg, "gpu-1")
    assert isinstance(probe, simulated.SimulatedProbe)
    assert isinstance(probe, base.DeviceProbe)


def test_an_unknown_simulated_profile_is_a_config_error() -> None:
    cfg = AgentConfig(devices=DevicesSection(simulate=("tpu-v5",)))
    with pytest.raises(ConfigError, match=r"'tpu-v5'.*known: nvidia-h100"):
        base.probes_for(cfg, "gpu-1")
