"""User manual page ``resource-reservation`` of Koordinator v1.8 (``user-manuals/``).

Replayed: the quick start (``reservation-demo`` and its owner ``pod-demo-0``: the status the
page prints, and the pod still running once the reservation is deleted), the advanced
configuration's ``expires``, the TTL, the reservation on a specified node with multiple owners
(``reservation-demo-big`` shared by ``app-demo``), and the three pre-allocation examples (Default
mode, Cluster mode, multiple pods) with the page's scheduler configuration for pre-allocation.

Each test names the step it replays. The quick start and the specified-node example run twice:
as one scenario file through ``koordpy simulate`` (every object there from the start: the
reservation is placed first and its owners then go into it), and step by step as the page does
them (:class:`Cluster`: a memory store with every control loop, objects created and deleted
between runs, as with ``kubectl`` against ``koordpy up``).

Where the page and Koordinator v1.8 disagree, Koordinator wins and the test says so (spec
§9.1): an allocate-once reservation (the default) is ``Succeeded`` once its owner is in, where
the quick start prints ``Available``; the scheduler places a pre-allocating reservation only
when ``allocatePolicy`` is ``Restricted`` (the page's manifests leave it out: applied unchanged
they stay Pending with the reason on their ``Scheduled`` condition), and only an
``allocateOnce: false`` one keeps reserving what a taken-over pod frees. The page's Deployment
``app-demo`` is written as the two pods it creates.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import pytest

from apis import codec
from apis import constants as k
from apis.core import Pod
from apis.errors import DecodeError
from apis.meta import Object
from apis.scheduling import Reservation
from controller import printing
from controller import simulate as sim
from controller.loops import LOOPS, ControlLoop, LoopContext, LoopFactory, build_loops
from controller.scheduler.loop import SchedulerLoop
from controller.scheduler.profile import DEFAULT_CONFIG, PluginConfig, build_profile
from controller.store import Store
from tests.crdschema import schema_errors, validator
from tests.koordpy.daemons import cli, running_up
from tests.manuals.replay import Outcome, node, replay

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

#: The replicas of the page's Deployment ``app-demo`` (2 replicas), as the bare pods it makes:
#: the pod template's labels, scheduler and resources.
APP_DEMO_REPLICA = """
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels:
    app: app-demo
spec:
  schedulerName: koord-scheduler
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
APP_DEMO = [APP_DEMO_REPLICA.format(name=f"app-demo-798c66db46-{s}") for s in ("ctnbr", "pzphc")]

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

#: ``pluginConfig`` args of the Reservation plugin in the page's "Scheduler Configuration for
#: PreAllocation".
PREALLOCATION_ARGS: Mapping[str, Any] = {
    "preAllocationConfig": {
        "enableClusterMode": True,
        "clusterLabelKey": "pod.koordinator.sh/is-pre-allocatable",
        "clusterPriorityAnnotationKey": "pod.koordinator.sh/pre-allocatable-priority",
        "preferNoPreAllocatedPods": True,
    }
}

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


def _loops(reservation_args: Mapping[str, Any]) -> dict[str, LoopFactory]:
    """The control loops, the scheduler's Reservation plugin configured with ``reservation_args``
    (what the scheduler configuration's ``pluginConfig`` gives it)."""
    config = msgspec.structs.replace(
        DEFAULT_CONFIG,
        plugin_config=(
            *DEFAULT_CONFIG.plugin_config,
            PluginConfig(name="Reservation", args=dict(reservation_args)),
        ),
    )
    profile = build_profile(config)
    return {**LOOPS, "scheduler": lambda: SchedulerLoop([profile])}


def _replay_configured(
    reservation_args: Mapping[str, Any], *documents: str, max_time: timedelta = timedelta(hours=1)
) -> Outcome:
    objects = sim.scenario_objects("\n---\n".join(documents), source="manual")
    return Outcome(sim.simulate(objects, max_time=max_time, loops=_loops(reservation_args)))


