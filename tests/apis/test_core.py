"""Helpers of the core kinds: the effective pod request and Node accessors."""

from __future__ import annotations

from apis.codec import decode_as, decode_documents
from apis.core import Node, Pod, PodSpec, container_requests, pod_requests
from apis.resources import ResourceList


def _spec(raw: dict[str, object]) -> PodSpec:
    return decode_as(raw, PodSpec)


def _c(name: str, requests: dict[str, str] | None = None, **extra: object) -> dict[str, object]:
    resources: dict[str, object] = {}
    if requests is not None:
        resources["requests"] = requests
    if "limits" in extra:
        resources["limits"] = extra.pop("limits")
    return {"name": name, "resources": resources, **extra}


def test_sum_of_containers() -> None:
    spec = _spec({"containers": [_c("a", {"cpu": "500m"}), _c("b", {"cpu": "1", "memory": "1Gi"})]})
    assert pod_requests(spec) == {"cpu": 1500, "memory": 2**30}


def test_limit_stands_in_for_a_missing_request() -> None:
    spec = _spec(
        {
            "containers": [
                _c(
                    "a",
                    {"cpu": "250m"},
                    limits={"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "1"},
                )
            ]
        }
    )
    assert pod_requests(spec) == {"cpu": 250, "memory": 2 * 2**30, "nvidia.com/gpu": 1}
    assert container_requests(spec.containers[0]) == pod_requests(spec)


def test_init_containers_raise_the_floor_and_overhead_adds() -> None:
    spec = _spec(
        {
            "initContainers": [_c("init", {"cpu": "4", "memory": "1Gi"})],
            "containers": [_c("a", {"cpu": "1", "memory": "2Gi"})],
            "overhead": {"cpu": "100m"},
        }
    )
    assert pod_requests(spec) == {"cpu": 4100, "memory": 2 * 2**30}


def test_sidecars_add_to_the_main_phase_and_to_later_init_containers() -> None:
    spec = _spec(
        {
            "initContainers": [
                _c("sidecar", {"cpu": "500m"}, restartPolicy="Always"),
                _c("migrate", {"cpu": "3"}),
            ],
            "containers": [_c("app", {"cpu": "1"})],
        }
    )
    # init phase peak: sidecar + migrate = 3.5; main phase: app + sidecar = 1.5
    assert pod_requests(spec) == {"cpu": 3500}


def test_pod_level_resources_override_the_container_figure() -> None:
    spec = _spec(
        {
            "containers": [_c("a", {"cpu": "1", "memory": "1Gi"})],
            "resources": {"requests": {"cpu": "2"}},
            "overhead": {"cpu": "100m"},
        }
    )
    assert pod_requests(spec) == {"cpu": 2100, "memory": 2**30}


def test_pod_without_containers_requests_nothing() -> None:
    assert pod_requests(Pod()) == ResourceList()


def test_metax_sgpu_pod_requests() -> None:
    text = """
apiVersion: v1
kind: Pod
metadata: {name: p}
spec:
  containers:
    - name: c
      resources:
        limits: {cpu: "32", memory: 64Gi, koordinator.sh/gpu.shared: "1",
                 koordinator.sh/gpu-memory: 1Gi, koordinator.sh/gpu-core: "10",
                 metax-tech.com/sgpu: "1"}
"""
    [pod] = decode_documents(text)
    assert isinstance(pod, Pod)
    assert pod_requests(pod) == {
        "cpu": 32000,
        "memory": 64 * 2**30,
        "koordinator.sh/gpu.shared": 1,
        "koordinator.sh/gpu-memory": 2**30,
        "koordinator.sh/gpu-core": 10,
        "metax-tech.com/sgpu": 1,
    }


def test_node_accessors() -> None:
    text = """
apiVersion: v1
kind: Node
metadata: {name: "n", labels: {a: b}}
status:
  capacity: {cpu: "8", memory: 32Gi}
  conditions:
    - {type: Ready, status: "True"}
"""
    [node] = decode_documents(text)
    assert isinstance(node, Node)
    assert node.is_ready
    assert node.labels == {"a": "b"}
    # no allocatable reported: capacity is what can be allocated
    assert node.allocatable == node.capacity == {"cpu": 8000, "memory": 32 * 2**30}
    assert node.condition("DiskPressure") is None
    assert not Node().is_ready
