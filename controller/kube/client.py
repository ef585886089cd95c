"""The controller's Kubernetes client: :class:`runtime.kube.client.KubeClient` raising the
controller's own errors.

A refusal raises what :mod:`controller.errors` names for it, with the message of the server's
``Status``, so the store and the loops catch one hierarchy whichever backend they run on:

=====================  ==============================================================
404                    :class:`~controller.errors.NotFound`
409                    :class:`~controller.errors.AlreadyExists` (reason AlreadyExists),
                       else :class:`~controller.errors.Conflict`
410                    :class:`~controller.errors.Expired`
422                    :class:`~controller.errors.Invalid` (every cause, first field and value)
403                    :class:`~controller.errors.Forbidden`
429, 5xx, no answer    :class:`ServerUnavailable` (a :class:`~controller.errors.TransientError`)
anything else          :class:`ApiError`
an unusable config     :class:`~controller.errors.ConfigError`
=====================  ==============================================================

Each is also the :mod:`runtime.kube.errors` class of the same meaning.
"""

from __future__ import annotations

import asyncio
import os
from typing import ClassVar

from controller.errors import (
    AlreadyExists,
    ConfigError,
    Conflict,
    Expired,
    Forbidden,
    Invalid,
    NotFound,
    StoreError,
    TransientError,
)
from runtime.kube import client as base
from runtime.kube import errors as kube
from runtime.kube.client import (
    APPLY_PATCH,
    DEFAULT_BURST,
    DEFAULT_QPS,
    DEFAULT_TIMEOUT,
    JSON,
    JSON_PATCH,
    MERGE_PATCH,
    SERVICE_ACCOUNT_DIR,
    STRATEGIC_MERGE_PATCH,
    ClientOptions,
    Lines,
    RateLimiter,
    Status,
    StatusCause,
    StatusDetails,
    resource_path,
)

__all__ = [
    "APPLY_PATCH",
    "DEFAULT_BURST",
    "DEFAULT_QPS",
    "DEFAULT_TIMEOUT",
    "ERRORS",
    "JSON",
    "JSON_PATCH",
    "MERGE_PATCH",
    "SERVICE_ACCOUNT_DIR",
    "STRATEGIC_MERGE_PATCH",
    "ApiError",
    "ClientOptions",
    "KubeClient",
    "Lines",
    "RateLimiter",
    "ServerUnavailable",
    "Status",
    "StatusCause",
    "StatusDetails",
    "connect",
    "resource_path",
]


class ServerUnavailable(TransientError, kube.ServerUnavailable):  # noqa: N818 - a state
    """The API server did not do the request but may later: 429, a 5xx, or no answer at all
    (``code`` 0); ``retry_after`` the seconds it asked for (None: it did not say)."""


class ApiError(kube.ApiError, StoreError):
    """A refusal no other error names (400, 401, 405, 415...): ``code`` and ``reason``."""


#: A client's options unless told otherwise.
DEFAULT_OPTIONS = ClientOptions()

#: The controller's classes for what the API server answers.
ERRORS = kube.ErrorTable(
    not_found=NotFound,
    already_exists=AlreadyExists,
    conflict=Conflict,
    expired=Expired,
    invalid=Invalid,
    forbidden=Forbidden,
    unavailable=ServerUnavailable,
    api_error=ApiError,
    config=ConfigError,
)


class KubeClient(base.KubeClient):
    """One API server, as one user, raising :data:`ERRORS`."""

    errors: ClassVar[kube.ErrorTable] = ERRORS


async def connect(
    kubeconfig: str | os.PathLike[str] | None = None,
    *,
    context: str | None = None,
    options: ClientOptions = DEFAULT_OPTIONS,
) -> KubeClient:
    """The controller's client, built in a worker thread (:func:`runtime.kube.client.connect`)."""
    return await asyncio.to_thread(
        KubeClient.from_config, kubeconfig, context=context, options=options
    )
