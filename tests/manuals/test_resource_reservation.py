"""User manual page ``resource-reservation`` of Koordinator v1.8 (``user-manuals/``).

Replayed: the quick start (``reservation-demo`` and its owner ``pod-demo-0``: the status the
page prints, and the pod still running once the reservation is deleted), the advanced
configuration's ``expires``, the TTL, the reservation on a specified node with multiple owners
(``reservation-demo-big`` shared by ``app-demo``), and the three pre-allocation examples (Default
mode, Cluster mode, multiple pods) with the page's scheduler configuration for pre-allocation,
applied as the scheduler's configuration (a ``KubeSchedulerConfiguration`` document in the
scenario, or the ``koord-scheduler-config`` ConfigMap).

Each test names the step it replays. The quick start and the specified-node example run twice:
as one scenario file through ``koordpy simulate`` (every object there from the start: the
reservation is placed first and its owners then go into it), and step by step as the page does
them (:class:`~tests.manuals.replay.Cluster`: objects created and deleted between runs, as
with ``kubectl`` against ``koordpy up``).

Where the page and Koordinator v1.8 disagree, Koordinator wins and the test says so (spec
§9.1): an allocate-once reservation (the default) is ``Succeeded`` once its owner is in, where
the quick start prints ``Available``; the scheduler places a pre-allocating reservation only
when ``allocatePolicy`` is ``Restricted`` (the page's manifests leave it out: applied unchanged
they stay Pending with the reason on their ``Scheduled`` condition), and only an
``allocateOnce: false`` one keeps reserving what a taken-over pod frees. The page's scheduler
configuration for pre-allocation enables the Reservation plugin at ``plugins.reservation``,
which is no extension point: applied unchanged it is refused naming that field (the plugin is
enabled by default, so the replays use the page's document without that stanza).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from apis import codec
from apis import constants as k
from apis.errors import DecodeError
from apis.scheduling import Reservation
from controller.cli import printing
from tests.crdschema import schema_errors, validator
from tests.koordpy.daemons import cli, running_up
from tests.manuals.replay import Cluster, Outcome, node, replay, scheduler_config

# --- the page's manifests ----------------------------------------------------------------------

RESERVATION_DEMO = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-demo
spec:
  template:
    metadata:
      namespace: default
    spec:
      containers:
        - args:
            - '-c'
            - '1'
          command:
            - stress
          image: polinux/stress
          imagePullPolicy: Always
          name: stress
          resources:
            requests:
              cpu: 500m
              memory: 800Mi
      schedulerName: koord-scheduler
  owners:
    - object:
        name: pod-demo-0
        namespace: default
  ttl: 1h
"""

POD_DEMO_0 = """
apiVersion: v1
kind: Pod
metadata:
  name: pod-demo-0
spec:
  containers:
    - args:
        - '-c'
        - '1'
      command:
        - stress
      image: polinux/stress
      imagePullPolicy: Always
      name: stress
      resources:
        limits:
          cpu: '1'
          memory: 1Gi
        requests:
          cpu: 200m
          memory: 400Mi
  restartPolicy: Always
  schedulerName: koord-scheduler
"""

#: The advanced configuration's example, with its ``YYYY-MM-DDTHH:MM:SSZ`` placeholder filled
#: in: 30 minutes after the start of the simulation, before the ``ttl`` of 1 hour.
RESERVATION_ADVANCED = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-demo
spec:
  template:
    metadata:
      namespace: default
    spec:
      containers:
        - args:
            - '-c'
            - '1'
          command:
            - stress
          image: polinux/stress
          imagePullPolicy: Always
          name: stress
          resources:
            requests:
              cpu: 500m
              memory: 800Mi
      schedulerName: koord-scheduler
  owners:
    - object:
        name: pod-demo-0
        namespace: default
    - labelSelector:
        matchLabels:
          app: app-demo
  ttl: 1h
  expires: "2026-01-01T00:30:00Z"
"""

RESERVATION_DEMO_BIG = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-demo-big
spec:
  allocateOnce: false
  template:
    metadata:
      namespace: default
    spec:
      containers:
        - args:
            - '-c'
            - '1'
          command:
            - stress
          image: polinux/stress
          imagePullPolicy: Always
          name: stress
          resources:
            requests:
              cpu: 6
              memory: 20Gi
      nodeName: node-1
      schedulerName: koord-scheduler
  owners:
    - object:
        name: pod-demo-1
        namespace: default
    - labelSelector:
        matchLabels:
          app: app-demo
  ttl: 1h
"""

#: The page's Deployment ``app-demo`` (step 4), as the page gives it.
APP_DEMO = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-demo
spec:
  replicas: 2
  selector:
    matchLabels:
      app: app-demo
  template:
    metadata:
      name: stress
      labels:
        app: app-demo # match the owner spec of `reservation-demo-big`
    spec:
      schedulerName: koord-scheduler # use koord-scheduler
      containers:
      - name: stress
        image: polinux/stress
        args:
          - '-c'
          - '1'
        command:
          - stress
        resources:
          requests:
            cpu: 2
            memory: 10Gi
          limits:
            cpu: 4
            memory: 20Gi
