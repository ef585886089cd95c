"""The defaults the API server gives a new pod, through the store
(controller.admission.poddefaults): what ``kubectl get pod -o yaml`` shows after a create."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from apis import codec
from apis.core import Pod, PodStatus
from controller.store.cluster import Outcome
from controller.store.sqlite import Store
from tests.controller.admission.helpers import decode, pod


@pytest.fixture
def store() -> Store:
    return Store()


def _containers(*resources: dict[str, Any], init: bool = False) -> dict[str, Any]:
    key = "initContainers" if init else "containers"
    return {
        key: [
            {"name": f"c{i}", "image": "busybox", "resources": r} for i, r in enumerate(resources)
        ]
    }


def test_a_bare_pod_is_stored_with_the_api_server_s_defaults(store: Store) -> None:
    saved = store.create(pod("web"))
    wire = codec.to_builtins(saved)
    spec, status = wire["spec"], wire["status"]
    assert spec["schedulerName"] == "default-scheduler"
    assert spec["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] == 30
    assert spec["dnsPolicy"] == "ClusterFirst"
    assert spec["enableServiceLinks"] is True
    assert (status["phase"], status["qosClass"]) == ("Pending", "Burstable")
    # What was stored is what a read returns.
    assert store.get(store.registry.for_type(Pod), "web", "default") == saved


def test_apply_of_a_new_pod_defaults_it_too(store: Store) -> None:
    saved, outcome = store.apply(pod("web"))
    assert outcome is Outcome.CREATED
    assert (saved.status.phase, saved.spec.scheduler_name) == ("Pending", "default-scheduler")
    # Applying the same manifest again leaves the defaults (and the object) as they are.
    again, outcome = store.apply(pod("web"))
    assert outcome is Outcome.UNCHANGED
    assert again == saved


@pytest.mark.parametrize(
    ("spec", "qos"),
    [
        (_containers({}), "BestEffort"),
        (
            _containers({"requests": {"nvidia.com/gpu": 1}, "limits": {"nvidia.com/gpu": 1}}),
            "BestEffort",
        ),
        (_containers({"requests": {"cpu": "1"}}), "Burstable"),
        (_containers({"requests": {"memory": "1Gi"}}), "Burstable"),
        (_containers({"limits": {"cpu": "1"}}), "Burstable"),
        (_containers({"limits": {"cpu": "1", "memory": "1Gi"}}), "Guaranteed"),
        (
            _containers(
                {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {"cpu": "1", "memory": "1Gi"}}
            ),
            "Guaranteed",
        ),
        (
            _containers(
                {
                    "requests": {"cpu": "500m", "memory": "1Gi"},
                    "limits": {"cpu": "1", "memory": "1Gi"},
                }
            ),
            "Burstable",
        ),
        (_containers({"limits": {"cpu": "1", "memory": "1Gi"}}, {}), "Burstable"),
        (
            {
                **_containers({"limits": {"cpu": "1", "memory": "1Gi"}}),
                **_containers({"requests": {"cpu": "1"}}, init=True),
            },
            "Burstable",
        ),
    ],
    ids=[
        "nothing",
        "extended-only",
        "cpu-request",
        "memory-request",
        "cpu-limit-only",
        "limits-only",
        "requests-equal-limits",
        "request-below-limit",
        "one-container-unlimited",
        "init-container-unlimited",
    ],
)
def test_the_qos_class_follows_the_containers_requests_and_limits(
    store: Store, spec: dict[str, Any], qos: str
) -> None:
    obj = decode(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "web", "namespace": "default"},
            "spec": spec,
        }
    )
    assert isinstance(obj, Pod)
    assert store.create(obj).status.qos_class == qos


def test_what_the_pod_sets_is_kept(store: Store) -> None:
    saved = store.create(
        pod(
            "web",
            schedulerName="koord-scheduler",
            restartPolicy="Never",
            terminationGracePeriodSeconds=0,
            dnsPolicy="Default",
            enableServiceLinks=False,
        )
    )
    spec = saved.spec
    assert spec.scheduler_name == "koord-scheduler"
    assert spec.restart_policy == "Never"
    assert spec.termination_grace_period_seconds == 0
    assert spec.dns_policy == "Default"
    assert spec.enable_service_links is False


def test_a_loaded_running_pod_keeps_its_status(store: Store) -> None:
    """``simulate`` and ``apply`` load pods that already run: their status stands, and only a
    missing QoS class is filled in."""
    running = msgspec.structs.replace(
        pod("web", nodeName="n1"),
        status=PodStatus(phase="Running", qos_class="Guaranteed"),
    )
    saved = store.create(running)
    assert (saved.status.phase, saved.status.qos_class) == ("Running", "Guaranteed")
    unclassed = msgspec.structs.replace(
        pod("api", nodeName="n1"), status=PodStatus(phase="Running")
    )
    saved = store.create(unclassed)
    assert (saved.status.phase, saved.status.qos_class) == ("Running", "Burstable")


def test_an_update_is_not_defaulted_again(store: Store) -> None:
    """The defaults are the create's: an update that changes the phase keeps it."""
    saved = store.create(pod("web"))
    finished = msgspec.structs.replace(
        saved, status=msgspec.structs.replace(saved.status, phase="Succeeded")
    )
    updated = store.update(finished)
    assert updated.status.phase == "Succeeded"
    assert updated.spec.scheduler_name == "default-scheduler"


def test_an_update_leaving_the_defaults_out_keeps_the_stored_ones(store: Store) -> None:
    """An update from the manifest (without what the API server filled in) keeps it, and
    what an update sets stands."""
    saved = store.create(pod("web", schedulerName="koord-scheduler"))
    updated = store.update(pod("web", labels={"app": "web"}))
    assert updated.metadata.labels == {"app": "web"}
    spec = updated.spec
    assert spec.scheduler_name == "koord-scheduler"
    assert (spec.restart_policy, spec.termination_grace_period_seconds) == ("Always", 30)
    assert (spec.dns_policy, spec.enable_service_links) == ("ClusterFirst", True)
    assert (updated.status.phase, updated.status.qos_class) == ("Pending", "Burstable")
    assert updated.metadata.resource_version != saved.metadata.resource_version
    changed = store.update(pod("web", restartPolicy="OnFailure"))
    assert changed.spec.restart_policy == "OnFailure"
