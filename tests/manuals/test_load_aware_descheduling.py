"""Koordinator v1.8 user manual "Load Aware Descheduling" (``load-aware-descheduling.md``).

The page's cluster: three 4-core 16 GiB nodes and a one-replica ``stress-demo`` whose pod runs on
one of them; ``kubectl top node`` then shows that node at 2105m CPU / 3594Mi and the two others
near idle. The NodeMetrics here say the same, measured where the pod runs at each report (the
agent's report every minute: the stress pod uses 1900m and 1600Mi, each node's system the
rest), and the page's ``koord-descheduler-config`` (LowNodeLoad, low cpu 20 / memory 30, high
cpu 50 / memory 60, every 60s) is applied once the pod runs. The page's owner is a Deployment;
here a batch Job with the page's pod template (koordpy brings back a deleted Job pod under its
name, as a Deployment brings one under a new name): switch to the Deployment once koordpy runs
Deployments. The page's ``MigrationControllerArgs`` are elided (``....``); a one-replica
workload passes v1.8's expected-replicas gate only with ``skipCheckExpectedReplicas`` (which
this test sets), as the page's eviction of its one pod needs.

What the page shows: the pod is evicted from the hot node through a PodMigrationJob (Events
``Evicting`` and ``EvictComplete``; the page's older ``Try to evict Pod`` message is v1.8's
``Pod ... evicted from node ... by the reason ...``) and its replacement runs on another node.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from apis import codec
from apis.core import Pod
from apis.scheduling import PodMigrationJob
from controller.store import Store
from tests.manuals.replay import Outcome, node
from tests.manuals.stages import Stage, dump, pod_running, replay_in_stages, running_pod

NODES = ("cn-beijing.10.0.3.110", "cn-beijing.10.0.3.111", "cn-beijing.10.0.3.112")
POD = "stress-demo-0"

STRESS_DEMO = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: stress-demo
  namespace: default
  labels:
    app: stress-demo
spec:
  suspend: true
  parallelism: 1
  completions: 1
  template:
    metadata:
      name: stress-demo
      labels:
        app: stress-demo
    spec:
      containers:
        - args:
            - '--vm'
            - '2'
            - '--vm-bytes'
            - '1600M'
            - '-c'
            - '2'
            - '--vm-hang'
            - '2'
          command:
            - stress
          image: polinux/stress
          imagePullPolicy: Always
          name: stress
          resources:
            limits:
              cpu: '2'
              memory: 4Gi
            requests:
              cpu: '2'
              memory: 4Gi
      restartPolicy: Never
      schedulerName: koord-scheduler # use the koord-scheduler
"""

#: The page's ConfigMap, its elisions (``...``) left out, plus ``skipCheckExpectedReplicas``.
DESCHEDULER_CONFIG = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: koord-descheduler-config
  namespace: koordinator-system
data:
  koord-descheduler-config: |
    apiVersion: descheduler/v1alpha2
    kind: DeschedulerConfiguration
    # Execute the LowNodeLoad plugin every 60s
    deschedulingInterval: 60s
    profiles:
      - name: koord-descheduler
        plugins:
          deschedule:
            disabled:
              - name: "*"
          balance:
            enabled:
              - name: LowNodeLoad  # Configure to enable the LowNodeLoad plugin
        pluginConfig:
        - name: MigrationController
          args:
            apiVersion: descheduler/v1alpha2
            kind: MigrationControllerArgs
            skipCheckExpectedReplicas: true
        - name: LowNodeLoad
          args:
            apiVersion: descheduler/v1alpha2
            kind: LowNodeLoadArgs
            evictableNamespaces:
            # include and exclude are mutually exclusive, only one of them can be configured.
            # include indicates that only the namespace configured below will be processed
            # include:
            #   - test-namespace
              # exclude means to only process namespaces other than those configured below
              exclude:
                - "kube-system"
                - "koordinator-system"
            # lowThresholds defines the low usage threshold of resources
            lowThresholds:
              cpu: 20
              memory: 30
            # highThresholds defines the target usage threshold of resources
            highThresholds:
              cpu: 50
              memory: 60