"""

RESERVATION_PREALLOC = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-prealloc
spec:
  preAllocation: true
  template:
    metadata:
      namespace: default
    spec:
      containers:
        - name: placeholder
          resources:
            requests:
              cpu: 500m
              memory: 800Mi
      schedulerName: koord-scheduler
  owners:
    - labelSelector:
        matchLabels:
          app: my-app
  ttl: 2h
"""

RESERVATION_CLUSTER_MODE = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-cluster-mode
spec:
  preAllocation: true
  preAllocationPolicy:
    mode: Cluster
  template:
    metadata:
      namespace: default
    spec:
      containers:
        - name: placeholder
          resources:
            requests:
              cpu: 2
              memory: 4Gi
      schedulerName: koord-scheduler
  owners:
    - labelSelector:
        matchLabels:
          app: critical-app
  ttl: 4h
"""

RESERVATION_MULTI_PODS = """
apiVersion: scheduling.koordinator.sh/v1alpha1
kind: Reservation
metadata:
  name: reservation-multi-pods
spec:
  preAllocation: true
  preAllocationPolicy:
    mode: Cluster
    enableMultiple: true
  template:
    metadata:
      namespace: default
    spec:
      containers:
        - name: placeholder
          resources:
            requests:
              cpu: 2
              memory: 4Gi
      schedulerName: koord-scheduler
  owners:
    - labelSelector:
        matchLabels:
          app: high-priority-app
  ttl: 4h
"""

#: The page's pre-allocatable batch pods (``batch-job-N``), already running on ``node``: the
#: page labels pods that exist, so here they are bound.
BATCH_JOB = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  labels:
    pod.koordinator.sh/is-pre-allocatable: "true"
  annotations:
    pod.koordinator.sh/pre-allocatable-priority: "{priority}"
spec:
  nodeName: {node}
  containers:
    - name: batch-job
      image: busybox
      resources:
        requests:
          cpu: {cpu}
          memory: {memory}
"""

#: The page's "Scheduler Configuration for PreAllocation", applied unchanged: refused, as
#: kube-scheduler's strict decoding refuses it, ``reservation`` being no extension point.
PAGE_PREALLOCATION_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: koord-scheduler
    plugins:
      reservation:
        enabled:
          - name: Reservation
    pluginConfig:
      - name: Reservation
        args:
          apiVersion: kubescheduler.config.k8s.io/v1
          kind: ReservationArgs
          preAllocationConfig:
            # Enable cluster-wide pre-allocation mode
            enableClusterMode: true
            # Custom label key for identifying pre-allocatable pods (optional)
            clusterLabelKey: pod.koordinator.sh/is-pre-allocatable
            # Custom annotation key for prioritizing pods (optional)
            clusterPriorityAnnotationKey: pod.koordinator.sh/pre-allocatable-priority
            # Prefer placing reservations without using pre-allocatable pods when possible
            preferNoPreAllocatedPods: true
"""
#: The page's configuration as the scheduler takes it: without the ``plugins`` stanza (the
#: Reservation plugin is enabled at all its points by default).
PREALLOCATION_CONFIG = PAGE_PREALLOCATION_CONFIG.replace(
    """    plugins:
      reservation:
        enabled:
          - name: Reservation
""",
    "",
)


def preallocation_config(*, prefer: bool = True) -> str:
    """:data:`PREALLOCATION_CONFIG`, ``preferNoPreAllocatedPods`` set to ``prefer``."""
    return PREALLOCATION_CONFIG.replace(
        "preferNoPreAllocatedPods: true", f"preferNoPreAllocatedPods: {str(prefer).lower()}"
    )


#: The page's nodes (``kubectl get node``): node-1 already has 780m CPU and 1216Mi requested.
NODES = [
    node("node-0", cpu="7800m", memory="28625036Ki"),
    node("node-1", cpu="7800m", memory="28629692Ki"),
    """
apiVersion: v1
kind: Pod
metadata:
  name: system-daemons
  namespace: kube-system
spec:
  nodeName: node-1
  containers:
    - name: daemons
      resources:
        requests:
          cpu: 780m
          memory: 1216Mi
