"""ElasticQuota admission (§4.1, §4.2, §4.4): pod -> quota, usage, the PreFilter check and its
messages (§10)."""

from __future__ import annotations

import pytest

from apis import constants as k
from apis.core import Pod
from apis.resources import ResourceList
from controller.quota.args import ElasticQuotaArgs
from controller.quota.check import (
    QuotaIndex,
    QuotaLedger,
    QuotaUsage,
    Verdict,
    check_pod,
    exceeded_dimensions,
    format_resources,
    quota_name,
)
from tests.controller.quota.builders import GI, pod, quota, res

# --- pod -> quota ------------------------------------------------------------------------------

RESOLUTION_QUOTAS = (
    quota("team-a", namespace="team"),
    quota("team", namespace="team"),
    quota("shared", namespace="quotas", namespaces=("batch", "team")),
    quota("ml", namespace="elsewhere"),
)
RESOLUTION = QuotaIndex.build(RESOLUTION_QUOTAS)


@pytest.mark.parametrize(
    ("labelled", "namespace", "disable_default", "expected"),
    [
        ("team-a", "team", False, "team-a"),
        ("", "team", False, "team"),
        ("", "batch", False, "shared"),
        ("", "other", False, k.QUOTA_DEFAULT),
        ("missing", "team", False, k.QUOTA_DEFAULT),
        ("", "ml", False, k.QUOTA_DEFAULT),
        ("team-a", "team", True, "team-a"),
        ("", "team", True, ""),
        ("missing", "team", True, ""),
    ],
    ids=[
        "label",
        "quota named like the namespace wins over the annotation",
        "namespaces annotation",
        "default quota",
        "unknown label means default",
        "same-named quota of another namespace does not bind",
        "gate DisableDefaultQuota: label",
        "gate DisableDefaultQuota: no label, not managed",
        "gate DisableDefaultQuota: unknown label, not managed",
    ],
)
def test_quota_name(labelled: str, namespace: str, disable_default: bool, expected: str) -> None:
    p = pod("p", namespace=namespace, quota=labelled)
    assert quota_name(p, RESOLUTION, disable_default_quota=disable_default) == expected


def test_builtin_quotas_exist_with_the_args_max() -> None:
    args = ElasticQuotaArgs(
        default_quota_group_max=res(cpu=1000), system_quota_group_max=res(cpu=2000)
    )
    index = QuotaIndex.build((), args)
    default = index.get(k.QUOTA_DEFAULT)
    system = index.get(k.QUOTA_SYSTEM)
    root = index.get(k.QUOTA_ROOT)
    assert default is not None
    assert system is not None
    assert root is not None
    assert (default.spec.max, system.spec.max) == (res(cpu=1000), res(cpu=2000))
    assert default.namespace == system.namespace == "koordinator-system"
    assert root.metadata.labels[k.LABEL_QUOTA_IS_PARENT] == "true"
    # An object the user created for a built-in quota is used as it is.
    mine = quota(k.QUOTA_DEFAULT, namespace="koordinator-system", max=res(cpu=5))
    assert QuotaIndex.build((mine,), args).get(k.QUOTA_DEFAULT) == mine


def test_tree_links() -> None:
    index = QuotaIndex.build(
        (
            quota("org", is_parent=True),
            quota("dept", parent="org", is_parent=True),
            quota("leaf", parent="dept"),
            quota("orphan", parent="nowhere"),
        )
    )
    assert index.ancestors("leaf") == ("dept", "org")
    assert index.ancestors("org") == ()
    assert index.ancestors("orphan") == ()
    assert set(index.subtree("org")) == {"org", "dept", "leaf"}


# --- usage -------------------------------------------------------------------------------------


def test_ledger_counts_assigned_pods_only() -> None:
    index = QuotaIndex.build((quota("q"),))
    overhead = ResourceList({"cpu": 100})
    pods = [
        pod("running", cpu=1000, memory=1, node="n1", quota="q", overhead=overhead),
        pod("pinned", cpu=500, node="n1", quota="q", non_preemptible=True),
        pod("terminating", cpu=200, node="n1", quota="q", terminating=True),
        pod("pending", cpu=4000, quota="q"),
        pod("done", cpu=4000, node="n1", quota="q", phase="Succeeded"),
        pod("failed", cpu=4000, node="n1", quota="q", phase="Failed"),
        pod("elsewhere", cpu=300, node="n1", namespace="other"),
    ]
    ledger = QuotaLedger.from_pods(pods, index)
    assert ledger.usage("q") == QuotaUsage(
        used=res(cpu=1800, memory=1), non_preemptible_used=res(cpu=500)
    )
    assert ledger.usage(k.QUOTA_DEFAULT).used == res(cpu=300)
    assert ledger.usage("unused") == QuotaUsage()


