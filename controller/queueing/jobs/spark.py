"""``sparkoperator.k8s.io/v1beta2`` SparkApplication, queued as ``<app>-spark-qu``.

* held by the annotation ``scheduling.x-k8s.io/suspend: "true"`` only;
* pod sets: ``driver`` (1 pod, cluster mode only) and ``executor`` (``instances``, or the
  number of live executor pods when larger); their pod templates are built from the Spark
  sizes: cpu ``coreRequest`` else ``cores`` (default 1), memory ``memory`` plus
  ``memoryOverhead`` (default ``memoryOverheadFactor`` x memory, factor 0.1, at least 384 MiB;
  Spark units: ``512m``, ``4g`` are binary multiples), and the GPU; pods are labelled
  ``spark-role`` and ``sparkoperator.k8s.io/app-name``;
* priority: ``batchSchedulerOptions.priorityClassName``, else the executor's class;
* status: ``applicationState.state`` ``SUBMITTED`` on resume, ``RUNNING``, then ``COMPLETED`` or
  ``FAILED`` when the driver pod ends; ``executorState`` per executor pod.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import ClassVar, Final

import msgspec

from apis import constants as k
from apis.core import Pod, PodSpec, PodTemplateSpec
from apis.meta import Object, ObjectMeta
from apis.quantity import QuantityError, to_canonical
from apis.queueing import PodSet
from apis.workloads import SparkApplication, SparkApplicationState, SparkPodSpec
from controller.queueing.jobs.base import (
    FAILED,
    SUCCEEDED,
    AnnotationHeldAdapter,
    ExtensionArgs,
    count_replicas,
    plain_container,
    with_annotations,
)

__all__ = ["Args", "SparkAdapter", "spark_memory_bytes"]

replace = msgspec.structs.replace

DRIVER: Final = "driver"
EXECUTOR: Final = "executor"
LABEL_SPARK_ROLE: Final = "spark-role"
LABEL_SPARK_APP_NAME: Final = "sparkoperator.k8s.io/app-name"
#: Spark's minimum memory overhead (384 MiB) and default overhead factor.
MIN_OVERHEAD: Final = 384 << 20
DEFAULT_OVERHEAD_FACTOR: Final = 0.1

_MEMORY = re.compile(r"^\s*(\d+)\s*([kmgtp]?)b?\s*$", re.IGNORECASE)
_SHIFT = {"": 20, "k": 10, "m": 20, "g": 30, "t": 40, "p": 50}


class Args(ExtensionArgs, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Settings of the ``sparkapp`` extension."""


def spark_memory_bytes(text: str) -> int:
    """Spark's memory strings in bytes (``512m``, ``4g``, ``1024``: a bare number is MiB)."""
    match = _MEMORY.match(text)
    if match is None:
        raise ValueError(f"invalid Spark memory size {text!r}")
    return int(match[1]) << _SHIFT[match[2].lower()]


def _job(obj: Object) -> SparkApplication:
    if not isinstance(obj, SparkApplication):
        raise TypeError(f"expected a SparkApplication, got {obj.kind}")
    return obj


def _requests(app: SparkApplication, pod: SparkPodSpec) -> dict[str, int]:
    cpu = 1000 * (pod.cores if pod.cores is not None else 1)
    if pod.core_request:
        with contextlib.suppress(QuantityError):
            cpu = to_canonical("cpu", pod.core_request)
    memory = spark_memory_bytes(pod.memory) if pod.memory else 1 << 30
    if pod.memory_overhead:
        overhead = spark_memory_bytes(pod.memory_overhead)
    else:
        try:
            factor = float(app.spec.memory_overhead_factor or DEFAULT_OVERHEAD_FACTOR)
        except ValueError:
            factor = DEFAULT_OVERHEAD_FACTOR
        overhead = max(MIN_OVERHEAD, int(memory * factor))
    requests = {"cpu": cpu, "memory": memory + overhead}
    if pod.gpu is not None and pod.gpu.quantity:
        requests[pod.gpu.name] = pod.gpu.quantity
    return requests


def _template(app: SparkApplication, role: str, pod: SparkPodSpec) -> PodTemplateSpec:
    labels = {
        **pod.labels,
        LABEL_SPARK_ROLE: role,
        LABEL_SPARK_APP_NAME: app.metadata.name,
    }
    options = app.spec.batch_scheduler_options
    return PodTemplateSpec(
        metadata=ObjectMeta(labels=labels, annotations=dict(pod.annotations)),
        spec=PodSpec(
            containers=(
                plain_container(
                    f"spark-kubernetes-{role}", _requests(app, pod), pod.image or app.spec.image
                ),
            ),
            node_selector={**app.spec.node_selector, **pod.node_selector},
            tolerations=pod.tolerations,
            affinity=pod.affinity,
            scheduler_name=pod.scheduler_name,
            service_account_name=pod.service_account,
            priority_class_name=(options.priority_class_name if options else "")
            or pod.priority_class_name,
            restart_policy="Never",
        ),
    )


