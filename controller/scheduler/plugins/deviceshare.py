"""DeviceShare: GPUs (and NPUs), RDMA NICs and FPGAs, whole or shared, on the framework.

The pure core (:mod:`controller.scheduler.deviceshare`) decides; this adapter keeps the per-node
device
state and calls the core where it must:

- **sync** builds each node's :class:`~controller.scheduler.deviceshare.NodeDeviceState` from its
  ``Device`` object and the ``device-allocated`` annotations of the pods assigned to it, and
  updates only the nodes whose Device or pods changed. A changed Device answers True (parked
  pods may now fit). A Device that goes away leaves its devices unhealthy, allocations kept.
  The GPUs' free and total amounts are also laid out as ``[node, device]`` arrays aligned to
  the table's rows.
- **PreFilter** prepares the request (:func:`~controller.scheduler.deviceshare.prepare`): Skip for
  a pod
  asking no device, the core's reason (UnschedulableAndUnresolvable) for an invalid one.
- **Filter**: for a GPU request, rows without a GPU are rejected at once (``Insufficient gpu
  devices``, unresolvable, as the core says). For a *plain* GPU request (GPUs only; no
  hint, joint allocation, partition spec, designated allocation, isolation provider or
  template) on a *plain* node (no ``Honor`` partition policy, no MetaX sGPU slots, a model
  that shares), whether enough cards can give the per-card share is decided for every row at
  once over the arrays; that is exactly the core's verdict there. The other rows go through
  :func:`~controller.scheduler.deviceshare.allocate` one by one.
- **Score** is the core's node score (types' scores added), over the arrays for a plain GPU
  request, else per row; normalized so the best node has 100.
- **Reserve** allocates on the chosen node and charges the node state; **Unreserve** gives
  it back. A plain share, or one whole card, on a plain node is placed over the row's arrays
  exactly as the core places it (best device score, then lowest minor; a whole card by its
  PCIe switch's use when the cards report their topology); everything else is the core's
  :func:`~controller.scheduler.deviceshare.allocate`.
- **PreBind** writes ``scheduling.koordinator.sh/device-allocated``, and with
  ``devicePluginAdaption`` (Koordinator's ``DevicePluginAdaption`` gate, off by default) the
  vendor device-plugin annotations and labels. Their times (``bind-timestamp``,
  ``predicate-time``) are the loop's clock at the pass (``set_time``; the simulated clock
  under ``koordpy simulate``), a nanosecond later than the last one written when a pass binds
  several pods. An allocation the vendor's device plugin cannot take (several Cambricon cards,
  a share without compute or below the vendor's memory unit, a vNPU on an Ascend 310P 300I
  Duo) fails PreBind with an Error naming the vendor, as v1.8's adapters do. (The vendor
  plugins' node lock is not taken: koordpy's nodes run no vendor device plugin.)

GPU shared-resource templates (Ascend vNPU shapes) come from the ConfigMap the args name
(``koordinator-system/gpu-shared-resource-templates``, key ``data.yaml``), read at **sync**:
a changed ConfigMap answers True (parked pods may now match a template); one whose
``data.yaml`` cannot be read is logged and the last good templates stay; no ConfigMap, no
templates (a share that needs one is refused).

MetaX sGPU QoS: a pod's ``metax-tech.com/sgpu-qos-policy`` must be one of the three
policies (the core refuses it at PreFilter otherwise), and a MetaX node whose Device lists
the policies its cards support takes only those. The policy is not copied into
``metax-tech.com/gpu-devices-allocated`` (its entries hold uuid, compute and vRam only): it
stays on the pod, where MetaX's device plugin reads it.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Final, cast

import numpy as np
from numpy.typing import NDArray

from apis import constants as k
from apis.core import ConfigMap, Pod
from apis.kinds import default_registry
from apis.meta import Object, without_reported_at
from apis.resources import ResourceList
from apis.scheduling import Device
from controller.scheduler import framework as fw
from controller.scheduler.deviceshare import (
    AllocatedDevice,
    Allocation,
    DeviceRequest,
    NodeDeviceState,
    Rejection,
    adapter_annotations,
    allocate,
    apply,
    encode_allocation,
    node_state,
    prepare,
    release,
    score_node,
)
from controller.scheduler.deviceshare.annotation import AdaptError
from controller.scheduler.deviceshare.args import (
    MOST_ALLOCATED,
    ArgsError,
    DeviceShareArgs,
)
from controller.scheduler.deviceshare.requests import ERROR, UNSCHEDULABLE
from controller.scheduler.deviceshare.state import mark_unhealthy, pod_allocation
from controller.scheduler.deviceshare.templates import (
    NO_TEMPLATES,
    SharedTemplates,
    TemplateError,
    needs_template,
    parse_templates,
)
from controller.scheduler.nodetable import NodeTable, is_assigned
from controller.scheduler.podinfo import PodInfo, pod_key

if TYPE_CHECKING:
    from controller.store.snapshots import Change, Snapshot

__all__ = ["NAME", "DeviceShare", "DeviceSharePluginArgs"]

NAME: Final = "DeviceShare"
_CORE: Final = k.RESOURCE_GPU_CORE
_RATIO: Final = k.RESOURCE_GPU_MEMORY_RATIO
_MEMORY: Final = k.RESOURCE_GPU_MEMORY
#: Per-card resources the arrays hold (a plain request names nothing else).
_PLAIN: Final = frozenset({_CORE, _RATIO, _MEMORY})
_HONOR: Final = "Honor"
_NO_GPU: Final = "Insufficient gpu devices"
#: Resources the core reads a request from, and annotations it validates.
_DEVICE_RESOURCES: Final = frozenset({*k.GPU_RESOURCES, k.RESOURCE_RDMA, k.RESOURCE_FPGA})
_DEVICE_ANNOTATIONS: Final = frozenset(
    {
        k.ANNOTATION_DEVICE_ALLOCATE_HINT,
        k.ANNOTATION_DEVICE_JOINT_ALLOCATE,
        k.ANNOTATION_GPU_PARTITION_SPEC,
        k.ANNOTATION_DEVICE_ALLOCATED,
        k.ANNOTATION_SGPU_QOS_POLICY,
    }
)

Grid = NDArray[np.int64]
#: Amounts below this, times 100 (and plus a request of the same size), are exact in float64.
_EXACT_LIMIT: Final = 2**50 // 100
#: PreFilter answers remembered before the memo starts afresh.
_MEMO_LIMIT: Final = 4096
_REGISTRY: Final = default_registry()
_log = logging.getLogger(__name__)
_UNIX_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)


def _unix_ns(when: datetime) -> int:
    """Nanoseconds since the Unix epoch, exactly (a naive time is UTC)."""
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return (when - _UNIX_EPOCH) // timedelta(microseconds=1) * 1000


class DeviceSharePluginArgs(DeviceShareArgs, fw.PluginArgs):
    """``DeviceShareArgs`` (spec §3.6 defaults) plus the ``DevicePluginAdaption`` switch."""

    #: Write the vendor device-plugin annotations at PreBind (Koordinator's feature gate).
    device_plugin_adaption: bool = False

    def __post_init__(self) -> None:
        try:
            self.validate()
        except ArgsError as err:
            raise ValueError(str(err)) from None


def _code(rejection: Rejection) -> fw.Code:
    if rejection.code == UNSCHEDULABLE:
        return fw.Code.UNSCHEDULABLE
    if rejection.code == ERROR:
        return fw.Code.ERROR
    return fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@dataclass(frozen=True, slots=True)
class _PodRequest:
    """PreFilter's result: the core's request and, for a plain GPU request, its share."""

    request: DeviceRequest
    plain: bool
    count: int = 0
    per_device: Mapping[str, int] | None = None


#: PreFilter's note for a pod asking for no device.
_NOTHING: Final = _PodRequest(DeviceRequest(), plain=False)


@dataclass(frozen=True, slots=True)
class _Reserved:
    row: int
    node: str
    allocation: Allocation


@dataclass(frozen=True, slots=True)
class _Fixed:
    """Per-row facts of the arrays that change only with a Device."""

    no_gpu: NDArray[np.bool_]
    #: Rows where the arrays give the core's verdict for whole cards / shares.
    quick_whole: NDArray[np.bool_]
    quick_share: NDArray[np.bool_]
    #: The weighted resources some row has: (name, weight, capacity sum, its divisor).
    scored: tuple[tuple[str, int, Grid, Grid], ...]
    #: Per row, the weights of the resources it has (at least 1, a divisor).
    weight_sums: Grid
    #: The names of ``scored``.
    scored_names: tuple[str, ...]
    #: ``scored``'s divisors and ``weight_sums`` as float64, and whether float64 holds every
    #: amount the score multiplies by 100 exactly (then it scores in floats, much faster
    #: than numpy's integer division, with the same floors).
    divisors_f: tuple[NDArray[np.float64], ...]
    weight_sums_f: NDArray[np.float64]
    exact_in_floats: bool
    #: Some row has no GPU; every GPU row is quick for whole cards / for shares.
    any_no_gpu: bool
    all_quick_whole: bool
    all_quick_share: bool


class _Arrays:
    """The GPUs of every row as ``[row, minor order]`` arrays (padding: nothing free)."""

    def __init__(self, rows: int, width: int, names: tuple[str, ...]) -> None:
        shape = (rows, max(width, 1))
        self.names = names
        #: What each card has free, by resource name (unhealthy cards: nothing).
        self.free: dict[str, Grid] = {n: np.zeros(shape, np.int64) for n in names}
        #: What each healthy card offers, by resource name.
        self.capacity: dict[str, Grid] = {n: np.zeros(shape, np.int64) for n in names}
        #: Per row, the sums of ``free`` and ``capacity`` over its cards (the node score).
        self.free_sum: dict[str, Grid] = {n: np.zeros(rows, np.int64) for n in names}
        self.capacity_sum: dict[str, Grid] = {n: np.zeros(rows, np.int64) for n in names}
        #: Each card's memory as the Device reports it (the ratio <-> memory conversion).
        self.card_memory: Grid = np.zeros(shape, np.int64)
        #: The memory of the first healthy card (the node score's conversion), 0: none.
        self.first_memory: Grid = np.zeros(rows, np.int64)
        self.healthy: NDArray[np.bool_] = np.zeros(shape, np.bool_)
        #: How many GPU slots (healthy or not) each row has.
        self.gpus: Grid = np.zeros(rows, np.int64)
        #: Rows where the vectorized verdict is the core's (see the module docstring).
        self.plain: NDArray[np.bool_] = np.zeros(rows, np.bool_)
        #: Rows whose model may not be shared (``gpuShareUnsupportedModels``).
        self.no_share: NDArray[np.bool_] = np.zeros(rows, np.bool_)
        self._converted: dict[tuple[str, int, bool], Grid] = {}
        #: id of a grid in ``_converted`` -> its largest amount.
        self._peaks: dict[int, int] = {}
        self._fixed: _Fixed | None = None
        #: Per row, its GPUs in column order: (minor, id, NUMA node, PCIe switch).
        self.cards: list[tuple[tuple[int, str, int, str], ...]] = [()] * rows
        #: Per row, whether every healthy GPU reports its NUMA node and PCIe switch.
        self.topology: list[bool] = [False] * rows

    def fixed(self, weights: Mapping[str, int]) -> _Fixed:
        """What only a Device change (``fill``) changes, worked out once after it."""
        if self._fixed is None:
            has_gpu = self.gpus > 0
            scored = []
            weight_sums = np.zeros(len(self.gpus), np.int64)
            for name, weight in weights.items():
                capacity = self.capacity_sum[name]
                if capacity.any():
                    scored.append((name, weight, capacity, np.maximum(capacity, 1)))
                    weight_sums += np.where(capacity > 0, weight, 0)
            quick_whole = has_gpu & self.plain
            quick_share = quick_whole & ~self.no_share
            self._fixed = _Fixed(
                no_gpu=~has_gpu,
                quick_whole=quick_whole,
                quick_share=quick_share,
                scored=tuple(scored),
                weight_sums=np.maximum(weight_sums, 1),
                scored_names=tuple(name for name, _, _, _ in scored),
                divisors_f=tuple(divisor.astype(np.float64) for _, _, _, divisor in scored),
                weight_sums_f=np.maximum(weight_sums, 1).astype(np.float64),
                exact_in_floats=all(
                    int(capacity.max(initial=0)) < _EXACT_LIMIT for _, _, capacity, _ in scored
                ),
                any_no_gpu=not bool(has_gpu.all()),
                all_quick_whole=bool((quick_whole == has_gpu).all()),
                all_quick_share=bool((quick_share == has_gpu).all()),
            )
        return self._fixed

    def converted(self, name: str, amount: int, *, first: bool) -> Grid:
        """``amount`` of the other unit as ``name`` over every card (``first``: each row's
        first healthy card): ratio -> memory bytes, memory bytes -> ratio (floored)."""
        key = (name, amount, first)
        grid = self._converted.get(key)
        if grid is None:
            memory = self.first_memory if first else self.card_memory
            if name == _MEMORY:
                grid = amount * memory // 100
            else:
                grid = np.where(memory > 0, amount * 100 // np.maximum(memory, 1), 0)
            self._converted[key] = grid
            self._peaks[id(grid)] = int(grid.max(initial=0))
        return grid

    def peak(self, grid: Grid) -> int:
        """The largest amount of a grid :meth:`converted` gave."""
        peak = self._peaks.get(id(grid))
        return int(grid.max(initial=0)) if peak is None else peak

    def fill(self, row: int, state: NodeDeviceState, args: DeviceShareArgs) -> None:
        self._converted.clear()
        self._peaks.clear()
        self._fixed = None
        gpus = state.of_type(k.DEVICE_TYPE_GPU)
        names = self.names
        free = [[0] * len(names) for _ in range(self.healthy.shape[1])]
        capacity = [[0] * len(names) for _ in range(self.healthy.shape[1])]
        memory = [0] * self.healthy.shape[1]
        healthy = [False] * self.healthy.shape[1]
        first_memory = 0
        metax = False
        for column, slot in enumerate(gpus):
            total, used = slot.total, slot.used
            memory[column] = total.get(_MEMORY, 0)
            healthy[column] = slot.healthy
            metax = metax or total.get(k.RESOURCE_METAX_SGPU, 0) > 0
            if not slot.healthy:
                continue
            if not first_memory:
                first_memory = memory[column] or -1
            for index, name in enumerate(names):
                amount = total.get(name, 0)
                capacity[column][index] = amount
                free[column][index] = max(amount - used.get(name, 0), 0)
        free_grid = np.array(free, np.int64)
        capacity_grid = np.array(capacity, np.int64)
        for index, name in enumerate(names):
            self.free[name][row] = free_grid[:, index]
            self.capacity[name][row] = capacity_grid[:, index]
            self.free_sum[name][row] = free_grid[:, index].sum()
            self.capacity_sum[name][row] = capacity_grid[:, index].sum()
        self.card_memory[row] = memory
        self.healthy[row] = healthy
        self.cards[row] = tuple((g.minor, g.id, g.numa, g.pcie) for g in gpus)
        self.topology[row] = all(g.has_topology for g in gpus if g.healthy)
        self.first_memory[row] = max(first_memory, 0)
        self.gpus[row] = len(gpus)
        self.plain[row] = (
            state.partition_policy != _HONOR and not metax and state.vendor != k.GPU_VENDOR_METAX
        )
        self.no_share[row] = args.share_unsupported(state.vendor, state.model)

    def charge(self, row: int, allocation: Allocation) -> None:
        """Take a plain allocation's GPU shares off the row's free amounts."""
        columns = {card[0]: column for column, card in enumerate(self.cards[row])}
        for device in allocation.of(k.DEVICE_TYPE_GPU):
            column = columns[device.minor]
            for name in self.names:
                amount = device.resources.get_amount(name)
                if amount:
                    self.free[name][row, column] -= amount
                    self.free_sum[name][row] -= amount

    def refill(self, row: int, state: NodeDeviceState, minors: Sequence[int]) -> None:
        """Bring the cards of ``minors`` up to date after an allocation was charged or
        given back (capacity and health do not change)."""
        gpus = state.of_type(k.DEVICE_TYPE_GPU)
        for column, slot in enumerate(gpus):
            if slot.minor not in minors or not slot.healthy:
                continue
            total, used = slot.total, slot.used
            for name in self.names:
                amount = max(total.get(name, 0) - used.get(name, 0), 0)
                grid = self.free[name]
                self.free_sum[name][row] += amount - grid[row, column]
                grid[row, column] = amount


def _demand(per_device: Mapping[str, int], card_memory: int) -> dict[str, int]:
    """The core's ``demand`` for a card of ``card_memory`` bytes (plain requests)."""
    want = {name: amount for name, amount in per_device.items() if amount > 0}
    if card_memory > 0:
        if _MEMORY in want and _RATIO not in want:
            want[_RATIO] = want[_MEMORY] * 100 // card_memory
        elif _RATIO in want and _MEMORY not in want:
            want[_MEMORY] = want[_RATIO] * card_memory // 100
    return want