def test_ledger_assign_and_release() -> None:
    index = QuotaIndex.build((quota("q"),))
    ledger = QuotaLedger.from_pods([pod("a", cpu=1000, node="n", quota="q")], index)
    extra = pod("b", cpu=500, quota="q", non_preemptible=True)
    grown = ledger.assign("q", extra)
    assert grown.usage("q") == QuotaUsage(used=res(cpu=1500), non_preemptible_used=res(cpu=500))
    assert grown.release("q", extra).usage("q").used == ledger.usage("q").used
    assert ledger.usage("q").used == res(cpu=1000)  # the original is unchanged


def test_subtree_used() -> None:
    index = QuotaIndex.build(
        (quota("org", is_parent=True), quota("a", parent="org"), quota("b", parent="org"))
    )
    ledger = QuotaLedger.from_pods(
        [pod("x", cpu=1000, node="n", quota="a"), pod("y", cpu=2000, node="n", quota="b")], index
    )
    assert ledger.subtree_used("org", index) == res(cpu=3000)
    assert ledger.subtree_used("a", index) == res(cpu=1000)


# --- messages ----------------------------------------------------------------------------------


def test_format_resources() -> None:
    amounts = ResourceList({"memory": 2 * GI, "cpu": 1500, "nvidia.com/gpu": 2})
    assert format_resources(amounts) == "cpu:1500m,memory:2Gi,nvidia.com/gpu:2"
    assert format_resources(ResourceList()) == ""


@pytest.mark.parametrize(
    ("amounts", "limit", "expected"),
    [
        ({"cpu": 5}, {"cpu": 4}, ("cpu",)),
        ({"cpu": 4}, {"cpu": 4}, ()),
        ({"cpu": 5}, {"memory": 1}, ()),
        ({"memory": 2}, {"cpu": 1, "memory": 1}, ("memory",)),
        ({"cpu": 5, "memory": 5}, {"memory": 1, "cpu": 1}, ("cpu", "memory")),
    ],
    ids=["over", "equal", "name not limited", "name not requested", "sorted"],
)
def test_exceeded_dimensions(
    amounts: dict[str, int], limit: dict[str, int], expected: tuple[str, ...]
) -> None:
    assert exceeded_dimensions(amounts, limit) == expected


# --- the PreFilter check -----------------------------------------------------------------------

QUOTAS = (
    quota("org", max=res(cpu=6000), is_parent=True),
    quota("q", parent="org", min=res(cpu=1000), max=res(cpu=4000, memory=8)),
    quota("q2", parent="org", max=res(cpu=4000)),
)
INDEX = QuotaIndex.build(QUOTAS)
LEDGER = QuotaLedger.from_pods(
    [
        pod("a1", cpu=1500, memory=2, node="n1", quota="q"),
        pod("a2", cpu=500, node="n1", quota="q", non_preemptible=True),
        pod("b1", cpu=3000, node="n2", quota="q2"),
        pod("pending", cpu=9000, quota="q"),
    ],
    INDEX,
)


def _case(
    p: Pod,
    verdict: Verdict,
    message: str = "",
    *,
    args: ElasticQuotaArgs | None = None,
    limits: dict[str, ResourceList] | None = None,
) -> tuple[Pod, ElasticQuotaArgs, dict[str, ResourceList] | None, Verdict, str]:
    return (p, args or ElasticQuotaArgs(), limits, verdict, message)


PARENTS = ElasticQuotaArgs(enable_check_parent_quota=True)


