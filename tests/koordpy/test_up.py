"""``koordpy up`` as a user runs it: a real process, a real socket, the real CLI."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from apis.core import Container, Pod, PodSpec, ResourceRequirements
from apis.kinds import default_registry
from apis.meta import ObjectMeta
from apis.resources import ResourceList
from controller.api.client import Applied, Client
from koordpy.up import DEMO_CAPACITY_TYPES, DEMO_NODES
from tests.crdschema import schema_errors, validator
from tests.fakes.net import free_port as _free_port
from tests.koordpy.daemons import cli, names, running_up, table_rows

pytestmark = pytest.mark.slow

DEMO = ["test-host", *DEMO_NODES]


def test_demo_lists_nodes_with_gpus_and_valid_devices(tmp_path: Path, shared_dir: Path) -> None:
    with running_up(tmp_path, "--demo") as up:
        banner = "\n".join(up.stdout)
        assert up.api in banner
        assert "metrics" in banner
        got = cli(up.api, "get", "nodes")
        assert got.returncode == 0, got.stderr
        rows = {row["NAME"]: row for row in table_rows(got.stdout)}
        assert sorted(rows) == sorted(DEMO)
        assert all(rows[name]["GPUS"] == "8" for name in DEMO_NODES)
        assert rows["test-host"]["STATUS"] == "Ready"

        devices = cli(up.api, "get", "devices", "-o", "json")
        assert devices.returncode == 0, devices.stderr
        listing = json.loads(devices.stdout)
        items = listing["items"]
        assert sorted(item["metadata"]["name"] for item in items) == sorted(DEMO)
        check = validator(shared_dir, "scheduling.koordinator.sh/Device")
        for item in items:
            assert schema_errors(check, item) == [], item["metadata"]["name"]

        _jobs_admitted_and_placed(up.api)
        _pods_moved_to_reserved_nodes(up.api)

        again = cli(up.api, "apply", "-f", str(Path(__file__).parents[2] / "examples"))
        assert again.returncode == 0, again.stderr
        lines = again.stdout.splitlines()
        assert lines
        assert all(line.endswith(" unchanged") for line in lines), lines
        assert up.stop(signal.SIGTERM) == 0


def _pods_moved_to_reserved_nodes(api: str) -> None:
    """examples/descheduler.yaml drains the on-demand demo nodes: every pod of the batch Job
    ends on a reserved node, through PodMigrationJobs (a reservation first, then the eviction,
    then the replacement pod in the reservation), with Events saying so."""
    reserved = {name for name, kind in DEMO_CAPACITY_TYPES.items() if kind == "reserved"}
    deadline = time.monotonic() + 90
    while True:
        pods = json.loads(cli(api, "get", "pods", "-n", "team-a", "-o", "json").stdout)
        nodes = {
            p["metadata"]["name"]: p["spec"].get("nodeName")
            for p in pods["items"]
            if p["metadata"]["name"].startswith("preprocess-shards-")
        }
        jobs = json.loads(cli(api, "get", "pmj", "-o", "json").stdout)["items"]
        done = [j for j in jobs if j["status"].get("phase") == "Succeeded"]
        if len(nodes) == 4 and set(nodes.values()) <= reserved and done:
            break
        assert time.monotonic() < deadline, (nodes, [j["status"] for j in jobs])
        time.sleep(1)
    for job in done:
        assert job["status"]["nodeName"] in reserved
        assert job["metadata"]["annotations"]["koordinator.sh/evict-trigger"] == "CustomPriority"
    wide = cli(api, "get", "pods", "-n", "team-a", "-o", "wide").stdout
    assert any("preprocess-shards-" in line and "demo-" in line for line in wide.splitlines())
    events = cli(api, "get", "events", "-n", "team-a").stdout
    assert "evicted by PodMigrationJob" in events
    assert "(CustomPriority): drain node demo-ascend" in events
    listing = {row["NAME"]: row for row in table_rows(cli(api, "get", "nodes").stdout)}
    on_demand = [name for name, kind in DEMO_CAPACITY_TYPES.items() if kind == "on-demand"]
    assert any("SchedulingDisabled" in listing[name]["STATUS"] for name in on_demand)


#: The demo's queued jobs: QueueUnit -> the pods its job releases.
DEMO_JOBS = {
    "preprocess-shards": [f"preprocess-shards-{i}" for i in range(4)],
    "resnet50-ddp-py-qu": ["resnet50-ddp-master-0"]
    + [f"resnet50-ddp-worker-{i}" for i in range(3)],
}


def _jobs_admitted_and_placed(api: str) -> None:
    """The example jobs were queued as units, admitted against the team-a quota, and their
    pods placed by the scheduler on the simulated nodes."""
    deadline = time.monotonic() + 60
    while True:
        units = json.loads(cli(api, "get", "queueunits", "-n", "team-a", "-o", "json").stdout)
        pods = json.loads(cli(api, "get", "pods", "-n", "team-a", "-o", "json").stdout)
        phases = {u["metadata"]["name"]: u["status"].get("phase") for u in units["items"]}
        nodes = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in pods["items"]}
        wanted = [pod for names in DEMO_JOBS.values() for pod in names]
        if all(phases.get(u) == "Running" for u in DEMO_JOBS) and all(
            nodes.get(pod) in DEMO_NODES for pod in wanted
        ):
            break
        assert time.monotonic() < deadline, (phases, nodes)
        time.sleep(0.5)
    for unit in units["items"]:
        assert unit["spec"]["queue"] == "team-a"
        admitted = sum(a["replicas"] for a in unit["status"]["admissions"])
        assert admitted == len(DEMO_JOBS[unit["metadata"]["name"]])
    # The PyTorchJob's pods ask for a whole GPU each: DeviceShare chose the cards.
    for pod in pods["items"]:
        if pod["metadata"]["name"].startswith("resnet50-ddp-"):
            allocated = json.loads(
                pod["metadata"]["annotations"]["scheduling.koordinator.sh/device-allocated"]
            )
            [card] = allocated["gpu"]
            assert card["resources"]["koordinator.sh/gpu-memory-ratio"] == "100"
    listing = cli(api, "get", "queueunits,pods", "-n", "team-a")
    assert listing.returncode == 0, listing.stderr
    assert "queueunit.scheduling.x-k8s.io/preprocess-shards" in listing.stdout
    assert "pod/resnet50-ddp-worker-2" in listing.stdout
    described = cli(api, "describe", "queueunit", "preprocess-shards", "-n", "team-a").stdout
    assert "Admitted by queue team-a against quota team-a" in described


def test_apply_examples_then_again_unchanged(tmp_path: Path) -> None:
    examples = str(Path(__file__).parents[2] / "examples")
    with running_up(tmp_path) as up:
        first = cli(up.api, "apply", "-f", examples)
        assert first.returncode == 0, first.stderr
        assert all(line.endswith(" created") for line in first.stdout.splitlines())
        second = cli(up.api, "apply", "-f", examples)
        assert second.returncode == 0, second.stderr
        assert [line.rsplit(" ", 1)[0] for line in second.stdout.splitlines()] == [
            line.rsplit(" ", 1)[0] for line in first.stdout.splitlines()
        ]
        assert all(line.endswith(" unchanged") for line in second.stdout.splitlines())
        assert up.stop(signal.SIGINT) == 0


def test_state_survives_a_clean_restart(tmp_path: Path) -> None:
    examples = str(Path(__file__).parents[2] / "examples")
    with running_up(tmp_path) as up:
        assert cli(up.api, "apply", "-f", examples).returncode == 0
        before = cli(up.api, "get", "queues", "-A", "-o", "json").stdout
        assert up.stop() == 0
    with running_up(tmp_path) as up:
        after = cli(up.api, "get", "queues", "-A", "-o", "json").stdout
        # The queueing loop refreshes each queue's status (positions, admission rate) after
        # a restart; what was stored is what comes back.
        assert _stored(json.loads(after)) == _stored(json.loads(before))
        assert up.stop() == 0


def _stored(listing: dict[str, Any]) -> list[dict[str, Any]]:
    items = []
    for item in listing["items"]:
        meta = dict(item["metadata"])
        meta.pop("resourceVersion")
        annotations = dict(meta.pop("annotations", {}))
        annotations.pop("koordpy.io/admission-rate", None)
        items.append({**item, "metadata": {**meta, "annotations": annotations}, "status": None})
    assert items
    return items


def _pod(index: int) -> Pod:
    # Left to another scheduler: binding them would change the versions this test checks.
    return Pod(
        metadata=ObjectMeta(name=f"load-{index:04d}", namespace="default", labels={"app": "load"}),
        spec=PodSpec(
            scheduler_name="another-scheduler",
            containers=(
                Container(
                    name="main",
                    image="busybox",
                    resources=ResourceRequirements(
                        requests=ResourceList({"cpu": 100, "memory": 64 << 20})
                    ),
                ),
            ),
        ),
    )


def test_sigkill_during_a_1000_object_apply_keeps_every_acknowledged_object(
    tmp_path: Path,
) -> None:
    """Acknowledged = the API answered; each such object must survive with its version."""
    pods = [_pod(i) for i in range(1000)]
    acknowledged: dict[str, str] = {}
    failed: list[BaseException] = []
    with running_up(tmp_path) as up:
        client = Client(up.api, timeout=10)

        def writer() -> None:
            try:
                for start in range(0, len(pods), 10):
                    for result in client.apply(pods[start : start + 10]):
                        assert isinstance(result, Applied)
                        assert result.object is not None
                        meta = result.object.metadata
                        acknowledged[meta.name] = meta.resource_version
            except Exception as err:
                failed.append(err)

        thread = threading.Thread(target=writer, name="writer")
        thread.start()
        deadline = time.monotonic() + 60
        while len(acknowledged) < 300 and time.monotonic() < deadline and thread.is_alive():
            time.sleep(0.01)
        up.process.kill()
        up.process.wait(timeout=10)
        thread.join(timeout=30)
        client.close()
    assert 300 <= len(acknowledged) < 1000, "the kill must land in the middle of the apply"
    assert failed, "the writer must have seen the API go away"

    with running_up(tmp_path) as up, Client(up.api) as client:
        pods_kind = default_registry().for_type(Pod)
        stored, _ = client.list(pods_kind, namespace="default")
        versions = {obj.metadata.name: obj.metadata.resource_version for obj in stored}
        missing = {name for name in acknowledged if name not in versions}
        assert not missing, f"{len(missing)} acknowledged objects lost"
        changed = {n: (v, versions[n]) for n, v in acknowledged.items() if versions[n] != v}
        assert not changed
        assert up.stop() == 0


def test_nodes_and_devices_listed_by_short_names(tmp_path: Path) -> None:
    with running_up(tmp_path, "--demo") as up:
        by_short = cli(up.api, "get", "no")
        by_plural = cli(up.api, "get", "nodes")
        assert names(table_rows(by_short.stdout)) == names(table_rows(by_plural.stdout))
        assert up.stop() == 0


def test_bad_config_exits_2_before_starting(tmp_path: Path) -> None:
    config = tmp_path / "up.toml"
    config.write_text("[controller.api]\naddres = 'x'\n")
    import subprocess

    from tests.koordpy.daemons import koordpy_command

    result = subprocess.run(
        koordpy_command("up", "--config", str(config), "--state-dir", str(tmp_path / "s")),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "addres" in result.stderr
    assert not (tmp_path / "s").exists()


def test_tcp_api_requires_the_bearer_token(tmp_path: Path) -> None:
    api = f"127.0.0.1:{_free_port()}"
    with running_up(tmp_path, api=api, token="s3cret-" + "x" * 32) as up:
        assert f"koordpy --api {api} get nodes" in "\n".join(up.stdout)
        refused = cli(api, "get", "nodes")
        assert refused.returncode != 0
        assert "token" in refused.stderr.lower() or "unauth" in refused.stderr.lower()
        allowed = cli(api, "--token", "s3cret-" + "x" * 32, "get", "nodes")
        assert allowed.returncode == 0, allowed.stderr
        assert names(table_rows(allowed.stdout)) == ["test-host"]
        assert up.stop() == 0


def _meminfo_used() -> int:
    """MemTotal - MemAvailable of this host, bytes."""
    fields = {}
    for line in Path("/proc/meminfo").read_text().splitlines():
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0]) * 1024
    return fields["MemTotal"] - fields["MemAvailable"]


def test_the_agent_endpoint_serves_this_hosts_usage(tmp_path: Path) -> None:
    with running_up(tmp_path) as up:
        (line,) = [line for line in up.stdout if "agent metrics" in line]
        url = line.split()[-1]
        deadline = time.monotonic() + 30
        cpu = memory = None
        while time.monotonic() < deadline:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = response.read().decode()
            samples = {
                sample.name: sample
                for family in text_string_to_metric_families(text)
                for sample in family.samples
                if sample.labels.get("node") == "test-host"
            }
            cpu, memory = (
                samples.get("koordlet_node_used_cpu_cores"),
                samples.get("koordlet_node_used_memory_bytes"),
            )
            if cpu is not None and memory is not None:
                break
            time.sleep(0.5)
        used = _meminfo_used()
        assert up.stop() == 0
    assert cpu is not None, "node CPU is served once a tick measured it"
    assert cpu.value > 0, "this host runs the agent at least"
    assert memory is not None
    # The same figure /proc/meminfo gives, a tick apart.
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert abs(memory.value - used) <= 0.1 * total
    assert "koordlet_start_time" in text
