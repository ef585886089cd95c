"""What the device manual pages' replays share: the scheduler with ``DevicePluginAdaption``
on, a page's pod varied (renamed, other amounts), a pod's allocation and scheduling verdict
read back, and the pages' Device objects checked against Koordinator's Device CRD."""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import msgspec
import yaml

from apis import constants as k
from apis.core import Pod
from controller import simulate as sim
from controller.loops import LOOPS
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.profile import DEFAULT_CONFIG, PluginConfig, build_profile
from tests.crdschema import schema_errors, validator
from tests.manuals.replay import Outcome

__all__ = [
    "EPOCH_NS",
    "allocation",
    "check_devices",
    "pod_variant",
    "pods",
    "replay_adapted",
    "unschedulable",
]

#: The simulated clock's start (``koordpy simulate``'s epoch) in unix nanoseconds.
EPOCH_NS = int(sim.EPOCH.timestamp()) * 10**9

_ADAPTED = msgspec.structs.replace(
    DEFAULT_CONFIG,
    plugin_config=(
        *DEFAULT_CONFIG.plugin_config,
        PluginConfig(name="DeviceShare", args={"devicePluginAdaption": True}),
    ),
)


def replay_adapted(*documents: str, max_time: timedelta = timedelta(hours=1)) -> Outcome:
    """``replay`` with koord-scheduler's ``DevicePluginAdaption`` feature gate on."""
    loops = {**LOOPS, "scheduler": lambda: SchedulerLoop([build_profile(_ADAPTED)])}
    objects = sim.scenario_objects("\n---\n".join(documents), source="manual")
    return Outcome(sim.simulate(objects, max_time=max_time, loops=loops))


def pods(outcome: Outcome) -> list[Pod]:
    """Every pod the simulation ended with."""
    return [p for p in outcome.all("Pod") if isinstance(p, Pod)]


def allocation(outcome: Outcome, name: str) -> Any:
    """The pod's ``scheduling.koordinator.sh/device-allocated``, decoded."""
    pod = outcome.pod(name)
    text = pod.metadata.annotations.get(k.ANNOTATION_DEVICE_ALLOCATED)
    assert text, f"pod {name} holds no devices (node {pod.spec.node_name!r})"
    return json.loads(text)


def unschedulable(outcome: Outcome, name: str) -> str:
    """The message of the pod's ``PodScheduled=False`` condition (it must be unbound)."""
    pod = outcome.pod(name)
    assert not pod.spec.node_name, f"pod {name} was bound to {pod.spec.node_name}"
    (condition,) = [c for c in pod.status.conditions if c.type == "PodScheduled"]
    assert condition.status == "False"
    return condition.message


def pod_variant(
    manifest: str,
    name: str | None = None,
    *,
    resources: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
) -> str:
    """The page's one-container pod ``manifest`` with the change a test makes: renamed to
    ``name``, ``resources`` set in both its limits and requests, its annotations replaced by
    ``annotations`` (each where given)."""
    doc = yaml.safe_load(manifest)
    if name is not None:
        doc["metadata"]["name"] = name
    if annotations is not None:
        doc["metadata"]["annotations"] = dict(annotations)
    for part in ("limits", "requests"):
        doc["spec"]["containers"][0]["resources"][part].update(resources or {})
    return str(yaml.safe_dump(doc))


def check_devices(shared_dir: Path, *documents: str) -> None:
    """Every Device in ``documents`` is valid under Koordinator's Device CRD (the same schema
    as v1.8.0's)."""
    device_schema = validator(shared_dir, "scheduling.koordinator.sh/Device")
    seen = 0
    for text in documents:
        for doc in yaml.safe_load_all(text):
            if isinstance(doc, dict) and doc.get("kind") == "Device":
                seen += 1
                assert schema_errors(device_schema, doc) == [], doc["metadata"]["name"]
    assert seen, "no Device among the documents"
