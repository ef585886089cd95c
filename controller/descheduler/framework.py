"""The descheduler's plugin framework: what a plugin sees and how it asks for an eviction.

A cycle (controller-spec §6.1) hands every profile's Deschedule plugins, then every profile's
Balance plugins, a :class:`CycleView` of the cluster — an immutable snapshot of Ready nodes (the
global and the profile's node selectors applied), the pods on each node, the NodeMetrics and
the time — and an :class:`Evictor`. A plugin decides over the view and calls
:meth:`Evictor.evict` for each pod it wants moved; the evictor applies the per-node,
per-namespace and total limits of the cycle and the filters, and *records* the eviction (or,
in dry run, the proposal). The control loop does the I/O afterwards (PodMigrationJobs, pod
deletions, Events). Plugins therefore stay pure functions of the view, apart from the
evictor's bookkeeping, and return a :class:`Status`.

Extension points are Protocols; plugins sit in an explicit name -> (Args, factory) table
(``controller.descheduler.plugins.PLUGINS``), each ``Args`` a frozen msgspec Struct holding
its defaults and refusing bad values with an error naming the field and value.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

import msgspec

from apis.core import Node, Pod
from apis.slo import NodeMetric
from controller.descheduler import nodefit

__all__ = [
    "BalancePlugin",
    "CycleView",
    "DeschedulePlugin",
    "EvictionIntent",
    "Evictor",
    "Status",
    "same_objects",
]


def same_objects(before: Sequence[object], now: Sequence[object]) -> bool:
    """Whether ``now`` holds the very objects ``before`` held, in the same order: what a
    cycle worked out from them then still holds (the objects are immutable)."""
    return before is now or (len(before) == len(now) and all(map(operator.is_, before, now)))


@dataclass(frozen=True, slots=True)
class Status:
    """A plugin's outcome for one cycle: ``ok`` False with a message when it could not run
    (bad state of the cluster, not a refused eviction)."""

    ok: bool = True
    message: str = ""


@dataclass(frozen=True, slots=True)
class CycleView:
    """The cluster as one cycle sees it. Never changes during the cycle."""

    now: datetime
    #: Ready, schedulable-or-not nodes matching the global and the profile's node selectors,
    #: sorted by name.
    nodes: Sequence[Node]
    #: Node name -> the pods bound to it that are not finished or being deleted, by name.
    pods_by_node: Mapping[str, Sequence[Pod]]
    #: Node name -> its NodeMetric (absent when none was reported).
    metrics: Mapping[str, NodeMetric] = field(default_factory=dict)
    #: Every node of the cluster (also those the selectors left out), by name: a pod may move
    #: to any of them.
    all_nodes: Mapping[str, Node] = field(default_factory=dict)
    #: Nodes with a pod the evictor would evict directly (``EvictDirectly``), when known.
    #: Admitting such a pod counts it as migrating at once, which can change the evictor's
    #: filter for the node's other pods; on every other node admitting pods leaves the
    #: filter's answer for the node's other pods as it was (see :meth:`filter_holds_on`).
    #: None: not known, every node counts as one.
    direct_nodes: frozenset[str] | None = None
    #: What :meth:`request_of` gave in the cycle before, by pod identity, with the pod (see
    #: :meth:`requests_asked`): taken again for a pod that is still the same object.
    requests_before: Mapping[int, tuple[Pod, dict[str, int]]] = field(default_factory=dict)
    #: Memos of :meth:`request_of` (by pod identity; ``_asked`` keeps those pods alive, so no
    #: identity is reused) and of :meth:`requested_on` (by node name), filled as plugins and
    #: the evictor ask.
    _requests: dict[int, dict[str, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    _asked: list[Pod] = field(default_factory=list, init=False, repr=False, compare=False)
    _requested: dict[str, dict[str, int]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def pods_on(self, node: str) -> Sequence[Pod]:
        return self.pods_by_node.get(node, ())

    def filter_holds_on(self, node: str) -> bool:
        """Whether the evictor's filter keeps its answer for each pod of ``node`` while other
        pods of the node are admitted: a plugin may then ask it pod by pod as it goes instead
        of for every pod up front."""
        return self.direct_nodes is not None and node not in self.direct_nodes

    def request_of(self, pod: Pod) -> Mapping[str, int]:
        """``pod``'s effective request (:func:`~controller.descheduler.nodefit.request_of`),
        worked out once per view. Shared: never modify it."""
        found = self._requests.get(id(pod))
        if found is None:
            before = self.requests_before.get(id(pod))
            found = before[1] if before is not None and before[0] is pod else None
            if found is None:
                found = nodefit.request_of(pod)
            self._requests[id(pod)] = found
            self._asked.append(pod)
        return found

    def requests_asked(self) -> dict[int, tuple[Pod, dict[str, int]]]:
        """What :meth:`request_of` gave in this view, by pod identity, with the pod: the next
        cycle's ``requests_before``."""
        requests = self._requests
        return {id(pod): (pod, requests[id(pod)]) for pod in self._asked}

    def requested_on(self, node: str) -> Mapping[str, int]:
        """The requests of the pods on ``node`` summed, ``pods`` their number
        (:func:`~controller.descheduler.nodefit.requested`), once per view. Shared: never
        modify it; copy it to book more on the node."""
        found = self._requested.get(node)
        if found is None:
            found = self._requested[node] = nodefit.requested(self.pods_on(node), self.request_of)
        return found


