"""Koordinator v1.8 user manual "Load Aware Scheduling" (``user-manuals/load-aware-scheduling``).

The page's cluster: three 4-core / 16 GiB nodes ``cn-beijing.10.0.3.110``, ``.111`` and
``.112``; the ``stress-demo`` pod runs on ``.112`` and the NodeMetrics report what the page's
``kubectl top node`` shows (``.110`` 92m / 1158Mi, ``.111`` 77m / 1162Mi, ``.112`` 2105m /
3594Mi). Steps 1-5 are replayed with the page's two Deployments, step by step; the other
examples (the page's claims about prod usage, percentiles, node annotations) place one pod of
the nginx Deployment's template, written as a pod, on a cluster set up at once. The page's
scheduler configuration (section "Global Configuration via plugin args") is applied through
the ConfigMap ``koordinator-system/koord-scheduler-config``, as the page applies it.
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from apis import codec
from tests.manuals.replay import Cluster, Outcome, node, node_metric, replay, scheduler_config

NODES = ("cn-beijing.10.0.3.110", "cn-beijing.10.0.3.111", "cn-beijing.10.0.3.112")
#: The simulation starts here: the NodeMetrics are reported at that instant.
REPORTED = "2026-01-01T00:00:00Z"
#: How long the filter tests run: the NodeMetrics stay fresh (the page's 300 s), so the
#: pod's condition still gives the reason of the first attempts.
FRESH = timedelta(minutes=1)

#: The page's ``koord-scheduler-config`` (its ``...`` left out: the other plugins keep their
#: defaults).
PAGE_CONFIG = """
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
  - schedulerName: koord-scheduler
    plugins:
      filter:
        enabled:
          - name: LoadAwareScheduling
      score:
        enabled:
          - name: LoadAwareScheduling
            weight: 1
      reserve:
        enabled:
          - name: LoadAwareScheduling
    pluginConfig:
    - name: LoadAwareScheduling
      args:
        apiVersion: kubescheduler.config.k8s.io/v1
        kind: LoadAwareSchedulingArgs
        filterExpiredNodeMetrics: true
        nodeMetricExpirationSeconds: 300
        resourceWeights:
          cpu: 1
          memory: 1
        usageThresholds:
          cpu: 75
          memory: 85
        prodUsageThresholds:
          cpu: 55
          memory: 65
        scoreAccordingProdUsage: true
        estimatedScalingFactors:
          cpu: 80
          memory: 70
        aggregated:
          usageThresholds:
            cpu: 65
            memory: 75
          usageAggregationType: "p99"
          scoreAggregationType: "p99"
"""


def config_map(config: str = PAGE_CONFIG, **extra: str) -> str:
    """The page's ConfigMap ``koord-scheduler-config`` holding ``config``."""
    return scheduler_config(config, **extra)


def metric(
    name: str,
    cpu: str,
    memory: str,
    *,
    p99: tuple[str, str] | None = None,
    pods: dict[str, tuple[str, str]] | None = None,
) -> str:
    """``name``'s NodeMetric: usage ``cpu``/``memory`` now, the p99 over 5 minutes (the same
    figures unless given) and the usage of ``pods`` (name -> cpu, memory; namespace default;
    reported ``koord-prod``, as koordlet reports a pod without a priority class)."""
    return node_metric(
        name,
        cpu=cpu,
        memory=memory,
        updated=REPORTED,
        pods=pods,
        pod_priority="koord-prod",
        p99=p99 or (cpu, memory),
        report_interval=60,
    )


STRESS_DEMO = "stress-demo-7fdd89cc6b-gcnzn"


