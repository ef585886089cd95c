"""Choosing the devices of one node for a pod: the same function answers Filter and Reserve.

Per device type the candidates are the healthy devices matching the pod's hint selector (and
the NUMA nodes the topology manager chose, unless that alignment is disabled). Then:

* a pod that already carries an allocation only has it verified;
* reservations the pod may use hand their unused share back first (:class:`ReservedDevices`):
  ``Aligned`` prefers their devices, ``Restricted`` limits their devices to that share;
* with ``device-joint-allocate`` the primary type is placed first and each secondary type is
  drawn from the primary's PCIe switches in turn (``SamePCIe``: from exactly those switches);
* whole GPUs of a pod with a ``gpu-partition-spec`` (or on a node whose partition policy is
  ``Honor``) take a partition of the node's table (the Device's, else the built-in one of
  H100/H800/H20): the lowest ``allocationScore`` group with a free partition, and in it the
  partition that leaves the most larger partitions whole;
* other whole GPUs go through the topology path when the devices report their topology: the
  tightest scope (PCIe switch, then NUMA node, then node) that can hold them all, preferring
  scopes already in use, its lowest free minors first; ``requiredTopologyScope`` makes the
  scope mandatory;
* everything else takes the best-scoring devices that can give the per-device request
  (preferred minors first, then score, then minor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Final

from apis import constants as k
from apis.labels import Selector
from apis.resources import ResourceList
from apis.scheduling import VirtualFunction
from controller.scheduler.deviceshare.annotation import (
    EMPTY_ALLOCATION,
    AllocatedDevice,
    AllocatedVF,
    Allocation,
)
from controller.scheduler.deviceshare.args import DEFAULT_ARGS, DeviceShareArgs
from controller.scheduler.deviceshare.requests import (
    ERROR,
    SCOPES,
    DeviceRequest,
    Rejection,
    TypeRequest,
)
from controller.scheduler.deviceshare.scoring import device_score
from controller.scheduler.deviceshare.state import (
    DeviceSlot,
    NodeDeviceState,
    PartitionTable,
    charge,
    demand,
    release,
)
from controller.scheduler.deviceshare.templates import NO_TEMPLATES, SharedTemplates, needs_template

__all__ = [
    "ALIGNED",
    "HAMI_CORE",
    "RESTRICTED",
    "NUMAHint",
    "ReservedDevices",
    "allocate",
    "insufficient",
    "numa_hints",
]

#: The GPU isolation provider whose absence has its own message.
HAMI_CORE: Final = k.GPU_ISOLATION_PROVIDER_HAMI_CORE
_JOINT_VIOLATION: Final = "node(s) Device Joint-Allocate rules violation"
_NO_PRIMARY: Final = "node(s) Insufficient primary device"
_MULTI_SHARED: Final = "node(s) Unsupported Multi-Shared GPU"
_NO_TOPOLOGY: Final = "node(s) missing GPU Device Topology Tree"
_NO_SCOPE: Final = "Insufficient Topology Scoped GPU Devices"
_NO_TEMPLATE: Final = "no matched GPU shared resource template"
_NO_PARTITION_TABLE: Final = "node(s) missing GPU Partition Table"
_PARTITION_COUNT: Final = "node(s) Unsupported number of GPU requests"
_NO_PARTITION: Final = "Insufficient Partitioned GPU Devices"
_HONOR: Final = "Honor"
#: Bin-pack weight of each partition size still wholly free after a choice.
_PARTITION_WEIGHTS: Final = ((8, 10000), (4, 100), (2, 1))


def insufficient(device_type: str) -> str:
    return f"Insufficient {device_type} devices"


@dataclass(frozen=True, slots=True)
class _Pick:
    slot: DeviceSlot
    want: ResourceList
    vf: VirtualFunction | None = None


def _fits(slot: DeviceSlot, want: Mapping[str, int]) -> bool:
    free = slot.free
    return all(free.get_amount(name) >= amount for name, amount in charge(slot, want).items())


def _entry(pick: _Pick, template: str = "") -> AllocatedDevice:
    vfs = () if pick.vf is None else (AllocatedVF(minor=pick.vf.minor, bus_id=pick.vf.bus_id),)
    return AllocatedDevice(
        minor=pick.slot.minor, resources=pick.want, id=pick.slot.id, vfs=vfs, template=template
    )


@dataclass(frozen=True, slots=True)
class _Context:
    request: DeviceRequest
    state: NodeDeviceState
    args: DeviceShareArgs
    templates: SharedTemplates
    numa_nodes: frozenset[int] | None
    preferred: Mapping[str, frozenset[int]]

    def candidates(self, device_type: str) -> list[DeviceSlot]:
        hint = self.request.hint(device_type)
        selector = hint.device_selector() if hint is not None else Selector.everything()
        numa = None if self.args.disable_device_numa_topology_alignment else self.numa_nodes
        return [
            slot
            for slot in self.state.of_type(device_type)
            if slot.healthy
            and selector.matches(slot.labels)
            and (numa is None or slot.numa in numa)
        ]

    def vf_selector(self, device_type: str) -> Selector | None:
        """The selector of the VFs the pod wants, None when it wants none."""
        hint = self.request.hint(device_type)
        if hint is None or hint.vf_selector is None:
            return None
        return Selector.from_label_selector(hint.vf_selector)

    def pick(self, slot: DeviceSlot, wanted: TypeRequest) -> _Pick | None:
        """What ``slot`` would give, None when it cannot (too little free, no free VF)."""
        want = demand(slot, wanted.per_device)
        if not _fits(slot, want):
            return None
        vf_selector = self.vf_selector(wanted.device_type)
        if vf_selector is None:
            return _Pick(slot, want)
        vfs = slot.free_vfs(vf_selector)
        return _Pick(slot, want, vfs[0]) if vfs else None

    def score(self, slot: DeviceSlot, wanted: TypeRequest) -> int:
        return device_score(slot, wanted.per_device, self.args)


def _ranked(
    ctx: _Context,
    wanted: TypeRequest,
    slots: Iterable[DeviceSlot],
    pcie_order: Sequence[str] = (),
) -> list[_Pick]:
    """The devices that can give the per-device request, best first."""
    preferred = ctx.preferred.get(wanted.device_type, frozenset())
    picks = [
        (pick, ctx.score(slot, wanted))
        for slot in slots
        if (pick := ctx.pick(slot, wanted)) is not None
    ]
    picks.sort(key=lambda p: (p[0].slot.minor not in preferred, -p[1], p[0].slot.minor))
    ordered = [pick for pick, _ in picks]
    if not pcie_order:
        return ordered
    # Round-robin over the preferred PCIe switches, the other devices after them.
    groups = [[p for p in ordered if p.slot.pcie == pcie] for pcie in pcie_order]
    rest = [p for p in ordered if p.slot.pcie not in pcie_order]
    interleaved: list[_Pick] = []
    for depth in range(max((len(g) for g in groups), default=0)):
        interleaved.extend(group[depth] for group in groups if depth < len(group))
    return interleaved + rest


def _scope_key(level: int) -> Callable[[DeviceSlot], tuple[int, str, int]]:
    if level >= SCOPES["Device"]:
        return lambda s: (s.numa, s.pcie, s.minor)
    if level == SCOPES["PCIe"]:
        return lambda s: (s.numa, s.pcie, 0)
    if level == SCOPES["NUMANode"]:
        return lambda s: (s.numa, "", 0)
    return lambda s: (0, "", 0)


def _in_scope(
    picks: list[_Pick],
    candidates: list[DeviceSlot],
    count: int,
    level: int,
    preferred: frozenset[int],
) -> list[_Pick] | None:
    """The lowest ``count`` minors (preferred ones first) of the best scope at ``level`` that
    holds them: the scope with the most preferred devices, then the most devices in use;
    None when no scope holds them."""
    key = _scope_key(level)
    in_use: dict[tuple[int, str, int], int] = {}
    for slot in candidates:
        in_use[key(slot)] = in_use.get(key(slot), 0) + int(slot.in_use)
    scopes: dict[tuple[int, str, int], list[_Pick]] = {}
    for pick in picks:
        scopes.setdefault(key(pick.slot), []).append(pick)
    holding = [(scope, members) for scope, members in scopes.items() if len(members) >= count]
    if not holding:
        return None

    def rank(
        item: tuple[tuple[int, str, int], list[_Pick]],
    ) -> tuple[int, int, tuple[int, str, int]]:
        scope, members = item
        liked = sum(p.slot.minor in preferred for p in members)
        return -min(liked, count), -in_use.get(scope, 0), scope

    _, members = min(holding, key=rank)
    return sorted(members, key=lambda p: (p.slot.minor not in preferred, p.slot.minor))[:count]


def _topology(
    ctx: _Context, wanted: TypeRequest, candidates: list[DeviceSlot], scope: str
) -> list[_Pick] | Rejection | None:
    """Whole GPUs placed by topology; None to fall through to the default path."""
    if not all(slot.has_topology for slot in candidates):
        return Rejection.unresolvable(_NO_TOPOLOGY) if scope else None
    picks = _ranked(ctx, wanted, candidates)
    if len(picks) < wanted.count:
        return Rejection.unschedulable(insufficient(wanted.device_type))
    preferred = ctx.preferred.get(wanted.device_type, frozenset())
    if scope:
        chosen = _in_scope(picks, candidates, wanted.count, SCOPES[scope], preferred)
        return chosen if chosen is not None else Rejection.unschedulable(_NO_SCOPE)
    for level in (SCOPES["PCIe"], SCOPES["NUMANode"], SCOPES["Node"]):
        chosen = _in_scope(picks, candidates, wanted.count, level, preferred)
        if chosen is not None:
            return chosen
    return None


def _binpack(table: PartitionTable, taken: frozenset[int], requested: int) -> int:
    """How much of the table stays wholly free once ``taken`` is used: bigger partitions
    count for (much) more."""
    return sum(
        weight * partition.allocation_score
        for size, weight in _PARTITION_WEIGHTS
        if size >= requested
        for partition in table.get(size, ())
        if taken.isdisjoint(partition.minors)
    )


def _partition(
    ctx: _Context, wanted: TypeRequest, candidates: list[DeviceSlot]
) -> list[_Pick] | Rejection | None:
    """Whole GPUs from the node's partition table; None to fall through to topology."""
    spec = ctx.request.partition
    honor = ctx.state.partition_policy == _HONOR
    if spec is None and not honor:
        return None
    table = ctx.state.partition_table()
    if table is None:
        return Rejection.unresolvable(_NO_PARTITION_TABLE) if honor else None
    partitions = table.get(wanted.count, ())
    if not partitions:
        return Rejection.unresolvable(_PARTITION_COUNT)
    free = {
        pick.slot.minor: pick for pick in _ranked(ctx, wanted, candidates) if not pick.slot.in_use
    }
    taken = frozenset(s.minor for s in ctx.state.of_type(k.DEVICE_TYPE_GPU)) - free.keys()
    bandwidth = spec.bandwidth if spec is not None else 0
    scores = sorted({p.allocation_score for p in partitions})
    if spec is not None and spec.restricted:
        scores = scores[:1]
    for score in scores:
        feasible = [
            p
            for p in partitions
            if p.allocation_score == score
            and p.ring_bus_bandwidth >= bandwidth
            and all(minor in free for minor in p.minors)
        ]
        if feasible:
            best = max(
                feasible,
                key=lambda p: (
                    _binpack(table, taken | set(p.minors), wanted.count),
                    [-m for m in p.minors],
                ),
            )
            return [free[minor] for minor in best.minors]
    if honor or (spec is not None and spec.restricted):
        return Rejection.unschedulable(_NO_PARTITION)
    return None


