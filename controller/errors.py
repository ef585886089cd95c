"""Errors of the controller.

::

    ControllerError
    ├── ConfigError          bad configuration; fatal, the process exits with code 2
    ├── TransientError       a failure worth retrying (the supervisor backs off and restarts)
    └── StoreError           a store request that cannot be done (carries kind, namespace, name)
        ├── NotFound         no such object
        ├── AlreadyExists    create of a name that is taken
        ├── Conflict         stale resourceVersion or uid precondition (re-read and retry)
        ├── Invalid          bad name, namespace, labels, annotations...; names field and value
        │   └── Forbidden    refused by an admission rule (``pods "x" is forbidden: ...``)
        └── Expired          watch resourceVersion older than the history, or a watcher that
                             fell too far behind (re-list, then watch again)

The six that name what an API server answers are also the :mod:`runtime.kube.errors` of the
same name, so the Kubernetes client raises them for the controller (:mod:`controller.kube.client`)
and what the agent shares with it catches them too.

Messages read like the Kubernetes API server's: ``pods "web" not found``,
``reservations.scheduling.koordinator.sh "r1" already exists``.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import ClassVar

from apis.kinds import Kind
from apis.validation import FieldError
from runtime import configfile
from runtime.kube import errors as kube

__all__ = [
    "AlreadyExists",
    "ConfigError",
    "Conflict",
    "ControllerError",
    "Expired",
    "Forbidden",
    "Invalid",
    "NotFound",
    "StorageFull",
    "StoreError",
    "TransientError",
    "Unavailable",
]

#: What Kubernetes tells a writer whose resourceVersion is stale.
MODIFIED_DETAIL = (
    "the object has been modified; please apply your changes to the latest version and try again"
)


class ControllerError(Exception):
    """Base of every error the controller raises on purpose."""


class ConfigError(ControllerError, configfile.ConfigError):
    """The configuration is unusable; nothing starts and the process exits with code 2."""

    exit_code: ClassVar[int] = 2


class TransientError(ControllerError):
    """A failure that may go away on its own (retried with backoff)."""


class StoreError(ControllerError):
    """A store request that cannot be done.

    ``kind`` is the kind concerned (``None`` when the error is not about one kind), ``namespace``
    and ``name`` those of the object, empty where not known. ``str(err)`` is the full message.
    """

    def __init__(
        self,
        message: str,
        *,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.namespace = namespace
        self.name = name


class StorageFull(StoreError):  # noqa: N818 - a state, as errors.NotFound
    """The file system holding the state file has no room for the write (or the start)."""


@functools.lru_cache(maxsize=256)
def _resource(kind: Kind) -> str:
    return kind.qualified_plural


@functools.lru_cache(maxsize=256)
def _qualified_kind(kind: Kind) -> str:
    return f"{kind.kind}.{kind.group}" if kind.group else kind.kind


class NotFound(StoreError, kube.NotFound):  # noqa: N818 - reads as Kubernetes says it
    """No object of that kind, namespace and name."""

    @classmethod
    def of(cls, kind: Kind, name: str, namespace: str = "") -> NotFound:
        return cls(
            f'{_resource(kind)} "{name}" not found', kind=kind, namespace=namespace, name=name
        )


class AlreadyExists(StoreError, kube.AlreadyExists):  # noqa: N818 - reads as Kubernetes says it
    """A create whose name is already taken."""

    @classmethod
    def of(cls, kind: Kind, name: str, namespace: str = "") -> AlreadyExists:
        return cls(
            f'{_resource(kind)} "{name}" already exists', kind=kind, namespace=namespace, name=name
        )


class Conflict(StoreError, kube.Conflict):  # noqa: N818 - reads as Kubernetes says it
    """A write based on a version that is no longer current."""

    @classmethod
    def of(
        cls, kind: Kind, name: str, namespace: str = "", *, detail: str = MODIFIED_DETAIL
    ) -> Conflict:
        return cls(
            f'Operation cannot be fulfilled on {_resource(kind)} "{name}": {detail}',
            kind=kind,
            namespace=namespace,
            name=name,
        )


class Invalid(kube.Invalid, StoreError):  # noqa: N818 - reads as Kubernetes says it
    """An object the store refuses to keep (its fields are :class:`runtime.kube.errors.Invalid`'s).

    ``causes`` holds one ``field: reason`` line per problem; ``field`` and ``value`` are those of
    the first problem (empty when it names no value).
    """

    @classmethod
    def of(
        cls, kind: Kind, name: str, causes: Sequence[FieldError], namespace: str = ""
    ) -> Invalid:
        lines = [str(cause) for cause in causes]
        shown = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
        first = causes[0] if causes else None
        return cls(
            f'{_qualified_kind(kind)} "{name}" is invalid: {shown}',
            kind=kind,
            namespace=namespace,
            name=name,
            causes=lines,
            field=first.field if first is not None else "",
            value=first.value or "" if first is not None else "",
        )


class Forbidden(Invalid, kube.Forbidden):
    """An object an admission rule refuses outright, as the API server words it:
    ``pods "web" is forbidden: no PriorityClass with name gold was found``."""

    @classmethod
    def because(
        cls,
        kind: Kind,
        name: str,
        reason: str,
        namespace: str = "",
        *,
        field: str = "",
        value: str = "",
    ) -> Forbidden:
        return cls(
            f'{_resource(kind)} "{name}" is forbidden: {reason}',
            kind=kind,
            namespace=namespace,
            name=name,
            causes=(f"{field}: Forbidden: {reason}" if field else reason,),
            field=field,
            value=value,
        )


class Expired(StoreError, kube.Expired):  # noqa: N818 - reads as Kubernetes says it
    """A watch that cannot continue from the version asked for (HTTP 410 Gone)."""


class Unavailable(StoreError):  # noqa: N818 - a state, as errors.NotFound
    """A write a remote store did not do, and may do when sent again later: the API server
    answered 429 (a PodDisruptionBudget refusing an eviction, or its own load) or 5xx, or did
    not answer. ``code`` is the HTTP status (0: no answer); ``retry_after`` the seconds the
    server asked for (None: it did not say)."""

    def __init__(
        self,
        message: str,
        *,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
        code: int = 0,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message, kind=kind, namespace=namespace, name=name)
        self.code = code
        self.retry_after = retry_after
