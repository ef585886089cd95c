"""The ``koordpy`` command: one entry point, verbs like kubectl's.

Each verb lives with the package that owns it; this module only builds the argument tree and
dispatches (imports are lazy so ``koordpy get`` never loads the agent).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from koordpy import __version__

__all__ = ["build_parser", "main"]

#: verb -> "module:function" taking the parsed namespace and returning an exit code.
COMMANDS: dict[str, str] = {
    "up": "koordpy.up:main",
    "agent": "agent.cli:main",
    "controller": "controller.daemon:main",
    "apply": "controller.cli.commands:apply",
    "get": "controller.cli.commands:get",
    "describe": "controller.cli.commands:describe",
    "delete": "controller.cli.commands:delete",
    "simulate": "controller.simulate:main",
    "crds": "controller.kube.crds:main",
}


#: The API options and the environment variable each defaults to.
_API_ENV = (
    ("api", "KOORDPY_API"),
    ("token", "KOORDPY_TOKEN"),
    ("token_file", "KOORDPY_TOKEN_FILE"),
    ("tls_ca", "KOORDPY_TLS_CA"),
)


def _api_options() -> argparse.ArgumentParser:
    """``--api``, ``--token``, ``--token-file`` and ``--tls-ca``, before or after the verb."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--api",
        default=argparse.SUPPRESS,
        help="controller API address: unix:///path.sock or host:port "
        "(default $KOORDPY_API, else unix:///run/koordpy/controller.sock; "
        "as non-root under $XDG_RUNTIME_DIR)",
    )
    parent.add_argument(
        "--token",
        default=argparse.SUPPRESS,
        help="bearer token for a TCP API (default $KOORDPY_TOKEN)",
    )
    parent.add_argument(
        "--token-file",
        default=argparse.SUPPRESS,
        help="file holding the bearer token, mode 0600 (default $KOORDPY_TOKEN_FILE)",
    )
    parent.add_argument(
        "--tls-ca",
        default=argparse.SUPPRESS,
        help="CA certificate (PEM) that verifies a TLS API's certificate (default $KOORDPY_TLS_CA)",
    )
    return parent