class Cluster:
    """The page's steps one after the other: a memory store, every control loop, and a clock
    that moves only when asked; between runs objects are created or deleted as with kubectl."""

    def __init__(self, loops: Mapping[str, LoopFactory] | None = None) -> None:
        self.now = sim.EPOCH
        self.store = Store(path=None, clock=lambda: self.now, seed=sim.SEED)
        self._loops: list[ControlLoop] = build_loops(loops)
        self._ctx = LoopContext(store=self.store, now=lambda: self.now)

    def create(self, *documents: str) -> None:
        """``kubectl create -f``, then the loops until nothing changes."""
        for obj in sim.scenario_objects("\n---\n".join(documents), source="manual"):
            self.store.apply(obj)
        self.run()

    def delete(self, kind: type[Object], name: str, namespace: str = "") -> None:
        self.store.delete(self.store.registry.for_type(kind), name, namespace)
        self.run()

    def run(self, duration: timedelta = timedelta(0)) -> None:
        """The loops as ``koordpy simulate`` runs them, for ``duration`` of simulated time."""
        deadline = self.now + duration
        while True:
            wake: float | None = None
            for _ in range(sim.MAX_PASSES_PER_INSTANT):
                before = self.store.resource_version
                waits = [
                    w for w in (loop.reconcile(self._ctx) for loop in self._loops) if w is not None
                ]
                wake = min(waits, default=None)
                if self.store.resource_version == before:
                    break
            else:
                raise AssertionError("the loops do not converge")
            step = timedelta(seconds=max(wake, 0.001)) if wake is not None else None
            if step is None or self.now + step > deadline:
                return
            self.now += step

    def wire(self, kind: type[Object], name: str, namespace: str = "") -> Any:
        """The stored object as JSON data, as ``kubectl get -o json`` shows it."""
        found = self.store.get(self.store.registry.for_type(kind), name, namespace)
        return json.loads(codec.encode_json(found))

    def close(self) -> None:
        self.store.close()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    opened = Cluster()
    try:
        yield opened
    finally:
        opened.close()


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
    cluster.create(*NODES, RESERVATION_DEMO)
    reservation = cluster.wire(Reservation, "reservation-demo")
    # Step 2, ``kubectl get reservation reservation-demo -o wide``.
    kind = cluster.store.registry.for_type(Reservation)
    assert printing.headers(kind, wide=True) == ["NAME", "PHASE", "AGE", "NODE", "TTL", "EXPIRES"]
    name, phase, age, node_name, _, _ = printing.row(
        kind, reservation, now=cluster.now + timedelta(seconds=88), wide=True
    )
    assert (name, phase, age) == ("reservation-demo", "Available", "88s")
    assert node_name == reservation["status"]["nodeName"] != ""

    assert schema_errors(reservation_schema, reservation) == []

    cluster.create(POD_DEMO_0)
    pod = cluster.wire(Pod, "pod-demo-0", "default")
    reservation = cluster.wire(Reservation, "reservation-demo")
    _check_quick_start(reservation, pod)
    assert schema_errors(reservation_schema, reservation) == []

    cluster.delete(Reservation, "reservation-demo")  # step 6
    after = cluster.wire(Pod, "pod-demo-0", "default")
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
    cluster.create(*NODES, RESERVATION_DEMO)
    before = cluster.wire(Reservation, "reservation-demo")
    verbatim = RESERVATION_ADVANCED.replace('"2026-01-01T00:30:00Z"', '"YYYY-MM-DDTHH:MM:SSZ"')
    with pytest.raises(DecodeError) as refused:
        cluster.create(verbatim)
    assert "spec.expires" in str(refused.value)
    assert "YYYY-MM-DDTHH:MM:SSZ" in str(refused.value)
    assert cluster.wire(Reservation, "reservation-demo") == before


def test_advanced_configuration_owner_by_label_selector() -> None:
    """Advanced Configurations: owners are ORed, so a pod labelled app=app-demo allocates from
    the reservation as pod-demo-0 would."""
    outcome = replay(*NODES, RESERVATION_ADVANCED, APP_DEMO[0], max_time=timedelta(minutes=10))
    reservation = outcome.wire("Reservation", "reservation-demo")
    pod = outcome.wire("Pod", "app-demo-798c66db46-ctnbr")
    assert _allocated_to(pod) == {"name": "reservation-demo", "uid": reservation["metadata"]["uid"]}
    assert _owners(reservation) == [_owner_of(pod)]


# --- Example: Reserve on Specified Node, with Multiple Owners ---------------------------------


