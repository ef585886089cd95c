"""The README's config examples are real configs."""

from __future__ import annotations

import re
from pathlib import Path

from agent.config import AgentConfig
from controller.config import ControllerConfig
from runtime import configfile


def _toml_blocks(repo_root: Path) -> list[str]:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```toml\n(.*?)```", text, flags=re.DOTALL)


def test_readme_configs_parse(repo_root: Path) -> None:
    kubernetes_text, agent_kubernetes_text, controller_text, agent_text = _toml_blocks(repo_root)
    kubernetes = configfile.parse_config(kubernetes_text, ControllerConfig).kubernetes
    assert (kubernetes.qps, kubernetes.burst, kubernetes.lease_duration) == (50.0, 100, 15.0)
    agent_kubernetes = configfile.parse_config(agent_kubernetes_text, AgentConfig)
    assert agent_kubernetes.report.transport == "kubernetes"
    assert (agent_kubernetes.kubernetes.qps, agent_kubernetes.kubernetes.burst) == (20.0, 30)
    controller = configfile.parse_config(controller_text, ControllerConfig)
    assert controller.store.synchronous == "NORMAL"
    assert controller.api.address == "0.0.0.0:7443"
    agent = configfile.parse_config(agent_text, AgentConfig)
    assert agent.agent.node_name == "gpu-01"
    assert agent.report.interval == 10.0


def test_readme_starts_with_the_two_setup_commands(repo_root: Path) -> None:
    text = (repo_root / "README.md").read_text(encoding="utf-8")
    first_section = text.split("\n## ", 2)[1]
    assert first_section.startswith("Set-up")
    assert "make demo" in first_section
    assert "make test" in first_section
