"""What a Kubernetes API server's refusals become.

::

    KubeError              base: ``message``; ``kind``, ``namespace``, ``name`` of the object
    ├── NotFound           404
    ├── AlreadyExists      409 with reason AlreadyExists
    ├── Conflict           409 otherwise: a stale resourceVersion or uid precondition
    ├── Expired            410: a watch's version is older than the server's history
    ├── Invalid            422: ``causes`` (``field: message`` each), ``field`` and ``value``
    │   └── Forbidden      403
    ├── ServerUnavailable  429, 5xx or no answer at all: worth sending again later
    └── ApiError           anything else (400, 401, 405, 415...): ``code`` and ``reason``

A package with a hierarchy of its own (the controller's store errors) hands a client an
:class:`ErrorTable` of subclasses of these, so its code catches its own errors while what is
shared (the reflector) still catches these. A kubeconfig or service account that cannot be used
raises the table's ``config`` error, a :class:`runtime.configfile.ConfigError` (exit status 2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from apis.kinds import Kind
from runtime import configfile

__all__ = [
    "AlreadyExists",
    "ApiError",
    "Conflict",
    "ErrorTable",
    "Expired",
    "Forbidden",
    "Invalid",
    "KubeError",
    "NotFound",
    "ServerUnavailable",
]


class KubeError(Exception):
    """A request the API server did not do; ``str(err)`` is the server's message."""

    def __init__(
        self, message: str, *, kind: Kind | None = None, namespace: str = "", name: str = ""
    ) -> None:
        super().__init__(message)
        self.message = message
        self.kind = kind
        self.namespace = namespace
        self.name = name


class NotFound(KubeError):  # noqa: N818 - reads as Kubernetes says it
    """No such object."""


class AlreadyExists(KubeError):  # noqa: N818 - reads as Kubernetes says it
    """A create of a name that is taken."""


class Conflict(KubeError):  # noqa: N818 - reads as Kubernetes says it
    """A write based on a version that is no longer current (re-read and retry)."""


class Expired(KubeError):  # noqa: N818 - reads as Kubernetes says it
    """A watch that cannot continue from the version asked for (list again)."""


class Invalid(KubeError):  # noqa: N818 - reads as Kubernetes says it
    """An object the server refuses: one ``field: message`` line per cause; ``field`` and
    ``value`` are those of the first cause (empty when it names none)."""

    def __init__(
        self,
        message: str,
        *,
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
        causes: Sequence[str] = (),
        field: str = "",
        value: str = "",
    ) -> None:
        super().__init__(message, kind=kind, namespace=namespace, name=name)
        self.causes = tuple(causes)
        self.field = field
        self.value = value


class Forbidden(Invalid):
    """Refused by authorization or an admission rule (403)."""


class ServerUnavailable(KubeError):  # noqa: N818 - a state, as NotFound
    """The server did not do the request but may later: ``code`` is the HTTP status (0: no
    answer), ``retry_after`` the seconds it asked the client to wait (None: it did not say)."""

    def __init__(self, message: str, *, code: int = 0, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.retry_after = retry_after


class ApiError(KubeError):
    """A refusal no other error names: ``code`` and ``reason`` are the HTTP status and the
    ``Status`` reason (``BadRequest``, ``Unauthorized``...)."""

    def __init__(
        self,
        message: str,
        *,
        code: int = 0,
        reason: str = "",
        kind: Kind | None = None,
        namespace: str = "",
        name: str = "",
    ) -> None:
        super().__init__(message, kind=kind, namespace=namespace, name=name)
        self.code = code
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ErrorTable:
    """The classes a client raises, each a subclass of the one named here."""

    not_found: type[NotFound] = NotFound
    already_exists: type[AlreadyExists] = AlreadyExists
    conflict: type[Conflict] = Conflict
    expired: type[Expired] = Expired
    invalid: type[Invalid] = Invalid
    forbidden: type[Forbidden] = Forbidden
    unavailable: type[ServerUnavailable] = ServerUnavailable
    api_error: type[ApiError] = ApiError
    config: Callable[[str], configfile.ConfigError] = configfile.ConfigError


#: What a client raises unless it is given another table.
ERRORS = ErrorTable()
