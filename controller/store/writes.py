"""The write half of the :class:`~controller.store.cluster.Cluster` seam: batches of writes whose
results arrive later.

A control loop never waits on a write. It hands :meth:`Cluster.write
<controller.store.cluster.Cluster.write>` a batch of :class:`Write` s (create, update with its
resourceVersion as precondition, status update, merge patch, apply, delete, and the pod
subresources binding and eviction) and gets a :class:`Pending` back at once. A local backend
(memory, SQLite) commits the batch in one transaction before it returns, so the results are
there already; a backend doing network I/O sends the writes and resolves the :class:`Pending`
when the answers are in, without ever blocking the event loop. Each result is in its write's
place: the stored object and its :class:`~controller.store.cluster.Outcome`, or the
:class:`~controller.errors.StoreError` it failed with. Writes of one batch are independent: one
failing changes nothing of the others (a remote backend gives no transaction over them).

A loop sends through its :class:`~controller.store.assumed.Outbox`, which keeps what the loop
wrote assumed (:class:`~controller.store.assumed.Assumed`, laid over its snapshots) from the
moment it was sent, and runs the loop's handling of the results when they arrive: at once when
they already have, or at the start of a later pass (``Outbox.collect``). A backend counts a
result arriving as a change (``Cluster.changed_after`` returns), so a loop waiting for one runs
again.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from apis.kinds import Kind
from apis.meta import Object
from controller.errors import StoreError

__all__ = ["Outcome", "Pending", "Result", "Verb", "Write"]


class Outcome(enum.StrEnum):
    """What a write did."""

    CREATED = "created"
    CONFIGURED = "configured"
    UNCHANGED = "unchanged"
    DELETED = "deleted"


#: What a write did (the stored object and how), or why it did nothing.
Result = tuple[Object, Outcome] | StoreError


class Verb(enum.StrEnum):
    """The kinds of write a backend takes."""

    CREATE = "create"
    #: replace the object; its resourceVersion, when set, is the precondition
    UPDATE = "update"
    #: replace the status alone (the ``status`` subresource)
    UPDATE_STATUS = "update-status"
    #: a JSON merge patch (RFC 7386) of the named object
    PATCH = "patch"
    #: create, or replace labels, annotations, finalizers, owners, body and status
    APPLY = "apply"
    DELETE = "delete"
    #: the pod's ``binding`` subresource: ``obj`` is the pod as bound (``spec.nodeName`` set,
    #: with what the scheduler's pre-bind wrote into its metadata)
    BIND = "bind"
    #: the pod's ``eviction`` subresource
    EVICT = "evict"


@dataclass(frozen=True, slots=True, kw_only=True)
class Write:
    """One write. Build it with the class methods, which say what each verb needs."""

    verb: Verb
    #: the object written (create, update, status, apply, bind); for delete and evict the
    #: object as read (its uid and, with ``precondition``, its resourceVersion are checked)
    obj: Object | None = None
    kind: Kind | None = None
    name: str = ""
    namespace: str = ""
    #: a resourceVersion the stored object must have (delete, evict, patch); "" for none
    resource_version: str = ""
    patch: Mapping[str, Any] | None = None

    @classmethod
    def create(cls, obj: Object) -> Write:
        return cls(verb=Verb.CREATE, obj=obj)

    @classmethod
    def update(cls, obj: Object) -> Write:
        """Replace ``obj``; a non-empty resourceVersion must be the stored one."""
        return cls(verb=Verb.UPDATE, obj=obj)

    @classmethod
    def update_status(cls, obj: Object) -> Write:
        """Write ``obj``'s status alone (resourceVersion as with :meth:`update`)."""
        return cls(verb=Verb.UPDATE_STATUS, obj=obj)

    @classmethod
    def apply(cls, obj: Object) -> Write:
        return cls(verb=Verb.APPLY, obj=obj)

    @classmethod
    def merge_patch(
        cls,
        kind: Kind,
        name: str,
        patch: Mapping[str, Any],
        namespace: str = "",
        *,
        resource_version: str = "",
    ) -> Write:
        """Merge ``patch`` (wire field names, as ``kubectl patch --type merge`` takes it)."""
        return cls(
            verb=Verb.PATCH,
            kind=kind,
            name=name,
            namespace=namespace,
            patch=patch,
            resource_version=resource_version,
        )

    @classmethod
    def delete(
        cls, kind: Kind, name: str, namespace: str = "", *, resource_version: str = ""
    ) -> Write:
        return cls(
            verb=Verb.DELETE,
            kind=kind,
            name=name,
            namespace=namespace,
            resource_version=resource_version,
        )

    @classmethod
    def delete_of(cls, kind: Kind, obj: Object, *, precondition: bool = False) -> Write:
        """Delete ``obj`` as read (its resourceVersion the precondition when asked)."""
        meta = obj.metadata
        return cls(
            verb=Verb.DELETE,
            obj=obj,
            kind=kind,
            name=meta.name,
            namespace=meta.namespace,
            resource_version=meta.resource_version if precondition else "",
        )

    @classmethod
    def bind(cls, pod: Object) -> Write:
        """Bind ``pod`` (as bound: ``spec.nodeName`` set) through the binding subresource."""
        return cls(verb=Verb.BIND, obj=pod)

    @classmethod
    def evict(cls, kind: Kind, pod: Object, *, precondition: bool = False) -> Write:
        """Evict ``pod`` through the eviction subresource."""
        return dataclasses.replace(
            cls.delete_of(kind, pod, precondition=precondition), verb=Verb.EVICT
        )

    @property
    def removes(self) -> bool:
        """Whether the write deletes its object (delete, evict)."""
        return self.verb in (Verb.DELETE, Verb.EVICT)


class Pending:
    """The results of one batch of writes, once they are in (a future without a loop: a
    local backend makes it :meth:`completed`, a remote one :meth:`resolve` s it later)."""

    __slots__ = ("_callbacks", "_results")

    def __init__(self) -> None:
        self._results: list[Result] | None = None
        self._callbacks: list[Callable[[Pending], None]] = []

    @classmethod
    def completed(cls, results: Iterable[Result]) -> Pending:
        pending = cls()
        pending._results = list(results)
        return pending

    def done(self) -> bool:
        return self._results is not None

    def results(self) -> list[Result]:
        """Each write's result in its place (``RuntimeError`` before they arrived)."""
        if self._results is None:
            raise RuntimeError("the writes' results have not arrived")
        return self._results

    def resolve(self, results: Iterable[Result]) -> None:
        """The backend's part: the results are in (once)."""
        if self._results is not None:
            raise RuntimeError("results already arrived")
        self._results = list(results)
        callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback(self)

    def add_done_callback(self, callback: Callable[[Pending], None]) -> None:
        """Call ``callback`` once the results are in (at once when they are)."""
        if self._results is not None:
            callback(self)
        else:
            self._callbacks.append(callback)