def stress_demo(name: str = STRESS_DEMO, on: str = NODES[2]) -> str:
    """The page's ``stress-demo`` pod, running on ``on`` (``.112``, as the page shows it)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "labels": {"app": "stress-demo"},
        },
        "spec": {
            "schedulerName": "koord-scheduler",
            "nodeName": on,
            "containers": [
                {
                    "name": "stress",
                    "image": "polinux/stress",
                    "command": ["stress"],
                    "args": ["--vm", "2", "--vm-bytes", "1600M", "-c", "2", "--vm-hang", "2"],
                    "resources": {
                        "limits": {"cpu": "2", "memory": "4Gi"},
                        "requests": {"cpu": "2", "memory": "4Gi"},
                    },
                }
            ],
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastTransitionTime": "2025-12-31T23:50:00Z",
                }
            ],
        },
    }
    return codec.dump_yaml(doc)


def nginx(name: str, **spec: Any) -> str:
    """A pod of the page's ``nginx-with-loadaware`` Deployment (500m cpu)."""
    doc = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "nginx"}},
        "spec": {
            "schedulerName": "koord-scheduler",
            "containers": [
                {
                    "name": "nginx",
                    "image": "nginx",
                    "resources": {"limits": {"cpu": "500m"}, "requests": {"cpu": "500m"}},
                }
            ],
            **spec,
        },
    }
    return codec.dump_yaml(doc)


NGINX = [
    f"nginx-with-loadaware-5646666d56-{s}"
    for s in ("224jp", "7glt9", "kcdvr", "qzw4j", "sbgv9", "z79dn")
]


def cluster(*, busy_p99: tuple[str, str] | None = None) -> list[str]:
    """The page's three nodes, their NodeMetrics as ``kubectl top`` shows, and stress-demo."""
    return [
        *(node(name, cpu="4", memory="16Gi") for name in NODES),
        metric(NODES[0], "92m", "1158Mi"),
        metric(NODES[1], "77m", "1162Mi"),
        metric(NODES[2], "2105m", "3594Mi", p99=busy_p99, pods={STRESS_DEMO: ("2010m", "2416Mi")}),
        stress_demo(),
    ]


def placement(outcome: Outcome, names: list[str]) -> Counter[str]:
    found = Counter[str]()
    for name in names:
        pod = outcome.pod(name, "default")
        found[pod.spec.node_name] += 1
    return found


def message(outcome: Outcome, name: str) -> str:
    pod = outcome.pod(name, "default")
    return next((c.message for c in pod.status.conditions if c.type == "PodScheduled"), "")


#: The page's Deployment ``stress-demo`` (step 1), as the page gives it.
STRESS_DEMO_DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: stress-demo
  namespace: default
  labels:
    app: stress-demo
spec:
  replicas: 1
  selector:
    matchLabels:
      app: stress-demo
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
      restartPolicy: Always
      schedulerName: koord-scheduler # use the koord-scheduler
"""

#: The page's Deployment ``nginx-with-loadaware`` (step 4), as the page gives it.
NGINX_WITH_LOADAWARE = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-with-loadaware
  labels:
    app: nginx
spec:
  replicas: 6
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      name: nginx
      labels:
        app: nginx
    spec:
      schedulerName: koord-scheduler # use the koord-scheduler
      containers:
      - name: nginx
        image: nginx
        resources:
          limits:
            cpu: 500m
          requests:
            cpu: 500m
"""


def _runs(outcome: Outcome, app: str, count: int) -> bool:
    pods = outcome.pods(app=app)
    return len(pods) == count and all(p.status.phase == "Running" for p in pods)


