"""Manual page ``queue-management`` (Koord-Queue; ``koord-queue`` is its earlier copy).

koordinator-sh/website ``docs/user-manuals/queue-management.md`` and
``docs/user-manuals/koord-queue.md``: an ElasticQuota gets a Queue of its own; suspended Jobs
labelled with the quota get QueueUnits, one is admitted and the one past the quota's ``max``
stays ``Enqueued`` until the first finishes; the queue policies order and block as the page's
table says; the Argo Workflow example queues with its ``koord-queue/min-resources``; the page's
fragments without a name and its Queue with ``spec.annotations`` are refused, naming the field.
"""

from __future__ import annotations

from typing import Any

import pytest

from apis.errors import DecodeError
from tests.manuals.replay import Outcome, node, replay

#: "Create an ElasticQuota", as the page gives it.
TEAM_A = """
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: team-a
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/parent: ""
    quota.scheduling.koordinator.sh/is-parent: "false"
spec:
  max:
    cpu: "4"
    memory: 8Gi
  min:
    cpu: "4"
    memory: 8Gi
"""


def job(
    name: str,
    *,
    quota: str = "team-a",
    cpu: str = "4",
    memory: str = "8Gi",
    template_meta: str = "",
    pod_spec: str = "",
) -> str:
    """The page's suspended ``batch/v1`` Job (``sleep 30``), its name and requests varied."""
    return f"""
apiVersion: batch/v1
kind: Job
metadata:
  name: {name}
  namespace: default
  labels:
    quota.scheduling.koordinator.sh/name: {quota}
spec:
  suspend: true
  template:
    {template_meta}
    spec:
      {pod_spec}
      containers:
      - name: test
        image: busybox:stable
        command: ["/bin/sh", "-c", "sleep 30"]
        resources:
          requests:
            cpu: "{cpu}"
            memory: {memory}
          limits:
            cpu: "{cpu}"
            memory: {memory}
      restartPolicy: Never
"""


def unit(outcome: Outcome, name: str) -> dict[str, Any]:
    wire: dict[str, Any] = outcome.wire("QueueUnit", name, "default")
    return wire


def phase(outcome: Outcome, name: str) -> str:
    return str(unit(outcome, name).get("status", {}).get("phase", ""))


def quota(name: str, *, cpu: str, policy: str = "", annotations: str = "") -> str:
    labels = f"\n  labels:\n    koord-queue/queue-policy: {policy}" if policy else ""
    notes = f"\n  annotations:\n    {annotations}" if annotations else ""
    return f"""
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: ElasticQuota
metadata:
  name: {name}
  namespace: default{labels}{notes}
spec:
  max:
    cpu: "{cpu}"
    memory: 20Gi
"""


# --- Quick Start with ElasticQuota -------------------------------------------------------------


def test_quick_start_one_job_runs_and_the_second_stays_enqueued() -> None:
    """ "Submit Jobs and verify queuing": jobs.yaml applied at once against team-a."""
    outcome = replay(
        node("n1", cpu="16", memory="32Gi"), TEAM_A, job("my-job") + "---" + job("my-job-blocked")
    )
    queue = outcome.wire("Queue", "team-a", "koord-queue")  # "Queue Auto-creation"
    assert queue["spec"] == {"queuePolicy": "Priority", "priority": 1000}

    assert phase(outcome, "my-job") == "Running"
    assert unit(outcome, "my-job")["spec"]["consumerRef"]["name"] == "my-job"
    assert unit(outcome, "my-job")["spec"]["resource"] == {"cpu": "4", "memory": "8Gi"}
    [pod] = [p for p in outcome.all("Pod") if p.metadata.name.startswith("my-job-")]
    assert outcome.wire("Pod", pod.metadata.name, "default")["status"]["phase"] == "Running"
    assert outcome.wire("Job", "my-job", "default")["spec"]["suspend"] is False

    assert phase(outcome, "my-job-blocked") == "Enqueued"
    assert outcome.wire("Job", "my-job-blocked", "default")["spec"]["suspend"] is True
    blocked = [e for e in outcome.events("FailedScheduling") if e.involved_object.name]
    assert any(e.involved_object.name == "my-job-blocked" for e in blocked)


def test_quick_start_the_blocked_job_runs_once_the_first_completes() -> None:
    """ "Once my-job completes ... my-job-blocked will be dequeued automatically": the page's
    ``sleep 30`` is given to the simulator as a 30 s runtime."""
    runtime = "metadata:\n      annotations:\n        koordpy.io/simulated-runtime: 30s"
    outcome = replay(
        node("n1", cpu="16", memory="32Gi"),
        TEAM_A,
        job("my-job", template_meta=runtime),
        job("my-job-blocked", template_meta=runtime),
    )
    assert phase(outcome, "my-job") == "Succeed"  # Koord-Queue spells the phase so
    assert phase(outcome, "my-job-blocked") == "Succeed"
    assert outcome.wire("Job", "my-job-blocked", "default")["spec"]["suspend"] is False