"""

#: ``kubectl top node`` without the stress pod (cpu m, memory Mi): the node the pod runs on
#: first (the page's cn-beijing.10.0.3.112), then the two others.
SYSTEM = ((205, 1994), (92, 1158), (77, 1162))
#: The stress pod's usage (cpu m, memory Mi): with its node's own, the page's 2105m / 3594Mi.
STRESS = (1900, 1600)


class Cluster:
    """Plays the agents and the user: once the pod runs, the node it landed on is the page's
    hot node; every minute each node reports its own usage plus the stress pod's where the pod
    runs then; with the first report comes the descheduler configuration (step 4)."""

    def __init__(self, config: str) -> None:
        self.config = config
        self.hot = ""
        self.system: dict[str, tuple[int, int]] = {}

    def start(self, store: Store, now: datetime) -> Sequence[str]:
        pod = running_pod(store, POD)
        assert pod is not None
        self.hot = pod.spec.node_name
        others = [n for n in NODES if n != self.hot]
        self.system = dict(zip([self.hot, *others], SYSTEM, strict=True))
        return [*self.report(store, now), self.config]

    def report(self, store: Store, now: datetime) -> Sequence[str]:
        pod = running_pod(store, POD)
        docs = []
        for name, (cpu, memory) in self.system.items():
            here = pod is not None and pod.spec.node_name == name
            pods = (
                [
                    {
                        "namespace": "default",
                        "name": POD,
                        "podUsage": {
                            "resources": {"cpu": f"{STRESS[0]}m", "memory": f"{STRESS[1]}Mi"}
                        },
                    }
                ]
                if here
                else []
            )
            used = (cpu + STRESS[0], memory + STRESS[1]) if here else (cpu, memory)
            metric = {
                "apiVersion": "slo.koordinator.sh/v1alpha1",
                "kind": "NodeMetric",
                "metadata": {"name": name},
                "status": {
                    "updateTime": codec.to_builtins(now),
                    "nodeMetric": {
                        "nodeUsage": {
                            "resources": {"cpu": f"{used[0]}m", "memory": f"{used[1]}Mi"}
                        },
                        "systemUsage": {"resources": {"cpu": f"{cpu}m", "memory": f"{memory}Mi"}},
                    },
                    "podsMetric": pods,
                },
            }
            docs.append(dump(metric))
        return docs


def run(minutes: int, config: str = DESCHEDULER_CONFIG) -> tuple[Outcome, Cluster]:
    """The page's cluster for ``minutes`` after the pod runs (with ``config``)."""
    cluster = Cluster(config)
    reports = [Stage(delay=60, documents=cluster.report) for _ in range(minutes)]
    outcome = replay_in_stages(
        [*(node(n, cpu="4", memory="16Gi") for n in NODES), STRESS_DEMO],
        [Stage(when=pod_running(POD), documents=cluster.start), *reports],
        max_time=timedelta(minutes=minutes, seconds=30),
    )
    return outcome, cluster


def test_the_hot_nodes_pod_is_migrated_to_an_idle_node() -> None:
    """The hot node (53% cpu, over the high threshold of 50%) is relieved after LowNodeLoad
    has seen it over for ``consecutiveAbnormalities`` (5) cycles: a PodMigrationJob evicts its
    pod, which runs again on an idle node, and stays there (that node then uses 49%)."""
    outcome, cluster = run(minutes=9)
    hot = cluster.hot
    pod = outcome.get("Pod", POD, "default")
    assert isinstance(pod, Pod)
    assert pod.status.phase == "Running"
    assert pod.spec.node_name not in ("", hot)
    [job] = outcome.all("PodMigrationJob")
    assert isinstance(job, PodMigrationJob)
    assert job.status.phase == "Succeeded"
    assert job.metadata.annotations["koordinator.sh/evict-trigger"] == "LowNodeLoad"
    reason = job.metadata.annotations["koordinator.sh/evict-reason"]
    assert reason == "node is overutilized, node cpu usage(52.62%)>threshold(50.00%)"
    events = [
        (e.reason, e.message)
        for e in outcome.events()
        if e.involved_object.kind == "PodMigrationJob" and e.reason in ("Evicting", "EvictComplete")
    ]
    assert events == [
        ("Evicting", f'Pod "default/{POD}" evicted from node "{hot}" by the reason "{reason}"'),
        ("EvictComplete", f'Pod "default/{POD}" has been evicted'),
    ]


def test_nothing_moves_before_the_node_has_been_hot_for_five_cycles() -> None:
    """Four cycles over the threshold (at 0 to 3 minutes) are not yet an anomaly: the pod
    stays; the fifth (at 4 minutes) moves it."""
    outcome, cluster = run(minutes=3)
    pod = outcome.get("Pod", POD, "default")
    assert isinstance(pod, Pod)
    assert pod.spec.node_name == cluster.hot
    assert outcome.all("PodMigrationJob") == []
    moved, _ = run(minutes=4)
    assert len(moved.all("PodMigrationJob")) == 1


def test_low_thresholds_above_the_high_ones_are_refused() -> None:
    """``lowThresholds.cpu: 70`` over ``highThresholds.cpu: 50``: the configuration is refused
    with a Warning naming the field and both values, and nothing is descheduled."""
    bad = DESCHEDULER_CONFIG.replace("              cpu: 20\n", "              cpu: 70\n")
    outcome, cluster = run(minutes=9, config=bad)
    assert outcome.all("PodMigrationJob") == []
    pod = outcome.get("Pod", POD, "default")
    assert isinstance(pod, Pod)
    assert pod.spec.node_name == cluster.hot
    [warning] = outcome.events("InvalidConfiguration")
    assert warning.message == (
        "invalid descheduler configuration (descheduling is off): profiles[0].pluginConfig[1]"
        ".args.lowThresholds.cpu: 70.0 is above highThresholds.cpu (50.0)"
    )