def _gpu(ctx: _Context, wanted: TypeRequest) -> tuple[AllocatedDevice, ...] | Rejection:
    state = ctx.state
    template = ""
    matched = ctx.args.gpu_shared_resource_templates_config.matched_resources
    if wanted.shared and needs_template(wanted.per_device, matched):
        names = ctx.templates.matching(state.vendor, state.model, wanted.per_device)
        if len(names) != 1:
            return Rejection.unresolvable(_NO_TEMPLATE)
        template = names[0]
    candidates = ctx.candidates(k.DEVICE_TYPE_GPU)
    hint = ctx.request.hint(k.DEVICE_TYPE_GPU)
    scope = hint.required_topology_scope if hint is not None else ""
    chosen: list[_Pick] | Rejection | None = None
    if not wanted.shared:
        chosen = _partition(ctx, wanted, candidates)
        if chosen is None:
            chosen = _topology(ctx, wanted, candidates, scope)
    elif wanted.count > 1 and scope:
        return Rejection.unresolvable(_MULTI_SHARED)
    if isinstance(chosen, Rejection):
        return chosen
    if chosen is None:
        ranked = _ranked(ctx, wanted, candidates)
        if len(ranked) < wanted.count:
            return Rejection.unschedulable(insufficient(k.DEVICE_TYPE_GPU))
        chosen = ranked[: wanted.count]
    return tuple(_entry(pick, template) for pick in chosen)