@pytest.mark.parametrize("configured", [False, True], ids=["shipped-config", "page-config"])
def test_nginx_pods_avoid_the_loaded_node(configured: bool) -> None:
    """ "Load-aware scheduling by the whole machine load", steps 1-5 with the page's two
    Deployments: stress-demo's pod runs (step 2); the node it landed on reports the page's
    2105m / 3594Mi (its pod using 2010m), the two others the page's idle figures (step 3); the
    six pods of nginx-with-loadaware then go to the two others (three each), none to the loaded
    node (step 5); with the chart's configuration (no ConfigMap) and with the page's. (Their
    requests alone place them so too: the test below shows the load deciding.)"""
    extra = [config_map()] if configured else []
    nodes = [node(name, cpu="4", memory="16Gi") for name in NODES]
    with Cluster(*extra, *nodes, STRESS_DEMO_DEPLOYMENT) as steps:
        steps.run_until(lambda o: _runs(o, "stress-demo", 1), within=timedelta(minutes=1))
        [stress] = steps.pods(app="stress-demo")
        loaded = stress.spec.node_name
        idle = [name for name in NODES if name != loaded]
        steps.apply(
            metric(idle[0], "92m", "1158Mi"),
            metric(idle[1], "77m", "1162Mi"),
            metric(loaded, "2105m", "3594Mi", pods={stress.metadata.name: ("2010m", "2416Mi")}),
        )
        steps.apply(NGINX_WITH_LOADAWARE)
        steps.run_until(lambda o: _runs(o, "nginx", 6), within=timedelta(minutes=1))
        outcome = steps.outcome()
    pods = outcome.pods(app="nginx")
    assert all(p.metadata.name.startswith("nginx-with-loadaware-") for p in pods)
    assert Counter(p.spec.node_name for p in pods) == {idle[0]: 3, idle[1]: 3}
    assert not list(outcome.events("InvalidConfiguration"))


@pytest.mark.parametrize("busy", [NODES[0], NODES[2]])
@pytest.mark.parametrize("configured", [False, True], ids=["shipped-config", "page-config"])
def test_scoring_prefers_the_less_loaded_node(configured: bool, busy: str) -> None:
    """Scoring by load (the page's claim behind step 5): two nodes each running a stress-demo
    pod, so their requests are the same; the one whose pod uses 1.5 cores (reported prod, as
    the page's ``scoreAccordingProdUsage`` scores prod pods) loses to the one whose pod idles,
    in either node order."""
    idle = NODES[2] if busy == NODES[0] else NODES[0]
    docs = [
        *([config_map()] if configured else []),
        node(NODES[0], cpu="4", memory="16Gi"),
        node(NODES[2], cpu="4", memory="16Gi"),
        stress_demo("stress-busy", busy),
        stress_demo("stress-idle", idle),
        metric(busy, "1600m", "3594Mi", pods={"stress-busy": ("1500m", "2416Mi")}),
        metric(idle, "92m", "1158Mi", pods={"stress-idle": ("15m", "50Mi")}),
        nginx(NGINX[0]),
    ]
    outcome = replay(*docs)
    assert placement(outcome, NGINX[:1]) == {idle: 1}


def only_on(name: str) -> dict[str, Any]:
    return {"nodeSelector": {"kubernetes.io/hostname": name}}


#: The page's configuration without ``prodUsageThresholds`` ("Not enabled by default").
WHOLE_MACHINE_CONFIG = PAGE_CONFIG.replace(
    """        prodUsageThresholds:
          cpu: 55
          memory: 65
""",
    "",
)
#: ... and without ``aggregated`` either: ``usageThresholds`` alone.
LATEST_USAGE_CONFIG = WHOLE_MACHINE_CONFIG.split("        aggregated:")[0]
#: ``.112``'s p99 over the last 5 minutes: above its latest figure.
BUSY_P99 = ("2600m", "3594Mi")


def pinned_to_busy_node(config: str | None) -> Outcome:
    """An nginx pod that may only go to ``.112``, under ``config`` (None: no ConfigMap)."""
    extra = [config_map(config)] if config is not None else []
    docs = [*extra, *cluster(busy_p99=BUSY_P99), nginx(NGINX[0], **only_on(NODES[2]))]
    return replay(*docs, max_time=FRESH)


def test_the_page_config_filters_a_prod_pod_by_prod_usage() -> None:
    """ "Load-aware scheduling by the Prod Pods": the nginx pod is prod (no priority class), so
    ``.112`` is checked against ``prodUsageThresholds`` (cpu 55 %): stress-demo's 2010m plus
    the pod's estimate (80 % of 500m) is 60 %, and ``.112`` is filtered."""
    outcome = pinned_to_busy_node(PAGE_CONFIG)
    assert placement(outcome, NGINX[:1]) == {"": 1}
    assert "node(s) cpu usage exceed threshold" in message(outcome, NGINX[0])


