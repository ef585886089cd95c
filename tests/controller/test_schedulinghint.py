"""Scheduling hints: reading the annotation, and trying the preferred nodes in order."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.constants import ANNOTATION_SCHEDULING_HINT, ANNOTATION_SCHEDULING_HINT_DEPRECATED
from controller.errors import ConfigError
from controller.scheduler.schedulinghint import (
    DEFAULT_MAX_HINT_NODES,
    HintError,
    SchedulingHint,
    SchedulingHintArgs,
    candidate_preferred_nodes,
    hinted_nodes,
    parse_args,
    parse_scheduling_hint,
    pick_preferred_node,
)

NEW = ANNOTATION_SCHEDULING_HINT
OLD = ANNOTATION_SCHEDULING_HINT_DEPRECATED

# --- the annotation ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        pytest.param({}, None, id="no-annotation"),
        pytest.param({NEW: ""}, None, id="empty-new-key"),
        pytest.param({NEW: "", OLD: ""}, None, id="both-empty"),
        pytest.param(
            {NEW: '{"nodeNames": ["n1", "n2"]}'},
            SchedulingHint(node_names=("n1", "n2"), source=NEW),
            id="new-key",
        ),
        pytest.param(
            {OLD: '{"preferredNodeNames": ["n3"]}'},
            SchedulingHint(preferred_node_names=("n3",), source=OLD),
            id="deprecated-key-when-new-absent",
        ),
        pytest.param(
            {NEW: "", OLD: '{"preferredNodeNames": ["n3"]}'},
            SchedulingHint(preferred_node_names=("n3",), source=OLD),
            id="deprecated-key-when-new-empty",
        ),
        pytest.param(
            {NEW: '{"nodeNames": ["a"]}', OLD: '{"nodeNames": ["b"]}'},
            SchedulingHint(node_names=("a",), source=NEW),
            id="new-key-wins",
        ),
        pytest.param(
            {NEW: '{"preferredNodeNames": ["z", "a", "m"]}'},
            SchedulingHint(preferred_node_names=("z", "a", "m"), source=NEW),
            id="order-kept",
        ),
        pytest.param(
            {NEW: '{"nodeNames": null, "preferredNodeNames": null, "extensions": null}'},
            SchedulingHint(source=NEW),
            id="nulls-read-as-absent",
        ),
        pytest.param({NEW: "null"}, SchedulingHint(source=NEW), id="json-null"),
        pytest.param({NEW: "{}"}, SchedulingHint(source=NEW), id="empty-object"),
        pytest.param(
            {NEW: '{"nodeNames": ["a"], "somethingElse": 1}'},
            SchedulingHint(node_names=("a",), source=NEW),
            id="unknown-members-ignored",
        ),
        pytest.param(
            {NEW: '{"extensions": {"DeviceShare": {}, "NodeNUMAResource": true}}'},
            SchedulingHint(extensions={"DeviceShare": {}, "NodeNUMAResource": True}, source=NEW),
            id="extensions",
        ),
    ],
)
def test_hint_annotation(annotations: dict[str, str], expected: SchedulingHint | None) -> None:
    assert parse_scheduling_hint(annotations) == expected


@pytest.mark.parametrize(
    ("annotations", "key", "message"),
    [
        pytest.param({NEW: '{"nodeNames": ["a"'}, NEW, "Input data was truncated", id="truncated"),
        pytest.param(
            {NEW: "not json"}, NEW, "JSON is malformed: invalid character (byte 4)", id="garbage"
        ),
        pytest.param(
            {NEW: '{"nodeNames": "a"}'},
            NEW,
            "Expected `array | null`, got `str` - at `$.nodeNames`",
            id="wrong-type",
        ),
        pytest.param(
            {NEW: '{"preferredNodeNames": [1]}'},
            NEW,
            "Expected `str`, got `int` - at `$.preferredNodeNames[0]`",
            id="wrong-item-type",
        ),
        pytest.param(
            {NEW: "[]"}, NEW, "Expected `object | null`, got `array`", id="array-not-object"
        ),
        pytest.param({NEW: "  "}, NEW, "Input data was truncated", id="blank-is-not-empty"),
        pytest.param(
            {NEW: "{bad", OLD: '{"nodeNames": ["ok"]}'},
            NEW,
            "JSON is malformed: object keys must be strings (byte 1)",
            id="no-fallback-from-bad-new-key",
        ),
        pytest.param(
            {OLD: "{bad"},
            OLD,
            "JSON is malformed: object keys must be strings (byte 1)",
            id="bad-deprecated-key",
        ),
    ],
)
def test_malformed_hint_is_an_error_with_the_json_text(
    annotations: dict[str, str], key: str, message: str
) -> None:
    assert parse_scheduling_hint(annotations) == HintError(key=key, message=message)


@pytest.mark.parametrize(
    ("extensions", "plugin", "present"),
    [
        ({"DeviceShare": {}}, "DeviceShare", True),
        ({"NodeNUMAResource": None}, "NodeNUMAResource", True),
        ({"DeviceShare": {}}, "NodeNUMAResource", False),
        ({"Reservation": {"SkipRestoreNodeInfo": True}}, "Reservation", False),
        ({}, "DeviceShare", False),
    ],
)
def test_extensions(extensions: dict[str, object], plugin: str, present: bool) -> None:
    assert SchedulingHint(extensions=extensions).has_extension(plugin) is present


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        (None, None),
        (SchedulingHint(), None),
        (SchedulingHint(preferred_node_names=("a",)), None),
        (SchedulingHint(node_names=("a", "b", "a")), frozenset({"a", "b"})),
    ],
)
def test_hinted_nodes(hint: SchedulingHint | None, expected: frozenset[str] | None) -> None:
    assert hinted_nodes(hint) == expected


# --- args -----------------------------------------------------------------------------------------


def test_args_defaults() -> None:
    assert parse_args(None) == SchedulingHintArgs(max_hint_nodes=DEFAULT_MAX_HINT_NODES)
    assert parse_args({"maxHintNodes": 5}).max_hint_nodes == 5


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        ({"maxHintNodes": 0}, "maxHintNodes: must be greater than 0, got 0"),
        ({"maxHintNodes": -3}, "maxHintNodes: must be greater than 0, got -3"),
        ({"maxHintNodes": "ten"}, "maxHintNodes"),
        ({"maxNodes": 3}, "maxNodes"),
    ],
)
def test_bad_args_name_field_and_value(raw: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError, match="SchedulingHintArgs") as raised:
        parse_args(raw)
    assert fragment in str(raised.value)


def test_args_checked_when_built_in_code() -> None:
    with pytest.raises(ConfigError, match="maxHintNodes: must be greater than 0, got 0"):
        SchedulingHintArgs(max_hint_nodes=0)


# --- preferred nodes ----------------------------------------------------------------------------


def _fits_only(*nodes: str) -> tuple[Callable[[str], bool], list[str]]:
    tried: list[str] = []

    def fits(node: str) -> bool:
        tried.append(node)
        return node in nodes

    return fits, tried


@pytest.mark.parametrize(
    ("preferred", "allowed", "fitting", "max_hint", "chosen", "tried"),
    [
        pytest.param(("a", "b", "c"), None, {"b", "c"}, 100, "b", ["a", "b"], id="first-fit"),
        pytest.param(("c", "b"), None, {"b", "c"}, 100, "c", ["c"], id="order-of-the-hint"),
        pytest.param(("a", "b"), None, set(), 100, None, ["a", "b"], id="none-fit-fallback"),
        pytest.param((), None, {"a"}, 100, None, [], id="no-preference"),
        pytest.param(
            ("a", "b", "c"), {"c", "b"}, {"a", "b", "c"}, 100, "b", ["b"], id="outside-prefilter"
        ),
        pytest.param(("a", "b"), set(), {"a"}, 100, None, [], id="empty-intersection-skips"),
        pytest.param(("a", "b", "c"), None, {"c"}, 2, None, ["a", "b"], id="truncated"),
        pytest.param(
            ("x", "a", "b"), {"a", "b"}, {"b"}, 2, None, ["a"], id="truncate-before-intersect"
        ),
        pytest.param(("a", "a", "b"), None, {"b"}, 100, "b", ["a", "b"], id="duplicate-tried-once"),
    ],
)
def test_pick_preferred_node(
    preferred: tuple[str, ...],
    allowed: set[str] | None,
    fitting: set[str],
    max_hint: int,
    chosen: str | None,
    tried: list[str],
) -> None:
    fits, calls = _fits_only(*fitting)
    assert pick_preferred_node(preferred, fits, allowed=allowed, max_hint_nodes=max_hint) == chosen
    assert calls == tried


def test_default_cap_is_one_hundred() -> None:
    preferred = [f"n{i}" for i in range(150)]
    assert len(candidate_preferred_nodes(preferred, allowed=None)) == 100
    fits, calls = _fits_only("n120")
    assert pick_preferred_node(preferred, fits) is None
    assert len(calls) == 100


def test_filter_error_propagates() -> None:
    def broken(node: str) -> bool:
        raise RuntimeError(f"filter failed on {node}")

    with pytest.raises(RuntimeError, match="filter failed on a"):
        pick_preferred_node(("a",), broken)


@pytest.mark.parametrize("bad", [0, -1])
def test_candidates_reject_a_bad_cap(bad: int) -> None:
    with pytest.raises(ValueError, match="max_hint_nodes"):
        candidate_preferred_nodes(("a",), allowed=None, max_hint_nodes=bad)


@given(
    preferred=st.lists(st.sampled_from("abcdefgh"), max_size=12),
    allowed=st.none() | st.frozensets(st.sampled_from("abcdefgh")),
    fitting=st.frozensets(st.sampled_from("abcdefgh")),
    cap=st.integers(min_value=1, max_value=12),
)
def test_chosen_node_is_the_first_allowed_fitting_one_within_the_cap(
    preferred: list[str],
    allowed: frozenset[str] | None,
    fitting: frozenset[str],
    cap: int,
) -> None:
    fits, _ = _fits_only(*fitting)
    chosen = pick_preferred_node(preferred, fits, allowed=allowed, max_hint_nodes=cap)
    window = [n for n in preferred[:cap] if allowed is None or n in allowed]
    expected = next((n for n in window if n in fitting), None)
    assert chosen == expected
