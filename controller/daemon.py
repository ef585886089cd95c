"""``koordpy controller run``: the central controller as a long-running daemon."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from pathlib import Path

from controller import app
from controller.config import DEFAULT_STATE_DIR, ControllerConfig, load
from controller.errors import ConfigError, ControllerError
from runtime import configfile, lifecycle, logs, mqtt
from runtime.exposition import MetricsAddressError

__all__ = ["main", "run"]

log = logging.getLogger(__name__)


async def run(
    cfg: ControllerConfig,
    *,
    state_dir: Path,
    api_address: str | None = None,
    metrics_address: str | None = None,
    api_token: str | None = None,
    stop: asyncio.Event,
    own_process: bool = False,
) -> None:
    """Serve until ``stop`` is set; every resource is closed before returning.

    ``own_process``: the controller is this process's only job, so the garbage collector is
    tuned for its heap once the store is loaded (:func:`runtime.lifecycle.settle_heap`)."""
    async with contextlib.AsyncExitStack() as stack:
        controller = await app.open_controller(
            stack,
            cfg,
            state_dir=state_dir,
            api_address=api_address,
            metrics_address=metrics_address,
            api_token=api_token,
        )
        log.info("controller ready: API %s, state %s", controller.api.address, state_dir)
        if own_process:
            lifecycle.settle_heap()
        lifecycle.notify_ready()
        await lifecycle.run_components(
            controller.components, stop, restarts_metric=controller.restarts
        )
        lifecycle.notify_stopping()


async def run_kubernetes(
    cfg: ControllerConfig,
    *,
    kubeconfig: str | None,
    context: str | None = None,
    metrics_address: str | None = None,
    stop: asyncio.Event,
) -> None:
    """Control the cluster of ``kubeconfig`` (None: in-cluster) until ``stop`` is set."""
    async with contextlib.AsyncExitStack() as stack:
        controller = await app.open_kube_controller(
            stack, cfg, kubeconfig=kubeconfig, context=context, metrics_address=metrics_address
        )
        log.info(
            "controller ready: cluster %s, watching %d kinds",
            controller.client.server,
            len(controller.store.reflectors),
        )
        lifecycle.settle_heap()
        lifecycle.notify_ready()
        await lifecycle.run_components(
            controller.components, stop, restarts_metric=controller.restarts
        )
        lifecycle.notify_stopping()


def _kubeconfig(args: argparse.Namespace, cfg: ControllerConfig) -> tuple[bool, str | None]:
    """(Kubernetes mode?, the kubeconfig file: None for in-cluster)."""
    given = getattr(args, "kubeconfig", None) or cfg.kubernetes.kubeconfig or None
    if given is not None:
        return True, given
    return bool(getattr(args, "in_cluster", False)), None


def main(args: argparse.Namespace) -> int:
    """CLI: ``koordpy controller run [--config F] [--state-dir D] [--api A]``.

    With ``[ingest] transport = "mqtt"`` every file ``[mqtt]`` names (password, CA, client
    certificate and key) is read first: one that cannot be used exits 2 naming it. A broker
    that is down or refuses us is not an error: the controller serves and keeps retrying.
    """
    try:
        cfg = load(args.config).starting_fresh(args.start_fresh)
    except ConfigError as err:
        return configfile.exit_on_error(configfile.ConfigError(str(err)))
    if cfg.ingest.transport == "mqtt":
        try:
            mqtt.check_files(cfg.mqtt)
        except mqtt.MqttFileError as err:
            return configfile.exit_on_error(configfile.ConfigError(f"[mqtt] {err}"))
    logs.setup_logging(cfg.controller.log_level)
    kubernetes, kubeconfig = _kubeconfig(args, cfg)
    if kubernetes:
        return _main_kubernetes(args, cfg, kubeconfig)
    state_dir = Path(args.state_dir or cfg.controller.state_dir or DEFAULT_STATE_DIR)

    async def serve() -> None:
        with lifecycle.stop_event() as stop:
            await run(
                cfg,
                state_dir=state_dir,
                api_address=args.api or None,
                metrics_address=args.metrics_address,
                api_token=args.token or None,
                stop=stop,
                own_process=True,
            )

    try:
        asyncio.run(serve())
    except (ConfigError, MetricsAddressError) as err:
        log.error("cannot start: %s", err)
        return configfile.EXIT_CONFIG
    except ControllerError as err:
        log.error("controller failed: %s", err)
        return 1
    return 0


def _main_kubernetes(
    args: argparse.Namespace, cfg: ControllerConfig, kubeconfig: str | None
) -> int:
    """``koordpy controller run --kubeconfig FILE`` / ``--in-cluster``: a configuration or a
    kubeconfig that cannot be used exits 2; losing the cluster later is retried, not fatal."""
    if kubeconfig is not None and not Path(kubeconfig).is_file():
        return configfile.exit_on_error(
            configfile.ConfigError(f"--kubeconfig: {kubeconfig}: no such file")
        )

    async def serve() -> None:
        with lifecycle.stop_event() as stop:
            await run_kubernetes(
                cfg,
                kubeconfig=kubeconfig,
                context=getattr(args, "context", None) or None,
                metrics_address=args.metrics_address,
                stop=stop,
            )

    try:
        asyncio.run(serve())
    except (ConfigError, MetricsAddressError) as err:
        log.error("cannot start: %s", err)
        return configfile.EXIT_CONFIG
    except TimeoutError as err:
        log.error("cannot start: the cluster's objects were %s", err)
        return 1
    except ControllerError as err:
        log.error("controller failed: %s", err)
        return 1
    return 0
