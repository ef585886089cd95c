"""NodeRestriction: what a node's report may change on its own Node."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from agent.cgroups.detect import CgroupDriver, CgroupInfo, CgroupVersion
from agent.devices import base, simulated
from agent.node import HostFacts, build_node
from apis.codec import encode_json
from apis.core import Node
from apis.meta import ObjectMeta
from controller.fleet.ingest import Ingest, Result
from controller.fleet.noderestriction import agent_owns_label
from controller.store.sqlite import Store
from runtime.bus import Bus, Message, node_topic

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)
FACTS = HostFacts(
    hostname="n1",
    cpus=16,
    memory=64 << 30,
    ephemeral_storage=100 << 30,
    kernel="6.1.0",
    os_image="Debian GNU/Linux 12 (bookworm)",
    architecture="amd64",
)
CAPACITY_TYPE = "karpenter.sh/capacity-type"


@pytest.fixture
async def store() -> AsyncIterator[Store]:
    async with Store() as opened:
        yield opened


def report(
    beat: datetime,
    *,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> Message:
    node = build_node("n1", FACTS, heartbeat=beat, ready_since=T0)
    meta = node.metadata
    node = msgspec.structs.replace(
        node,
        metadata=msgspec.structs.replace(
            meta,
            labels={**meta.labels, **(labels or {})},
            annotations={**meta.annotations, **(annotations or {})},
        ),
    )
    return Message(node_topic("n1", "node"), encode_json(node))


def stored(store: Store) -> Node:
    node = store.get(store.registry.for_type(Node), "n1")
    assert isinstance(node, Node)
    return node


def relabel(store: Store, **labels: str) -> None:
    """What an administrator does: labels on the stored Node."""
    node = stored(store)
    meta = node.metadata
    store.update(
        msgspec.structs.replace(
            node, metadata=msgspec.structs.replace(meta, labels={**meta.labels, **labels})
        )
    )


def heartbeat(store: Store) -> datetime | None:
    ready = stored(store).condition("Ready")
    assert ready is not None
    return ready.last_heartbeat_time


async def test_a_node_cannot_rewrite_an_admin_label(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """The attack: an administrator made n1 ``on-demand``; n1's report says ``reserved``."""
    ingest = Ingest(Bus(), store)
    assert await ingest.handle(report(T0)) == Result.APPLIED
    relabel(store, **{CAPACITY_TYPE: "on-demand"})
    for minute in (1, 2):
        beat = T0 + timedelta(minutes=minute)
        attack = report(beat, labels={CAPACITY_TYPE: "reserved"})
        assert await ingest.handle(attack) == Result.APPLIED
        assert stored(store).metadata.labels[CAPACITY_TYPE] == "on-demand"
        # The rest of the report is taken: the node stays Ready whatever it says of the label.
        assert heartbeat(store) == beat
    said = [r.getMessage() for r in caplog.records if "held back" in r.getMessage()]
    assert said == [
        "held back part of a Node report: "
        f'node "n1" is not allowed to modify labels: {CAPACITY_TYPE}'
    ]


@pytest.mark.parametrize(
    "label",
    [
        "node-role.kubernetes.io/control-plane",
        "node-restriction.kubernetes.io/trusted",
        "example.k8s.io/fast",
        "node.koordinator.sh/mid-static-cpu-reserved-ratio",
    ],
)
async def test_a_node_cannot_add_or_remove_labels_it_does_not_own(store: Store, label: str) -> None:
    ingest = Ingest(Bus(), store)
    await ingest.handle(report(T0))
    await ingest.handle(report(T0 + timedelta(minutes=1), labels={label: "true"}))
    assert label not in stored(store).metadata.labels
    relabel(store, **{label: "admin"})
    # Reporting it as it is, or with another value, or without it: it stays the admin's.
    await ingest.handle(report(T0 + timedelta(minutes=2), labels={label: "admin"}))
    await ingest.handle(report(T0 + timedelta(minutes=3), labels={label: "node"}))
    await ingest.handle(report(T0 + timedelta(minutes=4)))
    assert stored(store).metadata.labels[label] == "admin"
    assert heartbeat(store) == T0 + timedelta(minutes=4)


