"""The apps/v1 kinds: real manifests load unchanged; what the API server refuses is refused,
naming the field and the value; the CLI stores nothing of a file with a refused workload."""

from __future__ import annotations

from pathlib import Path

import pytest

from apis.apps import DaemonSet, Deployment, InvalidWorkload, StatefulSet, scaled_value
from apis.codec import decode_documents, encode_json
from apis.errors import DecodeError
from apis.kinds import default_registry
from controller.cli import commands as cli

DEPLOYMENT = """
apiVersion: apps/v1
kind: Deployment
metadata:
  name: nginx-deployment
  labels:
    app: nginx
spec:
  replicas: 3
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:1.14.2
        ports:
        - containerPort: 80
"""


def one(text: str) -> object:
    [obj] = decode_documents(text, source="f.yaml")
    return obj


def refused(text: str) -> str:
    with pytest.raises(DecodeError) as err:
        decode_documents(text, source="f.yaml")
    return str(err.value)


def test_a_deployment_loads_unchanged() -> None:
    deploy = one(DEPLOYMENT)
    assert isinstance(deploy, Deployment)
    assert deploy.spec.replicas == 3
    assert deploy.spec.selector is not None
    assert deploy.spec.selector.match_labels == {"app": "nginx"}
    assert deploy.spec.template.spec.containers[0].image == "nginx:1.14.2"
    assert b'"replicas":3' in encode_json(deploy)


def test_a_selector_that_misses_the_template_labels_is_refused() -> None:
    message = refused(
        DEPLOYMENT.replace("      labels:\n        app: nginx", "      labels:\n        app: web")
    )
    assert "f.yaml: document 0" in message
    assert "spec.template.metadata.labels" in message
    assert '"app=web"' in message
    assert "`selector` does not match template `labels`" in message


@pytest.mark.parametrize(
    "selector",
    ["  selector: {}\n", "  selector:\n    matchLabels: {}\n", ""],
    ids=["empty", "empty-labels", "missing"],
)
def test_a_deployment_needs_a_selector(selector: str) -> None:
    text = DEPLOYMENT.replace("  selector:\n    matchLabels:\n      app: nginx\n", selector)
    message = refused(text)
    assert "spec.selector: Required value" in message


def test_negative_replicas_are_refused() -> None:
    message = refused(DEPLOYMENT.replace("replicas: 3", "replicas: -1"))
    assert 'spec.replicas: Invalid value: "-1": must be greater than or equal to 0' in message


def test_a_deployment_template_must_restart_always() -> None:
    text = DEPLOYMENT.replace("      containers:", "      restartPolicy: Never\n      containers:")
    message = refused(text)
    assert 'spec.template.spec.restartPolicy: Unsupported value: "Never"' in message


def test_bad_template_labels_are_refused() -> None:
    text = DEPLOYMENT.replace(
        "      labels:\n        app: nginx", '      labels:\n        app: nginx\n        -x: "y"'
    )
    message = refused(text)
    assert 'spec.template.metadata.labels: Invalid value: "-x"' in message


def test_a_template_without_containers_is_refused() -> None:
    text = DEPLOYMENT.split("      containers:")[0] + "      containers: []\n"
    assert "spec.template.spec.containers: Required value" in refused(text)


@pytest.mark.parametrize(
    ("strategy", "field", "value"),
    [
        ("{type: Rolling}", "spec.strategy.type", '"Rolling"'),
        (
            "{rollingUpdate: {maxSurge: 0, maxUnavailable: 0}}",
            "spec.strategy.rollingUpdate.maxUnavailable",
            '"0"',
        ),
        (
            "{rollingUpdate: {maxSurge: '0%', maxUnavailable: '0%'}}",
            "spec.strategy.rollingUpdate.maxUnavailable",
            '"0%"',
        ),
        ("{rollingUpdate: {maxSurge: 'lots'}}", "spec.strategy.rollingUpdate.maxSurge", '"lots"'),
        ("{rollingUpdate: {maxSurge: -1}}", "spec.strategy.rollingUpdate.maxSurge", '"-1"'),
    ],
)
def test_bad_strategies_are_refused(strategy: str, field: str, value: str) -> None:
    text = DEPLOYMENT.replace("  replicas: 3", f"  replicas: 3\n  strategy: {strategy}")
    message = refused(text)
    assert f"{field}: " in message
    assert value in message


def test_recreate_with_rolling_parameters_is_refused() -> None:
    text = DEPLOYMENT.replace(
        "  replicas: 3", "  replicas: 3\n  strategy: {type: Recreate, rollingUpdate: {maxSurge: 1}}"
    )
    assert "spec.strategy.rollingUpdate: Forbidden" in refused(text)


