"""What ``koordpy up --demo`` applies, replayed through ``koordpy simulate`` on nodes shaped as
the demo's simulated ones (96 CPU, 768 GiB, their ``karpenter.sh/capacity-type``): the
Deployment of ``examples/reservation-deployment.yaml`` goes into its reservation next to
everything else the examples hold, as the resource reservation manual's "Reserve on Specified
Node, with Multiple Owners" shows."""

from __future__ import annotations

import json
from typing import Any

from apis import codec
from apis import constants as k
from koordpy.up import DEMO_CAPACITY_TYPES, DEMO_MEMORY, examples_dir, load_examples
from tests.manuals.replay import Outcome, node, replay


def _demo() -> Outcome:
    directory = examples_dir()
    assert directory is not None
    examples = [codec.dump_yaml(codec.to_builtins(obj)) for obj in load_examples(directory)]
    nodes = [
        node(
            name,
            cpu="96",
            memory=f"{DEMO_MEMORY >> 30}Gi",
            labels={"karpenter.sh/capacity-type": kind},
        )
        for name, kind in DEMO_CAPACITY_TYPES.items()
    ]
    return replay(*nodes, *examples)


def _replicas(outcome: Outcome) -> list[Any]:
    [deployment] = [d for d in outcome.all("Deployment") if d.metadata.name == "app-demo"]
    sets = {
        rs.metadata.name
        for rs in outcome.all("ReplicaSet")
        if any(ref.uid == deployment.metadata.uid for ref in rs.metadata.owner_references)
    }
    return [
        codec.to_builtins(p)
        for p in outcome.all("Pod")
        if any(ref.name in sets for ref in p.metadata.owner_references)
    ]


def test_the_deployment_of_the_examples_runs_in_its_reservation() -> None:
    outcome = _demo()
    reservation = outcome.wire("Reservation", "reservation-demo-big")
    status = reservation["status"]
    assert status["phase"] == "Available"
    assert status["nodeName"] == "demo-nvidia-h100"
    pods = _replicas(outcome)
    assert len(pods) == 2
    expected = {"name": "reservation-demo-big", "uid": reservation["metadata"]["uid"]}
    for pod in pods:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"] == "demo-nvidia-h100"
        annotation = pod["metadata"]["annotations"][k.ANNOTATION_RESERVATION_ALLOCATED]
        assert json.loads(annotation) == expected
    assert sorted(o["name"] for o in status["currentOwners"]) == sorted(
        p["metadata"]["name"] for p in pods
    )
    # The page's figures: the two replicas take 4 of the 6 CPU and all 20Gi reserved.
    assert status["allocated"] == {"cpu": "4", "memory": "20Gi"}
    deployment = outcome.wire("Deployment", "app-demo", "default")
    assert deployment["status"]["readyReplicas"] == 2


def test_the_reservation_keeps_its_place_for_the_replicas_only() -> None:
    """Of the 96 CPU of ``demo-nvidia-h100``, the reservation's 6 are held for ``app-demo``:
    no other example pod is charged to the reservation."""
    outcome = _demo()
    owners = {pod["metadata"]["name"] for pod in _replicas(outcome)}
    for pod in outcome.all("Pod"):
        annotation = pod.metadata.annotations.get(k.ANNOTATION_RESERVATION_ALLOCATED)
        if annotation and json.loads(annotation)["name"] == "reservation-demo-big":
            assert pod.metadata.name in owners