def _other(
    ctx: _Context, wanted: TypeRequest, pcie_order: Sequence[str] = (), count: int = 0
) -> tuple[AllocatedDevice, ...] | Rejection:
    candidates = ctx.candidates(wanted.device_type)
    vf_selector = ctx.vf_selector(wanted.device_type)
    if vf_selector is not None and not any(
        vf_selector.matches(group.labels) and group.vfs
        for slot in candidates
        for group in slot.vf_groups
    ):
        return Rejection.unresolvable(f"Insufficient {wanted.device_type} VirtualFunctions")
    if wanted.apply_for_all:
        if not candidates:
            return Rejection.unresolvable(insufficient(wanted.device_type))
        every = [ctx.pick(slot, wanted) for slot in candidates]
        picks = [p for p in every if p is not None]
        if len(picks) < len(every):
            return Rejection.unschedulable(insufficient(wanted.device_type))
        return tuple(_entry(p) for p in picks)
    needed = max(count, wanted.count)
    ranked = _ranked(ctx, wanted, candidates, pcie_order)
    if len(ranked) < needed:
        return Rejection.unschedulable(insufficient(wanted.device_type))
    return tuple(_entry(p) for p in ranked[:needed])


def _one_type(ctx: _Context, wanted: TypeRequest) -> tuple[AllocatedDevice, ...] | Rejection:
    if not ctx.state.of_type(wanted.device_type):
        return Rejection.unresolvable(insufficient(wanted.device_type))
    if wanted.device_type == k.DEVICE_TYPE_GPU:
        return _gpu(ctx, wanted)
    return _other(ctx, wanted)