@pytest.mark.parametrize("policy", ["Priority", "Block", "Intelligent"])
def test_the_queue_policy_label_sets_the_auto_created_queue(policy: str) -> None:
    outcome = replay(quota("team-b", cpu="10", policy=policy))
    assert outcome.wire("Queue", "team-b", "koord-queue")["spec"]["queuePolicy"] == policy


def test_the_intelligent_example_passes_its_threshold_to_the_queue() -> None:
    """ "Intelligent Policy" configuration example: the threshold annotation on the
    ElasticQuota tunes the Queue made for it."""
    outcome = replay(
        quota(
            "intelligent-queue",
            cpu="10",
            policy="Intelligent",
            annotations='koord-queue/priority-threshold: "5"',
        )
    )
    queue = outcome.wire("Queue", "intelligent-queue", "koord-queue")
    assert queue["spec"]["queuePolicy"] == "Intelligent"
    assert queue["metadata"]["annotations"]["koord-queue/priority-threshold"] == "5"


# --- Queue Priority ----------------------------------------------------------------------------


def test_a_priority_class_value_becomes_the_queue_unit_priority() -> None:
    """ "Queue Priority": the PriorityClass named in the pod template gives its value; a raw
    ``priority`` is used where no PriorityClass is named."""
    priority_class = """
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata:
  name: important
value: 200
"""
    outcome = replay(
        node("n1"),
        TEAM_A,
        priority_class,
        job("classed", cpu="1", memory="1Gi", pod_spec="priorityClassName: important"),
        job("raw", cpu="1", memory="1Gi", pod_spec="priority: 7"),
    )
    assert unit(outcome, "classed")["spec"]["priority"] == 200
    assert unit(outcome, "raw")["spec"]["priority"] == 7


def test_the_priority_queue_unit_example_is_kept_as_written() -> None:
    """ "Priority Queue": a QueueUnit written by hand, with its queue, priority and resource."""
    outcome = replay(
        """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: QueueUnit
metadata:
  name: high-priority-job
  namespace: default
spec:
  queue: priority-queue
  priority: 200
  consumerRef:
    apiVersion: batch/v1
    kind: Job
    name: important-job
    namespace: default
  resource:
    cpu: "2"
    memory: 4Gi
""",
    )
    written = unit(outcome, "high-priority-job")
    spec = written["spec"]
    assert spec["priority"] == 200
    assert spec["queue"] == "koordinator-default-quota"
    assert written["status"]["phase"] == "Dequeued"
    assert spec["resource"] == {"cpu": "2", "memory": "4Gi"}
    assert spec["consumerRef"]["name"] == "important-job"


def priority_class(name: str, value: int) -> str:
    return (
        f"apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {{name: {name}}}\n"
        + (f"value: {value}\n")
    )


def _contest(policy: str) -> Outcome:
    """On a 4-CPU quota the top job (2 CPUs) goes first; then the 4-CPU job of priority 200
    cannot fit, and the 2-CPU job of priority 100 could."""
    return replay(
        node("n1"),
        quota("contest", cpu="4", policy=policy),
        priority_class("top", 300),
        priority_class("high", 200),
        priority_class("low", 100),
        job("first", quota="contest", cpu="2", memory="1Gi", pod_spec="priorityClassName: top"),
        job("big", quota="contest", cpu="4", memory="1Gi", pod_spec="priorityClassName: high"),
        job("small", quota="contest", cpu="2", memory="1Gi", pod_spec="priorityClassName: low"),
    )


def test_priority_policy_lets_a_schedulable_lower_priority_job_pass() -> None:
    """ "Priority policy is not strict priority scheduling": the blocked high-priority job is
    skipped and the lower-priority one that fits is dequeued."""
    outcome = _contest("Priority")
    assert phase(outcome, "first") == "Running"
    assert phase(outcome, "big") == "Enqueued"
    assert phase(outcome, "small") == "Running"


def test_block_policy_keeps_the_lower_priority_job_behind_the_blocked_one() -> None:
    """ "Block policy: strict priority scheduling - blocked high-priority jobs must wait,
    preventing lower-priority jobs from bypassing them"."""
    outcome = _contest("Block")
    assert phase(outcome, "first") == "Running"
    assert phase(outcome, "big") == "Enqueued"
    assert phase(outcome, "small") == "Enqueued"


