"""Errors of the node agent, translated at the edge into a hierarchy that encodes policy.

::

    AgentError                  base of everything the agent raises on purpose
    ├── ConfigError             fatal: a bad config; the process exits 2 before starting
    ├── TransientError          retry: the supervisor restarts the component with backoff
    ├── Unsupported             degrade: hardware or a kernel feature is absent (no NVML, no
    │                           cgroup file); the feature is switched off, the agent runs on
    ├── NotFound                ignore: a cgroup or process vanished between listing and use
    └── Rejected                report: the kernel (or a range check) refused a value; carries
                                the file, the value and the reason

``ConfigError`` is also a :class:`runtime.configfile.ConfigError` (and so a
:class:`runtime.lifecycle.Fatal`): ``supervise()`` never restarts a component that raised it.
"""

from __future__ import annotations

from runtime import configfile

__all__ = ["AgentError", "ConfigError", "NotFound", "Rejected", "TransientError", "Unsupported"]


class AgentError(Exception):
    """Base of the agent's own errors."""


class ConfigError(AgentError, configfile.ConfigError):
    """The configuration cannot be used; fatal."""


class TransientError(AgentError):
    """A failure worth retrying (the supervisor restarts the component with backoff)."""


class Unsupported(AgentError):  # noqa: N818 - names the policy (degrade)
    """Missing hardware, library or kernel feature: degrade, do not retry."""


class NotFound(AgentError):  # noqa: N818 - names the condition
    """A cgroup or process vanished; callers ignore it."""


class Rejected(AgentError):  # noqa: N818 - names the condition
    """A value the kernel refused (EINVAL, ERANGE, EBUSY...) or a range check caught first."""

    def __init__(self, path: str, value: str, reason: str) -> None:
        super().__init__(f"{path}: {value!r} rejected: {reason}")
        #: The file written.
        self.path = path
        #: The text that was (to be) written.
        self.value = value
        #: The errno text (``Invalid argument``) or the failed check.
        self.reason = reason

    def __reduce__(self) -> tuple[type[Rejected], tuple[str, str, str]]:
        return (type(self), (self.path, self.value, self.reason))
