"""Which pods a descheduler plugin may pick: ``evictableNamespaces`` and ``podSelectors``.

Both plugins (CustomPriority, LowNodeLoad) take the same two args. :func:`namespaces_problem`
is the check each plugin's ``Args`` runs and words with its own kind.
"""

from __future__ import annotations

from apis.meta import LabelSelector, Model

__all__ = ["EvictableNamespaces", "PodSelector", "namespaces_problem"]


class EvictableNamespaces(Model):
    """Namespaces whose pods may be evicted: only ``include``, or all but ``exclude``."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()

    def allows(self, namespace: str) -> bool:
        if self.include:
            return namespace in self.include
        return namespace not in self.exclude


class PodSelector(Model):
    """One entry of ``podSelectors``: a named label selector (a missing one selects nothing)."""

    name: str = ""
    selector: LabelSelector | None = None


def namespaces_problem(namespaces: EvictableNamespaces | None) -> tuple[object, str] | None:
    """(the value, the rule it breaks) when ``evictableNamespaces`` sets both lists."""
    if namespaces is not None and namespaces.include and namespaces.exclude:
        return (
            {"include": list(namespaces.include), "exclude": list(namespaces.exclude)},
            "sets both include and exclude; only one of them is allowed",
        )
    return None
