"""Replaying a manual page whose steps wait for the cluster: "once the pod runs, create ...",
as one ``koordpy simulate`` run. (A page played step by step, looking at the objects between
steps, is simpler with :class:`tests.manuals.replay.Cluster`.)

:func:`replay_in_stages` runs ``koordpy simulate`` over the first documents with one more
control loop, the user, who applies each :class:`Stage`'s documents once its condition holds
(the stages in order, each once). The documents a stage applies may depend on what the cluster
looks like then (the node a pod landed on), so they are made by a function of the store.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from apis.core import Pod
from controller import simulate as sim
from controller.loops import LOOPS, LoopContext
from controller.store import Store
from tests.manuals.replay import Outcome

__all__ = ["Stage", "pod_running", "replay_in_stages", "running_pod"]

Condition = Callable[[Store, datetime], bool]


def _always(store: Store, now: datetime) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """Apply ``documents(store, now)`` (YAML texts) once ``delay`` seconds have passed since the
    previous stage (or the start) and ``when(store, now)`` holds."""

    documents: Callable[[Store, datetime], Sequence[str]]
    when: Condition = _always
    delay: float = 0.0


def running_pod(store: Store, name: str, namespace: str = "default") -> Pod | None:
    """The pod ``namespace/name`` when it runs on a node."""
    kind = store.registry.for_type(Pod)
    if not store.exists(kind, name, namespace):
        return None
    pod = store.get(kind, name, namespace)
    if isinstance(pod, Pod) and pod.spec.node_name and pod.status.phase == "Running":
        return pod
    return None


def pod_running(name: str, namespace: str = "default") -> Condition:
    """The condition "pod ``namespace/name`` runs"."""
    return lambda store, now: running_pod(store, name, namespace) is not None


class _User:
    """The control loop that plays the user."""

    name = "user"

    def __init__(self, stages: Sequence[Stage]) -> None:
        self._stages = list(stages)
        self._since: datetime | None = None

    def reconcile(self, ctx: LoopContext) -> float | None:
        now = ctx.now()
        if self._since is None:
            self._since = now
        while self._stages:
            stage = self._stages[0]
            due = self._since + timedelta(seconds=stage.delay)
            if now < due:
                return (due - now).total_seconds()
            if not stage.when(ctx.store, now):
                return None
            for text in stage.documents(ctx.store, now):
                for obj in sim.scenario_objects(text, source="stage"):
                    ctx.store.apply(obj)
            self._stages.pop(0)
            self._since = now
        return None


def replay_in_stages(
    first: Sequence[str], stages: Sequence[Stage], *, max_time: timedelta = timedelta(hours=1)
) -> Outcome:
    """Simulate ``first``, applying each stage's documents as it comes due."""
    objects = sim.scenario_objects("\n---\n".join(first), source="manual")
    user = _User(stages)
    result = sim.simulate(objects, max_time=max_time, loops={**LOOPS, "user": lambda: user})
    return Outcome(result)
