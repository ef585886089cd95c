"""Koordinator v1.8 user manual "GangScheduling" (``user-manuals/gang-scheduling.md``).

The page's PodGroup and pods, applied unchanged on one node: a gang through the PodGroup CRD
(pods labelled ``pod-group.scheduling.sigs.k8s.io``), a gang through the pod annotations
``gang.scheduling.koordinator.sh/*``, and the advanced configurations (total number, mode,
gang groups, waiting time). The page shows ``kubectl get pg`` for the annotation gang too;
Koordinator makes no PodGroup for a gang of annotations, nor does koordpy.
"""

from __future__ import annotations

from datetime import timedelta

from apis.core import Pod
from apis.gang import PodGroup
from tests.manuals.replay import Cluster, Outcome, node, replay

PODGROUP = """\
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: gang-example
  namespace: default
spec:
  scheduleTimeoutSeconds: 100
  minMember: 2
"""


def pod(name: str, metadata: str) -> str:
    """The page's busybox pod ``name``, with the page's gang ``metadata`` lines."""
    return f"""\
apiVersion: v1
kind: Pod
metadata:
  name: {name}
  namespace: default
{metadata}\
spec:
  schedulerName: koord-scheduler
  containers:
  - command:
    - sleep
    - 365d
    image: busybox
    imagePullPolicy: IfNotPresent
    name: curlimage
    resources:
      limits:
        cpu: 40m
        memory: 40Mi
      requests:
        cpu: 40m
        memory: 40Mi
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  restartPolicy: Always
"""


LABELLED = "  labels:\n    pod-group.scheduling.sigs.k8s.io: gang-example\n"
ANNOTATED = """\
  annotations:
    gang.scheduling.koordinator.sh/name: "gang-example"
    gang.scheduling.koordinator.sh/min-available: "2"
"""
NODE = node("node-0", cpu="4", memory="8Gi")


def placed(outcome: Outcome) -> dict[str, tuple[str, str]]:
    """Pod name -> (node, ``status.phase``: Pending from its create, as the API server writes
    it, until the kubelet runs it)."""
    return {
        p.metadata.name: (p.spec.node_name, p.status.phase)
        for p in outcome.all("Pod")
        if isinstance(p, Pod)
    }


def status(outcome: Outcome, name: str = "gang-example") -> dict[str, object]:
    found = outcome.get("PodGroup", name, "default")
    assert isinstance(found, PodGroup)
    wire: dict[str, object] = outcome.wire("PodGroup", name, "default")["status"]
    return wire


def test_a_podgroup_gang_waits_for_its_second_pod_then_runs() -> None:
    """ "apply gang through gang crd": pod-example1 alone stays Pending; once pod-example2 is
    created both run, and the PodGroup shows ``phase: Running``, ``running: 2``,
    ``scheduled: 2``."""
    alone = replay(NODE, PODGROUP, pod("pod-example1", LABELLED), max_time=timedelta(minutes=5))
    assert placed(alone) == {"pod-example1": ("", "Pending")}
    assert status(alone)["phase"] == "Pending"

    with Cluster(NODE, PODGROUP, pod("pod-example1", LABELLED)) as cluster:
        cluster.run(timedelta(seconds=46))
        cluster.apply(pod("pod-example2", LABELLED))
        cluster.run(timedelta(hours=1))
        outcome = cluster.outcome()
    assert placed(outcome) == {
        "pod-example1": ("node-0", "Running"),
        "pod-example2": ("node-0", "Running"),
    }
    shown = status(outcome)
    assert {k: shown[k] for k in ("phase", "running", "scheduled")} == {
        "phase": "Running",
        "running": 2,
        "scheduled": 2,
    }


def test_an_annotation_gang_waits_for_its_second_pod_then_runs() -> None:
    """ "apply gang through annotation": the same, with ``gang.scheduling.koordinator.sh/name``
    and ``min-available: "2"`` on each pod."""
    alone = replay(NODE, pod("pod-example1", ANNOTATED), max_time=timedelta(minutes=5))
    assert placed(alone) == {"pod-example1": ("", "Pending")}
    both = replay(NODE, pod("pod-example1", ANNOTATED), pod("pod-example2", ANNOTATED))
    assert placed(both) == {
        "pod-example1": ("node-0", "Running"),
        "pod-example2": ("node-0", "Running"),
    }
    bound = both.get("Pod", "pod-example1", "default").metadata.annotations
    assert bound["internal.scheduling.koordinator.sh/bind-gang-member-count"] == "2"
    assert bound["internal.scheduling.koordinator.sh/bind-gang-group-id"] == "default/gang-example"


def test_all_or_nothing_when_only_one_member_fits() -> None:
    """The gang binds only when ``minMember`` pods can be placed: with room for one pod, neither
    of the two is bound (the PodGroup has both members, none scheduled)."""
    small = node("node-0", cpu="60m", memory="8Gi")
    outcome = replay(
        small,
        PODGROUP,
        pod("pod-example1", LABELLED),
        pod("pod-example2", LABELLED),
        max_time=timedelta(minutes=5),
    )
    assert {name: where for name, (where, _) in placed(outcome).items()} == {
        "pod-example1": "",
        "pod-example2": "",
    }
    shown = status(outcome)
    assert shown["phase"] == "PreScheduling"
    assert shown.get("scheduled", 0) == 0


#: The page's groups annotation value, as it writes it (a YAML double-quoted JSON list).
GROUPS = '"[\\"default/gang-example1\\", \\"default/gang-example2\\"]"'