def _node_checks(ctx: _Context) -> Rejection | None:
    gpu = ctx.request.gpu
    state = ctx.state
    qos = ctx.request.sgpu_qos_policy
    if (
        gpu is not None
        and qos
        and state.vendor == k.GPU_VENDOR_METAX
        and state.sgpu_qos_policies is not None
        and qos not in state.sgpu_qos_policies
    ):
        return Rejection.unschedulable(f'node(s) didn\'t support MetaX sGPU QoS policy "{qos}"')
    if gpu is None or not gpu.shared:
        return None
    if ctx.args.share_unsupported(state.vendor, state.model):
        return Rejection.unresolvable(
            f'model "{state.model}" of vendor "{state.vendor}" does not support GPU Share'
        )
    provider = ctx.request.isolation_provider
    if provider and state.labels.get(k.LABEL_GPU_ISOLATION_PROVIDER, "") != provider:
        name = "HAMICore" if provider == HAMI_CORE else provider
        return Rejection(ERROR, f"GPUIsolationProvider{name} not found on the node")
    if state.vendor == k.GPU_VENDOR_METAX and gpu.count > 1:
        return Rejection.unresolvable(_MULTI_SHARED)
    return None


def _verify(state: NodeDeviceState, designated: Allocation) -> Allocation | Rejection:
    """A pod's own allocation still fits the node."""
    for device_type, devices in designated.devices.items():
        for device in devices:
            slot = state.slot(device_type, device.minor)
            if slot is None or not slot.healthy or not _fits(slot, device.resources):
                return Rejection.unschedulable(insufficient(device_type))
    return designated


