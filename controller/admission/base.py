"""What an admission plugin is, what it may read, and how it refuses (kubernetes.md: the API
server runs mutating, then validating admission on every write).

A plugin is a pure function ``(obj, old, lookup) -> obj``: ``obj`` is the object about to be
stored, ``old`` the stored one (None on create), ``lookup`` a read-only view of the other
stored objects as the write's transaction sees them. It returns the object to store (``obj``
itself when it changes nothing) or raises :class:`InvalidError` (the object breaks a rule about
a field: the store reports ``Invalid``) or :class:`ForbiddenError` (a rule refuses the write as
a whole: the store reports ``Forbidden``). Plugins never write.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from apis.meta import Object
from apis.validation import FieldError
from controller.errors import ControllerError

__all__ = ["AdmissionError", "ForbiddenError", "InvalidError", "Lookup", "Plugin", "Registration"]

ObjT = TypeVar("ObjT", bound=Object)


class AdmissionError(ControllerError):
    """Base of what admission plugins raise to refuse a write."""


class InvalidError(AdmissionError):
    """The object breaks rules about its fields; ``causes`` names each field and value."""

    def __init__(self, *causes: FieldError) -> None:
        super().__init__("; ".join(str(cause) for cause in causes))
        self.causes = causes


class ForbiddenError(AdmissionError):
    """A rule refuses the write; ``field`` and ``value`` say what it is about."""

    def __init__(self, reason: str, *, field: str = "", value: str = "") -> None:
        super().__init__(reason)
        self.reason = reason
        self.field = field
        self.value = value


class Lookup(Protocol):
    """Read-only access to stored objects (with the writes of the current transaction)."""

    def get(self, kind: type[ObjT], name: str, namespace: str = "") -> ObjT | None:
        """The object, or None; a namespaced kind's empty namespace means ``default``."""
        ...

    def list(self, kind: type[ObjT]) -> Sequence[ObjT]:
        """Every object of the kind, sorted by namespace then name."""
        ...


class Plugin(Protocol):
    def __call__(self, obj: Object, old: Object | None, lookup: Lookup, /) -> Object: ...


@dataclass(frozen=True, slots=True)
class Registration:
    """One entry of the admission table: a plugin and the object types it is called for."""

    name: str
    kinds: tuple[type[Object], ...]
    plugin: Plugin