def test_the_page_config_filters_by_the_aggregated_threshold() -> None:
    """ "Load-aware scheduling based on percentile statistics": with ``aggregated`` (cpu 65 % of
    the p99), ``.112`` at a p99 of 2.6 cores plus 400m is at 75 % and is filtered, although its
    latest usage (63 %) passes ``usageThresholds`` (75 %): the aggregated thresholds win."""
    outcome = pinned_to_busy_node(WHOLE_MACHINE_CONFIG)
    assert placement(outcome, NGINX[:1]) == {"": 1}
    assert "node(s) cpu aggregated usage exceed threshold" in message(outcome, NGINX[0])


def test_usage_thresholds_alone_let_that_pod_onto_the_node() -> None:
    """Without ``aggregated``: ``usageThresholds`` (cpu 75 %) pass ``.112`` at 2105m + 400m."""
    outcome = pinned_to_busy_node(LATEST_USAGE_CONFIG)
    assert placement(outcome, NGINX[:1]) == {NODES[2]: 1}


def test_the_shipped_config_lets_that_pod_onto_the_node() -> None:
    """No ConfigMap: the chart's thresholds (cpu 65 % of the latest usage) pass ``.112`` at
    2105m + 425m (85 % of 500m), 63 %."""
    outcome = pinned_to_busy_node(None)
    assert placement(outcome, NGINX[:1]) == {NODES[2]: 1}


def test_the_configuration_document_itself_in_a_scenario() -> None:
    """``koordpy simulate`` takes the page's KubeSchedulerConfiguration as a scenario document
    too: it becomes the ConfigMap, and filters as the ConfigMap does."""
    docs = [WHOLE_MACHINE_CONFIG, *cluster(busy_p99=BUSY_P99), nginx(NGINX[0], **only_on(NODES[2]))]
    outcome = replay(*docs, max_time=FRESH)
    stored = outcome.wire("ConfigMap", "koord-scheduler-config", "koordinator-system")
    assert "LoadAwareSchedulingArgs" in stored["data"]["koord-scheduler-config"]
    assert placement(outcome, NGINX[:1]) == {"": 1}


def test_a_node_annotation_overrides_the_global_thresholds() -> None:
    """ "Configure filter thresholds by Node": ``scheduling.koordinator.sh/usage-thresholds``
    on ``.110`` (cpu 1 %) filters it for a pod that could only go there."""
    annotated = codec.load_yaml_documents(node(NODES[0], cpu="4", memory="16Gi"))[0]
    annotated["metadata"]["annotations"] = {
        "scheduling.koordinator.sh/usage-thresholds": '{"usageThresholds": {"cpu": 1}}'
    }
    docs = [
        config_map(LATEST_USAGE_CONFIG),
        codec.dump_yaml(annotated),
        metric(NODES[0], "92m", "1158Mi"),
        nginx(NGINX[0], **only_on(NODES[0])),
    ]
    outcome = replay(*docs, max_time=FRESH)
    assert placement(outcome, NGINX[:1]) == {"": 1}
    assert "node(s) cpu usage exceed threshold" in message(outcome, NGINX[0])


def test_an_invalid_threshold_is_refused_and_the_shipped_config_stays() -> None:
    """A ConfigMap with ``usageThresholds.cpu: 175`` (outside 0..100) is refused with an Event
    naming the field and the value; scheduling goes on with the configuration in force."""
    outcome = pinned_to_busy_node(WHOLE_MACHINE_CONFIG.replace("cpu: 75", "cpu: 175"))
    events = list(outcome.events("InvalidConfiguration"))
    assert len(events) == 1
    assert events[0].involved_object.name == "koord-scheduler-config"
    assert "profiles[0].pluginConfig[0].args.usageThresholds.cpu" in events[0].message
    assert "175" in events[0].message
    # The shipped configuration decided, not the refused one's aggregated filter.
    assert placement(outcome, NGINX[:1]) == {NODES[2]: 1}