""",
]


# --- helpers -----------------------------------------------------------------------------------


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    with Cluster() as opened:
        yield opened


@pytest.fixture(scope="module")
def reservation_schema(shared_dir: Path) -> jsonschema.Draft7Validator:
    return validator(shared_dir, "scheduling.koordinator.sh/Reservation")


def _allocated_to(pod: Any) -> dict[str, str] | None:
    text = pod["metadata"].get("annotations", {}).get(k.ANNOTATION_RESERVATION_ALLOCATED)
    return None if text is None else dict(json.loads(text))


def _conditions(reservation: Any) -> list[tuple[str, str, str]]:
    return [
        (c["type"], c["status"], c.get("reason", "")) for c in reservation["status"]["conditions"]
    ]


def _owners(reservation: Any) -> list[tuple[str, str, str]]:
    return sorted(
        (o["namespace"], o["name"], o["uid"])
        for o in reservation["status"].get("currentOwners", ())
    )


def _owner_of(pod: Any) -> tuple[str, str, str]:
    meta = pod["metadata"]
    return (meta["namespace"], meta["name"], meta["uid"])


def _valid(schema: jsonschema.Draft7Validator, outcome: Outcome) -> None:
    """Every Reservation of ``outcome``, as it goes on the wire, passes the CRD's schema."""
    reservations = outcome.all("Reservation")
    assert reservations
    for reservation in reservations:
        assert schema_errors(schema, json.loads(codec.encode_json(reservation))) == []


AVAILABLE = [("Scheduled", "True", "Scheduled"), ("Ready", "True", "Available")]
#: An allocate-once reservation once its owner is in: Koordinator v1.8's controller marks it
#: Succeeded in the same status update that writes ``currentOwners`` (the page prints the
#: phase Available next to them, which v1.8 never writes for ``allocateOnce`` left at its
#: default of true).
SUCCEEDED = [("Scheduled", "True", "Scheduled"), ("Ready", "False", "Succeeded")]


# --- Quick Start -------------------------------------------------------------------------------


def _check_quick_start(reservation: Any, pod: Any) -> None:
    """Steps 4 and 5: pod-demo-0 on the reservation's node, allocating from it (the phase as
    Koordinator v1.8 writes it, see :data:`SUCCEEDED`)."""
    assert reservation["status"]["phase"] == "Succeeded"
    node_name = reservation["status"]["nodeName"]
    assert node_name in ("node-0", "node-1")
    assert pod["spec"]["nodeName"] == node_name
    assert pod["status"]["phase"] == "Running"
    assert _allocated_to(pod) == {
        "name": "reservation-demo",
        "uid": reservation["metadata"]["uid"],
    }
    assert reservation["status"]["allocatable"] == {"cpu": "500m", "memory": "800Mi"}
    assert reservation["status"]["allocated"] == {"cpu": "200m", "memory": "400Mi"}
    assert _conditions(reservation) == SUCCEEDED
    assert _owners(reservation) == [_owner_of(pod)]


def test_quick_start_step_by_step(
    cluster: Cluster, reservation_schema: jsonschema.Draft7Validator
) -> None:
    """Quick Start steps 1-6, in the page's order: the reservation becomes Available, then
    pod-demo-0 is created and lands in it; deleting the reservation leaves the pod running."""
    cluster.apply(*NODES, RESERVATION_DEMO)
    reservation = cluster.wire("Reservation", "reservation-demo")
    # Step 2, ``kubectl get reservation reservation-demo -o wide``.
    kind = cluster.store.registry.for_type(Reservation)
    assert printing.headers(kind, wide=True) == ["NAME", "PHASE", "AGE", "NODE", "TTL", "EXPIRES"]
    name, phase, age, node_name, _, _ = printing.row(
        kind, reservation, now=cluster.now + timedelta(seconds=88), wide=True
    )
    assert (name, phase, age) == ("reservation-demo", "Available", "88s")
    assert node_name == reservation["status"]["nodeName"] != ""

    assert schema_errors(reservation_schema, reservation) == []

    cluster.apply(POD_DEMO_0)
    pod = cluster.wire("Pod", "pod-demo-0", "default")
    reservation = cluster.wire("Reservation", "reservation-demo")
    _check_quick_start(reservation, pod)
    assert schema_errors(reservation_schema, reservation) == []

    cluster.delete("Reservation", "reservation-demo")  # step 6
    after = cluster.wire("Pod", "pod-demo-0", "default")
    assert after["status"]["phase"] == "Running"
    assert after["spec"]["nodeName"] == pod["spec"]["nodeName"]
    assert after["metadata"]["uid"] == pod["metadata"]["uid"]


def test_quick_start_in_one_scenario_file(reservation_schema: jsonschema.Draft7Validator) -> None:
    """Quick Start steps 1-5 as one scenario file: the reservation is placed first and
    pod-demo-0, scheduled after it in the same pass, allocates from it."""
    outcome = replay(*NODES, RESERVATION_DEMO, POD_DEMO_0)
    _check_quick_start(
        outcome.wire("Reservation", "reservation-demo"), outcome.wire("Pod", "pod-demo-0")
    )
    _valid(reservation_schema, outcome)