async def test_a_node_cannot_register_with_restricted_labels(store: Store) -> None:
    """Registering, Kubernetes' rule for kubelets: nothing in node-restriction.kubernetes.io,
    and in kubernetes.io / k8s.io only the kubelet's own labels (the others left out)."""
    ingest = Ingest(Bus(), store)
    bad = {"node-role.kubernetes.io/control-plane": "", "node-restriction.kubernetes.io/x": "y"}
    given = {"topology.kubernetes.io/zone": "a", CAPACITY_TYPE: "spot"}
    assert await ingest.handle(report(T0, labels={**bad, **given})) == Result.APPLIED
    labels = stored(store).metadata.labels
    assert labels.items() >= given.items()
    assert not labels.keys() & bad.keys()


async def test_a_node_cannot_rewrite_an_admin_annotation(store: Store) -> None:
    ingest = Ingest(Bus(), store)
    await ingest.handle(report(T0))
    node = stored(store)
    key = "node.koordinator.sh/reservation"
    notes = {**node.metadata.annotations, key: '{"resources":{"cpu":"2"}}'}
    store.update(
        msgspec.structs.replace(
            node, metadata=msgspec.structs.replace(node.metadata, annotations=notes)
        )
    )
    attack = report(T0 + timedelta(minutes=1), annotations={key: '{"resources":{"cpu":"0"}}'})
    await ingest.handle(attack)
    assert stored(store).metadata.annotations[key] == '{"resources":{"cpu":"2"}}'
    added = report(T0 + timedelta(minutes=2), annotations={"example.com/new": "x"})
    await ingest.handle(added)
    assert "example.com/new" not in stored(store).metadata.annotations


async def test_what_the_agent_reports_of_its_own_is_taken(store: Store) -> None:
    """The real agent's Node: its labels (hostname, os, arch, cgroup layout, GPU from the
    Device), the CPU topology annotation and the status change freely."""
    cgroup = CgroupInfo(
        version=CgroupVersion.V2, driver=CgroupDriver.SYSTEMD, root=Path("/sys/fs/cgroup")
    )
    probe = simulated.simulate((simulated.PROFILES["nvidia-h100"],), "n1")
    device = base.build_device(Node(metadata=ObjectMeta(name="n1")), [probe])
    ingest = Ingest(Bus(), store)
    first = build_node("n1", FACTS, heartbeat=T0, ready_since=T0, cgroup=cgroup, device=device)
    body = encode_json(first)
    assert await ingest.handle(Message(node_topic("n1", "node"), body)) == Result.APPLIED
    relabel(store, team="ml")
    moved = dataclasses.replace(cgroup, version=CgroupVersion.V1, driver=CgroupDriver.CGROUPFS)
    second = build_node(
        "n1",
        FACTS,
        heartbeat=T0 + timedelta(minutes=1),
        ready_since=T0,
        cgroup=moved,
    )
    meta = second.metadata
    second = msgspec.structs.replace(
        second,
        metadata=msgspec.structs.replace(
            meta,
            labels={**meta.labels, "kubernetes.io/arch": "arm64"},
            annotations={"node.koordinator.sh/cpu-topology": '{"detail":[]}'},
        ),
    )
    body = encode_json(second)
    assert await ingest.handle(Message(node_topic("n1", "node"), body)) == Result.APPLIED
    node = stored(store)
    assert node.metadata.labels["kubernetes.io/arch"] == "arm64"
    assert node.metadata.labels["node.koordpy.io/cgroup-version"] == "v1"
    assert "node.koordinator.sh/gpu-vendor" not in node.metadata.labels  # the GPU went away
    assert node.metadata.labels["team"] == "ml"
    assert node.metadata.annotations["node.koordinator.sh/cpu-topology"] == '{"detail":[]}'


@pytest.mark.parametrize(
    ("key", "owned"),
    [
        ("kubernetes.io/hostname", True),
        ("topology.kubernetes.io/zone", True),
        ("node.kubernetes.io/instance-type", True),
        ("feature.node.kubernetes.io/cpu-avx", True),
        ("kubelet.kubernetes.io/anything", True),
        ("node.koordpy.io/cgroup-driver", True),
        ("node.koordinator.sh/gpu-model", True),
        ("node-role.kubernetes.io/worker", False),
        ("node-restriction.kubernetes.io/x", False),
        ("kubernetes.io/role", False),
        ("karpenter.sh/capacity-type", False),
        ("node.koordinator.sh/gpu-partition-policy", False),
        ("team", False),
    ],
)
def test_which_labels_an_agent_owns(key: str, owned: bool) -> None:
    assert agent_owns_label(key) is owned
