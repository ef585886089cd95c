"""Container statuses as the kubelet reports them: every field round-trips, states are read."""

from __future__ import annotations

import json
from typing import Any

import pytest

from apis.codec import decode_as, decode_json, encode_json
from apis.core import ContainerStatus, Pod
from apis.errors import DecodeError

#: A status with every field Kubernetes 1.24-1.35 writes (values as a 1.35 kubelet sends them).
FULL_STATUS: dict[str, Any] = {
    "name": "app",
    "state": {"running": {"startedAt": "2026-03-01T08:00:30Z"}},
    "lastState": {
        "terminated": {
            "exitCode": 137,
            "signal": 9,
            "reason": "OOMKilled",
            "message": "out of memory",
            "startedAt": "2026-03-01T07:00:00Z",
            "finishedAt": "2026-03-01T08:00:00Z",
            "containerID": "containerd://old",
        }
    },
    "ready": False,
    "restartCount": 0,
    "image": "docker.io/library/nginx:1.27",
    "imageID": "",
    "containerID": "containerd://0123abcd",
    "started": True,
    "allocatedResources": {"cpu": "500m", "memory": "256Mi"},
    "resources": {"requests": {"cpu": "500m"}, "limits": {"cpu": "1", "memory": "256Mi"}},
    "volumeMounts": [
        {
            "name": "data",
            "mountPath": "/data",
            "readOnly": True,
            "recursiveReadOnly": "Enabled",
        }
    ],
    "user": {"linux": {"uid": 1000, "gid": 1000, "supplementalGroups": [1000, 2000]}},
    "allocatedResourcesStatus": [
        {"name": "nvidia.com/gpu", "resources": [{"resourceID": "gpu-0", "health": "Healthy"}]}
    ],
    "stopSignal": "SIGTERM",
}


def test_every_field_round_trips_unchanged() -> None:
    status = decode_as(FULL_STATUS, ContainerStatus)
    assert json.loads(encode_json(status)) == FULL_STATUS
    assert status.container_id == "containerd://0123abcd"
    assert status.image_id == ""
    assert status.ready is False
    assert status.restart_count == 0
    assert status.allocated_resources == {"cpu": 500, "memory": 256 * 2**20}
    assert status.running
    assert not status.terminated


def test_pod_with_all_three_status_lists_round_trips() -> None:
    raw: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"containers": [{"name": "app"}]},
        "status": {
            "phase": "Running",
            "initContainerStatuses": [
                {
                    "name": "init",
                    "ready": False,
                    "restartCount": 0,
                    "image": "busybox",
                    "imageID": "sha256:1",
                    "state": {"terminated": {"exitCode": 0, "reason": "Completed"}},
                }
            ],
            "containerStatuses": [FULL_STATUS],
            "ephemeralContainerStatuses": [
                {"name": "debug", "state": {"waiting": {"reason": "PodInitializing"}}}
            ],
        },
    }
    pod = decode_as(raw, Pod)
    assert json.loads(encode_json(pod)) == raw
    assert decode_json(encode_json(pod), Pod) == pod
    [init] = pod.status.init_container_statuses
    assert init.terminated
    assert not init.running
    [debug] = pod.status.ephemeral_container_statuses
    assert debug.state is not None
    assert debug.state.waiting == {"reason": "PodInitializing"}
    assert not debug.running


def test_minimal_hand_written_status() -> None:
    status = decode_as({"name": "app"}, ContainerStatus)
    assert status.container_id == ""
    assert status.state is None
    assert not status.running
    assert encode_json(status) == b'{"name":"app"}'


@pytest.mark.parametrize(
    "raw",
    [
        {"name": "app", "restartCount": "zero"},
        {"name": "app", "state": {"sleeping": {}}},
        {"ready": True},
    ],
    ids=["wrong-type", "unknown-state", "no-name"],
)
def test_invalid_status_names_the_field(raw: dict[str, Any]) -> None:
    with pytest.raises(DecodeError) as caught:
        decode_as(raw, ContainerStatus)
    assert caught.value.field
