"""Koordinator v1.8 user manual "Descheduling with Custom Priority"
(``user-manuals/custom-priority-descheduling.md``).

The page's example: two ``node-pool=spot`` nodes, two ``node-pool=on-demand`` nodes, a
four-replica ``stress-demo`` placed on the spot nodes first, then the page's
``koord-descheduler-config`` (CustomPriority, ``spot`` before ``on-demand``, MigrationController
evicting) applied unchanged. The spot-first placement is made as the page suggests: the
on-demand nodes join (labelled) once the four pods run on the spot nodes. ``stress-demo`` is
the page's Deployment, applied as the page gives it; each evicted pod is replaced by its
ReplicaSet under a new name. The steps are played one after the other
(:class:`~tests.manuals.replay.Cluster`). The nodes' size is not on the page: the spot nodes
hold two pods each (2 CPUs, 4 GiB), the on-demand ones more (8 CPUs, 16 GiB), so that the
scheduler places each migrated pod's reservation on the emptier on-demand nodes (a reservation
is only kept off the pod's own node: with room on the other spot node it may land there, and
the pod moves again in a later cycle).

What the page expects: in ``BestEffort`` mode the pods on spot nodes are evicted one by one and
run again on the on-demand nodes, each through a PodMigrationJob; in ``DrainNode`` mode with
``autoCordon: true`` a spot node whose pods all fit on the on-demand pool is drained and
cordoned.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from apis.core import Node
from apis.scheduling import PodMigrationJob
from tests.manuals.replay import Cluster, Outcome, node

CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: koord-descheduler-config
  namespace: koordinator-system
data:
  koord-descheduler-config: |
    apiVersion: descheduler/v1alpha2
    kind: DeschedulerConfiguration
    enableContentionProfiling: true
    enableProfiling: true
    healthzBindAddress: 0.0.0.0:10251
    metricsBindAddress: 0.0.0.0:10251
    leaderElection:
      resourceLock: leases
      resourceName: koord-descheduler
      resourceNamespace: koordinator-system
    deschedulingInterval: 60s
    dryRun: false
    profiles:
      - name: koord-descheduler
        plugins:
          deschedule:
            disabled:
              - name: "*"
          evict:
            disabled:
              - name: "*"
            enabled:
              - name: MigrationController
          balance:
            enabled:
              - name: CustomPriority # Configure to enable the CustomPriority plugin
        pluginConfig:
          - name: MigrationController
            args:
              apiVersion: descheduler/v1alpha2
              kind: MigrationControllerArgs
              evictionPolicy: Eviction
              namespaces:
                exclude:
                  - kube-system
                  - koordinator-system
          - name: CustomPriority
            args:
              apiVersion: descheduler/v1alpha2
              kind: CustomPriorityArgs
              evictableNamespaces:
                exclude:
                  - kube-system
                  - koordinator-system
              nodeFit: true
              mode: BestEffort
              evictionOrder:
                - name: "spot"          # priority name (custom), earlier entry = eviction source
                  nodeSelector:
                    matchLabels:
                      node-pool: "spot"
                - name: "on-demand"     # later entry = target pool candidate
                  nodeSelector:
                    matchLabels:
                      node-pool: "on-demand"
"""
DRAIN = CONFIG.replace(
    "              mode: BestEffort\n",
    "              mode: DrainNode\n              autoCordon: true\n",
)

#: The page's Deployment (step 2), as the page gives it.
STRESS_DEMO = """\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: stress-demo
  namespace: default
  labels:
    app: stress-demo
spec:
  replicas: 4
  selector:
    matchLabels:
      app: stress-demo
  template:
    metadata:
      name: stress-demo
      labels:
        app: stress-demo
    spec:
      schedulerName: koord-scheduler
      containers:
        - name: stress
          image: polinux/stress
          command: ["stress"]
          args: ["--cpu", "1", "--vm", "1", "--vm-bytes", "256M", "--timeout", "3600s"]
          resources:
            limits:
              cpu: "1"
              memory: "512Mi"
            requests:
              cpu: "1"
              memory: "512Mi"
"""
SPOT = ["spot-node-1", "spot-node-2"]
ON_DEMAND = ["ondemand-node-1", "ondemand-node-2"]


def _pool(name: str, pool: str) -> str:
    if pool == "spot":
        return node(name, cpu="2", memory="4Gi", labels={"node-pool": pool})
    return node(name, cpu="8", memory="16Gi", labels={"node-pool": pool})


def _all_running(outcome: Outcome) -> bool:
    pods = outcome.pods(app="stress-demo")
    return len(pods) == 4 and all(p.spec.node_name and p.status.phase == "Running" for p in pods)


def replay_page(*configs: str) -> tuple[Outcome, list[str]]:
    """Steps 2-5: the four pods on the spot nodes; then the on-demand nodes and the first of
    ``configs``, each later one 30 seconds after the one before; 11 minutes in all. The
    outcome, and the names of the first four pods."""
    with Cluster(*(_pool(n, "spot") for n in SPOT), STRESS_DEMO) as cluster:
        cluster.run_until(_all_running, within=timedelta(minutes=1))
        first = [p.metadata.name for p in cluster.pods(app="stress-demo")]
        assert {p.spec.node_name for p in cluster.pods(app="stress-demo")} <= set(SPOT)
        cluster.apply(*(_pool(n, "on-demand") for n in ON_DEMAND), configs[0])
        for config in configs[1:]:
            cluster.run(timedelta(seconds=30))
            cluster.apply(config)
        cluster.run(timedelta(minutes=11) - timedelta(seconds=30) * (len(configs) - 1))
        return cluster.outcome(), first


