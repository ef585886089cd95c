"""One pod's hostile annotations never stop the agent's QoS pass, and cost one log line.

On a fake 4-CPU host (the QoS loop, its strategies and its cgroup writer, over files): each
value here used to raise out of the pass every tick (a JSON document nested past the
interpreter's limit), or to bind CPUs the host does not have; now the value is treated as
absent, logged once however many passes run, and every other pod is handled.
"""

from __future__ import annotations

import logging
from pathlib import Path

import msgspec
import pytest

from agent.cgroups import detect
from agent.cgroups.cpuset import CpuSet
from agent.cgroups.resources import Resource
from agent.node import build_node
from agent.qos import cpuset_pool, nodeinfo, service
from agent.qos.loop import PassResult
from apis import constants as k
from apis.core import Pod
from tests.agent.test_qos_loop import EPOCH, FACTS, PODS, Clock, Settings, _host

DEEP = "[" * 200_000
ALL_CPUS = CpuSet(range(4))


@pytest.fixture(autouse=True)
def _fresh_logs() -> None:
    """Each value is logged once per process: start every test as a fresh agent would."""
    nodeinfo._parsed.cache_clear()
    cpuset_pool._refused.cache_clear()


def _pods(hostile: dict[str, dict[str, str]]) -> tuple[Pod, ...]:
    """The example pods, those named in ``hostile`` given its annotations instead of theirs."""
    pods = []
    for pod in PODS:
        assert isinstance(pod, Pod)
        annotations = hostile.get(pod.metadata.name)
        if annotations is not None:
            meta = msgspec.structs.replace(pod.metadata, annotations=annotations)
            pod = msgspec.structs.replace(pod, metadata=meta)
        pods.append(pod)
    return tuple(pods)


async def _passes(tmp_path: Path, pods: tuple[Pod, ...], count: int = 3) -> list[PassResult]:
    _, cfg, _ = _host(tmp_path, v2=False)
    info = detect.detect(cfg.host, cfg.cgroup)
    node = build_node("node-1", FACTS, heartbeat=EPOCH, ready_since=EPOCH, cgroup=info)
    clock = Clock()
    loop = service.build_loop(
        cfg,
        node="node-1",
        cgroup=info,
        pods=lambda: pods,
        node_object=lambda: node,
        nodeslo=Settings().current,
        clock=clock,
    )
    results = []
    for _ in range(count):
        results.append(await loop.run_once())
        clock.now += 1
    return results


def _cpusets(result: PassResult, pod: str) -> set[CpuSet]:
    """The cpusets the pass wants for ``pod``'s cgroup (its directory holds the pod's uid)."""
    uid = next(p.metadata.uid for p in PODS if p.metadata.name == pod)
    return {
        w.value
        for w in result.outcome.writes
        if w.resource is Resource.CPUSET_CPUS and uid in w.cgroup and isinstance(w.value, CpuSet)
    }


def _about(caplog: pytest.LogCaptureFixture, pod: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if f"default/{pod}" in r.getMessage()]


@pytest.mark.parametrize(
    ("cpuset", "named"),
    [
        pytest.param("0-1000", "4-1000", id="past-the-host"),
        pytest.param("0-1000000000", "1000000000", id="past-any-machine"),
    ],
)
async def test_a_bound_cpuset_past_the_host_binds_nothing_and_is_logged_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, cpuset: str, named: str
) -> None:
    status = msgspec.json.encode({"cpuset": cpuset}).decode()
    pods = _pods({"inference": {k.ANNOTATION_RESOURCE_STATUS: status}})
    with caplog.at_level(logging.WARNING):
        results = await _passes(tmp_path, pods)
    for result in results:
        # Treated as unbound: it runs on the LS pool, which it takes nothing from.
        assert _cpusets(result, "inference") == {ALL_CPUS}
        assert _cpusets(result, "web") == {ALL_CPUS}
    (record,) = _about(caplog, "inference")
    assert named in record.getMessage()
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


async def test_json_nested_past_the_interpreter_leaves_every_pass_running(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    pods = _pods(
        {
            "inference": {
                k.ANNOTATION_RESOURCE_STATUS: '{"cpuset":"1","numaNodeResources":' + DEEP
            },
            "web": {k.ANNOTATION_CPU_BURST: DEEP},
        }
    )
    with caplog.at_level(logging.WARNING):
        results = await _passes(tmp_path, pods)
    for result in results:
        assert _cpusets(result, "web") == {ALL_CPUS}
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], "no strategy failed"
    for pod in ("inference", "web"):
        (record,) = _about(caplog, pod)
        assert "nested deeper than" in record.getMessage()
