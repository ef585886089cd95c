"""The plugin chain: configuration, the filter runner, and the ElasticQuota filter's rules."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from apis import constants as k
from controller.queueing.framework import (
    Code,
    CycleContext,
    FilterPlugin,
    FilterResult,
    Status,
    run_filters,
)
from controller.queueing.ledger import QuotaLedger
from controller.queueing.plugins import (
    PluginRef,
    QueueingConfig,
    QueueingConfigError,
    build_plugins,
)
from controller.queueing.units import UnitInfo, unit_info
from controller.quota.check import QuotaIndex
from tests.controller.queueing.conftest import Harness, cores, unit_object

# --- configuration -------------------------------------------------------------------------------


def test_the_default_chain() -> None:
    plugins = build_plugins()
    assert [p.name for p in plugins.filters] == ["ElasticQuota"]
    assert plugins.queue_sort.name == "Priority"
    assert plugins.mapping.name == "ElasticQuota"


def test_the_koord_queue_name_is_accepted_as_an_alias() -> None:
    config = QueueingConfig(plugins=(PluginRef(name="Priority"), PluginRef(name="ElasticQuotaV2")))
    assert build_plugins(config).mapping.name == "ElasticQuota"


@pytest.mark.parametrize(
    ("plugins", "configs", "message"),
    [
        pytest.param(
            ("Priority", "ElasticQuota", "Nope"),
            {},
            "plugins[2].name: unknown plugin 'Nope'",
            id="unknown-plugin",
        ),
        pytest.param(
            ("Priority", "Priority", "ElasticQuota"),
            {},
            "'Priority' is listed twice",
            id="twice",
        ),
        pytest.param(("ElasticQuota",), {}, "exactly one MultiQueueSort", id="no-sort"),
        pytest.param(
            ("Priority", "ElasticQuota"),
            {"ElasticQuota": {"defaultPolicy": "FIFO"}},
            "pluginConfigs.ElasticQuota: ElasticQuotaArgs.defaultPolicy: 'FIFO'",
            id="bad-policy",
        ),
        pytest.param(
            ("Priority", "ElasticQuota"),
            {"ElasticQuota": {"checkRuntim": True}},
            "checkRuntim",
            id="unknown-field",
        ),
        pytest.param(
            ("Priority", "ElasticQuota", "TenantCap"),
            {"TenantCap": {"maxRunningUnits": -1}},
            "TenantCapArgs.maxRunningUnits: -1 must not be negative",
            id="negative-cap",
        ),
        pytest.param(
            ("Priority", "ElasticQuota"), {"Other": {}}, "unknown plugin 'Other'", id="stray-args"
        ),
    ],
)
def test_bad_configuration_names_the_field_and_value(
    plugins: tuple[str, ...], configs: dict[str, dict[str, Any]], message: str
) -> None:
    config = QueueingConfig(
        plugins=tuple(PluginRef(name=n) for n in plugins), plugin_configs=configs
    )
    with pytest.raises(QueueingConfigError) as raised:
        build_plugins(config)
    assert message in str(raised.value)


# --- the filter runner ----------------------------------------------------------------------------


class Fixed:
    """A filter allowing at most ``cap`` replicas per pod set, or refusing."""

    def __init__(self, name: str, cap: Mapping[str, int] | None) -> None:
        self.name = name
        self.cap = cap
        self.calls = 0

    def signature(self, unit: UnitInfo) -> Hashable:
        return None

    def filter(self, ctx: CycleContext, unit: UnitInfo, request: Mapping[str, int]) -> FilterResult:
        self.calls += 1
        if self.cap is None:
            return FilterResult(Status(Code.UNSCHEDULABLE, "no", plugin=self.name))
        return FilterResult(Status(), {n: min(c, self.cap.get(n, c)) for n, c in request.items()})


def context() -> CycleContext:
    return CycleContext(
        now=datetime(2026, 3, 1, tzinfo=UTC),
        index=QuotaIndex.build(()),
        ledger=QuotaLedger(lambda q: (q,)),
        runtime={},
        paths={},
        bump=lambda key: None,
    )


TWO_SETS = unit_info(unit_object("u", pod_sets=(("a", 4, cores(1)), ("b", 2, cores(1)))), "team-a")


@pytest.mark.parametrize(
    ("caps", "admissible", "ok"),
    [
        pytest.param([{}], {"a": 4, "b": 2}, True, id="all"),
        pytest.param([{"a": 3}, {"a": 2, "b": 1}], {"a": 2, "b": 1}, True, id="smallest-wins"),
        pytest.param([{"b": 0}], {"a": 4}, True, id="zero-drops-the-set"),
        pytest.param([{"a": 0, "b": 0}], {}, False, id="nothing-left-refuses"),
    ],
)
def test_run_filters_takes_the_smallest_count(
    caps: list[dict[str, int]], admissible: dict[str, int], ok: bool
) -> None:
    filters: list[FilterPlugin] = [Fixed(f"f{n}", cap) for n, cap in enumerate(caps)]
    result = run_filters(filters, context(), TWO_SETS, TWO_SETS.outstanding)
    assert result.status.ok is ok
    if ok:
        assert dict(result.admissible) == admissible


def test_the_first_refusal_stops_the_chain() -> None:
    later = Fixed("later", {})
    result = run_filters([Fixed("first", None), later], context(), TWO_SETS, {"a": 4})
    assert result.status.plugin == "first"
    assert later.calls == 0


# --- the ElasticQuota filter ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("labels", "admitted", "reason"),
    [
        pytest.param({}, True, "", id="preemptible-may-borrow-to-max"),
        pytest.param(
            {k.LABEL_QUOTA_PREEMPTIBLE: "false"},
            False,
            "waiting for quota team-a: cpu needs 3, 2 free of min 2",
            id="non-preemptible-stays-within-min",
        ),
    ],
)
def test_non_preemptible_units_are_checked_against_min(
    harness: Harness, labels: dict[str, str], admitted: bool, reason: str
) -> None:
    harness.quota("team-a", min=cores(2), max=cores(10))
    harness.unit("job", cpu_m=3000, labels=labels)
    harness.settle()
    assert (harness.phase("job") == "Dequeued") is admitted
    assert reason in harness.get("job").status.message


def test_resources_absent_from_max_are_unconstrained(harness: Harness) -> None:
    harness.quota("team-a", max={"memory": 1 << 30})
    harness.unit("job", cpu_m=64_000)
    harness.settle()
    assert harness.phase("job") == "Dequeued"


def test_check_runtime_off_gates_at_max_only(harness: Harness) -> None:
    plugins = build_plugins(
        QueueingConfig(
            plugins=(PluginRef(name="Priority"), PluginRef(name="ElasticQuota")),
            plugin_configs={"ElasticQuota": {"checkRuntime": False}},
        )
    )
    gated = Harness(harness.store, harness.clock, plugins=plugins)
    gated.node("n1", cores(2))
    gated.quota("team-a", max=cores(10))
    gated.unit("job", cpu_m=6000)
    gated.settle()
    assert gated.phase("job") == "Dequeued"  # Koord-Queue's V2 behaviour: max only