# --- Argo Workflow -----------------------------------------------------------------------------

WORKFLOW = """
apiVersion: argoproj.io/v1alpha1
kind: Workflow
metadata:
  name: my-workflow
  annotations:
   koord-queue/min-resources: |
     cpu: 5
     memory: 5Gi
spec:
  suspend: true
  templates:
    # Add this suspend template for queue management
    - name: koord-queue-suspend
      suspend: {}
    # Your actual workflow templates
    - name: main
      container:
        image: python:3.9
        command: [python, -c, "print('Hello from workflow')"]
  entrypoint: main
"""


def workflow_units(outcome: Outcome) -> list[dict[str, Any]]:
    wires = [
        outcome.wire("QueueUnit", u.metadata.name, "default") for u in outcome.all("QueueUnit")
    ]
    return [w for w in wires if w["spec"]["consumerRef"]["kind"] == "Workflow"]


def test_the_argo_workflow_example_is_queued_then_released() -> None:
    """ "Argo Workflow Example": the ``koord-queue-suspend`` template and ``spec.suspend`` put
    the workflow in a queue; once dequeued the suspend is removed and it runs."""
    outcome = replay(node("n1"), WORKFLOW)
    workflow = outcome.wire("Workflow", "my-workflow", "default")
    annotation = workflow["metadata"]["annotations"]["koord-queue/min-resources"]
    assert annotation == "cpu: 5\nmemory: 5Gi\n"  # the block scalar, kept as text
    [queued] = workflow_units(outcome)
    assert queued["spec"]["consumerRef"]["name"] == "my-workflow"
    assert queued["status"]["phase"] == "Running"
    assert workflow["spec"]["suspend"] is False
    assert workflow["status"]["phase"] == "Running"


def test_a_workflow_without_the_suspend_template_is_not_the_queues() -> None:
    """Without ``koord-queue-suspend``, ``spec.suspend`` is Argo's own pause: no QueueUnit."""
    outcome = replay(node("n1"), WORKFLOW.replace("koord-queue-suspend", "wait-here"))
    assert workflow_units(outcome) == []
    assert outcome.wire("Workflow", "my-workflow", "default")["spec"]["suspend"] is True


# --- what Kubernetes refuses -------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["TFJob", "PyTorchJob"])
def test_the_kubeflow_fragments_without_a_name_are_refused(kind: str) -> None:
    """The page's TFJob/PyTorchJob snippets show only the suspend field: without a name
    Kubernetes refuses them too."""
    fragment = f"""
apiVersion: kubeflow.org/v1
kind: {kind}
metadata:
  labels:
    quota.scheduling.koordinator.sh/name: team-a-queue
spec:
  runPolicy:
    suspend: true
"""
    with pytest.raises(Exception, match=r"metadata\.name|name"):
        replay(fragment)


def test_the_queue_cr_with_spec_annotations_is_refused_naming_the_field() -> None:
    """ "Via Queue CR" puts the threshold annotation under ``spec``, which the Queue CRD does
    not have: a strict apply refuses it. Under ``metadata`` it is taken."""
    queue = """
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: Queue
metadata:
  name: my-queue
  namespace: koord-queue
spec:
  queuePolicy: Intelligent
  priority: 1000
  annotations:
    koord-queue/priority-threshold: "5"
"""
    with pytest.raises(DecodeError) as caught:
        replay(queue)
    assert caught.value.field == "spec.annotations"
    threshold = '  annotations:\n    koord-queue/priority-threshold: "5"\n'
    fixed = queue.replace(threshold, "").replace("spec:\n", threshold + "spec:\n")
    wire = replay(fixed).wire("Queue", "my-queue", "koord-queue")
    assert wire["spec"] == {"queuePolicy": "Intelligent", "priority": 1000}
    assert wire["metadata"]["annotations"]["koord-queue/priority-threshold"] == "5"


def test_the_admission_check_queue_example_is_accepted() -> None:
    """ "Use AdmissionCheck": a Queue naming a check by label selector (work in progress)."""
    outcome = replay("""
apiVersion: scheduling.x-k8s.io/v1alpha1
kind: Queue
metadata:
  name: checked-queue
  namespace: koord-queue
spec:
  queuePolicy: Priority
  admissionChecks:
    - name: prov-req-check
      labelSelector:
        matchLabels:
          requires-provisioning: "true"
""")
    spec = outcome.wire("Queue", "checked-queue", "koord-queue")["spec"]
    [check] = spec["admissionChecks"]
    assert check == {
        "name": "prov-req-check",
        "labelSelector": {"matchLabels": {"requires-provisioning": "true"}},
    }
