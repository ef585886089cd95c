"""Events for a device's health changing, as a user sees them with ``kubectl describe node``.

:func:`health_events` compares two Device reports of one node: each device (keyed by its type
and id, else its minor) that turned unhealthy gives a Warning ``DeviceUnhealthy``, each that
recovered a Normal ``DeviceHealthy``, on the Node (namespace ``default``, where the kubelet keeps
a node's Events). A device first seen (the first report of a run, or a device that appeared)
gives one only when it is unhealthy. The message carries the reason and message of the
device's ``Healthy`` condition (``Xid79: Xid error detected on device, error code: 79``)
where it has one.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final

from apis.core import Event, EventSource
from apis.meta import ObjectMeta, ObjectReference
from apis.scheduling import Device, DeviceInfo

__all__ = ["HEALTHY_REASON", "UNHEALTHY_REASON", "health_events"]

UNHEALTHY_REASON: Final = "DeviceUnhealthy"
HEALTHY_REASON: Final = "DeviceHealthy"
_COMPONENT: Final = "koordlet"


def _key(device: DeviceInfo) -> tuple[str, str]:
    return device.type, device.id or f"minor-{device.minor}"


def _shown(device: DeviceInfo) -> str:
    minor = f" (minor {device.minor})" if device.minor is not None else ""
    return f"{device.type or 'device'} {device.id or '?'}{minor}"


def _why(device: DeviceInfo) -> str:
    for condition in device.conditions:
        if condition.type == "Healthy" and condition.status != "True":
            return f": {condition.reason}" + (f": {condition.message}" if condition.message else "")
    return ""


def health_events(
    previous: Device | None, current: Device, *, node: str, now: datetime
) -> list[Event]:
    """The Events for the health changes from ``previous`` to ``current`` (module doc)."""
    before = {_key(d): d.health for d in previous.spec.devices} if previous is not None else {}
    stamp = now.replace(microsecond=0)
    events: list[Event] = []
    for device in current.spec.devices:
        was = before.get(_key(device))
        if was == device.health or (was is None and device.health):
            continue  # no change, or a device first seen healthy
        if device.health:
            reason, kind, message = HEALTHY_REASON, "Normal", f"{_shown(device)} is healthy again"
        else:
            reason, kind = UNHEALTHY_REASON, "Warning"
            message = f"{_shown(device)} is unhealthy{_why(device)}"
        events.append(
            Event(
                metadata=ObjectMeta(generate_name=f"{node}.", namespace="default"),
                involved_object=ObjectReference(api_version="v1", kind="Node", name=node),
                reason=reason,
                message=message,
                source=EventSource(component=_COMPONENT, host=node),
                first_timestamp=stamp,
                last_timestamp=stamp,
                count=1,
                type=kind,
                reporting_component=_COMPONENT,
                reporting_instance=node,
            )
        )
    return events
