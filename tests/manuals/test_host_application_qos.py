"""Koordinator v1.8 user manual "QoS Management for Out-of-Band Applications on Host"
(``host-application-qos``).

Source: koordinator-sh/website ``versioned_docs/version-v1.8/user-manuals/host-application-qos.md``.
Its ``slo-controller-config`` (``host-application-config`` and ``resource-qos-config``) is
applied unchanged; the NodeSLO lists the host application ``nginx`` (LS, under
``host-latency-sensitive/nginx/``) and the CPU QoS classes, and the agent takes the application
into its settings.
"""

from __future__ import annotations

from pathlib import Path

from apis.slo import CgroupPath, HostApplicationSpec
from tests.controller.slo.slohelpers import agent_settings, slo_spec, valid_nodeslos
from tests.manuals.replay import node, replay

CONFIGMAP = """
apiVersion: v1
data:
  host-application-config: |
    {
      "applications": [
        {
          "name": "nginx",
          "qos": "LS",
          "cgroupPath": {
            "base": "CgroupRoot",
            "parentDir": "host-latency-sensitive/",
            "relativePath": "nginx/"
          }
        }
      ]
    }
  resource-qos-config: |
    {
      "clusterStrategy": {
        "lsClass": {
          "cpuQOS": {
            "enable": true,
            "groupIdentity": 2
          }
        },
        "beClass": {
          "cpuQOS": {
            "enable": true,
            "groupIdentity": -1
          }
        }
      }
    }
kind: ConfigMap
metadata:
  name: slo-controller-config
  namespace: koordinator-system
"""

NGINX = HostApplicationSpec(
    name="nginx",
    qos="LS",
    cgroup_path=CgroupPath(
        base="CgroupRoot", parent_dir="host-latency-sensitive/", relative_path="nginx/"
    ),
)


def test_the_host_application_is_in_every_nodeslo(shared_dir: Path) -> None:
    out = replay(CONFIGMAP, node("node-1"), node("node-2"))
    assert list(out.events()) == []
    assert valid_nodeslos(shared_dir, out) == 2
    for name in ("node-1", "node-2"):
        spec = slo_spec(out, name)
        assert spec.host_applications == (NGINX,)
        wire = out.wire("NodeSLO", name)["spec"]
        assert wire["resourceQOSStrategy"]["lsClass"] == {
            "cpuQOS": {"enable": True, "groupIdentity": 2}
        }
        assert agent_settings(spec).host_applications == (NGINX,)


def test_node_configs_give_some_nodes_their_own_applications() -> None:
    """``nodeConfigs`` of ``host-application-config`` (the same shape as the other keys')."""
    text = CONFIGMAP.replace(
        """        }
      ]
    }
  resource-qos-config""",
        """        }
      ],
      "nodeConfigs": [
        {
          "name": "no-apps",
          "nodeSelector": {"matchLabels": {"pool": "bare"}},
          "applications": []
        }
      ]
    }
  resource-qos-config""",
    )
    out = replay(text, node("node-1"), node("node-2", labels={"pool": "bare"}))
    assert slo_spec(out, "node-1").host_applications == (NGINX,)
    assert slo_spec(out, "node-2").host_applications == ()
