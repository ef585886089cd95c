"""What every quota holds, charge by charge (queue-spec §7.1, with the accounting fixed).

A charge is stored per holder (a QueueUnit's uid, or a pod's for usage outside the queue)
together with the quota path it was added along, and released by subtracting exactly what was
stored: a unit's charge is never recomputed from a spec that changed meanwhile, so nothing is
released twice or left behind. ``used`` of a quota is the sum over its subtree (the quota and
every ancestor below the root receive each charge); ``non_preemptible_used`` likewise for
non-preemptible holders; the pseudo resource ``kube-queue/max-jobs`` counts holding units.

Every release bumps the version of each quota on its path (:meth:`QuotaLedger.version`), which
is how the engine knows that a unit refused for lack of room in a quota may fit now.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

__all__ = ["Charge", "QuotaLedger"]

Vector = Mapping[str, int]


@dataclass(frozen=True, slots=True)
class Charge:
    quota: str
    #: The quota and its ancestors below the root, at the time of charging.
    path: tuple[str, ...]
    amounts: Mapping[str, int]
    non_preemptible: bool


class QuotaLedger:
    """Charges by holder and the used amount of every quota (subtree sums)."""

    def __init__(self, path_of: Callable[[str], tuple[str, ...]]) -> None:
        self._path_of = path_of
        self._charges: dict[str, Charge] = {}
        self._used: dict[str, dict[str, int]] = {}
        self._np_used: dict[str, dict[str, int]] = {}
        self._versions: dict[str, int] = {}
        #: Quotas whose used went down since :meth:`take_released` was last called.
        self._released: set[str] = set()

    # -- reads --------------------------------------------------------------------------------

    def used(self, quota: str) -> Mapping[str, int]:
        return self._used.get(quota, {})

    def non_preemptible_used(self, quota: str) -> Mapping[str, int]:
        return self._np_used.get(quota, {})

    def charge_of(self, holder: str) -> Charge | None:
        return self._charges.get(holder)

    def version(self, quota: str) -> int:
        return self._versions.get(quota, 0)

    def holders(self) -> Iterable[str]:
        return self._charges.keys()

    def __len__(self) -> int:
        return len(self._charges)

    # -- writes -------------------------------------------------------------------------------

    def _apply(self, charge: Charge, sign: int) -> None:
        amounts = charge.amounts
        for quota in charge.path:
            used = self._used.get(quota)
            if used is None:
                used = self._used[quota] = {}
            for name, amount in amounts.items():
                used[name] = used.get(name, 0) + sign * amount
            if charge.non_preemptible:
                pinned = self._np_used.setdefault(quota, {})
                for name, amount in amounts.items():
                    pinned[name] = pinned.get(name, 0) + sign * amount
            if sign < 0:
                self._versions[quota] = self._versions.get(quota, 0) + 1
                self._released.add(quota)

    def charge(
        self, holder: str, quota: str, amounts: Vector, *, non_preemptible: bool = False
    ) -> None:
        """Make ``holder``'s charge ``amounts`` in ``quota`` (replacing what it held)."""
        before = self._charges.get(holder)
        if (
            before is not None
            and before.quota == quota
            and before.amounts == amounts
            and before.non_preemptible == non_preemptible
        ):
            return
        if before is not None:
            self._apply(before, -1)
            del self._charges[holder]
        if not amounts:
            return
        charge = Charge(
            quota=quota,
            path=self._path_of(quota),
            amounts=dict(amounts),
            non_preemptible=non_preemptible,
        )
        self._charges[holder] = charge
        self._apply(charge, 1)

    def release(self, holder: str) -> Charge | None:
        """Release exactly what ``holder`` was charged; what that was (None if nothing)."""
        charge = self._charges.pop(holder, None)
        if charge is not None:
            self._apply(charge, -1)
        return charge

    def rebuild(self, path_of: Callable[[str], tuple[str, ...]]) -> None:
        """The quota tree changed: re-add every charge along its quota's new path."""
        self._path_of = path_of
        charges = self._charges
        self._charges = {}
        self._used.clear()
        self._np_used.clear()
        for holder, charge in charges.items():
            self.charge(
                holder, charge.quota, charge.amounts, non_preemptible=charge.non_preemptible
            )
        for quota in self._versions:
            self._versions[quota] += 1
        self._released.update(self._versions)

    def take_released(self) -> set[str]:
        """Quotas whose used went down since the last call (and forget them)."""
        released = self._released
        self._released = set()
        return released
