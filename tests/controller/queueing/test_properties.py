"""Hypothesis properties of admission through the ``queueing`` loop, over random quota trees
(two levels, 2-5 leaves, random min/max) and random admit / finish / delete sequences:

(a) at no level does what the store's units hold exceed the quota's max;
(b) a quota whose whole demand is within its min has every unit admitted after one settle
    (reclaim takes borrowed room back, with no minimum runtime);
(c) the ledger holds exactly one charge per holding unit, equal to what its
    ``status.admissions`` hold, and every quota's used equals the sum over its subtree, also
    after a restarted loop took over the store.
"""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from apis import constants as k
from apis.queueing import QueueUnit
from controller.queueing import phases
from controller.queueing.loop import QueueingLoop
from controller.store.sqlite import Store
from tests.controller.queueing.conftest import Clock, Harness, cores

CPU = "cpu"


@dataclass(frozen=True)
class Leaf:
    name: str
    parent: str
    min: int  # cores
    max: int


@dataclass(frozen=True)
class Tree:
    parents: dict[str, int]  # name -> max cores
    leaves: tuple[Leaf, ...]


@st.composite
def trees(draw: st.DrawFn, *, tight: bool = False) -> Tree:
    """Parents over 2-5 leaves; ``tight``: a parent's max is close to the sum of its
    children's mins and every leaf may borrow up to its parent's max."""
    parent_count = draw(st.integers(1, 2))
    leaf_count = draw(st.integers(max(2, parent_count), 5))
    shapes = [
        (f"leaf-{n}", f"dept-{n % parent_count}", draw(st.integers(0, 4)))
        for n in range(leaf_count)
    ]
    parents: dict[str, int] = {}
    for p in range(parent_count):
        name = f"dept-{p}"
        mins = sum(floor for _, parent, floor in shapes if parent == name)
        parents[name] = max(1, mins + draw(st.integers(0, 2 if tight else 6)))
    leaves = tuple(
        Leaf(
            name,
            parent,
            floor,
            parents[parent] if tight else draw(st.integers(max(floor, 1), 8)),
        )
        for name, parent, floor in shapes
    )
    return Tree(parents, leaves)


#: One step: ("add", leaf, cores, priority), or ("finish" | "delete", which unit, 0, 0).
Step = tuple[str, int, int, int]
steps = st.one_of(
    st.tuples(st.just("add"), st.integers(0, 4), st.integers(1, 4), st.integers(0, 3)),
    st.tuples(st.sampled_from(["finish", "delete"]), st.integers(0, 30), st.just(0), st.just(0)),
)


def build(harness: Harness, tree: Tree, policy: str = "Priority") -> None:
    harness.node("n1", cores(sum(tree.parents.values())))
    for name, cap in tree.parents.items():
        # A parent's min covers its children's (admission holds a tree to that).
        floor = sum(leaf.min for leaf in tree.leaves if leaf.parent == name)
        harness.quota(name, max=cores(cap), min=cores(floor), is_parent=True)
    for leaf in tree.leaves:
        harness.quota(
            leaf.name,
            min=cores(leaf.min),
            max=cores(leaf.max),
            parent=leaf.parent,
            labels={k.LABEL_QUEUE_POLICY: policy},
        )


def charge(unit: QueueUnit) -> int:
    """Millicores the unit's admissions hold (0 when it holds nothing)."""
    if unit.status.phase in phases.FINISHED_PHASES:
        return 0
    per_replica = {
        p.name: p.template.spec.containers[0].resources.requests[CPU] for p in unit.spec.pod_set
    }
    return sum(a.replicas * per_replica[a.name] for a in unit.status.admissions)


def held_by_quota(harness: Harness, tree: Tree) -> dict[str, int]:
    """Quota -> millicores held in its subtree, from the store's units alone."""
    parent_of = {leaf.name: leaf.parent for leaf in tree.leaves}
    held = dict.fromkeys([*tree.parents, *parent_of], 0)
    for unit in harness.units():
        amount = charge(unit)
        quota = unit.metadata.labels[k.LABEL_QUOTA_NAME]
        held[quota] += amount
        held[parent_of[quota]] += amount
    return held