@pytest.mark.parametrize(
    ("p", "args", "limits", "verdict", "message"),
    [
        _case(pod("p", cpu=2000, quota="q"), Verdict.SUCCESS),
        _case(
            pod("p", cpu=2001, quota="q"),
            Verdict.UNSCHEDULABLE,
            "Insufficient quotas, quotaName: q, runtime: cpu:4,memory:8Gi, "
            "used: cpu:2,memory:2Gi, pod's request: cpu:2001m, exceedDimensions: [cpu]",
        ),
        _case(
            pod("p", cpu=3000, memory=7, quota="q"),
            Verdict.UNSCHEDULABLE,
            "Insufficient quotas, quotaName: q, runtime: cpu:4,memory:8Gi, "
            "used: cpu:2,memory:2Gi, pod's request: cpu:3,memory:7Gi, "
            "exceedDimensions: [cpu memory]",
        ),
        _case(pod("p", cpu=100, extra={"nvidia.com/gpu": 8}, quota="q"), Verdict.SUCCESS),
        _case(pod("p", cpu=500, quota="q", non_preemptible=True), Verdict.SUCCESS),
        _case(
            pod("p", cpu=600, quota="q", non_preemptible=True),
            Verdict.UNSCHEDULABLE,
            "Insufficient non-preemptible quotas, quotaName: q, min: cpu:1, "
            "nonPreemptibleUsed: cpu:500m, pod's request: cpu:600m, exceedDimensions: [cpu]",
        ),
        _case(pod("p", memory=1, quota="q", non_preemptible=True), Verdict.SUCCESS),
        _case(pod("p", cpu=2000, quota="q"), Verdict.SUCCESS, args=ElasticQuotaArgs()),
        _case(
            pod("p", cpu=2000, quota="q"),
            Verdict.UNSCHEDULABLE,
            "Insufficient quotas, quotaNameTopo: [org q], runtime: cpu:6, used: cpu:5,memory:2Gi, "
            "pod's request: cpu:2, exceedDimensions: [cpu]",
            args=PARENTS,
        ),
        _case(pod("p", cpu=1000, quota="q"), Verdict.SUCCESS, args=PARENTS),
        _case(
            pod("p", cpu=1500, quota="q"),
            Verdict.UNSCHEDULABLE,
            "Insufficient quotas, quotaName: q, runtime: cpu:3, used: cpu:2,memory:2Gi, "
            "pod's request: cpu:1500m, exceedDimensions: [cpu]",
            limits={"q": res(cpu=3000)},
        ),
        _case(
            pod("p", cpu=1500, quota="q"),
            Verdict.SUCCESS,
            args=ElasticQuotaArgs(enable_runtime_quota=False),
            limits={"q": res(cpu=3000)},
        ),
        _case(pod("p", cpu=1500, quota="q"), Verdict.SUCCESS, limits={"q2": res(cpu=1)}),
    ],
    ids=[
        "fits exactly",
        "one millicore over",
        "two dimensions over",
        "resource missing from max is unconstrained",
        "non-preemptible within min",
        "non-preemptible over min",
        "non-preemptible resource missing from min is unconstrained",
        "parent not checked by default",
        "parent over its max",
        "parent within its max",
        "runtime limit",
        "runtime quota disabled: max",
        "runtime of another quota",
    ],
)
def test_check_pod(
    p: Pod,
    args: ElasticQuotaArgs,
    limits: dict[str, ResourceList] | None,
    verdict: Verdict,
    message: str,
) -> None:
    result = check_pod(p, index=INDEX, ledger=LEDGER, args=args, limits=limits)
    assert (result.verdict, result.message) == (verdict, message)
    assert result.admitted == (verdict is Verdict.SUCCESS)


def test_default_quota_is_limited_by_the_args() -> None:
    args = ElasticQuotaArgs(default_quota_group_max=res(cpu=1000))
    index = QuotaIndex.build(QUOTAS, args)
    result = check_pod(
        pod("p", cpu=2000, namespace="other"), index=index, ledger=QuotaLedger(), args=args
    )
    assert result.message == (
        "Insufficient quotas, quotaName: koordinator-default-quota, runtime: cpu:1, "
        "used: , pod's request: cpu:2, exceedDimensions: [cpu]"
    )


def test_only_requested_dimensions_are_checked() -> None:
    """A quota already over in memory still admits a pod that asks for CPU only."""
    ledger = LEDGER.assign("q", pod("big", memory=20, node="n1", quota="q"))
    assert check_pod(pod("p", cpu=100, quota="q"), index=INDEX, ledger=ledger).admitted
    refused = check_pod(pod("p", cpu=100, memory=1, quota="q"), index=INDEX, ledger=ledger)
    assert refused.exceeded == ("memory",)


def test_missing_quota_is_an_error() -> None:
    """An index without the built-in default quota (not one ``build`` makes)."""
    bare = QuotaIndex(by_name={}, object_keys=frozenset(), bound={}, children={})
    result = check_pod(pod("p", cpu=1), index=bare, ledger=QuotaLedger())
    assert (result.verdict, result.quota) == (Verdict.ERROR, k.QUOTA_DEFAULT)
    assert result.message == "Could not find the specified ElasticQuota"
    assert not result.admitted


def test_unmanaged_pod_is_skipped() -> None:
    result = check_pod(
        pod("p", cpu=10**9, namespace="other"),
        index=INDEX,
        ledger=LEDGER,
        disable_default_quota=True,
    )
    assert (result.verdict, result.quota, result.admitted) == (Verdict.SKIP, "", True)


def test_reserve_makes_the_next_pod_wait() -> None:
    """Reserve (assign) of one pod counts against the next one of the same quota."""
    first = pod("first", cpu=2000, quota="q")
    assert check_pod(first, index=INDEX, ledger=LEDGER).admitted
    ledger = LEDGER.assign("q", first)
    second = check_pod(pod("second", cpu=1, quota="q"), index=INDEX, ledger=ledger)
    assert second.verdict is Verdict.UNSCHEDULABLE
    assert second.exceeded == ("cpu",)
