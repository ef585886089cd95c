"""The kinds the job extensions and admission checks add: MPIJob, RayJob, SparkApplication,
Workflow, PriorityClass and AdmissionCheck (aliases and field shapes)."""

from __future__ import annotations

import pytest

from apis.admission import AdmissionCheck
from apis.codec import decode_documents, encode_json
from apis.core import PriorityClass
from apis.errors import DecodeError
from apis.kinds import default_registry
from apis.workloads import RayJob, SparkApplication

REGISTRY = default_registry()


def test_admission_check_v1beta1_is_rewritten_to_v1beta2() -> None:
    text = (
        "apiVersion: kueue.x-k8s.io/v1beta1\nkind: AdmissionCheck\nmetadata: {name: prov}\n"
        "spec: {controllerName: kueue.x-k8s.io/provisioning-request}\n"
    )
    [check] = decode_documents(text)
    assert isinstance(check, AdmissionCheck)
    assert check.api_version == "kueue.x-k8s.io/v1beta2"
    assert check.spec.controller_name == "kueue.x-k8s.io/provisioning-request"
    assert b'"apiVersion":"kueue.x-k8s.io/v1beta2"' in encode_json(check)
    assert not REGISTRY.for_object(check).namespaced


def test_priority_class_fields_sit_at_the_top_level() -> None:
    text = (
        "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\n"
        "value: 1000000\nglobalDefault: true\npreemptionPolicy: Never\n"
    )
    [found] = decode_documents(text)
    assert isinstance(found, PriorityClass)
    assert (found.value, found.global_default, found.preemption_policy) == (
        1_000_000,
        True,
        "Never",
    )
    assert not REGISTRY.for_object(found).namespaced


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (
            "apiVersion: ray.io/v1\nkind: RayJob\nmetadata: {name: r}\nspec: {entrypont: x}\n",
            "entrypont",
        ),
        (
            "apiVersion: sparkoperator.k8s.io/v1beta2\nkind: SparkApplication\n"
            "metadata: {name: s}\nspec: {driver: {core: 1}}\n",
            "core",
        ),
    ],
)
def test_misspelt_fields_are_refused(text: str, field: str) -> None:
    with pytest.raises(DecodeError, match=field):
        decode_documents(text)


def test_ray_and_spark_wire_names() -> None:
    text = """
apiVersion: ray.io/v1
kind: RayJob
metadata: {name: r}
spec: {runtimeEnvYAML: "pip: []", entrypointNumCpus: 0.5}
status: {dashboardURL: "http://head:8265", jobDeploymentStatus: Running}
---
apiVersion: sparkoperator.k8s.io/v1beta2
kind: SparkApplication
metadata: {name: s}
status: {submissionID: abc, applicationState: {state: RUNNING}}
"""
    ray, spark = decode_documents(text)
    assert isinstance(ray, RayJob)
    assert ray.spec.runtime_env_yaml == "pip: []"
    assert ray.status.dashboard_url == "http://head:8265"
    assert isinstance(spark, SparkApplication)
    assert spark.status.submission_id == "abc"
    assert spark.status.application_state is not None
    assert spark.status.application_state.state == "RUNNING"
