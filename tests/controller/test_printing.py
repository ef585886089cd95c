"""Tables, ages and describe text as the CLI prints them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from apis.codec import decode_object
from apis.kinds import Kind, default_registry
from apis.meta import Object
from controller.cli import printing

NOW = datetime(2026, 3, 1, 12, 0, 0, tzinfo=UTC)


def kind(name: str) -> Kind:
    return default_registry().resolve(name)


def node(name: str, *, allocatable: dict[str, str], **extra: Any) -> Object:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "creationTimestamp": (NOW - timedelta(hours=2, minutes=5)).isoformat(),
            **extra.pop("metadata", {}),
        },
        "status": {"allocatable": allocatable, **extra.pop("status", {})},
        **extra,
    }
    return decode_object(raw)


@pytest.mark.parametrize(
    ("delta", "text"),
    [
        (timedelta(seconds=0), "0s"),
        (timedelta(seconds=5), "5s"),
        (timedelta(seconds=119), "119s"),
        (timedelta(minutes=3), "3m"),
        (timedelta(minutes=3, seconds=10), "3m10s"),
        (timedelta(minutes=45, seconds=30), "45m"),
        (timedelta(minutes=179), "179m"),
        (timedelta(hours=2, minutes=5), "125m"),
        (timedelta(hours=3, minutes=5), "3h5m"),
        (timedelta(hours=5), "5h"),
        (timedelta(hours=30), "30h"),
        (timedelta(days=4), "4d"),
        (timedelta(days=4, hours=6), "4d6h"),
        (timedelta(days=40), "40d"),
        (timedelta(days=365 * 3 + 10), "3y10d"),
        (timedelta(days=365 * 9), "9y"),
        (timedelta(seconds=-0.5), "0s"),
        (timedelta(seconds=-30), "<invalid>"),
    ],
)
def test_age_reads_like_kubectl(delta: timedelta, text: str) -> None:
    assert printing.format_age(delta) == text


def test_gpu_count_prefers_gpu_memory_ratio() -> None:
    wire = {"status": {"allocatable": {"koordinator.sh/gpu-memory-ratio": "800"}}}
    assert printing.gpu_count(wire) == 8


def test_gpu_count_sums_vendor_resources() -> None:
    ascend = {"status": {"capacity": {"huawei.com/Ascend910": "8", "cpu": "192"}}}
    mixed = {"status": {"allocatable": {"nvidia.com/gpu": "2", "metax-tech.com/gpu": "4"}}}
    duo = {"status": {"allocatable": {"huawei.com/Ascend310P": "16"}}}
    assert printing.gpu_count(ascend) == 8
    assert printing.gpu_count(mixed) == 6
    assert printing.gpu_count(duo) == 16


def test_gpu_count_is_zero_without_accelerators() -> None:
    assert printing.gpu_count({"status": {"allocatable": {"cpu": "4"}}}) == 0
    assert printing.gpu_count({}) == 0


def test_node_table_columns_and_alignment() -> None:
    gpu = node(
        "gpu-node-with-a-long-name",
        allocatable={"cpu": "96", "memory": "1Ti", "koordinator.sh/gpu-memory-ratio": "800"},
        metadata={"labels": {"node.koordinator.sh/gpu-model": "H100"}},
        status={"conditions": [{"type": "Ready", "status": "True"}]},
    )
    cpu = node(
        "cpu-1",
        allocatable={"cpu": "7500m", "memory": "16Gi"},
        spec={"unschedulable": True},
        status={"conditions": [{"type": "Ready", "status": "False"}]},
    )
    text = printing.table(kind("no"), [gpu, cpu], now=NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "STATUS", "CPU", "MEMORY", "GPUS", "AGE"]
    assert lines[1].split() == ["gpu-node-with-a-long-name", "Ready", "96", "1Ti", "8", "125m"]
    assert lines[2].split() == [
        "cpu-1",
        "NotReady,SchedulingDisabled",
        "7500m",
        "16Gi",
        "0",
        "125m",
    ]
    # Every column starts at the same offset on every line, three spaces after the widest cell.
    for header in ("STATUS", "CPU", "MEMORY", "GPUS", "AGE"):
        start = lines[0].index(header)
        assert all(line[start - 1] == " " and line[start] != " " for line in lines)
    assert lines[0].index("STATUS") == len("gpu-node-with-a-long-name") + printing.GAP


def test_node_wide_adds_gpu_model_and_unknown_status() -> None:
    bare = node("n1", allocatable={"cpu": "2"}, metadata={"labels": {}})
    labelled = node(
        "n2",
        allocatable={"nvidia.com/gpu": "8"},
        metadata={"labels": {"node.koordinator.sh/gpu-model": "NVIDIA-H100"}},
    )
    rows = [printing.row(kind("nodes"), n, now=NOW, wide=True) for n in (bare, labelled)]
    headers = printing.headers(kind("nodes"), wide=True)
    assert "GPU-MODEL" in headers
    model = headers.index("GPU-MODEL")
    assert rows[0][headers.index("STATUS")] == "Unknown"
    assert rows[0][model] == "<none>"
    assert rows[1][model] == "NVIDIA-H100"
    assert rows[1][headers.index("GPUS")] == "8"


def test_namespace_column_only_for_namespaced_kinds() -> None:
    pod = decode_object(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "team-a"}}
    )
    assert printing.headers(kind("po"), namespaces=True)[:2] == ["NAMESPACE", "NAME"]
    assert printing.row(kind("po"), pod, now=NOW, namespaces=True)[:2] == ["team-a", "p"]
    assert printing.headers(kind("no"), namespaces=True)[0] == "NAME"


def test_pod_ready_status_restarts() -> None:
    pod = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {
                "phase": "Running",
                "podIP": "10.0.0.7",
                "containerStatuses": [
                    {"name": "a", "ready": True, "restartCount": 2},
                    {
                        "name": "b",
                        "ready": False,
                        "restartCount": 1,
                        "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                    },
                ],
            },
        }
    )
    headers = printing.headers(kind("po"), wide=True)
    cells = dict(zip(headers, printing.row(kind("po"), pod, now=NOW, wide=True), strict=True))
    assert cells["READY"] == "1/2"
    assert cells["STATUS"] == "CrashLoopBackOff"
    assert cells["RESTARTS"] == "3"
    assert cells["IP"] == "10.0.0.7"
    assert cells["NODE"] == "n1"
    assert cells["NOMINATED NODE"] == "<none>"


def test_elastic_quota_min_max_compact() -> None:
    quota = decode_object(
        {
            "apiVersion": "scheduling.sigs.k8s.io/v1alpha1",
            "kind": "ElasticQuota",
            "metadata": {
                "name": "team-a",
                "namespace": "default",
                "labels": {"quota.scheduling.koordinator.sh/parent": "root-quota"},
            },
            "spec": {"min": {"cpu": "4", "memory": "8Gi"}, "max": {"cpu": "8000m"}},
        }
    )
    headers = printing.headers(kind("eq"))
    cells = dict(zip(headers, printing.row(kind("eq"), quota, now=NOW), strict=True))
    assert cells["MIN"] == "cpu:4,memory:8Gi"
    assert cells["MAX"] == "cpu:8"
    assert cells["PARENT"] == "root-quota"


def test_event_table_shows_object_and_last_seen() -> None:
    event = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": "web.1", "namespace": "default"},
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "reason": "Scheduled",
            "message": "assigned default/web to n1",
            "type": "Normal",
            "lastTimestamp": (NOW - timedelta(seconds=42)).isoformat(),
        }
    )
    assert printing.headers(kind("ev")) == ["LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    assert printing.row(kind("ev"), event, now=NOW) == [
        "42s",
        "Normal",
        "Scheduled",
        "pod/web",
        "assigned default/web to n1",
    ]


def test_kinds_without_a_table_print_name_and_age() -> None:
    slo = decode_object(
        {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n"}}
    )
    assert printing.headers(kind("nodeslos")) == ["NAME", "AGE"]
    assert printing.row(kind("nodeslos"), slo, now=NOW) == ["n", "<unknown>"]


def test_align_keeps_widths_for_later_rows() -> None:
    lines, widths = printing.align([["NAME", "AGE"], ["a", "5s"]])
    assert lines == ["NAME   AGE", "a      5s"]
    more, _ = printing.align([["a-much-longer-name", "1s"]], widths)
    assert more == ["a-much-longer-name   1s"]


def test_describe_shows_metadata_body_conditions_and_events() -> None:
    pod = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "web",
                "namespace": "default",
                "labels": {"app": "web", "tier": "front"},
            },
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "nginx"}]},
            "status": {
                "phase": "Running",
                "conditions": [{"type": "PodScheduled", "status": "True", "reason": "Bound"}],
            },
        }
    )
    events = [
        {
            "involvedObject": {"kind": "Pod", "name": "web", "namespace": "default"},
            "type": "Normal",
            "reason": reason,
            "message": message,
            "source": {"component": "koord-scheduler"},
            "lastTimestamp": (NOW - timedelta(seconds=seconds)).isoformat(),
        }
        for reason, message, seconds in (
            ("Started", "started container c", 5),
            ("Scheduled", "assigned to n1", 60),
        )
    ]
    text = printing.describe(pod, events, now=NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["Name:", "web"]
    assert lines[1].split() == ["Namespace:", "default"]
    assert lines[2].split() == ["Labels:", "app=web"]
    assert lines[3].strip() == "tier=front"
    assert "Annotations:" in text
    assert "<none>" in lines[4]
    assert "  Node Name:  n1" in lines
    assert "    - Name:   c" in lines
    assert "      Image:  nginx" in lines
    conditions = lines.index("Conditions:")
    assert lines[conditions + 1].split() == [
        "Type",
        "Status",
        "LastTransitionTime",
        "Reason",
        "Message",
    ]
    assert lines[conditions + 3].split()[:2] == ["PodScheduled", "True"]
    start = lines.index("Events:")
    assert lines[start + 1].split() == ["Type", "Reason", "Age", "From", "Message"]
    # Newest last.
    assert lines[start + 3].split()[:3] == ["Normal", "Scheduled", "60s"]
    assert lines[start + 4].split()[:3] == ["Normal", "Started", "5s"]


def test_describe_without_events_says_none() -> None:
    nodeslo = decode_object(
        {"apiVersion": "slo.koordinator.sh/v1alpha1", "kind": "NodeSLO", "metadata": {"name": "n"}}
    )
    assert printing.describe(nodeslo, [], now=NOW).splitlines()[-1] == "Events:  <none>"


def test_involves_matches_kind_name_and_namespace() -> None:
    pod = decode_object(
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "a"}}
    )
    same = {"involvedObject": {"kind": "Pod", "name": "web", "namespace": "a"}}
    other_ns = {"involvedObject": {"kind": "Pod", "name": "web", "namespace": "b"}}
    other_kind = {"involvedObject": {"kind": "Node", "name": "web"}}
    assert printing.involves(same, pod)
    assert not printing.involves(other_ns, pod)
    assert not printing.involves(other_kind, pod)


def test_describe_shows_the_schedulers_reasons_per_plugin() -> None:
    diagnosis = (
        '{"NodeResourcesFit":{"Insufficient cpu":4990},'
        '"TaintToleration":{"node(s) had untolerated taint {dedicated: gpu}":10}}'
    )
    pod = decode_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "big",
                "namespace": "default",
                "annotations": {"scheduling.koordpy.io/diagnosis": diagnosis},
            },
        }
    )
    lines = printing.describe(pod, [], now=NOW).splitlines()
    start = lines.index("Scheduling Diagnosis:")
    assert lines[start + 1].split() == ["Plugin", "Nodes", "Reason"]
    assert lines[start + 3].split()[:3] == ["NodeResourcesFit", "4990", "Insufficient"]
    assert lines[start + 4].split()[:2] == ["TaintToleration", "10"]
    assert lines[start + 4].endswith("node(s) had untolerated taint {dedicated: gpu}")


# --- queueing: QueueUnit position/ETA/message, Queue pending, AdmissionCheck ------------------


def queue_obj(name: str, units: list[tuple[str, str]], rate: str | None) -> Object:
    annotations = {} if rate is None else {"koordpy.io/admission-rate": rate}
    return decode_object(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "Queue",
            "metadata": {"name": name, "namespace": "koord-queue", "annotations": annotations},
            "spec": {"queuePolicy": "Priority", "priority": 1000},
            "status": {
                "queueItemDetails": {
                    "active": [
                        {"name": unit, "namespace": ns, "priority": 10, "position": index}
                        for index, (ns, unit) in enumerate(units, start=1)
                    ]
                }
            },
        }
    )


def queue_unit(name: str, phase: str, message: str = "", **status: Any) -> Object:
    return decode_object(
        {
            "apiVersion": "scheduling.x-k8s.io/v1alpha1",
            "kind": "QueueUnit",
            "metadata": {
                "name": name,
                "namespace": "team",
                "creationTimestamp": (NOW - timedelta(minutes=3)).isoformat(),
            },
            "spec": {"priority": 10, "consumerRef": {"kind": "Job", "name": name}},
            "status": {"phase": phase, "message": message, **status},
        }
    )


QUEUES = [
    queue_obj("team-a", [("team", "first"), ("team", "third"), ("team", "waiting")], "2"),
    queue_obj("team-b", [("team", "idle")], None),
]
WAITING = "waiting for quota team-a: cpu needs 6, 2 free of runtime 40 (max 48)"


@pytest.mark.parametrize(
    ("unit", "position", "eta", "message"),
    [
        pytest.param(queue_unit("waiting", "Enqueued", WAITING), "3", "90s", WAITING, id="queued"),
        pytest.param(queue_unit("idle", "Enqueued"), "1", "<unknown>", "<none>", id="no-rate"),
        pytest.param(queue_unit("first", "Dequeued"), "<none>", "<none>", "<none>", id="admitted"),
        pytest.param(queue_unit("lost", ""), "<none>", "<none>", "<none>", id="not-listed"),
    ],
)
def test_queue_unit_wide_columns(unit: Object, position: str, eta: str, message: str) -> None:
    qu = kind("qu")
    context = printing.PrintContext.from_queues(QUEUES)
    headers = printing.headers(qu, wide=True)
    assert headers == [
        "NAME", "PHASE", "PRIORITY", "QUEUE", "JOBTYPE", "AGE", "POSITION", "ETA", "MESSAGE"
    ]  # fmt: skip
    cells = dict(
        zip(headers, printing.row(qu, unit, now=NOW, wide=True, context=context), strict=True)
    )
    assert (cells["POSITION"], cells["ETA"], cells["MESSAGE"]) == (position, eta, message)
    narrow = printing.headers(qu)
    assert narrow == ["NAME", "PHASE", "PRIORITY", "QUEUE", "JOBTYPE", "AGE"]


def test_queue_unit_wide_without_queues_prints_none() -> None:
    qu = kind("qu")
    unit = queue_unit("waiting", "Enqueued", WAITING)
    assert printing.row(qu, unit, now=NOW, wide=True)[-3:] == ["<none>", "<none>", WAITING]


def test_queue_wide_counts_pending_units() -> None:
    queue = kind("queue")
    assert printing.headers(queue, wide=True) == ["NAME", "POLICY", "PRIORITY", "AGE", "PENDING"]
    assert printing.row(queue, QUEUES[0], now=NOW, wide=True)[-1] == "3"
    assert printing.row(queue, QUEUES[0], now=NOW)[:3] == ["team-a", "Priority", "1000"]


@pytest.mark.parametrize(
    ("conditions", "active"),
    [
        ([{"type": "Active", "status": "True", "reason": "Ready", "message": "ok"}], "True"),
        ([{"type": "Active", "status": "False", "reason": "NoConfig", "message": "x"}], "False"),
        ([], "Unknown"),
    ],
)
def test_admission_check_columns(conditions: list[dict[str, str]], active: str) -> None:
    check = decode_object(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "AdmissionCheck",
            "metadata": {
                "name": "prov",
                "creationTimestamp": (NOW - timedelta(hours=1)).isoformat(),
            },
            "spec": {"controllerName": "koordpy.io/capacity"},
            "status": {"conditions": conditions},
        }
    )
    checks = kind("admissionchecks")
    assert printing.headers(checks) == ["NAME", "CONTROLLER", "ACTIVE", "AGE"]
    assert printing.row(checks, check, now=NOW) == ["prov", "koordpy.io/capacity", active, "60m"]


def test_describe_pending_unit_says_why_where_and_when() -> None:
    unit = queue_unit(
        "waiting",
        "Enqueued",
        WAITING,
        admissionChecks=[
            {"name": "capacity", "state": "Retry", "message": "pod set worker: 1 of 4 short"},
            {"name": "approval", "state": "Pending"},
        ],
    )
    context = printing.PrintContext.from_queues(QUEUES)
    lines = printing.describe(unit, [], now=NOW, context=context).splitlines()
    start = lines.index("Waiting:")
    assert [line.split(None, 1) for line in lines[start + 1 : start + 5]] == [
        ["Message:", WAITING],
        ["Queue:", "team-a"],
        ["Position:", "3"],
        ["ETA:", "90s"],
    ]
    table = lines.index("Admission Checks:")
    assert lines[table + 1].split() == ["Name", "State", "LastTransitionTime", "Message"]
    assert lines[table + 3].split()[:2] == ["capacity", "Retry"]
    assert lines[table + 4].split() == ["approval", "Pending", "<none>"]


def test_describe_admitted_unit_has_no_waiting_section() -> None:
    unit = queue_unit("first", "Dequeued", "Dequeued because schedule successfully")
    text = printing.describe(unit, [], now=NOW, context=printing.PrintContext.from_queues(QUEUES))
    assert "Waiting:" not in text.splitlines()
    assert "Admission Checks:" not in text.splitlines()
    pending = printing.describe(queue_unit("lost", "Enqueued", "waiting in queue"), [], now=NOW)
    lines = pending.splitlines()
    start = lines.index("Waiting:")
    assert lines[start + 2].split() == ["Position:", "<none>"]


# --- apps/v1 workloads -----------------------------------------------------------------------


def workload(kind_name: str, spec: dict[str, Any], status: dict[str, Any]) -> Object:
    return decode_object(
        {
            "apiVersion": "apps/v1",
            "kind": kind_name,
            "metadata": {
                "name": "web",
                "namespace": "default",
                "creationTimestamp": (NOW - timedelta(minutes=12)).isoformat(),
            },
            "spec": {
                "selector": {
                    "matchLabels": {"app": "web"},
                    "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}],
                },
                "template": {
                    "metadata": {"labels": {"app": "web", "tier": "a"}},
                    "spec": {
                        "containers": [
                            {"name": "nginx", "image": "nginx:1.27"},
                            {"name": "log", "image": "busybox"},
                        ],
                        **spec.pop("pod", {}),
                    },
                },
                **spec,
            },
            "status": status,
        }
    )


def test_deployment_table_reads_like_kubectl() -> None:
    deploy = workload(
        "Deployment",
        {"replicas": 3},
        {"readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2},
    )
    text = printing.table(kind("deploy"), [deploy], now=NOW)
    assert text.splitlines() == [
        "NAME   READY   UP-TO-DATE   AVAILABLE   AGE",
        "web    2/3     3            2           12m",
    ]
    wide = printing.row(kind("deployments"), deploy, now=NOW, wide=True)
    assert wide[5:] == ["nginx,log", "nginx:1.27,busybox", "app=web,tier in (a,b)"]


def test_a_new_deployment_reads_zero_of_its_default_replica() -> None:
    deploy = workload("Deployment", {}, {})
    assert printing.row(kind("deploy"), deploy, now=NOW) == ["web", "0/1", "0", "0", "12m"]


def test_replica_set_table_reads_like_kubectl() -> None:
    rs = workload("ReplicaSet", {"replicas": 4}, {"replicas": 3, "readyReplicas": 1})
    assert printing.headers(kind("rs")) == ["NAME", "DESIRED", "CURRENT", "READY", "AGE"]
    assert printing.row(kind("rs"), rs, now=NOW) == ["web", "4", "3", "1", "12m"]


def test_stateful_set_table_reads_like_kubectl() -> None:
    sts = workload("StatefulSet", {"replicas": 3, "serviceName": "web"}, {"readyReplicas": 3})
    assert printing.headers(kind("sts")) == ["NAME", "READY", "AGE"]
    assert printing.row(kind("sts"), sts, now=NOW) == ["web", "3/3", "12m"]


def test_daemon_set_table_reads_like_kubectl() -> None:
    ds = workload(
        "DaemonSet",
        {"pod": {"nodeSelector": {"kubernetes.io/os": "linux"}}},
        {
            "desiredNumberScheduled": 3,
            "currentNumberScheduled": 3,
            "numberReady": 2,
            "updatedNumberScheduled": 3,
            "numberAvailable": 2,
        },
    )
    assert printing.headers(kind("ds")) == [
        "NAME",
        "DESIRED",
        "CURRENT",
        "READY",
        "UP-TO-DATE",
        "AVAILABLE",
        "NODE SELECTOR",
        "AGE",
    ]
    row = printing.row(kind("ds"), ds, now=NOW)
    assert row == ["web", "3", "3", "2", "3", "2", "kubernetes.io/os=linux", "12m"]
    bare = workload("DaemonSet", {}, {})
    assert printing.row(kind("ds"), bare, now=NOW)[6] == "<none>"
