"""The reservation controller takes its ``ReservationArgs`` from the scheduler configuration in
force (the Reservation plugin's ``pluginConfig`` in ``koord-scheduler-config``), the one the
scheduler loop follows, under every control loop as ``koordpy simulate`` and ``up`` run them."""

from __future__ import annotations

from datetime import timedelta

from controller.loops import LOOPS
from controller.reservations.args import ReservationArgs
from controller.reservations.controller import ReservationController
from tests.manuals.replay import Cluster, node, scheduler_config

#: A reservation nothing owns, expiring 10 minutes in.
SHORT_LIVED = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: short-lived
spec:
  ttl: 10m
  template:
    spec:
      schedulerName: koord-scheduler
      containers:
        - name: main
          resources:
            requests:
              cpu: 500m
  owners:
    - labelSelector:
        matchLabels:
          app: nobody
"""


def reservation_config(reservation_args: str) -> str:
    """The ``koord-scheduler-config`` ConfigMap, the Reservation plugin's args given as YAML
    (a flow mapping)."""
    document = f"""\
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: koord-scheduler
    pluginConfig:
      - name: Reservation
        args: {reservation_args}
"""
    return scheduler_config(document)


def _names(cluster: Cluster) -> list[str]:
    return [r.metadata.name for r in cluster.outcome().all("Reservation")]


def test_gc_duration_of_the_configuration_collects_the_expired_reservation() -> None:
    """``gcDurationSeconds: 300``, ``gcIntervalSeconds: 30``: the reservation fails at 10
    minutes and is deleted 5 minutes later; with the defaults (one day) it stays."""
    configured = reservation_config("{gcDurationSeconds: 300, gcIntervalSeconds: 30}")
    with Cluster(node("node-0"), configured, SHORT_LIVED) as cluster:
        cluster.run(timedelta(minutes=11))
        assert cluster.wire("Reservation", "short-lived")["status"]["phase"] == "Failed"
        cluster.run(timedelta(minutes=3))
        assert _names(cluster) == ["short-lived"]
        cluster.run(timedelta(minutes=2, seconds=30))
        assert _names(cluster) == []

    with Cluster(node("node-0"), SHORT_LIVED) as shipped:
        shipped.run(timedelta(hours=2))
        assert shipped.wire("Reservation", "short-lived")["status"]["phase"] == "Failed"


def test_disable_garbage_collection_keeps_it_and_a_later_configuration_applies() -> None:
    """``disableGarbageCollection: true`` keeps the failed reservation; a new ConfigMap that
    turns collection back on (``gcDurationSeconds: 60``) is taken without a restart."""
    off = reservation_config("{gcDurationSeconds: 60, disableGarbageCollection: true}")
    with Cluster(node("node-0"), off, SHORT_LIVED) as cluster:
        cluster.run(timedelta(minutes=30))
        assert _names(cluster) == ["short-lived"]
        cluster.apply(reservation_config("{gcDurationSeconds: 60}"))
        cluster.run(timedelta(minutes=3))
        assert _names(cluster) == []


def test_a_bad_configuration_is_reported_once_and_the_args_in_force_stay() -> None:
    """A ConfigMap with ``gcIntervalSeconds: 0`` is refused once (one Warning, naming the field
    and the value), by whichever loop reads it first; the collection configured before goes
    on."""
    good = reservation_config("{gcDurationSeconds: 60}")
    with Cluster(node("node-0"), good, SHORT_LIVED) as cluster:
        cluster.apply(reservation_config("{gcDurationSeconds: 60, gcIntervalSeconds: 0}"))
        cluster.run(timedelta(minutes=13))
        assert _names(cluster) == []
        [warning] = cluster.outcome().events("InvalidConfiguration")
        assert "gcIntervalSeconds" in warning.message
        assert "0" in warning.message
        assert warning.source.component == "koord-scheduler"


def test_args_given_are_kept() -> None:
    """A controller built with ``args`` (``gcDurationSeconds: 60``) keeps them under a
    configuration that turns collection off."""
    loops = {**LOOPS, "reservations": lambda: ReservationController(FIXED)}
    off = reservation_config("{disableGarbageCollection: true}")
    with Cluster(node("node-0"), off, SHORT_LIVED, loops=loops) as cluster:
        cluster.run(timedelta(minutes=13))
        assert _names(cluster) == []


FIXED = ReservationArgs(gc_duration_seconds=60)