class SparkAdapter(AnnotationHeldAdapter):
    name: ClassVar[str] = "sparkapp"
    kind: ClassVar[type[Object]] = SparkApplication
    args_type: ClassVar[type[ExtensionArgs]] = Args
    suffix: ClassVar[str] = "-spark-qu"

    def is_managed(self, job: Object) -> bool:
        typed = _job(job)
        return self.is_suspended(typed) and typed.status.application_state is None

    def pod_sets(self, job: Object, pods: Mapping[str, Sequence[Pod]]) -> tuple[PodSet, ...]:
        app = _job(job)
        sets: list[PodSet] = []
        if app.spec.mode in ("", "cluster"):
            sets.append(
                PodSet(name=DRIVER, template=_template(app, DRIVER, app.spec.driver), count=1)
            )
        executor = app.spec.executor
        instances = executor.instances if executor.instances is not None else 1
        live = count_replicas(pods.get(EXECUTOR, ())).active
        sets.append(
            PodSet(
                name=EXECUTOR,
                template=_template(app, EXECUTOR, executor),
                count=max(instances, live),
            )
        )
        return tuple(sets)

    def priority_source(self, job: Object) -> tuple[str, int | None]:
        app = _job(job)
        options = app.spec.batch_scheduler_options
        name = (options.priority_class_name if options else "") or (
            app.spec.executor.priority_class_name
        )
        return name, None

    def enqueued(self, job: Object, unit: str, now: datetime) -> Object:
        app = _job(job)
        spec = app.spec
        stamped = {}
        for role, pod in ((DRIVER, spec.driver), (EXECUTOR, spec.executor)):
            stamped[role] = replace(
                pod,
                labels={**pod.labels, k.LABEL_SCHEDULE_ADMISSION: "false"},
                annotations={
                    **pod.annotations,
                    k.ANNOTATION_RELATED_QUEUEUNIT: unit,
                    k.ANNOTATION_RELATED_PODSET_NAME: role,
                },
            )
        meta = with_annotations(app, **{k.ANNOTATION_JOB_HAS_ENQUEUED: "true"})
        return replace(
            app,
            metadata=meta,
            spec=replace(spec, driver=stamped[DRIVER], executor=stamped[EXECUTOR]),
        )

    def suspend(self, job: Object, now: datetime) -> Object:
        app = _job(job)
        return replace(app, metadata=with_annotations(app, **{k.ANNOTATION_QUEUE_SUSPEND: "true"}))

    def resume(self, job: Object, now: datetime) -> Object:
        app = _job(job)
        meta = with_annotations(app, **{k.ANNOTATION_QUEUE_SUSPEND: "false"})
        status = replace(
            app.status,
            application_state=SparkApplicationState(state="SUBMITTED"),
            last_submission_attempt_time=now,
            submission_attempts=(app.status.submission_attempts or 0) + 1,
        )
        return replace(app, metadata=meta, status=status)

    def observe(self, job: Object, pods: Mapping[str, Sequence[Pod]], now: datetime) -> Object:
        app = _job(job)
        status = app.status
        if self.outcome(app) is not None or status.application_state is None:
            return app
        executors = {
            pod.metadata.name: _executor_state(pod.status.phase) for pod in pods.get(EXECUTOR, ())
        }
        decider = DRIVER if app.spec.mode in ("", "cluster") else EXECUTOR
        counts = count_replicas(pods.get(decider, ()))
        state = status.application_state
        if counts.failed:
            state = SparkApplicationState(state="FAILED", error_message="driver pod failed")
        elif counts.succeeded and not counts.active:
            state = SparkApplicationState(state="COMPLETED")
        elif counts.running:
            state = SparkApplicationState(state="RUNNING")
        terminal = state.state in ("COMPLETED", "FAILED")
        new = replace(
            status,
            application_state=state,
            executor_state=executors,
            termination_time=now if terminal else status.termination_time,
        )
        return app if new == status else replace(app, status=new)

    def outcome(self, job: Object) -> str | None:
        state = _job(job).status.application_state
        if state is None:
            return None
        if state.state == "COMPLETED":
            return SUCCEEDED
        if state.state in ("FAILED", "SUBMISSION_FAILED"):
            return FAILED
        return None


def _executor_state(phase: str) -> str:
    return {
        "Running": "RUNNING",
        "Succeeded": "COMPLETED",
        "Failed": "FAILED",
    }.get(phase, "PENDING")
