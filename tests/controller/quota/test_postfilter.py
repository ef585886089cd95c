"""The ElasticQuota PostFilter rule (§4.4): victims only from the preemptor's quota, of lower
priority, never non-preemptible, none for the default quota while
``disableDefaultQuotaPreemption`` holds, and the quota must fit after the evictions."""

from __future__ import annotations

import pytest

from apis.core import Pod
from controller.quota.args import ElasticQuotaArgs
from controller.quota.check import QuotaIndex, QuotaLedger, preemption_policy
from controller.scheduler.preemption import NodeState, preempt
from tests.controller.quota.builders import pod, quota, res

QUOTAS = (quota("q", max=res(cpu=4000)), quota("q2", max=res(cpu=4000)))
INDEX = QuotaIndex.build(QUOTAS)


def _run(
    preemptor: Pod,
    on_node: tuple[Pod, ...],
    *,
    cpu: int = 4000,
    args: ElasticQuotaArgs | None = None,
    elsewhere: tuple[Pod, ...] = (),
) -> tuple[list[str], str]:
    """(victim names, message) of preempting onto one node holding ``on_node``."""
    args = args or ElasticQuotaArgs()
    ledger = QuotaLedger.from_pods((*on_node, *elsewhere), INDEX)
    policy = preemption_policy(preemptor, index=INDEX, ledger=ledger, args=args)
    state = NodeState(name="n1", allocatable=res(cpu=cpu), pods=on_node)
    result = preempt(preemptor, [state], policy=policy)
    return [p.name for p in result.victims], result.message


NO_VICTIMS = (
    "preemption: 0/1 nodes are available: 1 No victims found on node n1 for preemptor pod web."
)


@pytest.mark.parametrize(
    ("preemptor", "on_node", "args", "victims", "message"),
    [
        (
            pod("web", cpu=2000, priority=10, quota="q"),
            (
                pod("mine", cpu=2000, priority=1, quota="q", node="n1"),
                pod("theirs", cpu=2000, priority=0, quota="q2", node="n1"),
            ),
            None,
            ["mine"],
            "",
        ),
        (
            pod("web", cpu=2000, priority=10, quota="q"),
            (
                pod("theirs", cpu=2000, priority=1, quota="q2", node="n1"),
                pod("mine", cpu=2000, priority=20, quota="q", node="n1"),
            ),
            None,
            [],
            NO_VICTIMS,
        ),
        (
            pod("web", cpu=2000, priority=10, quota="q"),
            (
                pod("pinned", cpu=2000, priority=1, quota="q", node="n1", non_preemptible=True),
                pod("other", cpu=2000, priority=5, quota="q", node="n1"),
            ),
            None,
            ["other"],
            "",
        ),
        (
            pod("web", cpu=2000, priority=10, namespace="misc"),
            (pod("old", cpu=4000, priority=1, namespace="misc", node="n1"),),
            None,
            [],
            NO_VICTIMS,
        ),
        (
            pod("web", cpu=2000, priority=10, namespace="misc"),
            (pod("old", cpu=4000, priority=1, namespace="misc", node="n1"),),
            ElasticQuotaArgs(disable_default_quota_preemption=False),
            ["old"],
            "",
        ),
    ],
    ids=[
        "same quota only",
        "nothing in the own quota",
        "never a non-preemptible pod",
        "default quota does not preempt",
        "default quota preempts when allowed",
    ],
)
def test_victims(
    preemptor: Pod,
    on_node: tuple[Pod, ...],
    args: ElasticQuotaArgs | None,
    victims: list[str],
    message: str,
) -> None:
    assert _run(preemptor, on_node, args=args) == (victims, message)


def test_quota_must_fit_after_the_evictions() -> None:
    """The node has room; the quota does not: a pod the node could keep is evicted."""
    on_node = (
        pod("v1", cpu=2000, priority=1, quota="q", node="n1"),
        pod("v2", cpu=2000, priority=2, quota="q", node="n1"),
    )
    web = pod("web", cpu=2000, priority=10, quota="q")
    assert _run(web, on_node, cpu=16000) == (["v1"], "")


def test_quota_used_elsewhere_cannot_be_freed_here() -> None:
    on_node = (pod("v1", cpu=1000, priority=1, quota="q", node="n1"),)
    elsewhere = (pod("far", cpu=3000, priority=1, quota="q", node="n2"),)
    web = pod("web", cpu=2000, priority=10, quota="q")
    assert _run(web, on_node, cpu=16000, elsewhere=elsewhere) == (
        [],
        "preemption: 0/1 nodes are available: "
        "1 Insufficient quotas, quotaName: q, exceedDimensions: [cpu].",
    )


def test_terminating_pod_of_the_own_quota_makes_the_preemptor_wait() -> None:
    web = pod("web", cpu=2000, priority=10, quota="q", nominated="n1")
    leaving = pod("leaving", cpu=4000, priority=1, quota="q", node="n1", terminating=True)
    assert _run(web, (leaving,)) == (
        [],
        "preemption: not eligible due to a terminating pod on the nominated node.",
    )
    other = pod("leaving", cpu=4000, priority=1, quota="q2", node="n1", terminating=True)
    assert _run(web, (other,))[1] == NO_VICTIMS
