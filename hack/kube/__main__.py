"""``python -m hack.kube up|down|bin-dir``: a real Kubernetes control plane from a shell.

    python -m hack.kube up --dir DIR [--scheduler] [--kwok] [--timeout SECONDS]
    python -m hack.kube down --dir DIR [--timeout SECONDS]
    python -m hack.kube nodes --dir DIR
    python -m hack.kube bin-dir

``up`` returns once the API server is ready, leaving the processes running; ``down`` stops
them and leaves the logs; ``nodes`` adds ``koordpy up --demo``'s two GPU nodes with their
Devices (:mod:`hack.kube.demo`; the Device CRD must be installed, kwok running).
Exit status: 0 done, 1 the cluster failed, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from hack.kube import paths
from hack.kube.cluster import Cluster, ClusterError, start_cluster, stop_cluster

log = logging.getLogger("hack.kube")


def _positive(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m hack.kube",
        description="Run etcd, kube-apiserver and kube-controller-manager on loopback "
        "(binaries from `make kube-bin`).",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings only")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    up = commands.add_parser("up", help="start a cluster in DIR and wait until it is ready")
    up.add_argument("--dir", type=Path, required=True, help="where state, logs and data go")
    up.add_argument("--scheduler", action="store_true", help="also run kube-scheduler")
    up.add_argument(
        "--kwok", action="store_true", help="also run kwok (plays the kubelet of every node)"
    )
    up.add_argument(
        "--timeout", type=_positive, default=120.0, help="seconds to wait for readiness"
    )

    down = commands.add_parser("down", help="stop the cluster recorded in DIR (logs stay)")
    down.add_argument("--dir", type=Path, required=True, help="the directory `up` used")
    down.add_argument(
        "--timeout", type=_positive, default=15.0, help="seconds between SIGTERM and SIGKILL"
    )

    nodes = commands.add_parser(
        "nodes", help="add the demo GPU nodes and their Devices to the cluster in DIR"
    )
    nodes.add_argument("--dir", type=Path, required=True, help="the directory `up` used")

    commands.add_parser("bin-dir", help="print where `make kube-bin` puts the binaries")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command == "bin-dir":
        print(paths.bin_dir())
        return 0

    directory: Path = args.dir
    if directory.exists() and not directory.is_dir():
        parser.error(f"--dir {directory}: not a directory")
    if args.command == "nodes":
        from hack.kube.demo import DEMO_NODES, make_nodes

        try:
            make_nodes(Cluster.load(directory))
        except ClusterError as error:
            log.error("%s", error)
            return 1
        print("nodes:", ", ".join(DEMO_NODES))
        return 0

    if args.command == "up":
        started = time.monotonic()
        try:
            cluster = start_cluster(
                directory, scheduler=args.scheduler, kwok=args.kwok, timeout=args.timeout
            )
        except paths.MissingBinariesError as error:
            print(f"error: {error}", file=sys.stderr)
            return 1
        except ClusterError as error:
            print(f"error: {error}", file=sys.stderr)
            print(f"logs stay in {directory.resolve()}", file=sys.stderr)
            return 1
        print(f"ready in {time.monotonic() - started:.1f}s: {cluster.server}")
        print(f"export KUBECONFIG={cluster.kubeconfig}")
        return 0

    if not directory.is_dir():
        parser.error(f"--dir {directory}: no such directory")
    stopped = stop_cluster(directory, timeout=args.timeout)
    print(f"stopped: {', '.join(stopped)}" if stopped else f"nothing was running in {directory}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
