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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

from apis.core import Node, Pod
from apis.slo import NodeMetric

__all__ = [
    "BalancePlugin",
    "CycleView",
    "DeschedulePlugin",
    "EvictionIntent",
    "Evictor",
    "Status",
]


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

    def pods_on(self, node: str) -> Sequence[Pod]:
        return self.pods_by_node.get(node, ())


@dataclass(frozen=True, slots=True)
class EvictionIntent:
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