def placement(outcome: Outcome) -> dict[str, str]:
    return {p.metadata.name: p.spec.node_name for p in outcome.pods(app="stress-demo")}


def evictions(outcome: Outcome) -> list[tuple[datetime | None, str, str]]:
    """The ``Evicted`` Events on the pods: (time, pod, message), oldest first."""
    found = [
        (e.first_timestamp, e.involved_object.name, e.message) for e in outcome.events("Evicted")
    ]
    return sorted(found, key=lambda e: (e[0] or datetime.min.replace(tzinfo=UTC), e[1]))


def test_best_effort_moves_every_pod_from_spot_to_on_demand() -> None:
    """``BestEffort``: the spot pods are evicted one by one (the default ``objectLimiters``
    let a 4-pod workload start a migration every 2.5 minutes) through PodMigrationJobs, each
    replaced by a new pod of the ReplicaSet on an on-demand node; nothing is cordoned."""
    outcome, first = replay_page(CONFIG)
    where = placement(outcome)
    assert len(where) == 4
    assert not set(where) & set(first)  # each replaced by a new pod of the ReplicaSet
    assert set(where.values()) <= set(ON_DEMAND)
    assert all(p.status.phase == "Running" for p in outcome.pods(app="stress-demo"))
    evicted = evictions(outcome)
    assert sorted(pod for _, pod, _ in evicted) == first  # each pod once
    assert len({at for at, _, _ in evicted}) == 4  # one at a time
    reason = "evicting from spot priority resource to lower priority resource"
    assert all(
        message.startswith("evicted by PodMigrationJob ")
        and message.endswith(f"(CustomPriority): {reason}")
        for _, _, message in evicted
    )
    jobs = [j for j in outcome.all("PodMigrationJob") if isinstance(j, PodMigrationJob)]
    assert jobs  # the later ones (the scavenger took the first after 10 minutes)
    assert {j.status.phase for j in jobs} == {"Succeeded"}
    assert {j.spec.pod_ref.name for j in jobs} <= set(first)
    # Each names the pod of the ReplicaSet that replaced its pod.
    assert {j.status.pod_ref.name if j.status.pod_ref else "" for j in jobs} <= set(where)
    assert {j.metadata.annotations["koordinator.sh/evict-trigger"] for j in jobs} == {
        "CustomPriority"
    }
    assert {j.metadata.annotations["koordinator.sh/evict-reason"] for j in jobs} == {reason}
    assert all(not n.spec.unschedulable for n in outcome.all("Node") if isinstance(n, Node))


def test_drain_node_drains_and_cordons_the_spot_nodes() -> None:
    """``DrainNode`` with ``autoCordon: true``: each spot node's pods all fit on the on-demand
    pool, so each is cordoned and drained; every pod runs on an on-demand node."""
    outcome, first = replay_page(DRAIN)
    assert len(placement(outcome)) == 4
    assert set(placement(outcome).values()) <= set(ON_DEMAND)
    cordoned = {
        n.metadata.name for n in outcome.all("Node") if isinstance(n, Node) and n.spec.unschedulable
    }
    assert cordoned == set(SPOT)
    evicted = evictions(outcome)
    assert sorted(pod for _, pod, _ in evicted) == first
    drained = {message.rpartition("(CustomPriority): ")[2] for _, _, message in evicted}
    assert drained == {f"drain node {n} (sourcePriority=spot)" for n in SPOT}


ONE_TIER = CONFIG.replace(
    """                - name: "on-demand"     # later entry = target pool candidate
                  nodeSelector:
                    matchLabels:
                      node-pool: "on-demand"
""",
    "",
)


def _warnings(outcome: Outcome) -> list[str]:
    return [
        e.message
        for e in outcome.events("InvalidConfiguration")
        if e.involved_object.name == "koord-descheduler-config"
    ]


def test_one_tier_is_refused_and_nothing_moves() -> None:
    """ "CustomPriority requires at least 2 entries in evictionOrder": with one, nothing is
    descheduled, and the ConfigMap gets a Warning naming the field."""
    outcome, first = replay_page(ONE_TIER)
    assert sorted(placement(outcome)) == first
    assert set(placement(outcome).values()) <= set(SPOT)
    assert outcome.all("PodMigrationJob") == []
    assert _warnings(outcome) == [
        "invalid descheduler configuration (descheduling is off): "
        "profiles[0].pluginConfig[1].args.evictionOrder: ['spot'] must list at least 2 tiers"
    ]


def test_a_bad_configuration_keeps_the_one_in_force() -> None:
    """A later ConfigMap with ``mode: Drain`` (no such mode) is refused with a Warning naming
    the field and the value; the configuration applied before keeps working."""
    bad = CONFIG.replace("mode: BestEffort", "mode: Drain")
    outcome, _ = replay_page(CONFIG, bad)
    assert _warnings(outcome) == [
        "invalid descheduler configuration (keeping the previous configuration): "
        "profiles[0].pluginConfig[1].args.mode: 'Drain' Invalid enum value 'Drain'"
    ]
    assert set(placement(outcome).values()) <= set(ON_DEMAND)