def _check_demo_big(reservation: Any, pods: list[Any]) -> None:
    """Steps 3, 5 and 6: on node-1 as its template says, both replicas in it."""
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
    10Gi each). The page creates them with a Deployment; here they are its two pods.

    node-1 has 7.8 CPU and 780m requested already: were the replicas counted on top of the
    reservation (0.78 + 6 + 2 + 2 CPU), the second one could not fit there.
    """
    outcome = replay(*NODES, RESERVATION_DEMO_BIG, *APP_DEMO)
    pods = [outcome.wire("Pod", f"app-demo-798c66db46-{s}") for s in ("ctnbr", "pzphc")]
    _check_demo_big(outcome.wire("Reservation", "reservation-demo-big"), pods)
    _valid(reservation_schema, outcome)


def test_specified_node_with_multiple_owners_step_by_step(cluster: Cluster) -> None:
    """Reserve on Specified Node, with Multiple Owners, steps 2-6 in the page's order (the
    Deployment's pods created as bare pods)."""
    cluster.create(*NODES, RESERVATION_DEMO_BIG)
    reservation = cluster.wire(Reservation, "reservation-demo-big")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-1",
    )
    cluster.create(*APP_DEMO)
    pods = [cluster.wire(Pod, f"app-demo-798c66db46-{s}", "default") for s in ("ctnbr", "pzphc")]
    _check_demo_big(cluster.wire(Reservation, "reservation-demo-big"), pods)


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
    cluster.create(*NODES, RESERVATION_DEMO_BIG)
    cluster.create(*APP_DEMO)
    cluster.create(pinned.format(name="too-big", cpu="1100m"))
    assert cluster.wire(Pod, "too-big", "default")["spec"].get("nodeName", "") == ""
    cluster.create(pinned.format(name="fits", cpu="1"))
    fits = cluster.wire(Pod, "fits", "default")
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
    outcome = _replay_configured(
        PREALLOCATION_ARGS, *NODES, batch, manifest, max_time=timedelta(minutes=1)
    )
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
    cluster.create(*NODES, MY_APP, _restricted(RESERVATION_PREALLOC))
    reservation = cluster.wire(Reservation, "reservation-prealloc")
    assert (reservation["status"]["phase"], reservation["status"]["nodeName"]) == (
        "Available",
        "node-0",
    )
    pod = cluster.wire(Pod, "my-app-0", "default")
    assert _allocated_to(pod) == {
        "name": "reservation-prealloc",
        "uid": reservation["metadata"]["uid"],
    }
    assert _owners(reservation) == [_owner_of(pod)]
    assert reservation["status"]["allocated"] == {"cpu": "500m", "memory": "800Mi"}

    cluster.run(timedelta(minutes=30))  # my-app-0 finishes after 20 minutes
    assert cluster.wire(Pod, "my-app-0", "default")["status"]["phase"] == "Succeeded"
    reservation = cluster.wire(Reservation, "reservation-prealloc")
    assert reservation["status"]["phase"] == "Available"
    assert reservation["status"]["nodeName"] == "node-0"
    assert _owners(reservation) == []
    assert reservation["status"].get("allocated", {}) == {}

    # The freed room is reserved for the owners: a new my-app pod goes into it.
    cluster.create(MY_APP.replace("my-app-0", "my-app-1").replace("  nodeName: node-0\n", ""))
    newcomer = cluster.wire(Pod, "my-app-1", "default")
    assert newcomer["spec"]["nodeName"] == "node-0"
    assert _allocated_to(newcomer) == {
        "name": "reservation-prealloc",
        "uid": reservation["metadata"]["uid"],
    }
    reservation = cluster.wire(Reservation, "reservation-prealloc")
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
    outcome = _replay_configured(
        PREALLOCATION_ARGS,
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
    outcome = _replay_configured(
        {},
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
    outcome = _replay_configured(
        PREALLOCATION_ARGS,
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
    outcome = replay(*NODES, RESERVATION_DEMO_BIG, *APP_DEMO, pod_demo_1)
    reservation = outcome.wire("Reservation", "reservation-demo-big")
    pods = [
        outcome.wire("Pod", name)
        for name in ("app-demo-798c66db46-ctnbr", "app-demo-798c66db46-pzphc", "pod-demo-1")
    ]
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
    cluster = Cluster(_loops(PREALLOCATION_ARGS))
    try:
        cluster.create(
            *_full_node(),
            SERVICE,
            finishing.format(name="batch-job-1", priority=100, node="node-0", cpu=1, memory="2Gi"),
            finishing.format(name="batch-job-2", priority=90, node="node-0", cpu=1, memory="2Gi"),
            _restricted(RESERVATION_MULTI_PODS),
        )
        reservation = cluster.wire(Reservation, "reservation-multi-pods")
        assert len(_owners(reservation)) == 2
        cluster.run(timedelta(minutes=15))
        for name in ("batch-job-1", "batch-job-2"):
            assert cluster.wire(Pod, name, "default")["status"]["phase"] == "Succeeded"
        reservation = cluster.wire(Reservation, "reservation-multi-pods")
        assert reservation["status"]["phase"] == "Available"
        assert _owners(reservation) == []
        assert reservation["status"].get("allocated", {}) == {}
        cluster.create(
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
        assert cluster.wire(Pod, "newcomer", "default")["spec"].get("nodeName", "") == ""
    finally:
        cluster.close()


@pytest.mark.parametrize(("prefer", "taken"), [(True, False), (False, True)])
def test_pre_allocation_prefer_no_pre_allocated_pods(prefer: bool, taken: bool) -> None:
    """Scheduler Configuration for PreAllocation, ``preferNoPreAllocatedPods``: "prefer placing
    reservations without using pre-allocatable pods if the node has sufficient resources". On
    node-0, with 2 CPU / 4Gi free beside batch-job-1, the Cluster-mode reservation takes no pod
    when it is on (the page's configuration), and takes batch-job-1 when it is off."""
    args = {
        "preAllocationConfig": {
            **PREALLOCATION_ARGS["preAllocationConfig"],
            "preferNoPreAllocatedPods": prefer,
        }
    }
    outcome = _replay_configured(
        args,
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
