"""The ``DevicePluginAdaption`` feature gate, set the way a user sets it, end to end.

The v1.8 vendor device pages (``device-scheduling-metax-gpu``, ``-ascend-npu``,
``-cambricon-mlu``) ask for ``DevicePluginAdaption=true`` in the chart's
``scheduler.featureGates``, which becomes koord-scheduler's ``--feature-gates`` flag. koordpy
reads that flag's text from the key ``feature-gates`` of the ConfigMap
``koordinator-system/koord-scheduler-config`` (README, "Scheduler configuration"). These tests
replay the MetaX page's sGPU pod (its Device, node and pod, from
:mod:`tests.manuals.test_device_scheduling_metax_gpu`) and the Ascend page's virtual-card pod
through ``koordpy simulate`` with that ConfigMap in the scenario, and check that the gate
reaches DeviceShare: with it on, binding writes what the vendor's device plugin reads
(``metax-tech.com/gpu-devices-allocated``, ``huawei.com/npu-core``); off, left out or
malformed, only Koordinator's own ``device-allocated`` is written.
"""

from __future__ import annotations

import json

import pytest

from apis import constants as k
from tests.manuals import test_device_scheduling_ascend_npu as ascend
from tests.manuals.devices import EPOCH_NS, replay_adapted
from tests.manuals.replay import Outcome, replay
from tests.manuals.test_device_scheduling_metax_gpu import DEVICE, NODE, POD, UUID

#: koord-scheduler's ConfigMap carrying only the gates: the shipped profile stays in force.
GATES_ONLY = """
apiVersion: v1
kind: ConfigMap
metadata:
  name: koord-scheduler-config
  namespace: koordinator-system
data:
  feature-gates: {gates}
"""

#: The same ConfigMap with a profile of the user's own beside the gates (the chart's layout:
#: the KubeSchedulerConfiguration under ``koord-scheduler-config``).
WITH_PROFILE = (
    GATES_ONLY
    + """\
  koord-scheduler-config: |
    apiVersion: kubescheduler.config.k8s.io/v1
    kind: KubeSchedulerConfiguration
    profiles:
      - schedulerName: koord-scheduler
        pluginConfig:
          - name: DeviceShare
            args:
              apiVersion: kubescheduler.config.k8s.io/v1
              kind: DeviceShareArgs
              scoringStrategy:
                type: MostAllocated
"""
)

#: What MetaX's device plugin reads for the page's sGPU: 10 % of the card, 1 GiB in MiB.
METAX_ALLOCATED = [[{"uuid": UUID, "compute": 10, "vRam": 1024}]]


def replay_with_gates(gates: str, *documents: str, template: str = GATES_ONLY) -> Outcome:
    """``replay`` with koord-scheduler's ConfigMap setting ``gates`` (``Name=bool,...``): the
    gate through the configuration a user applies, not through the plugin's args."""
    return replay(template.format(gates=json.dumps(gates)), *documents)


def _annotations(outcome: Outcome) -> dict[str, str]:
    pod = outcome.pod("test-metax-sgpu")
    assert pod.spec.node_name == "sample-node1"
    assert pod.status.phase == "Running"
    assert json.loads(pod.metadata.annotations[k.ANNOTATION_DEVICE_ALLOCATED])["gpu"]
    return dict(pod.metadata.annotations)


@pytest.mark.parametrize("template", [GATES_ONLY, WITH_PROFILE], ids=["gates-only", "profile"])
def test_the_gate_in_the_configmap_writes_the_metax_annotation(template: str) -> None:
    outcome = replay_with_gates("DevicePluginAdaption=true", DEVICE, NODE, POD, template=template)
    annotations = _annotations(outcome)
    assert json.loads(annotations[k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED]) == METAX_ALLOCATED
    assert annotations[k.ANNOTATION_GPU_MINORS] == "0"
    assert annotations[k.ANNOTATION_BIND_TIMESTAMP] == str(EPOCH_NS)


def test_the_configmap_and_the_plugin_args_give_the_same_pod() -> None:
    """The ConfigMap's gate does exactly what turning DeviceShare's adaption on in its args
    does (the helper the device pages' replays use)."""
    by_configmap = _annotations(replay_with_gates("DevicePluginAdaption=true", DEVICE, NODE, POD))
    by_args = _annotations(replay_adapted(DEVICE, NODE, POD))
    assert by_configmap == by_args


@pytest.mark.parametrize(
    "gates",
    ["DevicePluginAdaption=false", "ResizePod=true", ""],
    ids=["off", "other-gate", "empty"],
)
def test_without_the_gate_only_koordinators_allocation_is_written(gates: str) -> None:
    annotations = _annotations(replay_with_gates(gates, DEVICE, NODE, POD))
    assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED not in annotations
    assert k.ANNOTATION_BIND_TIMESTAMP not in annotations


def test_no_configmap_means_v18s_default_gate_off() -> None:
    annotations = _annotations(replay(DEVICE, NODE, POD))
    assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED not in annotations


def test_a_later_gate_in_the_list_wins() -> None:
    """The flag's syntax: the last value given for a gate is the one in force."""
    page = (DEVICE, NODE, POD)
    on = replay_with_gates("DevicePluginAdaption=false,DevicePluginAdaption=true", *page)
    assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED in _annotations(on)
    off = replay_with_gates("DevicePluginAdaption=true,DevicePluginAdaption=false", *page)
    assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED not in _annotations(off)


@pytest.mark.parametrize(
    ("gates", "named"),
    [
        ("DevicePluginAdaption=maybe", "'maybe'"),
        ("DevicePluginAdaptation=true", "'DevicePluginAdaptation'"),
    ],
    ids=["bad-value", "misspelt-gate"],
)
def test_a_bad_gate_is_refused_naming_it_and_the_shipped_gates_stay(gates: str, named: str) -> None:
    outcome = replay_with_gates(gates, DEVICE, NODE, POD)
    [event] = outcome.events("InvalidConfiguration")
    assert event.type == "Warning"
    assert event.involved_object.name == "koord-scheduler-config"
    assert "feature-gates" in event.message
    assert named in event.message
    # The pod is still placed, under the shipped configuration (gate off).
    assert k.ANNOTATION_METAX_GPU_DEVICES_ALLOCATED not in _annotations(outcome)


@pytest.mark.parametrize("gates", ["DevicePluginAdaption=true", "DevicePluginAdaption=false"])
def test_the_gate_reaches_the_ascend_pages_virtual_card_too(gates: str) -> None:
    """The Ascend NPU page's virtual-card pod (its Device, node, templates): with the gate on,
    Ascend's device plugin finds the card and template it reads; off, only the allocation."""
    page = (ascend.device(ascend.PARTITIONS), ascend.NODE, ascend.TEMPLATES, ascend.PARTIAL_CARD)
    outcome = replay_with_gates(gates, *page)
    pod = outcome.pod("test-ascend-partial-1")
    assert pod.status.phase == "Running"
    annotations = pod.metadata.annotations
    assert json.loads(annotations[k.ANNOTATION_DEVICE_ALLOCATED])["gpu"][0]["minor"] == 0
    if gates.endswith("true"):
        assert annotations[k.ANNOTATION_HUAWEI_NPU_CORE] == "0-vir10_3c_32g"
        assert annotations[k.ANNOTATION_HUAWEI_PREDICATE_TIME] == str(EPOCH_NS)
    else:
        assert k.ANNOTATION_HUAWEI_NPU_CORE not in annotations
        assert k.ANNOTATION_HUAWEI_PREDICATE_TIME not in annotations
