"""Batch and Mid allocatable, checked against the spec's formulas (agent-spec §5).

One node and one set of pods; each case changes a setting or an input and states the expected
amounts with the formula written out. Units: cpu millicores, memory bytes.

The node: capacity 20 cores / 100 GiB, allocatable 19 cores / 96 GiB (kubelet reserves 1 core,
4 GiB); usage 7 cores / 40 GiB. Pods (usage cpu / memory):

* ``ls``    LS (prod)  requests 2000m / 4 GiB, uses 1500m / 3 GiB
* ``lse``   LSE (prod) requests 4000m / 8 GiB, uses 1000m / 6 GiB (its CPU counts its request)
* ``quiet`` LS (prod)  requests 1000m / 2 GiB, no usage sample (counts its request)
* ``mid``   LS with priority 7500 (koord-mid) requests 1000m / 2 GiB, uses 500m / 1 GiB
* ``be``    BE (batch) requests 2000 batch-cpu / 4 GiB batch-memory, uses 2000m / 2 GiB
* ``done``  LS, Succeeded (ignored), requests 3000m / 3 GiB

So Σ pod usage = 1500 + 1000 + 500 + 2000 = 5000m and 3 + 6 + 1 + 2 = 12 GiB, and the system
usage is max(7000 - 5000, 0) = 2000m and max(40 - 12, 0) = 28 GiB.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping

import msgspec
import pytest

from agent.qos import batch_resources
from agent.qos.batch_resources import BatchResources
from agent.qos.framework import Strategy
from agent.qos.settings import ColocationSettings, QoSSettings
from apis import constants as k
from apis.core import Pod
from apis.slo import HostApplicationSpec
from tests.agent.qos_fixtures_evict import GIB, FakeUsage, make_node, make_pod, snapshot

CPU, MEMORY = k.RESOURCE_CPU, k.RESOURCE_MEMORY
BATCH_CPU, BATCH_MEMORY = k.RESOURCE_BATCH_CPU, k.RESOURCE_BATCH_MEMORY
MID_CPU, MID_MEMORY = k.RESOURCE_MID_CPU, k.RESOURCE_MID_MEMORY

CAP_CPU, CAP_MEM = 20_000, 100 * GIB
KUBELET_CPU, KUBELET_MEM = 1_000, 4 * GIB
NODE_CPU, NODE_MEM = 7_000, 40 * GIB
SYS_CPU = NODE_CPU - (1500 + 1000 + 500 + 2000)  # 2000
SYS_MEM = NODE_MEM - (3 + 6 + 1 + 2) * GIB  # 28 GiB
SAFETY_CPU = CAP_CPU * (100 - 60) // 100  # default cpuReclaimThresholdPercent 60
SAFETY_MEM = CAP_MEM * (100 - 65) // 100  # default memoryReclaimThresholdPercent 65
# HP (not batch/free) usage: ls 1500, lse its request 4000, quiet its request 1000, mid 500.
HP_USED_CPU = 1500 + 4000 + 1000 + 500
HP_USED_MEM = (3 + 6 + 2 + 1) * GIB
HP_REQ_CPU = 2000 + 4000 + 1000 + 1000
HP_REQ_MEM = (4 + 8 + 2 + 2) * GIB
HP_MAX_CPU = max(2000, 1500) + max(4000, 4000) + 1000 + max(1000, 500)
HP_MAX_MEM = (max(4, 3) + max(8, 6) + 2 + max(2, 1)) * GIB
# Mid's high-priority pods are prod/none only: ls, lse, quiet.
PROD_REQ_CPU = 2000 + 4000 + 1000
PROD_REQ_MEM = (4 + 8 + 2) * GIB


def build_pods() -> dict[str, Pod]:
    return {
        "ls": make_pod("ls", qos="LS", requests={CPU: 2000, MEMORY: 4 * GIB}),
        "lse": make_pod(
            "lse",
            qos="LSE",
            requests={CPU: 4000, MEMORY: 8 * GIB},
            limits={CPU: 4000, MEMORY: 8 * GIB},
        ),
        "quiet": make_pod("quiet", qos="LS", requests={CPU: 1000, MEMORY: 2 * GIB}),
        "mid": make_pod("mid", qos="LS", priority=7500, requests={CPU: 1000, MEMORY: 2 * GIB}),
        "be": make_pod("be", qos="BE", requests={BATCH_CPU: 2000, BATCH_MEMORY: 4 * GIB}),
        "done": make_pod(
            "done", qos="LS", requests={CPU: 3000, MEMORY: 3 * GIB}, phase="Succeeded"
        ),
    }


PODS = build_pods()


def build_usage(pods: Mapping[str, Pod] = PODS, **overrides: object) -> FakeUsage:
    uid = {name: pod.metadata.uid for name, pod in pods.items()}
    usage = FakeUsage(
        node_cpu_milli=NODE_CPU,
        node_memory_bytes=NODE_MEM,
        pods_cpu={uid["ls"]: 1500, uid["lse"]: 1000, uid["mid"]: 500, uid["be"]: 2000},
        pods_memory={
            uid["ls"]: 3 * GIB,
            uid["lse"]: 6 * GIB,
            uid["mid"]: 1 * GIB,
            uid["be"]: 2 * GIB,
        },
    )
    return dataclasses.replace(usage, **overrides)


def plan(
    colocation: ColocationSettings,
    *,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    host_apps: tuple[HostApplicationSpec, ...] = (),
    host_usage: Mapping[str, float] | None = None,
    strategy: BatchResources | None = None,
    now: float = 1000.0,
    usage: FakeUsage | None = None,
) -> Mapping[str, int]:
    pods = PODS
    node = make_node(
        cpu=CAP_CPU,
        memory=CAP_MEM,
        allocatable={CPU: CAP_CPU - KUBELET_CPU, MEMORY: CAP_MEM - KUBELET_MEM},
        labels=labels,
        annotations=annotations,
    )
    if usage is None:
        usage = build_usage(pods, host_apps_cpu=dict(host_usage or {}))
    settings = QoSSettings(colocation=colocation, host_applications=host_apps)
    outcome = (strategy or BatchResources()).plan(
        snapshot(node, list(pods.values()), usage, settings, now=now)
    )
    assert outcome.node_resources is not None
    return outcome.node_resources


ON = ColocationSettings(enable=True)

BATCH_CASES = [
    pytest.param(
        ON,
        {},
        {},
        # usage policy: cap - safety - max(system, reserved) - Σ HP used
        CAP_CPU - SAFETY_CPU - max(SYS_CPU, KUBELET_CPU) - HP_USED_CPU,  # 3000
        CAP_MEM - SAFETY_MEM - max(SYS_MEM, KUBELET_MEM) - HP_USED_MEM,  # 25 GiB
        id="usage-policy",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON, cpu_calculate_policy="maxUsageRequest", memory_calculate_policy="maxUsageRequest"
        ),
        {},
        {},
        CAP_CPU - SAFETY_CPU - max(SYS_CPU, KUBELET_CPU) - HP_MAX_CPU,  # 2000
        CAP_MEM - SAFETY_MEM - max(SYS_MEM, KUBELET_MEM) - HP_MAX_MEM,  # 21 GiB
        id="max-usage-request-policy",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON, memory_calculate_policy="request", cpu_calculate_policy="request"
        ),
        {},
        {},
        # request is memory only: cpu falls back to usage
        CAP_CPU - SAFETY_CPU - max(SYS_CPU, KUBELET_CPU) - HP_USED_CPU,
        CAP_MEM - SAFETY_MEM - KUBELET_MEM - HP_REQ_MEM,  # 45 GiB
        id="request-policy-memory-only",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON, batch_cpu_threshold_percent=10, batch_memory_threshold_percent=20
        ),
        {},
        {},
        min(CAP_CPU - SAFETY_CPU - SYS_CPU - HP_USED_CPU, CAP_CPU * 10 // 100),  # 2000
        min(CAP_MEM - SAFETY_MEM - SYS_MEM - HP_USED_MEM, CAP_MEM * 20 // 100),  # 20 GiB
        id="batch-threshold-percents-cap",
    ),
    pytest.param(
        ON,
        {},
        {k.ANNOTATION_NODE_RESERVATION: json.dumps({"resources": {"cpu": "3", "memory": "30Gi"}})},
        CAP_CPU - SAFETY_CPU - max(SYS_CPU, 3000) - HP_USED_CPU,  # reservation 3 cores wins
        CAP_MEM - SAFETY_MEM - max(SYS_MEM, 30 * GIB) - HP_USED_MEM,  # 30 GiB wins over 28
        id="node-reservation-above-system-usage",
    ),
    pytest.param(
        ON,
        {k.LABEL_NODE_CPU_RECLAIM_RATIO: "0.5", k.LABEL_NODE_MEMORY_RECLAIM_RATIO: "0.75"},
        {},
        CAP_CPU - CAP_CPU * 50 // 100 - SYS_CPU - HP_USED_CPU,  # 1000
        CAP_MEM - CAP_MEM * 25 // 100 - SYS_MEM - HP_USED_MEM,  # 35 GiB
        id="reclaim-ratio-labels",
    ),
    pytest.param(
        ON,
        {},
        {k.ANNOTATION_NODE_CPU_NORMALIZATION_RATIO: "1.5"},
        (CAP_CPU - SAFETY_CPU - SYS_CPU - HP_USED_CPU) * 3 // 2,  # 3000 x 1.5
        CAP_MEM - SAFETY_MEM - SYS_MEM - HP_USED_MEM,
        id="cpu-normalization-ratio",
    ),
    pytest.param(
        msgspec.structs.replace(ON, cpu_reclaim_threshold_percent=10),
        {},
        {},
        0,  # 20000 - 18000 - 2000 - 7000 < 0: floored at 0
        CAP_MEM - SAFETY_MEM - SYS_MEM - HP_USED_MEM,
        id="floored-at-zero",
    ),
]


@pytest.mark.parametrize(("colocation", "labels", "annotations", "cpu", "memory"), BATCH_CASES)
def test_batch_allocatable(
    colocation: ColocationSettings,
    labels: dict[str, str],
    annotations: dict[str, str],
    cpu: int,
    memory: int,
) -> None:
    resources = plan(colocation, labels=labels, annotations=annotations)
    assert resources[BATCH_CPU] == max(cpu, 0)
    assert resources[BATCH_MEMORY] == memory


def test_host_applications_above_the_batch_band_count_as_system_usage() -> None:
    apps = (
        HostApplicationSpec(name="sshd", priority="koord-prod"),
        HostApplicationSpec(name="log-shipper", priority="koord-batch"),
    )
    resources = plan(ON, host_apps=apps, host_usage={"sshd": 800, "log-shipper": 600})
    # system = max(node - pods - all host apps, 0) + host apps above the band (prod only)
    system = max(NODE_CPU - 5000 - (800 + 600), 0) + 800  # 1400
    assert resources[BATCH_CPU] == CAP_CPU - SAFETY_CPU - max(system, KUBELET_CPU) - HP_USED_CPU


def test_lse_cpu_counts_its_request_whatever_it_uses() -> None:
    lse_uid = PODS["lse"].metadata.uid
    busy = build_usage()
    busy.pods_cpu[lse_uid] = 3000
    busy.node_cpu_milli = NODE_CPU + 2000  # the extra usage is the LSE pod's: system unchanged
    idle = plan(ON)
    loaded = plan(ON, usage=busy)
    assert loaded[BATCH_CPU] == idle[BATCH_CPU]


MID_CASES = [
    pytest.param(
        msgspec.structs.replace(ON, mid_unallocated_percent=50),
        {},
        # prod reclaimable is 0 on the node: only the unallocated share
        # unallocated = cap - max(reserved, system) - Σ prod requests
        (CAP_CPU - max(KUBELET_CPU, SYS_CPU) - PROD_REQ_CPU) * 50 // 100,  # 5500
        (CAP_MEM - max(KUBELET_MEM, SYS_MEM) - PROD_REQ_MEM) * 50 // 100,  # 29 GiB
        id="dynamic-unallocated-share",
    ),
    pytest.param(ON, {}, 0, 0, id="dynamic-default-is-zero"),
    pytest.param(
        msgspec.structs.replace(
            ON,
            mid_unallocated_percent=50,
            mid_cpu_threshold_percent=20,
            mid_memory_threshold_percent=10,
        ),
        {},
        min((CAP_CPU - SYS_CPU - PROD_REQ_CPU) * 50 // 100, CAP_CPU * 20 // 100),  # 4000
        min((CAP_MEM - SYS_MEM - PROD_REQ_MEM) * 50 // 100, CAP_MEM * 10 // 100),  # 10 GiB
        id="dynamic-capped-by-threshold",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON,
            mid_reclaim_mode="static",
            mid_static_cpu_reserved_percent=30,
            mid_static_memory_reserved_percent=20,
        ),
        {},
        CAP_CPU * 30 // 100,  # 6000
        CAP_MEM * 20 // 100,  # 20 GiB
        id="static-percents",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON,
            mid_reclaim_mode="static",
            mid_static_cpu_reserved_percent=30,
            mid_static_memory_reserved_percent=20,
            mid_cpu_threshold_percent=25,
        ),
        {},
        min(CAP_CPU * 30 // 100, CAP_CPU * 25 // 100),  # 5000
        CAP_MEM * 20 // 100,
        id="static-capped-by-threshold",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON,
            mid_reclaim_mode="static",
            mid_static_cpu_reserved_percent=30,
            mid_static_memory_reserved_percent=20,
        ),
        {
            k.LABEL_NODE_MID_STATIC_CPU_RESERVED_RATIO: "0.1",
            k.LABEL_NODE_MID_STATIC_MEMORY_RESERVED_RATIO: "0.45",
        },
        CAP_CPU * 10 // 100,  # the label's 0.1 = 10 % beats the configured 30 %
        CAP_MEM * 45 // 100,
        id="static-label-overrides",
    ),
    pytest.param(
        msgspec.structs.replace(
            ON,
            mid_reclaim_mode="static",
            mid_static_cpu_reserved_percent=30,
            mid_static_memory_reserved_percent=20,
        ),
        {
            k.LABEL_NODE_MID_STATIC_CPU_RESERVED_RATIO: "lots",
            k.LABEL_NODE_MID_STATIC_MEMORY_RESERVED_RATIO: "-0.2",
        },
        CAP_CPU * 30 // 100,  # invalid and negative labels are ignored
        CAP_MEM * 20 // 100,
        id="static-bad-labels-ignored",
    ),
]


@pytest.mark.parametrize(("colocation", "labels", "cpu", "memory"), MID_CASES)
def test_mid_allocatable(
    colocation: ColocationSettings, labels: dict[str, str], cpu: int, memory: int
) -> None:
    resources = plan(colocation, labels=labels)
    assert resources[MID_CPU] == cpu
    assert resources[MID_MEMORY] == memory


def test_resources_are_published_as_integer_millicores_and_bytes() -> None:
    resources = plan(ON)
    assert set(resources) == {BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY}
    # batch-cpu is not a milli resource: the integer is the millicore count ("3k" = 3 cores)
    assert resources.to_wire()[BATCH_CPU] == "3k"
    assert resources.to_wire()[BATCH_MEMORY] == "25Gi"


def test_colocation_disabled_publishes_zeros() -> None:
    resources = plan(ColocationSettings(enable=False))
    assert dict(resources) == dict.fromkeys((BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY), 0)


def test_missing_usage_keeps_the_last_result_until_the_degrade_time_then_resets() -> None:
    strategy = BatchResources()
    zeros = dict.fromkeys((BATCH_CPU, BATCH_MEMORY, MID_CPU, MID_MEMORY), 0)
    no_usage = FakeUsage()
    # Nothing measured yet: degraded, zeros.
    assert dict(plan(ON, strategy=strategy, usage=no_usage, now=0.0)) == zeros
    good = dict(plan(ON, strategy=strategy, now=100.0))
    assert good[BATCH_CPU] == CAP_CPU - SAFETY_CPU - SYS_CPU - HP_USED_CPU
    degrade = ON.degrade_time_minutes * 60  # 15 minutes
    assert dict(plan(ON, strategy=strategy, usage=no_usage, now=100.0 + 60)) == good
    assert dict(plan(ON, strategy=strategy, usage=no_usage, now=100.0 + degrade)) == good
    assert dict(plan(ON, strategy=strategy, usage=no_usage, now=100.0 + degrade + 1)) == zeros
    # Usage returns: computed again.
    assert dict(plan(ON, strategy=strategy, now=100.0 + degrade + 2)) == good


def test_gauges_report_each_resource() -> None:
    node = make_node(cpu=CAP_CPU, memory=CAP_MEM)
    outcome = BatchResources().plan(
        snapshot(node, list(PODS.values()), build_usage(), QoSSettings(colocation=ON))
    )
    gauges = {
        g.labels["resource"]: g.value
        for g in outcome.gauges
        if g.name == "node_resource_allocatable"
    }
    assert outcome.node_resources is not None
    assert gauges == {name: float(v) for name, v in outcome.node_resources.items()}


def test_is_a_strategy() -> None:
    strategy = BatchResources()
    assert isinstance(strategy, Strategy)
    assert strategy.name == batch_resources.NAME == "batch_resources"
