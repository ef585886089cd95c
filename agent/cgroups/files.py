"""Reading and writing cgroup files, with errors translated at the edge.

:class:`CgroupFiles` maps ``(cgroup, resource)`` to the real file on this host (v1: the
resource's controller hierarchy, v2: the unified root; the file name from the resource
table), reads it into a value in v1 units and writes values converted back to the kernel's
text. ``OSError`` never leaves this module:

* the cgroup directory is gone (``ENOENT``, ``ENODEV``) -> :class:`~agent.errors.NotFound`;
* the directory exists but the file does not, the resource has no twin on this version, or
  the controller is not mounted -> :class:`~agent.errors.Unsupported`;
* the kernel refuses the value (``EINVAL``, ``ERANGE``, ``EBUSY``, ``EACCES``...), or the value
  fails the resource's range check before it is written -> :class:`~agent.errors.Rejected`
  (path, text and errno text);
* a read fails otherwise -> :class:`~agent.errors.TransientError`; text in a format the agent
  does not know -> :class:`~agent.errors.Unsupported`.

Paths are built by string concatenation from a per-controller base computed once: no
``resolve()``, no ``stat()`` on the happy path.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from agent.cgroups import resources
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.detect import CgroupInfo
from agent.cgroups.paths import check_cgroup
from agent.cgroups.resources import Reading, Resource, ResourceSpec, Value
from agent.errors import AgentError, NotFound, Rejected, TransientError, Unsupported

__all__ = ["CgroupFiles"]

_GONE = frozenset({errno.ENOENT, errno.ENODEV, errno.ENOTDIR})
_READ_CHUNK = 65536


def _why(err: OSError) -> str:
    """The errno text of ``err`` (``Invalid argument``)."""
    if err.strerror:
        return err.strerror
    return errno.errorcode.get(err.errno or 0, str(err))


class CgroupFiles:
    """The files of one host's cgroup tree (see the module docstring)."""

    __slots__ = ("_bases", "info", "version")

    def __init__(self, info: CgroupInfo) -> None:
        self.info = info
        #: 1 or 2: the hierarchy version of the resource controllers.
        self.version = info.resource_version
        self._bases: dict[str, str] = {}

    # --- paths -------------------------------------------------------------------------

    def _base(self, controller: str) -> str:
        base = self._bases.get(controller)
        if base is None:
            if (
                self.version == 1
                and self.info.subsystems
                and controller not in self.info.subsystems
            ):
                raise Unsupported(f"cgroup v1 controller {controller!r} is not mounted")
            base = str(self.info.hierarchy(controller))
            self._bases[controller] = base
        return base

    def _locate(self, cgroup: str, resource: Resource, *, write: bool) -> tuple[str, ResourceSpec]:
        entry = resources.TABLE[resource]
        name = entry.file(self.version, write=write)
        if name is None:
            raise Unsupported(f"{resource} has no cgroup v{self.version} file")
        check_cgroup(cgroup)
        base = self._base(entry.v1_subsystem)
        return (f"{base}/{cgroup}/{name}" if cgroup else f"{base}/{name}"), entry

    def path(self, cgroup: str, resource: Resource, *, write: bool = False) -> Path:
        """The file holding ``resource`` of ``cgroup`` (the written one with ``write``)."""
        return Path(self._locate(cgroup, resource, write=write)[0])

    def path_text(self, cgroup: str, resource: Resource, *, write: bool = False) -> str:
        """:meth:`path` as a string (no ``Path`` object on hot paths)."""
        return self._locate(cgroup, resource, write=write)[0]

    def directory(self, cgroup: str, controller: str = "cpu") -> Path:
        """``cgroup``'s directory in ``controller``'s hierarchy (the one tree on v2)."""
        check_cgroup(cgroup)
        base = self._base(controller)
        return Path(f"{base}/{cgroup}" if cgroup else base)

    def exists(self, cgroup: str, controller: str = "cpu") -> bool:
        """Whether the cgroup directory exists (in ``controller``'s hierarchy on v1)."""
        try:
            return self.directory(cgroup, controller).is_dir()
        except Unsupported:
            return False

    def listdir(self, cgroup: str, controller: str = "cpu") -> list[str]:
        """Names of the child cgroups of ``cgroup``, sorted; NotFound when it is gone."""
        directory = self.directory(cgroup, controller)
        try:
            with os.scandir(directory) as entries:
                return sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError as err:
            if err.errno in _GONE:
                raise NotFound(f"cgroup {cgroup!r} vanished ({directory})") from err
            raise TransientError(f"cannot list {directory}: {err.strerror}") from err

    # --- errors ------------------------------------------------------------------------

    def _gone(self, path: str, cgroup: str, entry: ResourceSpec) -> AgentError:
        """``path`` is missing: the cgroup vanished, or the file is not on this kernel."""
        if os.path.isdir(os.path.dirname(path)):
            return Unsupported(f"{path} does not exist ({entry.resource} not supported here)")
        if cgroup and os.path.isdir(self._base(entry.v1_subsystem)):
            return NotFound(f"cgroup {cgroup!r} vanished ({path})")
        return Unsupported(f"no cgroup hierarchy at {self._base(entry.v1_subsystem)}")

    # --- reading -----------------------------------------------------------------------

    def _read_path(self, path: str, cgroup: str, entry: ResourceSpec) -> str:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as err:
            if err.errno in _GONE:
                raise self._gone(path, cgroup, entry) from err
            raise TransientError(f"cannot open {path}: {err.strerror}") from err
        try:
            chunks: list[bytes] = []
            while chunk := os.read(fd, _READ_CHUNK):
                chunks.append(chunk)
        except OSError as err:
            if err.errno in _GONE:
                raise NotFound(f"cgroup {cgroup!r} vanished ({path})") from err
            raise TransientError(f"cannot read {path}: {err.strerror}") from err
        finally:
            os.close(fd)
        return b"".join(chunks).decode("ascii", errors="replace")

    def read_text(self, cgroup: str, resource: Resource) -> str:
        """The raw text of the file ``read`` would parse."""
        path, entry = self._locate(cgroup, resource, write=False)
        return self._read_path(path, cgroup, entry)

    def read(self, cgroup: str, resource: Resource) -> Reading:
        """The current value in v1 units (an int, a CpuSet, a stats dict, PSI, pids)."""
        path, entry = self._locate(cgroup, resource, write=False)
        text = self._read_path(path, cgroup, entry)
        try:
            return resources.parse(resource, self.version, text)
        except ValueError as err:
            raise Unsupported(f"{path}: unexpected content {text[:80]!r} ({err})") from err

    def read_value(self, cgroup: str, resource: Resource) -> Value:
        """``read`` for a resource holding one int or cpu set."""
        value = self.read(cgroup, resource)
        if isinstance(value, int | CpuSet):
            return value
        raise TypeError(f"{resource} is not a single value")

    def read_stats(self, cgroup: str, resource: Resource) -> dict[str, int]:
        """``read`` for ``cpu.stat`` / ``memory.stat`` (normalized keys, see resources)."""
        if resources.TABLE[resource].kind is not resources.Kind.STATS:
            raise TypeError(f"{resource} is not a stats file")
        value = self.read(cgroup, resource)
        assert isinstance(value, dict)
        return {k: int(v) for k, v in value.items()}

    # --- writing -----------------------------------------------------------------------

    def write(self, cgroup: str, resource: Resource, value: Value) -> None:
        """Write ``value`` (v1 units); raises NotFound, Unsupported or Rejected."""
        path, entry = self._locate(cgroup, resource, write=True)
        problem = resources.validate(resource, self.version, value)
        if problem is not None:
            raise Rejected(path, str(value), problem)
        text = resources.format_value(resource, self.version, value)
        if resource is Resource.CPU_PERIOD and self.version == 2:
            # cpu.max takes the period only behind a quota: keep the current one.
            current = self._read_path(path, cgroup, entry).split()
            text = f"{current[0] if current else 'max'} {text}"
        self._write_path(path, cgroup, entry, text)

    def _write_path(self, path: str, cgroup: str, entry: ResourceSpec, text: str) -> None:
        data = (text or "\n").encode("ascii")
        try:
            fd = os.open(path, os.O_WRONLY | os.O_TRUNC | os.O_CLOEXEC)
        except OSError as err:
            if err.errno in _GONE:
                raise self._gone(path, cgroup, entry) from err
            raise Rejected(path, text, _why(err)) from err
        try:
            os.write(fd, data)
        except OSError as err:
            if err.errno in (errno.ENOENT, errno.ENODEV):
                raise NotFound(f"cgroup {cgroup!r} vanished ({path})") from err
            raise Rejected(path, text, _why(err)) from err
        finally:
            os.close(fd)