def test_quick_start_ttl_expires_the_unused_reservation(
    reservation_schema: jsonschema.Draft7Validator,
) -> None:
    """Quick Start ``ttl: 1h``: "the reservation will get expired 1 hour later" when pod-demo-0
    has not come: Available for the hour, then Failed with ``Ready=False``, reason Expired."""
    before = replay(*NODES, RESERVATION_DEMO, max_time=timedelta(minutes=59))
    assert before.wire("Reservation", "reservation-demo")["status"]["phase"] == "Available"
    outcome = replay(*NODES, RESERVATION_DEMO, max_time=timedelta(hours=2))
    reservation = outcome.wire("Reservation", "reservation-demo")
    assert reservation["status"]["phase"] == "Failed"
    ready = next(c for c in reservation["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Expired")
    assert ready["lastTransitionTime"].startswith("2026-01-01T01:00:")
    _valid(reservation_schema, outcome)


def test_quick_start_a_consumed_reservation_does_not_expire() -> None:
    """Quick Start ``ttl: 1h`` once pod-demo-0 is in: the reservation is Succeeded (see
    :data:`SUCCEEDED`), which no TTL ends, and the pod runs on where it is."""
    outcome = replay(*NODES, RESERVATION_DEMO, POD_DEMO_0, max_time=timedelta(hours=2))
    reservation = outcome.wire("Reservation", "reservation-demo")
    assert reservation["status"]["phase"] == "Succeeded"
    pod = outcome.wire("Pod", "pod-demo-0")
    assert pod["status"]["phase"] == "Running"
    assert pod["spec"]["nodeName"] == reservation["status"]["nodeName"]


# --- Advanced Configurations -------------------------------------------------------------------


def test_advanced_configuration_expires_is_checked_before_ttl(
    reservation_schema: jsonschema.Draft7Validator,
) -> None:
    """Advanced Configurations: with both ``expires`` (here 30 minutes in) and ``ttl: 1h``,
    ``expires`` is checked first: the unused reservation fails at 30 minutes."""
    outcome = replay(*NODES, RESERVATION_ADVANCED, max_time=timedelta(minutes=40))
    reservation = outcome.wire("Reservation", "reservation-demo")
    assert reservation["status"]["phase"] == "Failed"
    ready = next(c for c in reservation["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "Expired")
    assert ready["lastTransitionTime"].startswith("2026-01-01T00:30:")
    _valid(reservation_schema, outcome)


def test_advanced_configuration_applied_with_its_placeholder_is_refused(cluster: Cluster) -> None:
    """Advanced Configurations applied unchanged: ``expires: "YYYY-MM-DDTHH:MM:SSZ"`` is no
    date-time, so the object is refused (as the API server refuses it) with the field and the
    value, and the reservation-demo already stored is left as it was."""
    cluster.apply(*NODES, RESERVATION_DEMO)
    before = cluster.wire("Reservation", "reservation-demo")
    verbatim = RESERVATION_ADVANCED.replace('"2026-01-01T00:30:00Z"', '"YYYY-MM-DDTHH:MM:SSZ"')
    with pytest.raises(DecodeError) as refused:
        cluster.apply(verbatim)
    assert "spec.expires" in str(refused.value)
    assert "YYYY-MM-DDTHH:MM:SSZ" in str(refused.value)
    assert cluster.wire("Reservation", "reservation-demo") == before


def test_advanced_configuration_owner_by_label_selector() -> None:
    """Advanced Configurations: owners are ORed, so a replica of app-demo (label app=app-demo)
    allocates from the reservation as pod-demo-0 would; the reservation being allocate-once,
    only one of the two does."""
    outcome = replay(*NODES, RESERVATION_ADVANCED, APP_DEMO, max_time=timedelta(minutes=10))
    reservation = outcome.wire("Reservation", "reservation-demo")
    pods = _app_demo(outcome)
    assert len(pods) == 2
    allocated = [p for p in pods if _allocated_to(p) is not None]
    assert [_allocated_to(p) for p in allocated] == [
        {"name": "reservation-demo", "uid": reservation["metadata"]["uid"]}
    ]
    assert _owners(reservation) == [_owner_of(allocated[0])]
    assert reservation["status"]["phase"] == "Succeeded"


# --- Example: Reserve on Specified Node, with Multiple Owners ---------------------------------


def _app_demo(found: Outcome | Cluster) -> list[Any]:
    """The pods of app-demo (``kubectl get pod -l app=app-demo``), as JSON data."""
    return [json.loads(codec.encode_json(p)) for p in found.pods(app="app-demo")]


def _check_demo_big(reservation: Any, pods: list[Any]) -> None:
    """Steps 3, 5 and 6: on node-1 as its template says, both replicas of app-demo (pods of its
    ReplicaSet, named after it) in it."""
    assert len(pods) == 2
    for pod in pods:
        assert re.fullmatch(r"app-demo-[a-z0-9]+-[a-z0-9]{5}", pod["metadata"]["name"])
        [owner] = pod["metadata"]["ownerReferences"]
        assert (owner["kind"], owner["controller"]) == ("ReplicaSet", True)
        assert pod["metadata"]["name"].startswith(owner["name"] + "-")
    assert reservation["status"]["phase"] == "Available"
    assert reservation["status"]["nodeName"] == "node-1"
    for pod in pods:
        assert pod["spec"]["nodeName"] == "node-1"
        assert pod["status"]["phase"] == "Running"
        assert _allocated_to(pod) == {
            "name": "reservation-demo-big",
            "uid": reservation["metadata"]["uid"],
        }
    assert reservation["status"]["allocatable"] == {"cpu": "6", "memory": "20Gi"}
    assert reservation["status"]["allocated"] == {"cpu": "4", "memory": "20Gi"}
    assert _conditions(reservation) == AVAILABLE
    assert _owners(reservation) == sorted(_owner_of(p) for p in pods)


def test_specified_node_with_multiple_owners_in_one_scenario_file(
    reservation_schema: jsonschema.Draft7Validator,
) -> None:
    """Reserve on Specified Node, with Multiple Owners: reservation-demo-big (6 CPU, 20Gi,
    ``allocateOnce: false``, ``nodeName: node-1``) takes both replicas of app-demo (2 CPU,
    10Gi each), the pods of the page's Deployment.

    node-1 has 7.8 CPU and 780m requested already: were the replicas counted on top of the
    reservation (0.78 + 6 + 2 + 2 CPU), the second one could not fit there.
    """
    outcome = replay(*NODES, RESERVATION_DEMO_BIG, APP_DEMO)
    _check_demo_big(outcome.wire("Reservation", "reservation-demo-big"), _app_demo(outcome))
    deployment = outcome.wire("Deployment", "app-demo")
    assert deployment["status"]["availableReplicas"] == 2
    _valid(reservation_schema, outcome)


def test_specified_node_with_multiple_owners_step_by_step(cluster: Cluster) -> None:
    """Reserve on Specified Node, with Multiple Owners, steps 2-6 in the page's order."""
    cluster.apply(*NODES, RESERVATION_DEMO_BIG)
    reservation = cluster.wire("Reservation", "reservation-demo-big")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-1",
    )
    cluster.apply(APP_DEMO)
    _check_demo_big(cluster.wire("Reservation", "reservation-demo-big"), _app_demo(cluster))


def test_a_replaced_replica_of_app_demo_goes_back_into_the_reservation(cluster: Cluster) -> None:
    """Reserve on Specified Node, with Multiple Owners, after step 6: a pod of app-demo
    deleted, its ReplicaSet makes another (a new name), which allocates the room the deleted one
    freed in reservation-demo-big (``allocateOnce: false``); the owners follow."""
    cluster.apply(*NODES, RESERVATION_DEMO_BIG, APP_DEMO)
    gone, kept = _app_demo(cluster)
    cluster.delete("Pod", gone["metadata"]["name"], "default")
    cluster.run(timedelta(seconds=30))
    pods = _app_demo(cluster)
    names = {p["metadata"]["name"] for p in pods}
    assert kept["metadata"]["name"] in names
    assert gone["metadata"]["name"] not in names
    _check_demo_big(cluster.wire("Reservation", "reservation-demo-big"), pods)


def test_the_owners_allocation_does_not_increase_the_nodes_requests(cluster: Cluster) -> None:
    """Reserve on Specified Node, step 6: "The allocation for reserved resources does not
    increase the requested of node resources". node-1 has 7.8 CPU: 780m for its daemons, 6 for
    the reservation (4 of them used by app-demo), so a 1 CPU pod that owns nothing still fits
    there; one of 1.1 CPU does not (the unused 2 CPU of the reservation stay reserved)."""
    pinned = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  nodeSelector:
    kubernetes.io/hostname: node-1
  containers:
    - name: main
      resources:
        requests:
          cpu: {cpu}
          memory: 1Gi
"""
    cluster.apply(*NODES, RESERVATION_DEMO_BIG)
    cluster.apply(APP_DEMO)
    cluster.apply(pinned.format(name="too-big", cpu="1100m"))
    assert cluster.wire("Pod", "too-big", "default")["spec"].get("nodeName", "") == ""
    cluster.apply(pinned.format(name="fits", cpu="1"))
    fits = cluster.wire("Pod", "fits", "default")
    assert fits["spec"]["nodeName"] == "node-1"
    assert _allocated_to(fits) is None


# --- Examples: PreAllocation -------------------------------------------------------------------


def _restricted(manifest: str) -> str:
    """The page's pre-allocating reservation as Koordinator v1.8 places it: ``allocatePolicy:
    Restricted``, and ``allocateOnce: false`` so that what a taken-over pod frees stays
    reserved."""
    return manifest.replace(
        "  preAllocation: true\n",
        "  preAllocation: true\n  allocatePolicy: Restricted\n  allocateOnce: false\n",
    )


@pytest.mark.parametrize(
    "manifest",
    [RESERVATION_PREALLOC, RESERVATION_CLUSTER_MODE, RESERVATION_MULTI_PODS],
    ids=["default-mode", "cluster-mode", "multiple"],
)
def test_pre_allocation_applied_unchanged_says_what_koordinator_requires(
    manifest: str, reservation_schema: jsonschema.Draft7Validator
) -> None:
    """The three PreAllocation examples as the page writes them: accepted (stored, valid), but
    Koordinator v1.8's scheduler places a pre-allocating reservation only with the Restricted
    policy; it stays Pending and its Scheduled condition says why."""
    batch = BATCH_JOB.format(name="batch-job-1", priority=100, node="node-0", cpu=2, memory="4Gi")
    outcome = replay(*NODES, batch, PREALLOCATION_CONFIG, manifest, max_time=timedelta(minutes=1))
    (reservation,) = (codec.to_builtins(r) for r in outcome.all("Reservation"))
    assert reservation["status"].get("phase", "Pending") == "Pending"
    assert reservation["status"].get("nodeName", "") == ""
    ((kind, status, reason),) = _conditions(reservation)
    assert (kind, status, reason) == ("Scheduled", "False", "Unschedulable")
    assert (
        "reservation pre allocation is unsupported with current attributes"
        in (reservation["status"]["conditions"][0]["message"])
    )
    _valid(reservation_schema, outcome)


MY_APP = """
apiVersion: v1
kind: Pod
metadata:
  name: my-app-0
  labels:
    app: my-app
  annotations:
    koordpy.io/simulated-runtime: 20m
spec:
  nodeName: node-0
  containers:
    - name: main
      resources:
        requests:
          cpu: 500m
          memory: 800Mi
"""


def test_pre_allocation_default_mode(
    cluster: Cluster, reservation_schema: jsonschema.Draft7Validator
) -> None:
    """PreAllocation with Default Mode: the reservation binds to the running pod matching its
    owners (app=my-app) and, when that pod terminates, keeps reserving what it freed for future
    owners (with Restricted and ``allocateOnce: false``, see :func:`_restricted`)."""
    cluster.apply(*NODES, MY_APP, _restricted(RESERVATION_PREALLOC))
    reservation = cluster.wire("Reservation", "reservation-prealloc")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-0",
    )
    pod = cluster.wire("Pod", "my-app-0", "default")
    assert _allocated_to(pod) == {
        "name": "reservation-prealloc",
        "uid": reservation["metadata"]["uid"],
    }
    assert _owners(reservation) == [_owner_of(pod)]
    assert reservation["status"]["allocated"] == {"cpu": "500m", "memory": "800Mi"}

    cluster.run(timedelta(minutes=30))  # my-app-0 finishes after 20 minutes
    assert cluster.wire("Pod", "my-app-0", "default")["status"]["phase"] == "Succeeded"
    reservation = cluster.wire("Reservation", "reservation-prealloc")
    assert reservation["status"]["phase"] == "Available"
    assert reservation["status"]["nodeName"] == "node-0"
    assert _owners(reservation) == []
    assert reservation["status"].get("allocated", {}) == {}

    # The freed room is reserved for the owners: a new my-app pod goes into it.
    cluster.apply(MY_APP.replace("my-app-0", "my-app-1").replace("  nodeName: node-0\n", ""))
    newcomer = cluster.wire("Pod", "my-app-1", "default")
    assert newcomer["spec"]["nodeName"] == "node-0"
    assert _allocated_to(newcomer) == {
        "name": "reservation-prealloc",
        "uid": reservation["metadata"]["uid"],
    }
    reservation = cluster.wire("Reservation", "reservation-prealloc")
    assert _owners(reservation) == [_owner_of(newcomer)]
    assert schema_errors(reservation_schema, reservation) == []


#: A running pod on node-0 that is not pre-allocatable.
SERVICE = """
apiVersion: v1
kind: Pod
metadata:
  name: service
spec:
  nodeName: node-0
  containers:
    - name: main
      resources:
        requests:
          cpu: 2
          memory: 4Gi
"""


def _full_node() -> list[str]:
    """One node of 4 CPU / 8Gi, so that a reservation fits only by taking over pods (the
    page's configuration prefers not to take any when the node has room)."""
    return [node("node-0", cpu="4", memory="8Gi")]


def test_pre_allocation_cluster_mode(reservation_schema: jsonschema.Draft7Validator) -> None:
    """PreAllocation with Cluster Mode, under the page's scheduler configuration
    (``enableClusterMode``): the highest-priority pod labelled pre-allocatable (batch-job-1,
    priority 100) is taken; a second candidate of priority 10 is added on the node here to show
    the choice."""
    outcome = replay(
        PREALLOCATION_CONFIG,
        *_full_node(),
        BATCH_JOB.format(name="batch-job-0", priority=10, node="node-0", cpu=2, memory="4Gi"),
        BATCH_JOB.format(name="batch-job-1", priority=100, node="node-0", cpu=2, memory="4Gi"),
        _restricted(RESERVATION_CLUSTER_MODE),
    )
    reservation = outcome.wire("Reservation", "reservation-cluster-mode")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-0",
    )
    taken = outcome.wire("Pod", "batch-job-1")
    assert _allocated_to(taken) == {
        "name": "reservation-cluster-mode",
        "uid": reservation["metadata"]["uid"],
    }
    assert _allocated_to(outcome.wire("Pod", "batch-job-0")) is None
    assert _owners(reservation) == [_owner_of(taken)]
    assert reservation["status"]["allocated"] == {"cpu": "2", "memory": "4Gi"}
    _valid(reservation_schema, outcome)


def test_pre_allocation_cluster_mode_needs_it_enabled() -> None:
    """PreAllocation with Cluster Mode without the page's scheduler configuration: the
    reservation stays Pending, its condition naming the disabled cluster mode."""
    outcome = replay(
        *_full_node(),
        BATCH_JOB.format(name="batch-job-1", priority=100, node="node-0", cpu=2, memory="4Gi"),
        _restricted(RESERVATION_CLUSTER_MODE),
        max_time=timedelta(minutes=1),
    )
    reservation = outcome.wire("Reservation", "reservation-cluster-mode")
    assert reservation["status"].get("nodeName", "") == ""
    (condition,) = reservation["status"]["conditions"]
    assert (
        "reservation requires cluster mode pre-allocation which is disabled"
        in (condition["message"])
    )


def test_pre_allocation_with_multiple_pods(reservation_schema: jsonschema.Draft7Validator) -> None:
    """PreAllocation with Multiple Pods: batch-job-1 and batch-job-2 (1 CPU, 2Gi each) are both
    taken for the 2 CPU / 4Gi reservation; the node's other pod (2 CPU, 4Gi, not
    pre-allocatable) is not."""
    outcome = replay(
        PREALLOCATION_CONFIG,
        *_full_node(),
        SERVICE,
        BATCH_JOB.format(name="batch-job-1", priority=100, node="node-0", cpu=1, memory="2Gi"),
        BATCH_JOB.format(name="batch-job-2", priority=90, node="node-0", cpu=1, memory="2Gi"),
        _restricted(RESERVATION_MULTI_PODS),
    )
    reservation = outcome.wire("Reservation", "reservation-multi-pods")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-0",
    )
    expected = {"name": "reservation-multi-pods", "uid": reservation["metadata"]["uid"]}
    taken = [outcome.wire("Pod", name) for name in ("batch-job-1", "batch-job-2")]
    assert [_allocated_to(p) for p in taken] == [expected, expected]
    assert _allocated_to(outcome.wire("Pod", "service")) is None
    assert _owners(reservation) == sorted(_owner_of(p) for p in taken)
    assert reservation["status"]["allocated"] == {"cpu": "2", "memory": "4Gi"}
    _valid(reservation_schema, outcome)


def test_specified_node_owner_by_object_reference() -> None:
    """Reserve on Specified Node, with Multiple Owners: the first owner entry names the pod
    default/pod-demo-1; that pod (pod-demo-0's manifest under this name) goes into
    reservation-demo-big on node-1 with the replicas of app-demo."""
    pod_demo_1 = POD_DEMO_0.replace("name: pod-demo-0", "name: pod-demo-1")
    outcome = replay(*NODES, RESERVATION_DEMO_BIG, APP_DEMO, pod_demo_1)
    reservation = outcome.wire("Reservation", "reservation-demo-big")
    pods = [*_app_demo(outcome), outcome.wire("Pod", "pod-demo-1")]
    assert len(pods) == 3
    expected = {"name": "reservation-demo-big", "uid": reservation["metadata"]["uid"]}
    assert [(p["spec"]["nodeName"], _allocated_to(p)) for p in pods] == [("node-1", expected)] * 3
    assert _owners(reservation) == sorted(_owner_of(p) for p in pods)
    # Aligned (the default policy): pod-demo-1's memory comes from the node, the reservation's
    # 20Gi being used up by app-demo; ``allocated`` is masked to the reservation's resources.
    assert reservation["status"]["allocated"] == {"cpu": "4200m", "memory": "20880Mi"}


@pytest.mark.slow
def test_quick_start_in_one_apply_to_a_live_koordpy_up(
    tmp_path: Path, reservation_schema: jsonschema.Draft7Validator
) -> None:
    """Quick Start steps 1 and 3 in one ``koordpy apply -f`` against ``koordpy up`` (its one
    node is this host): the reservation becomes Available and pod-demo-0 allocates from it."""
    manifest = tmp_path / "quick-start.yaml"
    manifest.write_text(f"{RESERVATION_DEMO}\n---\n{POD_DEMO_0}")
    with running_up(tmp_path / "state") as up:
        applied = cli(up.api, "apply", "-f", str(manifest))
        assert applied.returncode == 0, applied.stderr
        deadline = time.monotonic() + 60
        while True:
            got = cli(up.api, "get", "reservation", "reservation-demo", "-o", "json")
            assert got.returncode == 0, got.stderr
            reservation = json.loads(got.stdout)
            if reservation["status"].get("currentOwners"):
                break
            assert time.monotonic() < deadline, reservation["status"]
            time.sleep(0.5)
        pod = json.loads(cli(up.api, "get", "pod", "pod-demo-0", "-o", "json").stdout)
    assert pod["spec"]["nodeName"] == reservation["status"]["nodeName"] == "test-host"
    assert _allocated_to(pod) == {"name": "reservation-demo", "uid": reservation["metadata"]["uid"]}
    assert reservation["status"]["allocated"] == {"cpu": "200m", "memory": "400Mi"}
    assert _owners(reservation) == [_owner_of(pod)]
    assert schema_errors(reservation_schema, reservation) == []


def test_pre_allocation_with_multiple_pods_keeps_what_they_free() -> None:
    """PreAllocation with Multiple Pods, step 3: "When these pods terminate, the reservation
    will transition to reserve the freed resources" (with Restricted and ``allocateOnce:
    false``, see :func:`_restricted`): Available with nothing allocated, its 2 CPU / 4Gi still
    held, so a pod owning nothing does not get them."""
    finishing = BATCH_JOB.replace(
        "  annotations:\n", "  annotations:\n    koordpy.io/simulated-runtime: 10m\n"
    )
    with Cluster(scheduler_config(PREALLOCATION_CONFIG)) as cluster:
        cluster.apply(
            *_full_node(),
            SERVICE,
            finishing.format(name="batch-job-1", priority=100, node="node-0", cpu=1, memory="2Gi"),
            finishing.format(name="batch-job-2", priority=90, node="node-0", cpu=1, memory="2Gi"),
            _restricted(RESERVATION_MULTI_PODS),
        )
        reservation = cluster.wire("Reservation", "reservation-multi-pods")
        assert len(_owners(reservation)) == 2
        cluster.run(timedelta(minutes=15))
        for name in ("batch-job-1", "batch-job-2"):
            assert cluster.wire("Pod", name, "default")["status"]["phase"] == "Succeeded"
        reservation = cluster.wire("Reservation", "reservation-multi-pods")
        assert reservation["status"]["phase"] == "Available"
        assert _owners(reservation) == []
        assert reservation["status"].get("allocated", {}) == {}
        cluster.apply(
            """
apiVersion: v1
kind: Pod
metadata:
  name: newcomer
spec:
  containers:
    - name: main
      resources:
        requests:
          cpu: 1
          memory: 1Gi
"""
        )
        assert cluster.wire("Pod", "newcomer", "default")["spec"].get("nodeName", "") == ""


@pytest.mark.parametrize(("prefer", "taken"), [(True, False), (False, True)])
def test_pre_allocation_prefer_no_pre_allocated_pods(prefer: bool, taken: bool) -> None:
    """Scheduler Configuration for PreAllocation, ``preferNoPreAllocatedPods``: "prefer placing
    reservations without using pre-allocatable pods if the node has sufficient resources". On
    node-0, with 2 CPU / 4Gi free beside batch-job-1, the Cluster-mode reservation takes no pod
    when it is on (the page's configuration), and takes batch-job-1 when it is off."""
    outcome = replay(
        preallocation_config(prefer=prefer),
        *_full_node(),
        BATCH_JOB.format(name="batch-job-1", priority=100, node="node-0", cpu=2, memory="4Gi"),
        _restricted(RESERVATION_CLUSTER_MODE),
    )
    reservation = outcome.wire("Reservation", "reservation-cluster-mode")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-0",
    )
    allocated = _allocated_to(outcome.wire("Pod", "batch-job-1"))
    assert (allocated is not None) is taken
    assert bool(_owners(reservation)) is taken


