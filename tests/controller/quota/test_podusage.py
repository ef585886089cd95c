"""PodUsage: the quota usage and requests of the pods, kept pod by pod, are always what
reading every pod gives (QuotaLedger.from_pods, quota_requests)."""

from __future__ import annotations

import random

from apis.core import Pod
from apis.meta import Object
from controller.quota.check import PodUsage, QuotaIndex, QuotaLedger, quota_requests
from tests.controller.quota.builders import pod, quota, res


def _random_pod(rng: random.Random, namespace: str, name: str) -> Pod:
    return pod(
        name,
        cpu=rng.choice((0, 100, 500, 2000)),
        memory=rng.choice((0, 1, 4)),
        extra={"nvidia.com/gpu": 1} if rng.random() < 0.2 else None,
        namespace=namespace,
        node=rng.choice(("", "n1", "n2")),
        quota=rng.choice(("", "q", "child", "nowhere")),
        non_preemptible=rng.random() < 0.3,
        phase=rng.choice(("", "", "Running", "Succeeded", "Failed")),
    )


def test_usage_kept_pod_by_pod_is_what_reading_every_pod_gives() -> None:
    rng = random.Random(6)
    index = QuotaIndex.build(
        (
            quota("q", max=res(cpu=8000, memory=16)),
            quota("child", parent="q", max=res(cpu=4000, **{"nvidia.com/gpu": 2})),
            quota("ml", namespaces=("ml",), max=res(cpu=8000)),
        )
    )
    pods: dict[tuple[str, str], Pod] = {}
    usage = PodUsage(index)
    for _ in range(400):
        key = (rng.choice(("team", "other", "ml")), f"p{rng.randrange(20)}")
        before: Object | None = pods.get(key)
        after: Object | None = None
        if before is not None and rng.random() < 0.3:
            del pods[key]
        else:
            after = pods[key] = _random_pod(rng, *key)
        usage.update([(before, after)])
        everyone = list(pods.values())
        assert usage.ledger() == QuotaLedger.from_pods(everyone, index)
        assert usage.requests() == quota_requests(everyone, index)
    assert usage.ledger() == PodUsage(index, pods.values()).ledger()