def _content(device: Device) -> tuple[object, ...]:
    """What the allocator reads of a Device (not the time its agent last reported it)."""
    meta = device.metadata
    return (device.spec.devices, meta.labels, without_reported_at(meta.annotations))


def _width(states: Mapping[str, NodeDeviceState]) -> int:
    return max((len(s.of_type(k.DEVICE_TYPE_GPU)) for s in states.values()), default=0)


class DeviceShare:
    """The ``DeviceShare`` plugin; see the module docstring."""

    name = NAME
    #: PreFilter Skip: the pod asks for no device; nothing to filter, score, allocate or
    #: write for it (see the framework).
    pre_filter_skip_is_final = True

    def __init__(self, args: DeviceSharePluginArgs) -> None:
        self.args = args
        strategy = args.scoring_strategy
        self._weights = strategy.weights
        self._most = strategy.type == MOST_ALLOCATED
        self._names = tuple(sorted(_PLAIN | self._weights.keys()))
        self._templates: SharedTemplates = NO_TEMPLATES
        #: The templates ConfigMap last read (None: there was none).
        self._templates_source: ConfigMap | None = None
        #: node -> its Device (the last one seen when it is gone).
        self._devices: dict[str, Device] = {}
        #: Nodes whose Device went away: their devices stay, unhealthy.
        self._gone: set[str] = set()
        #: node -> pod uid -> the allocation it holds (bound or assumed).
        self._held: dict[str, dict[str, Allocation]] = {}
        #: pod uid -> (node, the pod object last read) for assigned pods.
        self._pods: dict[str, tuple[str, Pod]] = {}
        self._states: dict[str, NodeDeviceState] = {}
        #: node -> allocations held but not yet charged in its state (see ``_charge``).
        self._deferred: dict[str, list[Allocation]] = {}
        self._device_view: Sequence[object] | None = None
        self._pod_view: Sequence[Object] | None = None
        self._names_view: tuple[str, ...] | None = None
        self._arrays = _Arrays(0, 0, self._names)
        #: A pod's requests -> PreFilter's answer, for pods whose requests say it all.
        self._prepared: dict[ResourceList, _PodRequest | Rejection] = {}
        #: The loop's clock at this pass (unix nanoseconds), and the last bind time written.
        self._now_ns = 0
        self._stamped_ns = 0

    def set_time(self, now: datetime) -> None:
        self._now_ns = _unix_ns(now)

    def _bind_time_ns(self) -> int:
        """The pass's time, made strictly later than the last one written: a device plugin
        tells the pods bound to a node apart by it."""
        self._stamped_ns = max(self._now_ns, self._stamped_ns + 1)
        return self._stamped_ns

    # -- cluster state ------------------------------------------------------------------------

    def state(self, node: str) -> NodeDeviceState:
        """The device state of ``node`` (empty when it has no Device)."""
        deferred = self._deferred.pop(node, None)
        if deferred:
            current = self._states.get(node) or NodeDeviceState(node=node)
            for allocation in deferred:
                current = apply(current, allocation)
            self._states[node] = current
        return self._states.get(node) or NodeDeviceState(node=node)

    def _rebuild(self, node: str, table: NodeTable) -> None:
        device = self._devices.get(node)
        row = table.index.get(node)
        labels = table.nodes[row].metadata.labels if row is not None else {}
        state = node_state(device, node=node, node_labels=labels)
        if node in self._gone:
            state = mark_unhealthy(state)
        for allocation in self._held.get(node, {}).values():
            state = apply(state, allocation)
        self._states[node] = state
        self._deferred.pop(node, None)

    def _align(self, table: NodeTable) -> None:
        """Rebuild every node's state and the arrays for the table's rows."""
        self._names_view = table.names
        for name in table.names:
            self._rebuild(name, table)
        self._arrays = _Arrays(len(table), _width(self._states), self._names)
        for row, name in enumerate(table.names):
            self._arrays.fill(row, self.state(name), self.args)

    def _sync_templates(self, snapshot: Snapshot) -> bool:
        """Read the templates ConfigMap; True when the templates changed."""
        config = self.args.gpu_shared_resource_templates_config
        found = snapshot.get(
            _REGISTRY.for_type(ConfigMap), config.config_map_name, config.config_map_namespace
        )
        source = cast("ConfigMap | None", found)
        if source is self._templates_source:
            return False
        self._templates_source = source
        try:
            templates = NO_TEMPLATES if source is None else parse_templates(source.data)
        except TemplateError as err:
            _log.warning(
                "ConfigMap %s/%s: keeping the last good GPU shared resource templates: %s",
                config.config_map_namespace,
                config.config_map_name,
                err,
            )
            return False
        if templates == self._templates:
            return False
        self._templates = templates
        # PreFilter's remembered answers were given against the old templates.
        self._prepared.clear()
        return True

    def sync(self, snapshot: Snapshot, table: NodeTable) -> bool:
        registry = _REGISTRY
        devices = snapshot.objects(registry.for_type(Device))
        pods = snapshot.objects(registry.for_type(Pod))
        dirty: set[str] = set()
        changed = self._sync_templates(snapshot)
        if devices is not self._device_view:
            self._device_view = devices
            seen: set[str] = set()
            for obj in devices:
                device = cast("Device", obj)
                name = device.metadata.name
                seen.add(name)
                known = self._devices.get(name)
                if known is device and name not in self._gone:
                    continue
                self._devices[name] = device
                if name in self._gone or known is None or _content(known) != _content(device):
                    self._gone.discard(name)
                    dirty.add(name)
                    changed = True
            for name in self._devices.keys() - seen - self._gone:
                self._gone.add(name)
                dirty.add(name)
                changed = True
        if pods is not self._pod_view:
            since, self._pod_view = self._pod_view, pods
            changes = snapshot.changes(registry.for_type(Pod), since) if since is not None else None
            dirty |= self._sync_pods(pods, changes)
        if table.names is not self._names_view:
            self._align(table)
            return changed
        for name in dirty:
            self._rebuild(name, table)
        if _width({n: self.state(n) for n in dirty}) > self._arrays.healthy.shape[1]:
            self._names_view = None
            return self.sync(snapshot, table) or changed
        for name in dirty:
            at = table.index.get(name)
            if at is not None:
                self._arrays.fill(at, self.state(name), self.args)
        return changed

    def _sync_pods(
        self, pods: Sequence[Object], changes: Sequence[Change] | None = None
    ) -> set[str]:
        """The nodes whose held devices changed with the pods ``changes`` names (every pod
        in ``pods`` when None)."""
        dirty: set[str] = set()
        present: set[str] = set()
        if changes is None:  # every pod: whatever is not among them is gone
            gone = list(self._pods)
            changes = [(None, obj) for obj in pods]
        else:
            gone = [b.metadata.uid or pod_key(b) for b, _ in changes if isinstance(b, Pod)]
        for _, obj in changes:
            if obj is None:
                continue
            pod = cast("Pod", obj)
            if not is_assigned(pod) or k.ANNOTATION_DEVICE_ALLOCATED not in pod.annotations:
                continue
            uid = pod.metadata.uid or pod_key(pod)
            present.add(uid)
            known = self._pods.get(uid)
            if known is not None and known[1] is pod:
                continue
            node = pod.spec.node_name
            allocation = pod_allocation(pod)
            if known is not None:
                before = self._held.get(known[0], {}).pop(uid, None)
                if known[0] == node and before == allocation:
                    self._pods[uid] = (node, pod)
                    if allocation is not None:
                        self._held[node][uid] = allocation
                    continue
                dirty.add(known[0])
            else:
                # An assumed pod now bound: its allocation is already charged.
                assumed = self._held.get(node, {}).get(uid)
                if assumed is not None and assumed == allocation:
                    self._pods[uid] = (node, pod)
                    continue
            self._pods[uid] = (node, pod)
            if allocation is not None:
                self._held.setdefault(node, {})[uid] = allocation
            dirty.add(node)
        for uid in gone:
            if uid not in self._pods or uid in present:
                continue
            node, _ = self._pods.pop(uid)
            if self._held.get(node, {}).pop(uid, None) is not None:
                dirty.add(node)
        return dirty

    # -- PreFilter ----------------------------------------------------------------------------

    def pre_filter(self, state: fw.CycleState, pod: PodInfo, table: NodeTable) -> fw.Status:
        if _DEVICE_RESOURCES.isdisjoint(pod.requests) and _DEVICE_ANNOTATIONS.isdisjoint(
            pod.pod.annotations
        ):
            # Most pods: nothing for the core to read (it would answer an empty request).
            state.write(NAME, _NOTHING)
            return fw.SKIP
        # Without device annotations or an isolation provider the core reads nothing of the
        # pod but its requests: pods asking the same get the same answer.
        memo_key = (
            pod.requests
            if _DEVICE_ANNOTATIONS.isdisjoint(pod.pod.annotations)
            and k.LABEL_GPU_ISOLATION_PROVIDER not in pod.pod.labels
            else None
        )
        answer = self._prepared.get(memo_key) if memo_key is not None else None
        if answer is None:
            request = prepare(pod.pod, args=self.args, templates=self._templates)
            if isinstance(request, Rejection):
                answer = request
            elif request.empty:
                answer = _NOTHING
            else:
                answer = self._classify(request)
            if memo_key is not None:
                if len(self._prepared) >= _MEMO_LIMIT:
                    self._prepared.clear()
                self._prepared[memo_key] = answer
        state.write(NAME, answer)
        if isinstance(answer, Rejection):
            return fw.Status(_code(answer), (answer.reason,), NAME)
        if answer is _NOTHING:
            return fw.SKIP
        if table.names is not self._names_view:  # the node set changed since the last sync
            self._align(table)
        return fw.SUCCESS

    def _wanted(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable
    ) -> _PodRequest | Rejection | None:
        """PreFilter's answer (worked out here when the profile runs no DeviceShare
        PreFilter); None when the pod asks for no device."""
        if NAME not in state:
            self.pre_filter(state, pod, table)
        wanted = state.get(NAME, _PodRequest) or state.get(NAME, Rejection)
        return None if wanted is _NOTHING else wanted

    def pre_score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Status:
        """Skip (no Score) for a pod asking for no device."""
        return fw.SUCCESS if isinstance(self._wanted(state, pod, table), _PodRequest) else fw.SKIP

    def _classify(self, request: DeviceRequest) -> _PodRequest:
        gpu = request.gpu
        plain = (
            gpu is not None
            and len(request.types) == 1
            and not request.hints
            and request.joint is None
            and request.partition is None
            and request.designated is None
            and not request.isolation_provider
            and not gpu.apply_for_all
            and set(gpu.per_device) <= _PLAIN
            and not (
                gpu.shared
                and needs_template(
                    gpu.per_device,
                    self.args.gpu_shared_resource_templates_config.matched_resources,
                )
            )
        )
        if not plain or gpu is None:
            return _PodRequest(request, False)
        return _PodRequest(request, True, gpu.count, dict(gpu.per_device.nonzero()))

    # -- Filter -------------------------------------------------------------------------------

    def filter(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, candidates: fw.Mask
    ) -> fw.FilterResult:
        wanted = self._wanted(state, pod, table)
        if wanted is None:
            return fw.FilterResult.accept(candidates)
        if isinstance(wanted, Rejection):
            return fw.FilterResult.reject_where(
                candidates, candidates, wanted.reason, _code(wanted)
            )
        arrays = self._arrays
        fixed = arrays.fixed(self._weights)
        failed: dict[tuple[str, fw.Code], fw.Mask] = {}
        live = candidates
        gpu = wanted.request.gpu
        if gpu is not None and fixed.any_no_gpu:
            bare = candidates & fixed.no_gpu
            if bare.any():
                failed[(_NO_GPU, fw.Code.UNSCHEDULABLE_AND_UNRESOLVABLE)] = bare
                live = candidates & ~fixed.no_gpu
        slow: fw.Mask | None = live
        if wanted.plain and gpu is not None:
            quick = fixed.quick_share if gpu.shared else fixed.quick_whole
            # ``live`` holds GPU rows only when some row has none; ``quick`` is those rows
            # (all of them, when every GPU row is quick).
            every_quick = fixed.all_quick_share if gpu.shared else fixed.all_quick_whole
            short = self._enough(wanted)
            np.logical_not(short, out=short)
            short &= (
                live
                if every_quick and (live is not candidates or not fixed.any_no_gpu)
                else live & quick
            )
            if short.any():
                failed[(_NO_GPU, fw.Code.UNSCHEDULABLE)] = short
            slow = None if every_quick else live & ~quick
        for row in np.flatnonzero(slow) if slow is not None else ():
            answer = allocate(
                wanted.request,
                self.state(table.names[row]),
                args=self.args,
                templates=self._templates,
                filtering=True,
            )
            if isinstance(answer, Rejection):
                key = (answer.reason, _code(answer))
                mask = failed.get(key)
                if mask is None:
                    mask = failed[key] = np.zeros(len(candidates), np.bool_)
                mask[row] = True
        if not failed:
            return fw.FilterResult(candidates)
        rejected = np.logical_or.reduce(list(failed.values()))
        rejections = tuple(
            fw.Rejection(reason, code, np.flatnonzero(mask))
            for (reason, code), mask in failed.items()
        )
        return fw.FilterResult(candidates & ~rejected, rejections)

    def _enough(self, wanted: _PodRequest) -> fw.Mask:
        """Per row: whether enough healthy cards can each give the plain request's share.

        A plain request asks a positive amount of something, which an unhealthy card or a
        padding column (nothing free) never has: no health mask is needed.
        """
        arrays = self._arrays
        fits: NDArray[np.bool_] | None = None
        for name, want in self._wants(wanted).items():
            ok = arrays.free[name] >= want
            fits = ok if fits is None else np.logical_and(fits, ok, out=fits)
        assert fits is not None
        if wanted.count == 1:
            if fits.shape[1] == 8 and fits.flags.c_contiguous:
                # Eight booleans are one 64-bit word: any card = a non-zero word.
                return cast("fw.Mask", fits.view(np.uint64)[:, 0] != 0)
            return cast("fw.Mask", fits.any(axis=1))
        return cast("fw.Mask", np.count_nonzero(fits, axis=1) >= wanted.count)

    def _wants(self, wanted: _PodRequest, *, first: bool = False) -> dict[str, Grid | int]:
        """The core's ``demand`` over every row's cards (``first``: over each row's first
        healthy card): a ratio request also takes its memory, a memory request its ratio
        (0 where the card reports no memory). The converted grids are cached per amount
        until the card memories change."""
        per = wanted.per_device or {}
        wants: dict[str, Grid | int] = dict(per)
        if _MEMORY in per and _RATIO not in per:
            wants[_RATIO] = self._arrays.converted(_RATIO, per[_MEMORY], first=first)
        elif _RATIO in per and _MEMORY not in per:
            wants[_MEMORY] = self._arrays.converted(_MEMORY, per[_RATIO], first=first)
        return wants

    # -- Score --------------------------------------------------------------------------------

    def score(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, feasible: fw.Rows
    ) -> fw.Scores:
        wanted = self._wanted(state, pod, table)
        if not isinstance(wanted, _PodRequest):
            return fw.zero_scores(len(feasible))
        if not wanted.plain:
            return np.array(
                [
                    score_node(wanted.request, self.state(table.names[row]), self.args)
                    for row in feasible
                ],
                np.int64,
            )
        arrays = self._arrays
        fixed = arrays.fixed(self._weights)
        wants = self._wants(wanted, first=True)
        if fixed.exact_in_floats and self._within_exact(wants):
            scores = self._plain_scores_in_floats(fixed, wants)
            return scores if len(feasible) == len(table) else scores[feasible]
        total: Grid | None = None
        for name, weight, capacity, divisor in fixed.scored:
            free = arrays.free_sum[name]
            want = wants.get(name, 0)
            if self._most:
                value = np.minimum(capacity - free + want, capacity) * 100 // divisor
            else:
                value = np.maximum(free - want, 0) * 100 // divisor
            if weight != 1:
                value *= weight
            total = value if total is None else total + value
        if total is None:
            return np.zeros(len(feasible), np.int64)
        scores = total // fixed.weight_sums
        return scores if len(feasible) == len(table) else scores[feasible]

    def _within_exact(self, wants: Mapping[str, Grid | int]) -> bool:
        return all(
            (self._arrays.peak(want) if isinstance(want, np.ndarray) else want) < _EXACT_LIMIT
            for want in wants.values()
        )

    def _plain_scores_in_floats(self, fixed: _Fixed, wants: Mapping[str, Grid | int]) -> Grid:
        """The integer path's scores for every row, computed in float64: every amount is
        an integer below 2**50, so each product, difference and sum is exact and each
        floor of a quotient equals the integer division's."""
        arrays = self._arrays
        total: NDArray[np.float64] | None = None
        for (name, weight, capacity, _), divisor in zip(
            fixed.scored, fixed.divisors_f, strict=True
        ):
            free = arrays.free_sum[name]
            want = wants.get(name, 0)
            if self._most:
                value = np.minimum(capacity - free + want, capacity).astype(np.float64)
            else:
                value = np.subtract(free, want, dtype=np.float64)
                np.maximum(value, 0.0, out=value)
            value *= 100.0
            value /= divisor
            np.floor(value, out=value)
            if weight != 1:
                value *= weight
            if total is None:
                total = value
            else:
                total += value
        if total is None:
            return np.zeros(len(arrays.gpus), np.int64)
        total /= fixed.weight_sums_f
        return np.floor(total, out=total).astype(np.int64)

    def normalize(self, state: fw.CycleState, pod: PodInfo, scores: fw.Scores) -> fw.Scores:
        return fw.default_normalize(scores)

    # -- Reserve ------------------------------------------------------------------------------

    def reserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> fw.Status:
        wanted = self._wanted(state, pod, table)
        if not isinstance(wanted, _PodRequest):
            return fw.SUCCESS
        node = table.names[row]
        answer: Allocation | Rejection | None = self._plain_cards(wanted, row, node)
        quick = answer is not None
        if answer is None:
            answer = allocate(
                wanted.request, self.state(node), args=self.args, templates=self._templates
            )
        if isinstance(answer, Rejection):
            return fw.Status(_code(answer), (answer.reason,), NAME)
        self._charge(node, row, pod.uid, answer, quick=quick)
        state.write(f"{NAME}/reserved", _Reserved(row, node, answer))
        return fw.SUCCESS

    def _plain_cards(self, wanted: _PodRequest, row: int, node: str) -> Allocation | None:
        """The core's choice for a plain GPU request on a plain row, worked out over the
        row's arrays; None where the core must choose (several whole cards) or say why not.

        A share takes the cards that can give it, best device score first, then the lowest
        minor. One whole card takes, when every card reports its topology, a fitting card
        of the PCIe switch with the most cards in use (then the lowest NUMA node and switch,
        then the lowest minor), else the best-scoring one as a share does.
        """
        gpu = wanted.request.gpu
        arrays = self._arrays
        if (
            not wanted.plain
            or gpu is None
            or not arrays.plain[row]
            or (gpu.shared and arrays.no_share[row])
            or (not gpu.shared and gpu.count != 1)
        ):
            return None
        # Eight cards or so: plain Python over the row beats numpy's per-call cost here.
        per = gpu.per_device
        memory = arrays.card_memory[row].tolist()
        healthy = arrays.healthy[row].tolist()
        # The names this choice reads: the share's, the scored ones, and ratio and memory
        # (every GPU allocation holds both, so they tell whether a card is in use).
        fixed = arrays.fixed(self._weights)
        names = {*per, *fixed.scored_names, _RATIO, _MEMORY}
        free = {name: arrays.free[name][row].tolist() for name in names}
        capacity = {name: arrays.capacity[name][row].tolist() for name in names}
        fitting: list[tuple[int, int]] = []  # (-score, column)
        wants: dict[int, dict[str, int]] = {}
        # Cards of one size want the same: per card memory, the demand as (free amounts,
        # amount) pairs and the score's terms (weight, capacities, free amounts, demand)
        # over the weighted resources the cards may have, in the weights' order.
        plans: dict[
            int,
            tuple[
                dict[str, int],
                list[tuple[list[int], int]],
                list[tuple[int, list[int], list[int], int]],
            ],
        ] = {}
        most = self._most
        for column, ok in enumerate(healthy):
            if not ok:
                continue
            plan = plans.get(memory[column])
            if plan is None:
                want = _demand(per, memory[column])
                plan = plans[memory[column]] = (
                    want,
                    [(free[name], amount) for name, amount in want.items()],
                    [
                        (weight, capacity[name], free[name], want.get(name, 0))
                        for name, weight in self._weights.items()
                        if name in capacity
                    ],
                )
            want, checks, terms = plan
            wants[column] = want
            if any(frees[column] < amount for frees, amount in checks):
                continue
            # The core's ``device_score`` of the card.
            score = weight_sum = 0
            for weight, capacities, frees, extra in terms:
                total = capacities[column]
                if total <= 0:
                    continue
                requested = total - frees[column] + extra
                if most:
                    value = min(requested, total) * 100 // total
                else:
                    value = 0 if requested > total else (total - requested) * 100 // total
                score += value * weight
                weight_sum += weight
            fitting.append((-(score // weight_sum if weight_sum else 0), column))
        if len(fitting) < gpu.count:
            return None
        cards = arrays.cards[row]
        if not gpu.shared and arrays.topology[row]:
            busy: dict[tuple[int, str], int] = {}
            for column, ok in enumerate(healthy):
                if ok:
                    scope = cards[column][2:]
                    in_use = any(capacity[n][column] != free[n][column] for n in (_RATIO, _MEMORY))
                    busy[scope] = busy.get(scope, 0) + in_use
            best = min(
                (column for _, column in fitting),
                key=lambda c: (-busy[cards[c][2:]], *cards[c][2:], cards[c][0]),
            )
            picked = [best]
        else:
            picked = [column for _, column in sorted(fitting)[: gpu.count]]
        devices = tuple(
            AllocatedDevice(
                minor=cards[column][0],
                resources=ResourceList(wants[column]),
                id=cards[column][1],
            )
            for column in picked
        )
        return Allocation({k.DEVICE_TYPE_GPU: devices})

    def _charge(
        self, node: str, row: int, uid: str, allocation: Allocation, *, quick: bool = False
    ) -> None:
        """Hold ``allocation`` for ``uid`` on the node. ``quick`` (a plain allocation worked
        out over the arrays): the arrays are updated directly and the node state only when
        someone reads it next."""
        held = self._held.setdefault(node, {})
        before = held.pop(uid, None)
        if quick and before is None:
            held[uid] = allocation
            self._arrays.charge(row, allocation)
            self._deferred.setdefault(node, []).append(allocation)
            return
        current = self.state(node)
        if before is not None:
            current = release(current, before)
        held[uid] = allocation
        self._states[node] = apply(current, allocation)
        self._refill(row, node, allocation, before)

    def _refill(self, row: int, node: str, *allocations: Allocation | None) -> None:
        minors = {m for a in allocations if a is not None for m in a.minors(k.DEVICE_TYPE_GPU)}
        if minors:
            self._arrays.refill(row, self._states[node], tuple(minors))

    def unreserve(self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int) -> None:
        reserved = state.get(f"{NAME}/reserved", _Reserved)
        if reserved is None:
            return
        state.delete(f"{NAME}/reserved")
        held = self._held.get(reserved.node, {})
        if held.pop(pod.uid, None) is None:
            return
        self._states[reserved.node] = release(self.state(reserved.node), reserved.allocation)
        if table.index.get(reserved.node) == reserved.row:
            self._refill(reserved.row, reserved.node, reserved.allocation)

    # -- PreBind ------------------------------------------------------------------------------

    def pre_bind(
        self, state: fw.CycleState, pod: PodInfo, table: NodeTable, row: int
    ) -> fw.PreBindResult:
        reserved = state.get(f"{NAME}/reserved", _Reserved)
        if reserved is None or reserved.allocation.empty:
            return fw.PreBindResult(fw.SKIP)
        annotations = {k.ANNOTATION_DEVICE_ALLOCATED: encode_allocation(reserved.allocation)}
        labels: dict[str, str] = {}
        if self.args.device_plugin_adaption:
            node_state_ = self.state(reserved.node)
            try:
                adapted = adapter_annotations(
                    reserved.allocation,
                    vendor=node_state_.vendor,
                    model=node_state_.model,
                    node_name=reserved.node,
                    now_ns=self._bind_time_ns(),
                    isolation_provider=pod.pod.labels.get(k.LABEL_GPU_ISOLATION_PROVIDER, ""),
                )
            except AdaptError as err:
                return fw.PreBindResult(fw.Status.of(fw.Code.ERROR, str(err), plugin=NAME))
            annotations.update(adapted.annotations)
            labels.update(adapted.labels)
        return fw.PreBindResult(annotations=annotations, labels=labels)