class EvictionIntent(msgspec.Struct, frozen=True):
    """One eviction a plugin asked for and the evictor admitted."""

    pod: Pod
    node: str
    #: The plugin that asked (``LowNodeLoad``, ``CustomPriority``...).
    plugin: str
    #: Why, in the spec's words (``node is overutilized, node cpu usage(82.00%)>...``).
    reason: str
    #: A proposal only (dry run): nothing is evicted.
    dry_run: bool = False


@runtime_checkable
class Evictor(Protocol):
    """What plugins evict through (one per cycle; see ``controller.descheduler.evictor``)."""

    def filter(self, pod: Pod) -> bool:
        """The standard evictor filters and the MigrationController's non-retryable checks
        (``skipEvictionGates`` honoured; ``descheduler.alpha.kubernetes.io/evict`` bypasses
        them): may this pod be evicted at all?"""
        ...

    def pre_eviction_filter(self, pod: Pod) -> bool:
        """The checks that depend on other nodes (node fit when ``nodeFit`` is on)."""
        ...

    def evict(self, pod: Pod, *, plugin: str, reason: str) -> bool:
        """Ask to evict ``pod``: False when a limit of the cycle (per node, per namespace,
        total, migrating limits) or a filter refuses it; True when it was recorded."""
        ...

    def can_evict_from(self, node: str) -> bool:
        """False once the cycle's per-node limit for ``node`` or its total limit is reached:
        a plugin stops looking for more pods of that node (or at all)."""
        ...

    @property
    def intents(self) -> Sequence[EvictionIntent]:
        """Every eviction recorded this cycle, in order."""
        ...

    def cordon(self, node: str, *, plugin: str) -> None:
        """Ask to mark ``node`` unschedulable (DrainNode's ``autoCordon``)."""
        ...

    def uncordon(self, node: str) -> None:
        """Take back a cordon asked for in this cycle (a drain that could not finish)."""
        ...

    @property
    def cordoned(self) -> Sequence[str]:
        """Nodes to cordon, in order."""
        ...


@runtime_checkable
class DeschedulePlugin(Protocol):
    name: str

    def deschedule(self, view: CycleView, evictor: Evictor) -> Status: ...


@runtime_checkable
class BalancePlugin(Protocol):
    name: str

    def balance(self, view: CycleView, evictor: Evictor) -> Status: ...
