"""Pressure stall information (PSI): parsing ``/proc/pressure/*`` and cgroup ``*.pressure``.

A pressure file holds one ``some`` line and, for memory and I/O (and CPU since Linux 5.13), a
``full`` line::

    some avg10=0.12 avg60=0.05 avg300=0.00 total=123456
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

The node's files are ``/proc/pressure/{cpu,memory,io}`` (kernels with ``CONFIG_PSI``, not
booted with ``psi=0``); a cgroup v2 directory has ``{cpu,memory,io}.pressure``; on cgroup v1
some kernels booted with ``psi=1`` expose the same files in the cpuacct hierarchy.
"""

from __future__ import annotations

from typing import Final

from agent.metrics.snapshot import Pressure

__all__ = ["RESOURCES", "parse_pressure"]

#: The resources with a pressure file, as the snapshot names them.
RESOURCES: Final = ("cpu", "memory", "io")
_AVERAGES: Final = ("avg10=", "avg60=", "avg300=")


def _averages(fields: list[str]) -> tuple[float, float, float] | None:
    found: list[float] = []
    for prefix in _AVERAGES:
        value = next((f[len(prefix) :] for f in fields if f.startswith(prefix)), None)
        if value is None:
            return None
        try:
            found.append(float(value))
        except ValueError:
            return None
    return found[0], found[1], found[2]


def parse_pressure(text: str) -> Pressure | None:
    """The ``some`` (and ``full``) averages of a pressure file; ``None`` when there is no
    well-formed ``some`` line. A malformed ``full`` line counts as absent."""
    some: tuple[float, float, float] | None = None
    full: tuple[float, float, float] | None = None
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        if fields[0] == "some":
            some = _averages(fields[1:])
        elif fields[0] == "full":
            full = _averages(fields[1:])
    if some is None:
        return None
    return Pressure(some=some, full=full)
