"""The API server's field validation in admission: negative quantities, requests above limits,
int32 priorities, and objects larger than the API server stores (issue 18, point 1).

Each attack is written as a user (or a node) would send it; the store refuses it with the API
server's words, naming the field and value, and keeps what it held before.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from apis import codec
from apis import constants as k
from apis.core import ConfigMap, Node, Pod
from apis.meta import Object
from controller.errors import Invalid
from controller.store.encoding import encode
from controller.store.memory import MAX_OBJECT_BYTES
from controller.store.sqlite import Store
from tests.controller.admission.helpers import decode, priority_class, quota
from tests.manuals.replay import Cluster, node

NEGATIVE = "must be greater than or equal to 0"


def pod_with(name: str = "p", **spec: Any) -> Pod:
    body = {"containers": [{"name": "main", "image": "busybox"}], **spec}
    obj = decode({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": body})
    assert isinstance(obj, Pod)
    return obj


def resources(**requirements: dict[str, str]) -> dict[str, Any]:
    return {"containers": [{"name": "main", "image": "busybox", "resources": requirements}]}


def refused(store: Store, obj: Object) -> Invalid:
    with pytest.raises(Invalid) as caught:
        store.apply(obj)
    return caught.value


# --- the attack end to end -------------------------------------------------------------------

QUOTA = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: team
  namespace: default
spec:
  max:
    cpu: 4
    memory: 40Gi
  min:
    cpu: 4
    memory: 40Gi
"""


def quota_pod(name: str, cpu: str) -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/name: team
spec:
  schedulerName: koord-scheduler
  containers:
  - name: main
    image: busybox
    resources:
      requests:
        cpu: "{cpu}"
        memory: 1Gi