def _joint(
    ctx: _Context, done: dict[str, tuple[AllocatedDevice, ...]], *, filtering: bool
) -> Rejection | None:
    """Place the joint-allocation group (primary first) into ``done``."""
    request = ctx.request
    joint = request.joint
    if joint is None or not joint.device_types:
        return None
    group = [
        t
        for t in joint.device_types
        if (wanted := request.of(t)) is not None and not wanted.apply_for_all
    ]
    if len(group) < 2:
        return None
    primary = joint.device_types[0]
    if group[0] != primary:
        return Rejection.unschedulable(_NO_PRIMARY)
    primary_wanted = request.types[primary]
    placed = _one_type(ctx, primary_wanted)
    if isinstance(placed, Rejection):
        return placed
    done[primary] = placed
    slots = [ctx.state.slot(primary, d.minor) for d in placed]
    pcies = tuple(dict.fromkeys(s.pcie for s in slots if s is not None and s.pcie))
    well_planned = ctx.state.labels.get(k.LABEL_SECONDARY_DEVICE_WELL_PLANNED) == "true"
    for secondary in group[1:]:
        wanted = request.types[secondary]
        if (
            filtering
            and well_planned
            and primary == k.DEVICE_TYPE_GPU
            and not primary_wanted.shared
        ):
            done[secondary] = ()  # left to Reserve
            continue
        if not ctx.state.of_type(secondary):
            return Rejection.unresolvable(insufficient(secondary))
        count = len(pcies) if joint.same_pcie else 0
        chosen = _other(ctx, wanted, pcies, count)
        if isinstance(chosen, Rejection):
            return chosen
        if joint.same_pcie:
            got = {s.pcie for d in chosen if (s := ctx.state.slot(secondary, d.minor)) is not None}
            if not pcies or got != set(pcies):
                return Rejection.unschedulable(_JOINT_VIOLATION)
        done[secondary] = chosen
    return None


ALIGNED: Final = "Aligned"
RESTRICTED: Final = "Restricted"


@dataclass(frozen=True, slots=True)
class ReservedDevices:
    """What reservations on the node still hold for the pod at hand.

    ``remaining`` is, per device type and minor, the reserved share no owner uses yet (it is
    charged in the node state through the reserve pod's allocation). With ``policy``
    ``Aligned`` the pod prefers those devices; with ``Restricted`` a reserved device gives it
    no more than that share. An empty policy only makes the share visible (a pod that
    ignores reservations sees reserved-but-unused capacity as free).
    """

    remaining: Mapping[str, Mapping[int, ResourceList]]
    policy: str = ""

    def preferred(self) -> dict[str, frozenset[int]]:
        if self.policy not in (ALIGNED, RESTRICTED):
            return {}
        return {t: frozenset(minors) for t, minors in self.remaining.items()}

    def released(self, state: NodeDeviceState) -> NodeDeviceState:
        """``state`` with the reserved shares handed back."""
        return release(
            state,
            Allocation(
                {
                    t: tuple(AllocatedDevice(minor=m, resources=r) for m, r in minors.items())
                    for t, minors in self.remaining.items()
                }
            ),
        )


