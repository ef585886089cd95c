"""Why a pod is unschedulable, in kube-scheduler's words.

:func:`fit_error_message` is the FitError summary written into the pod's
``PodScheduled=False`` condition and the ``FailedScheduling`` Event::

    0/5000 nodes are available: 10 node(s) had untolerated taint {dedicated: gpu},
    4990 Insufficient cpu.

(one line; wrapped here).

``0/<nodes> nodes are available:``, then either the rejecting PreFilter's message or the
histogram of filter reasons (``<count> <reason>`` entries, sorted as strings, so ``10 ...``
sorts before ``4990 ...``, joined by ``, ``), then ``.``; a PostFilter's message follows as
`` <message>.``. With no nodes at all: ``no nodes available to schedule pods``.

A Reserve or Permit plugin that rejects the pod judged the one node it was placed on:
:func:`rejection_diagnosis` makes that kube-scheduler's one-node FitError
(``0/1 nodes are available: 1 <reason>.``).

:func:`diagnosis_annotation` is the per-plugin breakdown kept in the pod annotation
:data:`DIAGNOSIS_ANNOTATION` for ``koordpy describe pod``: compact JSON
``{"<plugin>": {"<reason>": <nodes>, ...}, ...}`` with sorted keys.
"""

from __future__ import annotations

import json

from controller.scheduler.framework import Diagnosis, Status

__all__ = [
    "DIAGNOSIS_ANNOTATION",
    "NO_NODES",
    "diagnosis_annotation",
    "fit_error_message",
    "rejection_diagnosis",
]

#: Pod annotation holding the last scheduling diagnosis (plugin -> reason -> node count).
DIAGNOSIS_ANNOTATION = "scheduling.koordpy.io/diagnosis"
NO_NODES = "no nodes available to schedule pods"


def fit_error_message(diagnosis: Diagnosis) -> str:
    if diagnosis.nodes == 0 and not diagnosis.pre_filter:
        return NO_NODES
    text = f"0/{diagnosis.nodes} nodes are available:"
    if diagnosis.pre_filter:
        text += f" {diagnosis.pre_filter}."
    else:
        entries = sorted(f"{count} {reason}" for reason, count in diagnosis.histogram().items())
        if entries:
            text += " " + ", ".join(entries) + "."
    if diagnosis.post_filter:
        text += f" {diagnosis.post_filter}."
    return text


def diagnosis_annotation(diagnosis: Diagnosis) -> str:
    counts = {plugin: dict(reasons) for plugin, reasons in diagnosis.counts.items() if reasons}
    return json.dumps(counts, sort_keys=True, separators=(",", ":"))


def rejection_diagnosis(status: Status) -> Diagnosis:
    """The diagnosis of a pod a Reserve or Permit plugin rejected on its one node."""
    message = status.message
    return Diagnosis(
        nodes=1, counts={status.plugin: {message: 1}}, codes={(status.plugin, message): status.code}
    )
