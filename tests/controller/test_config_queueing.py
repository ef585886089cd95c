"""``[queueing]`` in the controller's configuration: which plugins, with which args."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller import config
from controller.errors import ConfigError
from controller.queueing.plugins.tenantcap import TenantCap


def test_defaults_enable_priority_and_elastic_quota(tmp_path: Path) -> None:
    path = tmp_path / "controller.toml"
    path.write_text("")
    plugins = config.queueing_plugins(config.load(str(path)))
    assert sorted(plugins.by_name) == ["ElasticQuota", "Priority"]


def test_tenant_cap_is_enabled_with_its_args(tmp_path: Path) -> None:
    path = tmp_path / "controller.toml"
    path.write_text(
        "[queueing]\n"
        'plugins = ["Priority", "ElasticQuotaV2", "TenantCap"]\n'
        "reclaim_min_runtime = 300\n"
        "[queueing.plugin_configs.TenantCap]\n"
        'tenantLabel = "team.example.com/user"\n'
        "maxRunningUnits = 3\n"
        "[queueing.plugin_configs.TenantCap.maxResources]\n"
        'cpu = "64"\n'
    )
    cfg = config.load(str(path))
    assert cfg.queueing.reclaim_min_runtime == 300
    plugins = config.queueing_plugins(cfg)
    cap = plugins.by_name["TenantCap"]
    assert isinstance(cap, TenantCap)
    assert cap.args.tenant_label == "team.example.com/user"
    assert cap.args.max_running_units == 3
    assert cap.args.max_resources == {"cpu": 64_000}
    assert [f.name for f in plugins.filters] == ["ElasticQuota", "TenantCap"]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ('plugins = ["Priority"]', "QueueUnitMapping"),
        ('plugins = ["Priority", "ElasticQuota", "Priority"]', "listed twice"),
        (
            'plugins = ["Priority", "ElasticQuota"]\n'
            "[queueing.plugin_configs.ElasticQuota]\ndefaultPolicy = 'FIFO'",
            "defaultPolicy",
        ),
    ],
    ids=["no-mapping", "twice", "bad-policy"],
)
def test_a_bad_queueing_section_is_refused(tmp_path: Path, body: str, named: str) -> None:
    path = tmp_path / "controller.toml"
    path.write_text(f"[queueing]\n{body}\n")
    with pytest.raises(ConfigError, match=r"\[queueing\]") as caught:
        config.load(str(path))
    assert named in str(caught.value)
