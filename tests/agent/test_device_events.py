"""Events for a device's health changing (:func:`agent.devices.events.health_events`)."""

from __future__ import annotations

from datetime import UTC, datetime

from agent.devices.events import HEALTHY_REASON, UNHEALTHY_REASON, health_events
from apis.meta import ObjectMeta
from apis.scheduling import Device, DeviceCondition, DeviceInfo, DeviceSpec

XID_79 = "Xid error detected on device, error code: 79"
NOW = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)


def gpu(minor: int, *, healthy: bool = True, reason: str = "", message: str = "") -> DeviceInfo:
    conditions = ()
    if not healthy:
        conditions = (
            DeviceCondition(
                type="Healthy",
                status="False",
                last_transition_time=NOW,
                reason=reason or "Unknown",
                message=message,
            ),
        )
    return DeviceInfo(
        type="gpu", id=f"GPU-{minor}", minor=minor, health=healthy, conditions=conditions
    )


def device(*gpus: DeviceInfo) -> Device:
    return Device(metadata=ObjectMeta(name="node-1"), spec=DeviceSpec(devices=gpus))


def test_a_gpu_turning_unhealthy_gives_a_warning_on_the_node_with_its_reason() -> None:
    before = device(gpu(0), gpu(1))
    after = device(
        gpu(0),
        gpu(
            1, healthy=False, reason="Xid79", message="Xid error detected on device, error code: 79"
        ),
    )
    [event] = health_events(before, after, node="node-1", now=NOW)
    assert event.reason == UNHEALTHY_REASON
    assert event.type == "Warning"
    assert event.metadata.namespace == "default"
    assert event.involved_object.kind == "Node"
    assert event.involved_object.name == "node-1"
    assert event.message == (
        "gpu GPU-1 (minor 1) is unhealthy: Xid79: Xid error detected on device, error code: 79"
    )
    assert event.source.component == "koordlet"
    assert event.first_timestamp == NOW.replace(microsecond=0)


def test_a_recovery_gives_a_normal_event_and_no_change_gives_none() -> None:
    sick = device(gpu(0, healthy=False))
    well = device(gpu(0))
    [event] = health_events(sick, well, node="node-1", now=NOW)
    assert (event.reason, event.type) == (HEALTHY_REASON, "Normal")
    assert health_events(well, well, node="node-1", now=NOW) == []
    assert health_events(sick, sick, node="node-1", now=NOW) == []


def test_a_first_report_tells_only_of_devices_already_unhealthy() -> None:
    first = device(gpu(0), gpu(1, healthy=False), gpu(2))
    events = health_events(None, first, node="node-1", now=NOW)
    assert [e.message for e in events] == ["gpu GPU-1 (minor 1) is unhealthy: Unknown"]