def build_parser() -> argparse.ArgumentParser:
    api = _api_options()
    parser = argparse.ArgumentParser(
        prog="koordpy",
        description="Koordinator-compatible node agent and controller for GPU/NPU clusters.",
        parents=[api],
    )
    parser.add_argument("--version", action="version", version=f"koordpy {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    up = sub.add_parser(
        "up", parents=[api], help="run the controller and this host's agent in one process"
    )
    up.add_argument("--demo", action="store_true", help="add simulated GPU/NPU nodes and examples")
    up.add_argument("--state-dir", help="where state lives (default ~/.local/state/koordpy)")
    up.add_argument("--config", help="TOML config file (sections [controller] and [agent])")
    up.add_argument(
        "--start-fresh",
        action="store_true",
        help="start an empty store where the state dir's database was lost ([store] start_fresh)",
    )
    up.add_argument("--node-name", help="this host's node name (default $NODE_NAME or hostname)")
    up.add_argument(
        "--metrics-address",
        help="controller metrics listen address (default :9317; 'off' disables)",
    )
    up.add_argument(
        "--agent-metrics-address",
        help="agent metrics listen address (default :9316; 'off' disables)",
    )

    agent = sub.add_parser("agent", parents=[api], help="the node agent")
    agent_sub = agent.add_subparsers(dest="agent_command", metavar="ACTION", required=True)
    for action, text in (
        ("run", "run the node agent daemon"),
        ("plan", "one reconcile pass: print the cgroup writes it would make, write nothing"),
        ("devices", "probe this host's accelerators and print the Device object"),
    ):
        cmd = agent_sub.add_parser(action, parents=[api], help=text)
        cmd.add_argument("--config", help="agent TOML config (default /etc/koordpy/agent.toml)")
        cmd.add_argument("--node-name", help="node name (default $NODE_NAME or hostname)")
        if action == "run":
            cmd.add_argument(
                "--kubeconfig",
                help="report to this kubeconfig's cluster ([report] transport = 'kubernetes';"
                " default [kubernetes] kubeconfig, else the pod's service account)",
            )
            cmd.add_argument("--context", help="kubeconfig context (default: its current one)")
        if action == "devices":
            cmd.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
        if action == "plan":
            cmd.add_argument(
                "--pods-file", help="pods to plan for (YAML PodList or Pods) instead of [pods]"
            )
            cmd.add_argument(
                "--nodeslo-file", help="NodeSLO to plan with (default [qos] nodeslo_file)"
            )
            cmd.add_argument("-o", "--output", choices=("table", "json"), default="table")

    controller = sub.add_parser("controller", parents=[api], help="the central controller")
    controller_sub = controller.add_subparsers(
        dest="controller_command", metavar="ACTION", required=True
    )
    run = controller_sub.add_parser("run", parents=[api], help="run the controller daemon")
    run.add_argument(
        "--config", help="controller TOML config (default /etc/koordpy/controller.toml)"
    )
    run.add_argument("--state-dir", help="where state lives (default /var/lib/koordpy)")
    run.add_argument(
        "--start-fresh",
        action="store_true",
        help="start an empty store where the state dir's database was lost ([store] start_fresh)",
    )
    run.add_argument("--metrics-address", help="metrics listen address (default :9317)")
    cluster = run.add_mutually_exclusive_group()
    cluster.add_argument(
        "--kubeconfig",
        help="control this Kubernetes cluster instead of the embedded store ([kubernetes])",
    )
    cluster.add_argument(
        "--in-cluster",
        action="store_true",
        help="control the cluster this pod runs in, as its service account",
    )
    run.add_argument("--context", help="kubeconfig context (default: its current one)")

    apply = sub.add_parser("apply", parents=[api], help="create or update objects from files")
    apply.add_argument(
        "-f",
        "--filename",
        action="append",
        required=True,
        help="file, directory or - for stdin (repeatable)",
    )
    apply.add_argument("-n", "--namespace", help="namespace for objects that name none")
    apply.add_argument("-o", "--output", choices=("name", "yaml", "json"), help="print objects")

    get = sub.add_parser("get", parents=[api], help="list or show objects")
    get.add_argument("kind", help="kind, plural or short name (po, no, rsv, eq, qu, pmj, pg, ...)")
    get.add_argument("names", nargs="*", help="object names")
    _namespace_options(get)
    get.add_argument("-l", "--selector", help="label selector (app=web,tier!=db,env in (a,b))")
    get.add_argument("-o", "--output", choices=("wide", "yaml", "json", "name"), help="format")
    get.add_argument("-w", "--watch", action="store_true", help="watch for changes")
    get.add_argument(
        "--chunk-size",
        type=int,
        default=500,
        help="list in pages of this many objects (0: in one response)",
    )

    describe = sub.add_parser("describe", parents=[api], help="show an object and its events")
    describe.add_argument("kind")
    describe.add_argument("names", nargs="+")
    _namespace_options(describe)

    delete = sub.add_parser("delete", parents=[api], help="delete objects")
    delete.add_argument("kind", nargs="?")
    delete.add_argument("names", nargs="*")
    delete.add_argument("-f", "--filename", action="append", help="delete what files name")
    _namespace_options(delete)
    delete.add_argument("-l", "--selector", help="delete every object matching the selector")

    simulate = sub.add_parser(
        "simulate", help="run every control loop on a scenario file under a simulated clock"
    )
    simulate.add_argument(
        "-f",
        "--filename",
        required=True,
        help="scenario YAML (multi-document); with --from-cluster, the what-if applied on top",
    )
    simulate.add_argument(
        "-o",
        "--output",
        choices=("yaml", "json", "table"),
        help="yaml/json: every object (with --from-cluster: the changes); table: the changes"
        " (default: yaml, table with --from-cluster)",
    )
    simulate.add_argument(
        "--from-cluster",
        action="store_true",
        help="start from a read-only snapshot of a Kubernetes cluster and print what would change",
    )
    simulate.add_argument(
        "--kubeconfig",
        help="with --from-cluster: the cluster's kubeconfig (default: $KUBECONFIG, else"
        " ~/.kube/config, else in-cluster)",
    )
    simulate.add_argument("--context", help="kubeconfig context (default: its current one)")
    simulate.add_argument(
        "--max-time", default="1h", help="simulated time limit, a duration (default 1h)"
    )

    crds = sub.add_parser(
        "crds", help="print the CustomResourceDefinitions of koordpy's custom kinds"
    )
    crds.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    crds.add_argument(
        "--job-kinds",
        action="store_true",
        help="also the job kinds' (PyTorchJob, RayJob...), for a cluster without their operators",
    )
    return parser


def _namespace_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument("-n", "--namespace", help="namespace (default: default)")
    group.add_argument("-A", "--all-namespaces", action="store_true", help="across every namespace")


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    for option, variable in _API_ENV:
        if not hasattr(args, option):
            setattr(args, option, os.environ.get(variable, ""))
    if args.token_file and not args.token:
        from controller.api.token import TokenError, read_token_file

        try:
            args.token = read_token_file(args.token_file, field="--token-file")
        except TokenError as err:
            print(f"koordpy: {err}", file=sys.stderr)
            return 2
    module_name, _, func_name = COMMANDS[args.command].partition(":")
    handler = getattr(importlib.import_module(module_name), func_name)
    try:
        code: int = handler(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Output piped into `head` and friends: not an error.
        sys.stderr.close()
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main())
