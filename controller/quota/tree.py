"""The runtime quota of the ElasticQuota tree: what each quota may use now (controller-spec
§4.2, §4.3; queue-spec §7.3).

:meth:`QuotaTree.build` reads the quotas' places and settings once (it is rebuilt when a quota
changes); :meth:`QuotaTree.runtime` turns per-leaf requests and the cluster total into every
quota's runtime (it is recomputed whenever demand changes). Both are pure.

**Requests, bottom up.** A quota's request is its own (the caller's figure for a leaf) plus,
for a parent, its *child request*: the sum of its children's limited requests. A quota that
does not lend (label ``allow-lent-resource: "false"``) asks for at least its min; the limited
request caps that at ``max`` per resource (a resource missing from ``max`` is not capped).

**Runtime, top down.** The children of the root share ``total``; the children of any other
quota share that quota's runtime. Every resource is shared on its own, in integers:

1. a child whose (capped, not raised) request is above its effective min is *hungry* and
   starts at that min; any other child starts at its request when it lends, at its min when
   it does not;
2. what is left of the parent's amount is dealt to the hungry children in proportion to
   their shared weights by the largest-remainder method (ties go to the name that sorts
   first); a child given its request or more keeps its request and the excess is dealt
   again among those still hungry, until nothing is left or nobody is hungry. When the
   starting amounts already use the whole parent amount, nothing is dealt (their sum may
   then be above it).

The effective min is ``min`` capped at ``max``; with min scaling on, when the children's mins
add up to more than the parent's amount, each child's effective min is its share of that
amount in proportion to its min (rounded down). The shared weight is the
``shared-weight`` annotation (a JSON ResourceList); a resource it does not name, names with
zero, or an annotation that is missing or not valid stands for the quota's ``max`` of that
resource. When every hungry child weighs zero in a resource, they share it equally.

The resources shared are the names in any quota's ``max``; a request for any other resource
is left out. ``koordinator-system-quota`` and ``koordinator-default-quota`` take no part in
the sharing: their runtime is their ``max`` (the caller subtracts their usage from the total
it passes). So is any quota the root cannot reach (a parent that does not exist, a cycle of
parent labels). The root's runtime is the total itself.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Final

from apis import constants as k
from apis.bounded import decode_any, excerpt
from apis.quantity import QuantityError
from apis.quota import ElasticQuota
from apis.resources import ResourceList
from controller.quota.check import QuotaIndex

__all__ = ["QuotaTree", "RuntimeQuota", "largest_remainder", "share_level", "shared_weight"]

log = logging.getLogger(__name__)

_NO_RESOURCES: Final = ResourceList()
#: Quotas whose runtime is their max: they are outside the fair share.
_OUTSIDE: Final = frozenset({k.QUOTA_SYSTEM, k.QUOTA_DEFAULT})


# --- the sharing of one resource among the children of one parent -------------------------------


def largest_remainder(amount: int, weights: list[int]) -> list[int]:
    """``amount`` split in proportion to ``weights`` (Hamilton's method, exact integers):
    every part is rounded down and the parts with the largest remainders get one more; of
    equal remainders the earlier position wins. ``amount`` >= 0, at least one weight > 0."""
    whole = sum(weights)
    parts: list[int] = []
    remainders: list[int] = []
    for weight in weights:
        part, remainder = divmod(amount * weight, whole)
        parts.append(part)
        remainders.append(remainder)
    left = amount - sum(parts)
    if left:
        # A stable sort keeps equal remainders in position order, reversed or not.
        ranked = sorted(range(len(parts)), key=remainders.__getitem__, reverse=True)
        for position in ranked[:left]:
            parts[position] += 1
    return parts


def _scaled_mins(total: int, mins: tuple[int, ...]) -> tuple[int, ...]:
    """Each min's share of ``total`` in proportion to the mins when they add up to more."""
    whole = sum(mins)
    if whole <= total:
        return mins
    if total <= 0:
        return tuple(0 for _ in mins)
    return tuple(total * value // whole for value in mins)


def share_level(
    total: int,
    *,
    mins: tuple[int, ...],
    requests: list[int],
    weights: tuple[int, ...],
    lends: tuple[bool, ...],
    scale_min: bool = True,
) -> list[int]:
    """The runtime of each child of one parent in one resource (steps 1 and 2 of the module
    docstring). The children are given in name order; ``requests`` are capped at max and
    ``mins`` at max already."""
    if scale_min:
        mins = _scaled_mins(total, mins)
    runtime: list[int] = []
    hungry: list[int] = []
    for position, request in enumerate(requests):
        floor = mins[position]
        if request > floor:
            runtime.append(floor)
            hungry.append(position)
        else:
            runtime.append(request if lends[position] else floor)
    rest = total - sum(runtime)
    while rest > 0 and hungry:
        hungry_weights = [weights[position] for position in hungry]
        if not any(hungry_weights):
            hungry_weights = [1] * len(hungry)
        shares = largest_remainder(rest, hungry_weights)
        rest = 0
        still: list[int] = []
        for position, share in zip(hungry, shares, strict=True):
            given = runtime[position] + share
            request = requests[position]
            if given >= request:
                rest += given - request
                runtime[position] = request
            else:
                runtime[position] = given
                still.append(position)
        hungry = still
    return runtime


# --- the tree ----------------------------------------------------------------------------------


def shared_weight(quota: ElasticQuota) -> ResourceList:
    """The quota's shared weight per resource of its ``max`` (see the module docstring)."""
    text = quota.metadata.annotations.get(k.ANNOTATION_QUOTA_SHARED_WEIGHT, "")
    declared = _NO_RESOURCES
    if text:
        try:
            raw = decode_any(text, k.ANNOTATION_QUOTA_SHARED_WEIGHT)
            declared = ResourceList.parse(raw) if isinstance(raw, dict) else _NO_RESOURCES
        except (ValueError, QuantityError):
            log.debug("quota %s: shared weight %s is not a ResourceList", quota.name, excerpt(text))
    weights = dict(quota.spec.max)
    weights.update({name: amount for name, amount in declared.items() if amount > 0})
    return ResourceList(weights)


@dataclass(frozen=True, slots=True)
class _Level:
    """A parent and its children in name order, with what the sharing needs of them."""

    parent: str
    children: tuple[str, ...]
    lends: tuple[bool, ...]
    #: resource -> the children's mins (capped at their max) / shared weights.
    mins: Mapping[str, tuple[int, ...]]
    weights: Mapping[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class _Member:
    min: Mapping[str, int]
    max: Mapping[str, int]
    lends: bool
    children: tuple[str, ...]


class _Resources(Mapping[str, ResourceList]):
    """Amounts by quota, each made a ResourceList when first read (most are never read)."""

    __slots__ = ("_made", "_raw")

    def __init__(self, raw: Mapping[str, Mapping[str, int]]) -> None:
        self._raw = raw
        self._made: dict[str, ResourceList] = {}

    def __getitem__(self, name: str) -> ResourceList:
        made = self._made.get(name)
        if made is None:
            raw = self._raw[name]
            made = self._made[name] = raw if isinstance(raw, ResourceList) else ResourceList(raw)
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._raw)

    def __len__(self) -> int:
        return len(self._raw)

    def __contains__(self, name: object) -> bool:
        return name in self._raw


class _MaskedRuntime(Mapping[str, ResourceList]):
    """:meth:`RuntimeQuota.of` for every quota, computed when first asked for."""

    __slots__ = ("_made", "_quota")

    def __init__(self, quota: RuntimeQuota) -> None:
        self._quota = quota
        self._made: dict[str, ResourceList] = {}

    def __getitem__(self, name: str) -> ResourceList:
        made = self._made.get(name)
        if made is None:
            if name not in self._quota.runtime:
                raise KeyError(name)
            made = self._made[name] = self._quota.of(name)
        return made

    def __iter__(self) -> Iterator[str]:
        return iter(self._quota.runtime)

    def __len__(self) -> int:
        return len(self._quota.runtime)

    def __contains__(self, name: object) -> bool:
        return name in self._quota.runtime


@dataclass(frozen=True, slots=True)
class RuntimeQuota:
    """The runtime (and the requests behind it) of every quota of a :class:`QuotaTree`."""

    #: Every quota of the tree (parents, the root and the built-in quotas included), over
    #: every shared resource.
    runtime: Mapping[str, ResourceList]
    #: The limited request of every quota: what it asks of its parent.
    request: Mapping[str, ResourceList]
    #: Parents only: the sum of their children's limited requests.
    child_request: Mapping[str, ResourceList] = field(default_factory=dict)
    #: The names of each quota's ``max``: :meth:`of` masks the runtime to them.
    max_keys: Mapping[str, frozenset[str]] = field(default_factory=dict)

    def of(self, name: str) -> ResourceList:
        """The runtime of ``name`` over the resources of its own ``max`` (nothing for a quota
        the tree does not hold)."""
        runtime = self.runtime.get(name)
        if runtime is None:
            return _NO_RESOURCES
        keys = self.max_keys.get(name, frozenset())
        if len(keys) == len(runtime) and all(key in keys for key in runtime):
            return runtime
        return runtime.mask(keys)

    def limits(self) -> Mapping[str, ResourceList]:
        """:meth:`of` for every quota, as a mapping (each entry made on first use)."""
        return _MaskedRuntime(self)


@dataclass(frozen=True, slots=True)
class QuotaTree:
    """The shape and settings of the quota tree, ready for :meth:`runtime`."""

    #: The shared resources: every name in any quota's ``max``, sorted.
    resources: tuple[str, ...]
    #: Quotas of the fair share (the root included).
    members: Mapping[str, _Member]
    #: Parents with children, each after its own parent.
    levels: tuple[_Level, ...]
    #: Every fair-share quota, each after all of its children (the root last).
    bottom_up: tuple[str, ...]
    #: Quotas outside the fair share, with their runtime (= their max).
    outside: Mapping[str, ResourceList]
    max_keys: Mapping[str, frozenset[str]]
    scale_min: bool = True

    @classmethod
    def build(cls, index: QuotaIndex, *, enable_min_quota_scale: bool = True) -> QuotaTree:
        resources = tuple(sorted({name for q in index.by_name.values() for name in q.spec.max}))
        members: dict[str, _Member] = {}
        weights: dict[str, ResourceList] = {}
        bottom_up: list[str] = []
        levels: list[_Level] = []
        # Depth first from the root; a quota is placed after its children.
        stack: list[tuple[str, bool]] = [(k.QUOTA_ROOT, False)]
        while stack:
            name, expanded = stack.pop()
            if expanded:
                bottom_up.append(name)
                continue
            quota = index.by_name[name]
            # Each quota has one parent, so what the root reaches is a tree.
            kids = tuple(
                child
                for child in index.children.get(name, ())
                if child in index.by_name and child not in _OUTSIDE
            )
            max_ = quota.spec.max
            members[name] = _Member(
                min={
                    r: min(amount, max_[r]) if r in max_ else amount
                    for r, amount in quota.spec.min.items()
                },
                max=dict(max_),
                lends=quota.metadata.labels.get(k.LABEL_QUOTA_ALLOW_LENT_RESOURCE) != "false",
                children=kids,
            )
            weights[name] = shared_weight(quota)
            stack.append((name, True))
            stack.extend((child, False) for child in reversed(kids))
        for name in reversed(bottom_up):
            kids = members[name].children
            if not kids:
                continue
            levels.append(
                _Level(
                    parent=name,
                    children=kids,
                    lends=tuple(members[c].lends for c in kids),
                    mins={r: tuple(members[c].min.get(r, 0) for c in kids) for r in resources},
                    weights={r: tuple(weights[c].get(r, 0) for c in kids) for r in resources},
                )
            )
        outside = {
            name: quota.spec.max for name, quota in index.by_name.items() if name not in members
        }
        return cls(
            resources=resources,
            members=members,
            levels=tuple(levels),
            bottom_up=tuple(bottom_up),
            outside=outside,
            max_keys={name: frozenset(q.spec.max) for name, q in index.by_name.items()},
            scale_min=enable_min_quota_scale,
        )

    def runtime(
        self, requests: Mapping[str, Mapping[str, int]], total: Mapping[str, int]
    ) -> RuntimeQuota:
        """Every quota's runtime for these leaf ``requests`` (quota -> its own request) and
        the ``total`` the root's children share."""
        resources = self.resources
        members = self.members
        #: What each quota asks of its parent (raised to min without lending, capped at max).
        asked: dict[str, dict[str, int]] = {}
        #: What the sharing reads: the request capped at max, not raised.
        capped: dict[str, dict[str, int]] = {}
        child_request: dict[str, Mapping[str, int]] = {}
        for name in self.bottom_up:
            member = members[name]
            own = requests.get(name)
            amounts = {r: own.get(r, 0) for r in resources} if own else dict.fromkeys(resources, 0)
            if member.children:
                summed = dict.fromkeys(resources, 0)
                for child in member.children:
                    for r, amount in asked[child].items():
                        summed[r] += amount
                child_request[name] = summed
                for r in resources:
                    amounts[r] += summed[r]
            max_ = member.max
            for r, cap in max_.items():
                if amounts.get(r, 0) > cap:
                    amounts[r] = cap
            capped[name] = amounts
            if member.lends:
                asked[name] = amounts
            else:
                raised = dict(amounts)
                for r, floor in member.min.items():
                    if r in raised and raised[r] < floor:
                        raised[r] = floor
                asked[name] = raised
        root_total = {r: total.get(r, 0) for r in resources}
        runtimes: dict[str, dict[str, int]] = {k.QUOTA_ROOT: root_total}
        for level in self.levels:
            kids = level.children
            shares = {kid: dict.fromkeys(resources, 0) for kid in kids}
            for r in resources:
                parts = share_level(
                    runtimes[level.parent][r],
                    mins=level.mins[r],
                    requests=[capped[kid][r] for kid in kids],
                    weights=level.weights[r],
                    lends=level.lends,
                    scale_min=self.scale_min,
                )
                for kid, part in zip(kids, parts, strict=True):
                    shares[kid][r] = part
            runtimes.update(shares)
        runtime: dict[str, Mapping[str, int]] = dict(runtimes)
        request: dict[str, Mapping[str, int]] = dict(asked)
        for name, max_ in self.outside.items():
            runtime[name] = max_
            own = requests.get(name) or {}
            request[name] = {
                r: min(own.get(r, 0), max_[r]) if r in max_ else own.get(r, 0) for r in resources
            }
        return RuntimeQuota(
            runtime=_Resources(runtime),
            request=_Resources(request),
            child_request=_Resources(child_request),
            max_keys=self.max_keys,
        )
