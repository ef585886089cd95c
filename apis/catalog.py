"""The table of every kind koordpy stores, with the names kubectl and Koordinator print.

The order is the order ``koordpy get all`` lists them. Short names come from the CRDs'
``names`` where they define any (PodMigrationJob ``pmj``, QueueUnit ``qu``/``qus``); the
others follow kubectl (``po``, ``no``, ``ev``, ``cm``, ``deploy``, ``rs``, ``sts``, ``ds``)
and the upstream charts (``rsv`` for reservations, ``eq`` for elastic quotas, ``pg``/``pgs``
for pod groups). ``qu`` belongs to QueueUnit, as Koord-Queue prints it; Queue is reached
as ``queue``/``queues``.
"""

from __future__ import annotations

from apis import admission, apps, core, gang, queueing, quota, scheduling, slo, workloads
from apis.kinds import Kind

__all__ = ["ADMISSION_CHECK_ALIAS_API_VERSION", "KINDS", "QUEUE_ALIAS_API_VERSION"]

#: The apiVersion the v1.8 release notes use for a Queue (accepted, rewritten on input).
QUEUE_ALIAS_API_VERSION = "scheduling.koordinator.sh/v1alpha1"
#: Kueue's previous AdmissionCheck apiVersion (accepted, rewritten on input).
ADMISSION_CHECK_ALIAS_API_VERSION = "kueue.x-k8s.io/v1beta1"

KINDS: tuple[Kind, ...] = (
    Kind(core.Pod, "pods", namespaced=True, short_names=("po",)),
    Kind(core.Node, "nodes", namespaced=False, short_names=("no",)),
    Kind(core.Event, "events", namespaced=True, short_names=("ev",)),
    Kind(core.ConfigMap, "configmaps", namespaced=True, short_names=("cm",)),
    Kind(apps.Deployment, "deployments", namespaced=True, short_names=("deploy",)),
    Kind(apps.ReplicaSet, "replicasets", namespaced=True, short_names=("rs",)),
    Kind(apps.StatefulSet, "statefulsets", namespaced=True, short_names=("sts",)),
    Kind(apps.DaemonSet, "daemonsets", namespaced=True, short_names=("ds",)),
    Kind(core.Job, "jobs", namespaced=True),
    Kind(core.PyTorchJob, "pytorchjobs", namespaced=True),
    Kind(core.TFJob, "tfjobs", namespaced=True),
    Kind(workloads.MPIJob, "mpijobs", namespaced=True),
    Kind(workloads.RayJob, "rayjobs", namespaced=True),
    Kind(workloads.SparkApplication, "sparkapplications", namespaced=True),
    Kind(workloads.Workflow, "workflows", namespaced=True, short_names=("wf",)),
    Kind(core.PriorityClass, "priorityclasses", namespaced=False, short_names=("pc",)),
    Kind(scheduling.Device, "devices", namespaced=False),
    Kind(scheduling.Reservation, "reservations", namespaced=False, short_names=("rsv",)),
    Kind(scheduling.PodMigrationJob, "podmigrationjobs", namespaced=False, short_names=("pmj",)),
    Kind(slo.NodeMetric, "nodemetrics", namespaced=False),
    Kind(slo.NodeSLO, "nodeslos", namespaced=False),
    Kind(quota.ElasticQuota, "elasticquotas", namespaced=True, short_names=("eq",)),
    Kind(gang.PodGroup, "podgroups", namespaced=True, short_names=("pg", "pgs")),
    Kind(
        queueing.Queue,
        "queues",
        namespaced=True,
        api_version_aliases=(QUEUE_ALIAS_API_VERSION,),
    ),
    Kind(queueing.QueueUnit, "queueunits", namespaced=True, short_names=("qu", "qus")),
    Kind(
        admission.AdmissionCheck,
        "admissionchecks",
        namespaced=False,
        api_version_aliases=(ADMISSION_CHECK_ALIAS_API_VERSION,),
    ),
)