def test_the_pages_scheduler_configuration_applied_unchanged_is_refused() -> None:
    """Scheduler Configuration for PreAllocation, as the page writes it: ``plugins.reservation``
    is no extension point of a KubeSchedulerConfiguration, so the document is refused naming
    that field, in a scenario file and as the ``koord-scheduler-config`` ConfigMap (which gets
    a Warning; the shipped configuration stays, Cluster mode off)."""
    with pytest.raises(DecodeError) as refused:
        replay(*_full_node(), PAGE_PREALLOCATION_CONFIG)
    assert "profiles[0].plugins.reservation" in str(refused.value)

    batch = BATCH_JOB.format(name="batch-job-1", priority=100, node="node-0", cpu=2, memory="4Gi")
    with Cluster(*_full_node(), batch, scheduler_config(PAGE_PREALLOCATION_CONFIG)) as cluster:
        cluster.apply(_restricted(RESERVATION_CLUSTER_MODE))
        [warning] = cluster.outcome().events("InvalidConfiguration")
        assert "profiles[0].plugins.reservation" in warning.message
        reservation = cluster.wire("Reservation", "reservation-cluster-mode")
        assert reservation["status"].get("nodeName", "") == ""
        (condition,) = reservation["status"]["conditions"]
        assert "cluster mode pre-allocation which is disabled" in condition["message"]