def test_valid_strategies_load() -> None:
    for strategy in ("{type: Recreate}", "{rollingUpdate: {maxSurge: 0, maxUnavailable: 1}}"):
        text = DEPLOYMENT.replace("  replicas: 3", f"  replicas: 3\n  strategy: {strategy}")
        assert isinstance(one(text), Deployment)


def test_match_expressions_are_checked_against_the_template() -> None:
    text = DEPLOYMENT.replace(
        "    matchLabels:\n      app: nginx\n",
        "    matchExpressions:\n    - {key: app, operator: In, values: [nginx, web]}\n",
    )
    assert isinstance(one(text), Deployment)
    wrong = text.replace("values: [nginx, web]", "values: [web]")
    assert "spec.template.metadata.labels" in refused(wrong)
    bad = text.replace("operator: In", "operator: Near")
    assert "spec.selector: Invalid value" in refused(bad)


STATEFUL_SET = """
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  selector:
    matchLabels:
      app: nginx
  serviceName: "nginx"
  replicas: 3
  minReadySeconds: 10
  template:
    metadata:
      labels:
        app: nginx
    spec:
      terminationGracePeriodSeconds: 10
      containers:
      - name: nginx
        image: registry.k8s.io/nginx-slim:0.24
        ports:
        - containerPort: 80
          name: web
        volumeMounts:
        - name: www
          mountPath: /usr/share/nginx/html
  volumeClaimTemplates:
  - metadata:
      name: www
    spec:
      accessModes: [ "ReadWriteOnce" ]
      storageClassName: "my-storage-class"
      resources:
        requests:
          storage: 1Gi
"""


def test_a_stateful_set_loads_and_checks_its_policy() -> None:
    sts = one(STATEFUL_SET)
    assert isinstance(sts, StatefulSet)
    assert sts.spec.service_name == "nginx"
    assert sts.spec.volume_claim_templates[0]["metadata"] == {"name": "www"}
    bad = STATEFUL_SET.replace('  serviceName: "nginx"', "  podManagementPolicy: Random")
    assert 'spec.podManagementPolicy: Unsupported value: "Random"' in refused(bad)
    negative = STATEFUL_SET.replace("minReadySeconds: 10", "minReadySeconds: -5")
    assert "spec.minReadySeconds" in refused(negative)


DAEMON_SET = """
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: fluentd-elasticsearch
  namespace: kube-system
spec:
  selector:
    matchLabels:
      name: fluentd-elasticsearch
  template:
    metadata:
      labels:
        name: fluentd-elasticsearch
    spec:
      tolerations:
      - key: node-role.kubernetes.io/control-plane
        operator: Exists
        effect: NoSchedule
      containers:
      - name: fluentd-elasticsearch
        image: quay.io/fluentd_elasticsearch/fluentd:v5.0.1
"""


def test_a_daemon_set_loads_and_checks_its_selector() -> None:
    ds = one(DAEMON_SET)
    assert isinstance(ds, DaemonSet)
    assert ds.spec.template.spec.tolerations[0].operator == "Exists"
    wrong = DAEMON_SET.replace(
        "    matchLabels:\n      name: fluentd", "    matchLabels:\n      name: other"
    )
    assert "spec.template.metadata.labels" in refused(wrong)


def test_building_an_invalid_workload_in_code_fails_too() -> None:
    with pytest.raises(InvalidWorkload, match=r"spec\.selector"):
        Deployment()


@pytest.mark.parametrize(
    ("value", "total", "up", "expected"),
    [
        (None, 4, True, 1),
        (None, 4, False, 1),
        ("25%", 3, True, 1),
        ("25%", 3, False, 0),
        (2, 9, True, 2),
    ],
)
def test_scaled_values(value: int | str | None, total: int, up: bool, expected: int) -> None:
    assert scaled_value(value, total, round_up=up, default="25%") == expected


def test_apply_refuses_the_file_and_stores_nothing(tmp_path: Path) -> None:
    good = DEPLOYMENT.replace("nginx-deployment", "good")
    bad = DEPLOYMENT.replace("replicas: 3", "replicas: -2")
    path = tmp_path / "deploy.yaml"
    path.write_text(good + "---\n" + bad)
    with pytest.raises(cli.InputError) as err:
        cli.load([str(path)], default_registry())
    assert f"{path}: document 1" in str(err.value)
    assert "spec.replicas" in str(err.value)