"""


def test_a_negative_request_cannot_make_room_on_a_node_or_in_a_quota() -> None:
    """A pod asking ``cpu: "-100"`` would count -100 CPUs on the node and in the quota, and
    ten 2-CPU pods would then run on a 4-CPU node past a 4-CPU quota. It is refused, and of
    the ten only the two that fit run."""
    with Cluster(node("n1", cpu="4"), QUOTA) as cluster:
        with pytest.raises(Invalid) as caught:
            cluster.apply(quota_pod("negative", "-100"))
        assert str(caught.value) == (
            'Pod "negative" is invalid: spec.containers[0].resources.requests[cpu]: Invalid'
            f' value: "-100": {NEGATIVE}'
        )
        assert caught.value.field == "spec.containers[0].resources.requests[cpu]"
        assert caught.value.value == "-100"
        cluster.apply(*(quota_pod(f"web-{i}", "2") for i in range(10)))
        cluster.run_until(lambda o: sum(1 for p in o.all("Pod") if p.spec.node_name) >= 2)
        cluster.run()
        pods = [p for p in cluster.outcome().all("Pod") if isinstance(p, Pod)]
        assert "negative" not in {p.metadata.name for p in pods}
        assert len([p for p in pods if p.spec.node_name]) == 2


# --- negative quantities ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        (resources(requests={"cpu": "-100"}), "spec.containers[0].resources.requests[cpu]"),
        (resources(limits={"memory": "-1Gi"}), "spec.containers[0].resources.limits[memory]"),
        (
            {
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"nvidia.com/gpu": "-1"}}}
                ],
                "containers": [{"name": "main"}],
            },
            "spec.initContainers[0].resources.requests[nvidia.com/gpu]",
        ),
        ({"overhead": {"cpu": "-250m"}}, "spec.overhead[cpu]"),
        ({"resources": {"requests": {"cpu": "-1"}}}, "spec.resources.requests[cpu]"),
    ],
)
def test_negative_pod_quantities_are_refused(spec: dict[str, Any], field: str) -> None:
    with Store() as store:
        error = refused(store, pod_with(**spec))
        assert error.field == field
        assert error.value.startswith("-")
        assert f'{field}: Invalid value: "{error.value}": {NEGATIVE}' in str(error)
        assert store.list(store.registry.resolve("pods"))[0] == []


def test_every_negative_quantity_is_named() -> None:
    spec = {
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "-1", "memory": "-1Mi"}}},
            {"name": "b", "resources": {"limits": {"cpu": "-2"}}},
        ]
    }
    with Store() as store:
        error = refused(store, pod_with(**spec))
    assert error.causes == (
        f'spec.containers[0].resources.requests[cpu]: Invalid value: "-1": {NEGATIVE}',
        f'spec.containers[0].resources.requests[memory]: Invalid value: "-1Mi": {NEGATIVE}',
        f'spec.containers[1].resources.limits[cpu]: Invalid value: "-2": {NEGATIVE}',
    )


def node_doc(capacity: dict[str, str], allocatable: dict[str, str]) -> Object:
    return decode(
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "n1"},
            "status": {"capacity": capacity, "allocatable": allocatable},
        }
    )


def test_a_node_reporting_negative_capacity_or_allocatable_is_refused_and_kept() -> None:
    """A node (or anyone writing Nodes) claiming -8 CPUs allocatable is refused as the API
    server refuses it (``status.allocatable.cpu``); the Node stored before stays."""
    with Store() as store:
        store.apply(node_doc({"cpu": "4", "memory": "8Gi"}, {"cpu": "4", "memory": "8Gi"}))
        error = refused(store, node_doc({"cpu": "4"}, {"cpu": "-8", "memory": "8Gi"}))
        assert str(error) == (
            f'Node "n1" is invalid: status.allocatable.cpu: Invalid value: "-8": {NEGATIVE}'
        )
        error = refused(store, node_doc({"cpu": "-4", "memory": "-1"}, {}))
        assert error.causes == (
            f'status.capacity.cpu: Invalid value: "-4": {NEGATIVE}',
            f'status.capacity.memory: Invalid value: "-1": {NEGATIVE}',
        )
        kept = store.get(store.registry.resolve("nodes"), "n1")
        assert isinstance(kept, Node)
        assert kept.allocatable["cpu"] == 4000


def test_a_reservation_of_negative_resources_is_refused() -> None:
    reservation = decode(
        {
            "apiVersion": "scheduling.koordinator.sh/v1alpha1",
            "kind": "Reservation",
            "metadata": {"name": "r1"},
            "spec": {
                "template": {"spec": resources(requests={"cpu": "-4"})},
                "owners": [{"labelSelector": {"matchLabels": {"app": "web"}}}],
            },
        }
    )
    with Store() as store:
        error = refused(store, reservation)
    assert str(error) == (
        'Reservation.scheduling.koordinator.sh "r1" is invalid:'
        f' spec.template.spec.containers[0].resources.requests[cpu]: Invalid value: "-4":'
        f" {NEGATIVE}"
    )


@pytest.mark.parametrize("kind", ["Deployment", "ReplicaSet", "StatefulSet", "DaemonSet"])
def test_a_workload_whose_pods_would_be_refused_is_refused_itself(kind: str) -> None:
    """As the API server validates a template as the pods made from it: else its controller
    would try, and fail, to create those pods for ever."""
    workload = decode(
        {
            "apiVersion": "apps/v1",
            "kind": kind,
            "metadata": {"name": "web"},
            "spec": {
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": resources(requests={"cpu": "3"}, limits={"cpu": "2"}),
                },
            },
        }
    )
    with Store() as store:
        error = refused(store, workload)
    assert error.causes == (
        'spec.template.spec.containers[0].resources.requests: Invalid value: "3": must be less'
        " than or equal to cpu limit of 2",
    )


def test_zero_and_positive_quantities_are_stored() -> None:
    with Store() as store:
        store.apply(pod_with(**resources(requests={"cpu": "0", "memory": "0"})))
        store.apply(node_doc({"cpu": "0"}, {"cpu": "0"}))


# --- requests above limits -------------------------------------------------------------------


def test_a_request_above_its_limit_is_refused_as_kubernetes_words_it() -> None:
    with Store() as store:
        error = refused(store, pod_with(**resources(requests={"cpu": "3"}, limits={"cpu": "2"})))
    assert str(error) == (
        'Pod "p" is invalid: spec.containers[0].resources.requests: Invalid value: "3": must be'
        " less than or equal to cpu limit of 2"
    )
    assert error.field == "spec.containers[0].resources.requests"


def test_requests_are_checked_against_limits_resource_by_resource() -> None:
    spec = resources(
        requests={"cpu": "500m", "memory": "2Gi", "ephemeral-storage": "1Gi"},
        limits={"cpu": "1", "memory": "1Gi"},
    )
    with Store() as store:
        error = refused(store, pod_with(**spec))
    assert error.causes == (
        'spec.containers[0].resources.requests: Invalid value: "2Gi": must be less than or equal'
        " to memory limit of 1Gi",
    )


@pytest.mark.parametrize(
    "requirements",
    [
        {"limits": {"cpu": "2", "memory": "1Gi"}},  # requests default to the limits
        {"requests": {"cpu": "2"}, "limits": {"cpu": "2"}},
        {"requests": {"cpu": "1"}, "limits": {"cpu": "2", "memory": "1Gi"}},
        {"requests": {"cpu": "8"}},  # no limit: nothing to exceed
    ],
)
def test_requests_within_limits_are_stored(requirements: dict[str, dict[str, str]]) -> None:
    with Store() as store:
        store.apply(pod_with(**resources(**requirements)))


# --- priorities within int32 -----------------------------------------------------------------


@pytest.mark.parametrize("priority", [2**31, -(2**31) - 1, 2**62])
def test_a_pod_priority_outside_int32_is_refused(priority: int) -> None:
    """A pod naming no class keeps the priority it sets (see the Priority plugin): one that is
    no int32 would outrank every system class."""
    with Store() as store:
        error = refused(store, pod_with(priority=priority))
    assert error.causes == (
        f'spec.priority: Invalid value: "{priority}": must be between -2147483648 and'
        " 2147483647 (an int32)",
    )


def test_int32_bounds_themselves_are_stored() -> None:
    with Store() as store:
        store.apply(pod_with("high", priority=2**31 - 1))
        store.apply(pod_with("low", priority=-(2**31)))
        store.apply(priority_class("lowest", -(2**31)))


def test_a_priority_class_value_below_int32_is_refused() -> None:
    with Store() as store:
        error = refused(store, priority_class("sunk", -(2**31) - 1))
    assert error.causes == (
        'value: Invalid value: "-2147483649": must be between -2147483648 and 2147483647'
        " (an int32)",
    )


# --- object size -----------------------------------------------------------------------------


def config_map(name: str, size: int) -> ConfigMap:
    """A ConfigMap whose JSON is ``size`` bytes."""
    bare = ConfigMap(metadata=decode_meta(name), data={"blob": ""})
    room = size - len(codec.encode_json(bare))
    obj = ConfigMap(metadata=decode_meta(name), data={"blob": "x" * room})
    assert len(codec.encode_json(obj)) == size
    return obj


def decode_meta(name: str) -> Any:
    return decode(
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "a"}}
    ).metadata


def test_an_object_over_the_api_servers_limit_is_refused_and_nothing_is_stored(
    tmp_path: Path,
) -> None:
    """2 MiB of ConfigMap data is more than etcd takes in a request: refused with the size
    and the limit, and neither the file nor the memory holds it; the store goes on."""
    path = tmp_path / "state.db"
    with Store(path=path) as store:
        store.apply(config_map("small", 1000))
        version = store.resource_version
        error = refused(store, config_map("big", 2 * 1024 * 1024))
        found = re.fullmatch(
            r'configmaps "big" is invalid: request is too large: the object is (\d+) bytes as'
            f" JSON, more than the limit of {MAX_OBJECT_BYTES} bytes",
            str(error),
        )
        assert found is not None, str(error)
        assert int(found[1]) > 2 * 1024 * 1024  # the body, and what the store stamps on it
        assert store.resource_version == version
        store.apply(config_map("after", 1000))
    with Store(path=path) as reopened:
        names = [o.metadata.name for o in reopened.list(reopened.registry.resolve("cm"))[0]]
    assert names == ["after", "small"]


def test_an_update_growing_an_object_past_the_limit_keeps_the_stored_one() -> None:
    """The limit counts the object as stored: its metadata (uid, timestamps, version)
    included, so a body just under 1.5 MiB is refused once the store has stamped it."""
    with Store() as store:
        store.apply(config_map("grow", 1000))
        refused(store, config_map("grow", MAX_OBJECT_BYTES))
        stored = store.get(store.registry.resolve("cm"), "grow", "a")
        assert isinstance(stored, ConfigMap)
        assert len(stored.data["blob"]) < 1000


def test_an_object_within_the_limit_is_stored() -> None:
    with Store() as store:
        store.apply(config_map("fits", MAX_OBJECT_BYTES - 300))
        stored = store.get(store.registry.resolve("cm"), "fits", "a")
        assert len(encode(stored)) <= MAX_OBJECT_BYTES


# --- annotations admission reads as JSON ------------------------------------------------------


@pytest.mark.parametrize("key", [k.ANNOTATION_QUOTA_SHARED_WEIGHT, k.ANNOTATION_QUOTA_NAMESPACES])
def test_deeply_nested_quota_annotations_are_refused_or_ignored_cleanly(key: str) -> None:
    """200 KB of brackets fit in the annotations' 256 KiB; read as JSON by the quota
    webhook they would reach the recursion limit inside a write."""
    deep = "[" * 100_000 + "]" * 100_000
    with Store() as store:
        if key == k.ANNOTATION_QUOTA_SHARED_WEIGHT:
            error = refused(store, quota("q", annotations={key: deep}))
            assert error.field == f"metadata.annotations[{key}]"
            assert "nested deeper than 32 levels" in str(error)
        else:  # not a JSON list of names: bound to no namespace, as Koordinator reads it
            store.apply(quota("q", annotations={key: deep}))
