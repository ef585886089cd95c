"""Group identity settings from the NodeSLO's ``resourceQOSStrategy`` (koordlet's defaults)."""

from __future__ import annotations

from agent.qos.settings import QoSSettings, from_nodeslo
from apis.slo import (
    CPUQOS,
    NodeSLOSpec,
    ResourceQOS,
    ResourceQOSPolicies,
    ResourceQOSStrategy,
)


def on(value: int | None = None) -> ResourceQOS:
    return ResourceQOS(cpu_qos=CPUQOS(enable=True, group_identity=value))


def settings(strategy: ResourceQOSStrategy) -> QoSSettings:
    return from_nodeslo(NodeSLOSpec(resource_qos_strategy=strategy), QoSSettings())


def test_enabled_classes_without_a_value_take_koordlets_defaults() -> None:
    identity = settings(
        ResourceQOSStrategy(lsr_class=on(), ls_class=on(), be_class=on(), system_class=on())
    ).group_identity
    assert identity.active
    assert identity.bvt == {"LSR": 2, "LS": 2, "BE": -1, "SYSTEM": 0}


def test_classes_left_off_are_0() -> None:
    identity = settings(ResourceQOSStrategy(be_class=on(-1))).group_identity
    assert identity.active
    assert identity.bvt == {"LSR": 0, "LS": 0, "BE": -1, "SYSTEM": 0}


def test_core_sched_policy_or_nothing_enabled_is_inactive() -> None:
    core_sched = ResourceQOSStrategy(
        policies=ResourceQOSPolicies(cpu_policy="coreSched"), ls_class=on(2)
    )
    assert not settings(core_sched).group_identity.active
    assert not settings(ResourceQOSStrategy()).group_identity.active
    assert not QoSSettings().group_identity.active
