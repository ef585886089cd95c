"""Job extensions: how each job kind becomes a QueueUnit and runs once admitted.

:data:`EXTENSIONS` is the explicit registry, keyed by the Helm extension names
(``extension.<name>.enable``); each entry is a :class:`~controller.queueing.jobs.base.JobAdapter`.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from controller.queueing.jobs.base import JobAdapter
from controller.queueing.jobs.batchjob import BatchJobAdapter
from controller.queueing.jobs.kubeflow import MPIJobAdapter, PyTorchJobAdapter, TFJobAdapter
from controller.queueing.jobs.ray import RayJobAdapter
from controller.queueing.jobs.spark import SparkAdapter
from controller.queueing.jobs.workflow import WorkflowAdapter

__all__ = ["EXTENSIONS", "JobAdapter"]

EXTENSIONS: Mapping[str, JobAdapter] = MappingProxyType(
    {
        "job": BatchJobAdapter(),
        "pytorchjob": PyTorchJobAdapter(),
        "tfjob": TFJobAdapter(),
        "mpijob": MPIJobAdapter(),
        "rayjob": RayJobAdapter(),
        "sparkapp": SparkAdapter(),
        "workflow": WorkflowAdapter(),
    }
)