def run(harness: Harness, tree: Tree, plan: list[Step], policy: str, restart_at: int) -> None:
    """Apply the plan, settling the loop after every step and checking after each; at step
    ``restart_at`` a new loop (a restarted controller) takes over the same store."""
    build(harness, tree, policy)
    harness.settle()
    created: list[str] = []
    for number, step in enumerate(plan):
        if number == restart_at:
            harness.loop = QueueingLoop(rand=lambda: 0.5)
        kind, which, size, priority = step
        if kind == "add":
            name = f"u{number}"
            harness.unit(
                name,
                quota=tree.leaves[which % len(tree.leaves)].name,
                cpu_m=size * 1000,
                priority=priority,
                created=number,
            )
            created.append(name)
        elif created:
            name = created[which % len(created)]
            if kind == "delete":
                created.remove(name)
                harness.delete(name)
            elif harness.phase(name) not in phases.FINISHED_PHASES:
                harness.finish(name)
        harness.settle()
        yield_checks(harness, tree)


def yield_checks(harness: Harness, tree: Tree) -> None:
    held = held_by_quota(harness, tree)
    caps = {**tree.parents, **{leaf.name: leaf.max for leaf in tree.leaves}}
    # (a) no level over max
    for quota, amount in held.items():
        assert amount <= caps[quota] * 1000, (quota, amount, caps[quota])
    # (c) the ledger is exactly what the units hold, one charge per holding unit
    ledger = harness.loop.engine.ledger
    for quota, amount in held.items():
        assert ledger.used(quota).get(CPU, 0) == amount, quota
    holding = {u.metadata.uid: charge(u) for u in harness.units() if charge(u)}
    charged = {
        holder: c.amounts.get(CPU, 0)
        for holder in ledger.holders()
        if (c := ledger.charge_of(holder)) is not None and c.amounts.get(CPU, 0)
    }
    assert charged == holding


def within_min_admitted(harness: Harness, tree: Tree) -> None:
    """(b): every leaf whose whole demand fits its min has all its units admitted."""
    demand: dict[str, int] = {}
    waiting: dict[str, list[str]] = {}
    for unit in harness.units():
        if unit.status.phase in phases.FINISHED_PHASES:
            continue
        quota = unit.metadata.labels[k.LABEL_QUOTA_NAME]
        size = unit.spec.pod_set[0].template.spec.containers[0].resources.requests[CPU]
        demand[quota] = demand.get(quota, 0) + size
        if not unit.status.admissions:
            waiting.setdefault(quota, []).append(unit.metadata.name)
    for leaf in tree.leaves:
        if demand.get(leaf.name, 0) <= leaf.min * 1000:
            assert not waiting.get(leaf.name), (leaf, waiting.get(leaf.name))


SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@SETTINGS
@given(
    tree=trees(),
    plan=st.lists(steps, min_size=1, max_size=12),
    policy=st.sampled_from(["Priority", "Block", "Intelligent"]),
    restart_at=st.integers(0, 15),
)
def test_usage_never_exceeds_max_and_the_ledger_matches_the_units(
    tree: Tree, plan: list[Step], policy: str, restart_at: int
) -> None:
    clock = Clock()
    with Store(clock=clock) as store:
        run(Harness(store, clock), tree, plan, policy, restart_at)


borrowing = st.lists(
    st.tuples(st.integers(0, 4), st.integers(1, 4), st.integers(0, 3)), min_size=1, max_size=8
)


@SETTINGS
@given(
    tree=trees(tight=True),
    borrowers=borrowing,
    hungry=st.integers(0, 4),
    sizes=st.lists(st.integers(1, 2), min_size=1, max_size=4),
    at_once=st.booleans(),
)
def test_a_quota_within_its_min_gets_it_back_at_once(
    tree: Tree,
    borrowers: list[tuple[int, int, int]],
    hungry: int,
    sizes: list[int],
    at_once: bool,
) -> None:
    leaves = tree.leaves
    target = leaves[hungry % len(leaves)]
    assume(target.min > 0)
    clock = Clock()
    with Store(clock=clock) as store:
        harness = Harness(store, clock, reclaim_min_runtime=0)
        build(harness, tree)
        # Borrowers sit beside the hungry quota, so they take the room it is guaranteed.
        siblings = [q for q in leaves if q.parent == target.parent and q != target] or [
            q for q in leaves if q != target
        ]
        for number, (leaf, size, priority) in enumerate(borrowers):
            quota = siblings[leaf % len(siblings)]
            harness.unit(
                f"b{number}", quota=quota.name, cpu_m=size * 1000, priority=priority, created=number
            )
        harness.settle()
        total = 0
        for number, size in enumerate(sizes):
            if total + size > target.min:
                break
            total += size
            harness.unit(
                f"h{number}", quota=target.name, cpu_m=size * 1000, priority=0, created=100 + number
            )
            if not at_once:
                harness.settle()
        harness.settle()
        within_min_admitted(harness, tree)
        yield_checks(harness, tree)
