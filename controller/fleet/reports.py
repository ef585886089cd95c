"""What an agent's next report changes in the objects it reports, and what it leaves alone.

An agent republishes its Node and its Device on every heartbeat with nothing changed but a
time stamp (the Node's ``Ready`` condition ``lastHeartbeatTime``, the Device's
:data:`~apis.meta.REPORTED_AT_ANNOTATION`), and its NodeMetric with a new status (usage
figures and ``status.updateTime``). :func:`without_report` gives an object without that part
and without its resourceVersion (which every stored write changes): two states of an object
compare equal under it exactly when they differ only in what the agent keeps reporting. The
store uses it to write such changes to its file at most every ``[store]
report_write_interval`` seconds (see :class:`controller.store.sqlite.Store`); anything else, a
label, a taint, a new device, a NodeMetric's collect policy, is written at once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

import msgspec

from apis.core import Node
from apis.meta import Object, without_reported_at
from apis.scheduling import Device
from apis.slo import NodeMetric, NodeMetricStatus

__all__ = ["WITHOUT_REPORT", "without_report"]


def _node(node: Node) -> Node:
    conditions = node.status.conditions
    for i, condition in enumerate(conditions):
        if condition.type == "Ready" and condition.last_heartbeat_time is not None:
            ready = msgspec.structs.replace(condition, last_heartbeat_time=None)
            conditions = (*conditions[:i], ready, *conditions[i + 1 :])
            break
    return msgspec.structs.replace(
        node,
        metadata=msgspec.structs.replace(node.metadata, resource_version=""),
        status=msgspec.structs.replace(node.status, conditions=conditions),
    )


def _device(device: Device) -> Device:
    meta = device.metadata
    return msgspec.structs.replace(
        device,
        metadata=msgspec.structs.replace(
            meta, resource_version="", annotations=without_reported_at(meta.annotations)
        ),
    )


_NO_STATUS: Final = NodeMetricStatus()


def _nodemetric(metric: NodeMetric) -> NodeMetric:
    return msgspec.structs.replace(
        metric,
        metadata=msgspec.structs.replace(metric.metadata, resource_version=""),
        status=_NO_STATUS,
    )


#: Kind -> its object without what the agent keeps reporting, and without resourceVersion.
WITHOUT_REPORT: Final[Mapping[type[Object], Callable[[Any], Object]]] = {
    Node: _node,
    Device: _device,
    NodeMetric: _nodemetric,
}


def without_report(obj: Object) -> Object | None:
    """``obj`` without what its agent keeps reporting and without its resourceVersion; None
    for a kind no agent reports."""
    strip = WITHOUT_REPORT.get(type(obj))
    return strip(obj) if strip is not None else None