GROUPED = """\
apiVersion: scheduling.sigs.k8s.io/v1alpha1
kind: PodGroup
metadata:
  name: {name}
  namespace: default
  annotations:
    gang.scheduling.koordinator.sh/total-number: "3"
    gang.scheduling.koordinator.sh/mode: "NonStrict"
    gang.scheduling.koordinator.sh/groups: {groups}

spec:
  scheduleTimeoutSeconds: 100
  minMember: 2
"""


def _members(gang: str, *names: str) -> list[str]:
    labels = f"  labels:\n    pod-group.scheduling.sigs.k8s.io: {gang}\n"
    return [pod(name, labels) for name in names]


def test_a_gang_group_binds_only_when_every_gang_of_it_is_ready() -> None:
    """ "advanced configuration for gang", through the PodGroup: gang-example1 (NonStrict, total
    3, grouped with gang-example2) does not bind while gang-example2 is missing; with
    gang-example2 and its members too, every pod of the group runs."""
    first = [
        GROUPED.format(name="gang-example1", groups=GROUPS),
        *_members("gang-example1", "a-1", "a-2"),
    ]
    alone = replay(NODE, *first, max_time=timedelta(minutes=5))
    assert {name: where for name, (where, _) in placed(alone).items()} == {"a-1": "", "a-2": ""}

    second = [
        GROUPED.format(name="gang-example2", groups=GROUPS),
        *_members("gang-example2", "b-1", "b-2"),
    ]
    outcome = replay(NODE, *first, *second)
    assert {name: where for name, (where, _) in placed(outcome).items()} == {
        "a-1": "node-0",
        "a-2": "node-0",
        "b-1": "node-0",
        "b-2": "node-0",
    }
    for gang in ("gang-example1", "gang-example2"):
        assert status(outcome, gang)["phase"] == "Running"
    bound = outcome.get("Pod", "a-1", "default").metadata.annotations
    group_id = "default/gang-example1,default/gang-example2"
    assert bound["internal.scheduling.koordinator.sh/bind-gang-group-id"] == group_id


ADVANCED_POD = """\
  annotations:
    gang.scheduling.koordinator.sh/name: "gang-example1"
    gang.scheduling.koordinator.sh/min-available: "2"
    gang.scheduling.koordinator.sh/total-number: "3"
    gang.scheduling.koordinator.sh/mode: "Strict\\NonStrict"
    gang.scheduling.koordinator.sh/groups: {groups}
    gang.scheduling.koordinator.sh/waiting-time: "100s"
""".replace("{groups}", GROUPS)


def test_the_advanced_pod_annotations_are_accepted() -> None:
    """ "advanced configuration for gang", through pod annotations, as the page writes them
    (its ``mode`` value ``"Strict\\NonStrict"`` is no mode: Strict applies, as in v1.8): the
    group waits for gang-example2, then every pod runs."""
    first = [pod(name, ADVANCED_POD) for name in ("a-1", "a-2")]
    alone = replay(NODE, *first, max_time=timedelta(minutes=5))
    assert {name: where for name, (where, _) in placed(alone).items()} == {"a-1": "", "a-2": ""}

    other = ADVANCED_POD.replace('name: "gang-example1"', 'name: "gang-example2"')
    outcome = replay(NODE, *first, *(pod(name, other) for name in ("b-1", "b-2")))
    assert {where for where, _ in placed(outcome).values()} == {"node-0"}


def _messages(outcome: Outcome, pod_name: str) -> list[str]:
    return [
        e.message for e in outcome.events("FailedScheduling") if e.involved_object.name == pod_name
    ]


def test_strict_rejects_the_waiting_member_and_non_strict_keeps_it_waiting() -> None:
    """``gang.scheduling.koordinator.sh/mode`` on the PodGroup (default ``Strict``): with room
    for one member only, Strict rejects the member waiting in Permit as soon as the other is
    unschedulable; NonStrict keeps it waiting, until the PodGroup's ``scheduleTimeoutSeconds``
    (100: ``1m40s``) runs out. As kube-scheduler words a rejection in Permit, each is the
    FitError of the one node the member waited on, in its Event and in its ``PodScheduled``
    condition."""
    small = node("node-0", cpu="60m", memory="8Gi")
    outcomes = {}
    for mode in ("Strict", "NonStrict"):
        group = PODGROUP.replace(
            "  namespace: default\n",
            "  namespace: default\n  annotations:\n"
            f"    gang.scheduling.koordinator.sh/mode: {mode}\n",
        )
        outcomes[mode] = replay(
            small,
            group,
            pod("pod-example1", LABELLED),
            pod("pod-example2", LABELLED),
            max_time=timedelta(minutes=5),
        )
        assert {where for where, _ in placed(outcomes[mode]).values()} == {""}
    member = (
        '0/1 nodes are available: 1 Gang "default/gang-example" gets rejected due to member Pod'
        ' "pod-example2"'
    )
    timeout = (
        "0/1 nodes are available: 1 rejected due to timeout after waiting 1m40s at plugin"
        " Coscheduling."
    )
    waiting = {mode: _messages(o, "pod-example1") for mode, o in outcomes.items()}
    assert any(m.startswith(member) for m in waiting["Strict"])
    assert not any(m.startswith(member) for m in waiting["NonStrict"])
    # Its first rejection is the timeout; after it, pod-example2 (queued since its own
    # failure, earlier) goes first, so later attempts of pod-example1 may find no room.
    assert waiting["NonStrict"][0] == timeout
    strict = outcomes["Strict"].get("Pod", "pod-example1", "default")
    assert isinstance(strict, Pod)
    [condition] = [c for c in strict.status.conditions if c.type == "PodScheduled"]
    assert (condition.status, condition.reason) == ("False", "Unschedulable")
    assert condition.message.startswith(member) or condition.message == timeout