def _restrict(state: NodeDeviceState, reserved: ReservedDevices) -> NodeDeviceState:
    """Reserved devices offer the pod only their reserved share (Restricted)."""
    slots = []
    for slot in state.devices:
        share = reserved.remaining.get(slot.type, {}).get(slot.minor)
        if share is not None:
            free = slot.free
            used = dict(slot.used)
            for name, amount in share.items():
                used[name] = slot.total.get_amount(name) - min(amount, free.get_amount(name))
            slot = replace(slot, used=ResourceList(used).clamp_min(0))
        slots.append(slot)
    return replace(state, devices=tuple(slots))


def allocate(
    request: DeviceRequest,
    state: NodeDeviceState,
    *,
    args: DeviceShareArgs = DEFAULT_ARGS,
    templates: SharedTemplates = NO_TEMPLATES,
    numa_nodes: frozenset[int] | None = None,
    preferred: Mapping[str, frozenset[int]] | None = None,
    reserved: ReservedDevices | None = None,
    filtering: bool = False,
) -> Allocation | Rejection:
    """The devices of ``state`` for the pod, or why this node cannot give them.

    ``numa_nodes`` restricts candidates to those NUMA nodes (the topology manager's choice);
    ``preferred`` names minors per type to try first; ``reserved`` is what the reservations
    the pod may use still hold; ``filtering`` marks a Filter call, where secondaries of a
    well-planned node are left to Reserve.
    """
    if request.empty:
        return EMPTY_ALLOCATION
    if reserved is not None:
        state = reserved.released(state)
        if reserved.policy == RESTRICTED:
            state = _restrict(state, reserved)
        preferred = {**reserved.preferred(), **(preferred or {})}
    ctx = _Context(request, state, args, templates, numa_nodes, preferred or {})
    refused = _node_checks(ctx)
    if refused is not None:
        return refused
    if request.designated is not None and not request.designated.empty:
        return _verify(state, request.designated)
    done: dict[str, tuple[AllocatedDevice, ...]] = {}
    refused = _joint(ctx, done, filtering=filtering)
    if refused is not None:
        return refused
    for device_type, wanted in request.types.items():
        if device_type in done:
            continue
        placed = _one_type(ctx, wanted)
        if isinstance(placed, Rejection):
            return placed
        done[device_type] = placed
    return Allocation({t: done[t] for t in request.types if done.get(t)})


@dataclass(frozen=True, slots=True)
class NUMAHint:
    """A set of NUMA nodes whose devices can hold the pod (for the topology manager)."""

    nodes: frozenset[int]
    #: One of the smallest such sets.
    preferred: bool


def numa_hints(
    request: DeviceRequest,
    state: NodeDeviceState,
    *,
    args: DeviceShareArgs = DEFAULT_ARGS,
    templates: SharedTemplates = NO_TEMPLATES,
    reserved: ReservedDevices | None = None,
) -> tuple[NUMAHint, ...]:
    """Every set of NUMA nodes that can hold the pod's devices, smallest sets preferred;
    none when alignment is disabled or the devices report no NUMA node."""
    if request.empty or args.disable_device_numa_topology_alignment:
        return ()
    numa = sorted({s.numa for s in state.devices if s.type in request.types and s.numa >= 0})
    if not numa:
        return ()
    fitting = [
        frozenset(nodes)
        for size in range(1, len(numa) + 1)
        for nodes in combinations(numa, size)
        if isinstance(
            allocate(
                request,
                state,
                args=args,
                templates=templates,
                numa_nodes=frozenset(nodes),
                reserved=reserved,
            ),
            Allocation,
        )
    ]
    smallest = min((len(nodes) for nodes in fitting), default=0)
    return tuple(NUMAHint(nodes, len(nodes) == smallest) for nodes in fitting)
