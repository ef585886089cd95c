"""Owner matching: which pods may consume a reservation (controller-spec §1.1).

Owners are ORed; inside one owner the fields that are set are ANDed:

- ``object``: each non-empty of ``uid``, ``name``, ``namespace``, ``apiVersion`` equals the
  pod's (``kind``, ``resourceVersion`` and ``fieldPath`` are ignored);
- ``controller``: its ``namespace``, when set, equals the pod's; then some owner reference of
  the pod matches each non-empty of ``uid``, ``name``, ``kind``, ``apiVersion`` and, when set,
  the ``controller`` flag (``blockOwnerDeletion`` is ignored);
- ``labelSelector``: the pod's labels match it.

An owner with no field set (``{}``) matches every pod; no owners at all match nothing. A label
selector that does not parse makes the whole reservation unmatchable: :attr:`Owners.error`
holds the reason and :meth:`Owners.matches` is always false.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from apis.core import Pod
from apis.labels import Selector, SelectorError
from apis.meta import ObjectReference, OwnerReference
from apis.scheduling import Reservation, ReservationControllerReference, ReservationOwner

__all__ = ["OwnerMatcher", "Owners", "compile_owners", "owners_of"]


def _object_matches(want: ObjectReference, pod: Pod) -> bool:
    meta = pod.metadata
    return (
        (not want.uid or want.uid == meta.uid)
        and (not want.name or want.name == meta.name)
        and (not want.namespace or want.namespace == meta.namespace)
        and (not want.api_version or want.api_version == pod.api_version)
    )


def _reference_matches(want: ReservationControllerReference, ref: OwnerReference) -> bool:
    return (
        (not want.uid or want.uid == ref.uid)
        and (not want.name or want.name == ref.name)
        and (not want.kind or want.kind == ref.kind)
        and (not want.api_version or want.api_version == ref.api_version)
        and (want.controller is None or want.controller == ref.controller)
    )


def _controller_matches(want: ReservationControllerReference, pod: Pod) -> bool:
    if want.namespace and want.namespace != pod.metadata.namespace:
        return False
    return any(_reference_matches(want, ref) for ref in pod.metadata.owner_references)


@dataclass(frozen=True, slots=True)
class OwnerMatcher:
    """One owner entry, its label selector parsed."""

    object: ObjectReference | None = None
    controller: ReservationControllerReference | None = None
    selector: Selector | None = None

    def matches(self, pod: Pod) -> bool:
        if self.object is not None and not _object_matches(self.object, pod):
            return False
        if self.controller is not None and not _controller_matches(self.controller, pod):
            return False
        return self.selector is None or self.selector.matches(pod.metadata.labels)


@dataclass(frozen=True, slots=True)
class Owners:
    """The compiled owners of one reservation."""

    matchers: tuple[OwnerMatcher, ...] = ()
    #: Why the owners cannot be used (a label selector that does not parse); empty when fine.
    error: str = ""

    def matches(self, pod: Pod) -> bool:
        if self.error:
            return False
        return any(m.matches(pod) for m in self.matchers)

    @property
    def has_label_selector(self) -> bool:
        return any(m.selector is not None for m in self.matchers)


def compile_owners(owners: Sequence[ReservationOwner]) -> Owners:
    """Parse every owner's label selector once; a parse error makes all of them unmatchable."""
    matchers: list[OwnerMatcher] = []
    for index, owner in enumerate(owners):
        selector: Selector | None = None
        if owner.label_selector is not None:
            try:
                selector = Selector.from_label_selector(owner.label_selector)
            except SelectorError as err:
                return Owners(error=f"owners[{index}].labelSelector: {err}")
        matchers.append(
            OwnerMatcher(object=owner.object, controller=owner.controller, selector=selector)
        )
    return Owners(tuple(matchers))


def owners_of(reservation: Reservation) -> Owners:
    """The compiled ``spec.owners`` of ``reservation``."""
    return compile_owners(reservation.spec.owners)
