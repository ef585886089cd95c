"""The FitError summary and the per-plugin diagnosis annotation."""

from __future__ import annotations

import json

import pytest

from controller.scheduler import framework as fw
from controller.scheduler.explain import diagnosis_annotation, fit_error_message


@pytest.mark.parametrize(
    ("diagnosis", "message"),
    [
        pytest.param(
            fw.Diagnosis(
                nodes=5000,
                counts={
                    "TaintToleration": {"node(s) had untolerated taint {dedicated: gpu}": 10},
                    "NodeResourcesFit": {"Insufficient cpu": 4990},
                },
            ),
            "0/5000 nodes are available: 10 node(s) had untolerated taint {dedicated: gpu},"
            " 4990 Insufficient cpu.",
            id="issue-example-sorted-as-strings",
        ),
        pytest.param(
            fw.Diagnosis(
                nodes=3,
                counts={"NodeResourcesFit": {"Insufficient cpu": 2, "Insufficient memory": 3}},
            ),
            "0/3 nodes are available: 2 Insufficient cpu, 3 Insufficient memory.",
            id="one-node-several-reasons",
        ),
        pytest.param(
            fw.Diagnosis(
                nodes=4,
                counts={"A": {"Too many pods": 1}, "B": {"Too many pods": 2}},
            ),
            "0/4 nodes are available: 3 Too many pods.",
            id="same-text-merged",
        ),
        pytest.param(
            fw.Diagnosis(
                nodes=7,
                counts={"Coscheduling": {'Gang "g" gets rejected due to pod is unschedulable': 7}},
                pre_filter='Gang "g" gets rejected due to pod is unschedulable',
            ),
            '0/7 nodes are available: Gang "g" gets rejected due to pod is unschedulable.',
            id="pre-filter",
        ),
        pytest.param(
            fw.Diagnosis(
                nodes=1,
                counts={"NodeResourcesFit": {"Insufficient cpu": 1}},
                post_filter="preemption: 0/1 nodes are available: 1 No victims found.",
            ),
            "0/1 nodes are available: 1 Insufficient cpu."
            " preemption: 0/1 nodes are available: 1 No victims found..",
            id="post-filter-appended",
        ),
        pytest.param(fw.Diagnosis(nodes=0, counts={}), "no nodes available to schedule pods"),
    ],
)
def test_fit_error_message(diagnosis: fw.Diagnosis, message: str) -> None:
    assert fit_error_message(diagnosis) == message


def test_annotation_is_per_plugin_json() -> None:
    diagnosis = fw.Diagnosis(
        nodes=3,
        counts={
            "NodeResourcesFit": {"Insufficient memory": 1, "Insufficient cpu": 2},
            "NodeAffinity": {"node(s) didn't match Pod's node affinity/selector": 1},
            "Empty": {},
        },
    )
    text = diagnosis_annotation(diagnosis)
    assert json.loads(text) == {
        "NodeAffinity": {"node(s) didn't match Pod's node affinity/selector": 1},
        "NodeResourcesFit": {"Insufficient cpu": 2, "Insufficient memory": 1},
    }
    assert text.startswith('{"NodeAffinity":')
