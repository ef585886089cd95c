"""Generate the Python gRPC modules from ``objects.proto`` (run at build time).

``python -m controller.api.protogen`` regenerates them in a source checkout; the wheel build
hook (``hatch_build.py``) calls :func:`generate` so an installed package always carries them.
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO = Path("controller") / "api" / "objects.proto"


def generate(root: Path) -> None:
    """Run protoc over the API proto; outputs land next to it."""
    from grpc_tools import protoc  # build-time only dependency

    proto = root / PROTO
    args = [
        "protoc",
        f"-I{root}",
        f"--python_out={root}",
        f"--pyi_out={root}",
        f"--grpc_python_out={root}",
        str(proto.relative_to(root)),
    ]
    code = protoc.main(args)
    if code != 0:
        raise RuntimeError(f"protoc failed with exit code {code} on {proto}")


if __name__ == "__main__":
    generate(Path(__file__).resolve().parents[2] if len(sys.argv) < 2 else Path(sys.argv[1]))
