"""Where ``make kube-bin`` put the Kubernetes binaries.

The cache directory's name is computed by ``hack/kube/build.sh --print-dir`` alone (it hashes
the files that pin the versions), so Python and the build can never disagree about it.
``$KUBE_CACHE`` moves the cache's root, for both.
"""

from __future__ import annotations

import functools
import os
import subprocess
from collections.abc import Iterable
from pathlib import Path

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"

#: Every binary ``make kube-bin`` puts in the cache's ``bin/``.
ALL_BINARIES = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "kubectl",
    "helm",
)


class MissingBinariesError(RuntimeError):
    """Binaries ``make kube-bin`` builds are not in the cache."""

    def __init__(self, missing: Iterable[str], where: Path) -> None:
        self.missing = tuple(missing)
        self.where = where
        names = ", ".join(self.missing)
        super().__init__(
            f"Kubernetes binaries not built ({names} missing from {where}): run `make kube-bin`"
        )


@functools.cache
def _cache_dir_for(kube_cache: str | None, home: str | None) -> Path:
    # The arguments are the environment build.sh reads: the cache key of this function.
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-dir"],
        check=True,
        capture_output=True,
        text=True,
    )
    return Path(result.stdout.strip())


def cache_dir() -> Path:
    """The directory ``make kube-bin`` builds into for the pinned versions."""
    return _cache_dir_for(os.environ.get("KUBE_CACHE"), os.environ.get("HOME"))


def bin_dir() -> Path:
    """The cache's ``bin/`` directory (it may not exist yet)."""
    return cache_dir() / "bin"


def versions() -> dict[str, str]:
    """What the cache's ``versions.txt`` names (empty when nothing was built)."""
    path = cache_dir() / "versions.txt"
    if not path.is_file():
        return {}
    lines = path.read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def require(names: Iterable[str]) -> dict[str, Path]:
    """Each named binary's path; :class:`MissingBinariesError` names any that are missing."""
    where = bin_dir()
    paths = {name: where / name for name in names}
    missing = [name for name, path in paths.items() if not path.is_file()]
    if missing:
        raise MissingBinariesError(missing, where)
    return paths


def binary(name: str) -> Path:
    """One binary's path, or :class:`MissingBinariesError`."""
    return require([name])[name]
