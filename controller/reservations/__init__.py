"""Reservations: resources held on a node for the pods that own them (controller-spec §1).

Pure functions and frozen values the scheduler's Reservation plugin calls, and the lifecycle
controller:

- :mod:`.owners` — who may consume a reservation (object, controller, label selector).
- :mod:`.affinity` — the pod-side annotations and the per-reservation match decision (§1.4-1.5).
- :mod:`.reserve_pod` — the scheduler's pod view of a Reservation (§1.3).
- :mod:`.accounting` — node fit, allocate-policy fit, scoring and nomination (§1.6-1.7).
- :mod:`.preallocation` — candidates and selection for pre-allocation (§1.8).
- :mod:`.controller` — phases, owners, expiry and garbage collection (§1.2).
- :mod:`.args` — ``ReservationArgs`` (§1.9).
"""

from __future__ import annotations

__all__ = ["AnnotationError"]


class AnnotationError(ValueError):
    """An annotation of a pod or reservation that does not parse; names the key and why."""

    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"annotation {key}: {reason}")
        self.key = key
        self.reason = reason
