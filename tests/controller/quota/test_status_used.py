"""``status.used`` of an ElasticQuota through ``koordpy simulate``: pods created directly
count while assigned and not terminated, next to the pods of a queued job, each once
(controller-spec §4.2; queue-spec §7.1)."""

from __future__ import annotations

from pathlib import Path

from apis.quota import ElasticQuota
from tests.manuals.replay import node, replay

EXAMPLES = Path(__file__).parents[3] / "examples"

QUOTA = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: team-a
  namespace: team-a
spec:
  max: {cpu: "32", memory: 128Gi}
"""


def direct_pod(name: str, cpu: str, *, extra: str = "") -> str:
    return f"""
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: team-a
spec:
  schedulerName: koord-scheduler
  containers:
  - name: c
    image: busybox
    resources:
      requests: {{cpu: "{cpu}", memory: 1Gi}}
{extra}"""


def used(name: str, *docs: str) -> dict[str, int]:
    out = replay(*docs)
    quota = out.get("ElasticQuota", name, "team-a")
    assert isinstance(quota, ElasticQuota)
    return dict(quota.status.used.nonzero())


def test_a_queued_job_and_a_direct_pod_are_each_counted_once() -> None:
    job = (EXAMPLES / "batch-job.yaml").read_text(encoding="utf-8")
    got = used("team-a", node("n1", cpu="64", memory="256Gi"), QUOTA, job, direct_pod("d", "1"))
    # The job runs 4 pods of 2 CPUs and 4Gi; the direct pod 1 CPU and 1Gi.
    assert got == {"cpu": 9000, "memory": 17 * 2**30}


def test_pending_and_finished_pods_use_nothing() -> None:
    finished = "  nodeName: n1\n  restartPolicy: Never\nstatus:\n  phase: Failed\n"
    got = used(
        "team-a",
        node("n1", cpu="4", memory="16Gi"),
        QUOTA,
        direct_pod("runs", "3"),
        direct_pod("too-big", "8"),
        direct_pod("failed", "2", extra=finished),
    )
    assert got == {"cpu": 3000, "memory": 2**30}
