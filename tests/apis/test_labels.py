"""Label selectors: kubectl's ``-l`` text form and ``meta/v1`` LabelSelector."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from apis.labels import Operator, Requirement, Selector, SelectorError, parse_selector
from apis.meta import LabelSelector, LabelSelectorRequirement

WEB = {"app": "web", "tier": "frontend", "env": "prod"}
DB = {"app": "db", "tier": "backend"}
BARE: dict[str, str] = {}


@pytest.mark.parametrize(
    ("text", "web", "db", "bare"),
    [
        ("", True, True, True),
        ("app=web", True, False, False),
        ("app==web", True, False, False),
        ("app!=web", False, True, True),
        ("app in (web,db)", True, True, False),
        ("app notin (web)", False, True, True),
        ("env", True, False, False),
        ("!env", False, True, True),
        ("app=web,tier=frontend", True, False, False),
        ("app=web,tier=backend", False, False, False),
        ("tier in (backend), !env", False, True, False),
        ("  app = web  ", True, False, False),
    ],
    ids=lambda v: repr(v) if isinstance(v, str) else None,
)
def test_matching(text: str, web: bool, db: bool, bare: bool) -> None:
    selector = parse_selector(text)
    assert (selector.matches(WEB), selector.matches(DB), selector.matches(BARE)) == (
        web,
        db,
        bare,
    )


def test_greater_and_less_than_need_integers() -> None:
    selector = parse_selector("gpus>2,gpus<8")
    assert selector.matches({"gpus": "4"})
    assert not selector.matches({"gpus": "8"})
    assert not selector.matches({"gpus": "many"})
    assert not selector.matches({})


@pytest.mark.parametrize("text", ["mark=", "mark in ()", "mark in (,)"])
def test_empty_value_is_allowed(text: str) -> None:
    selector = parse_selector(text)
    assert selector.matches({"mark": ""})
    assert not selector.matches({"mark": "x"})
    assert not selector.matches({})


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("tier!=db,app=web", "app=web,tier!=db"),
        ("app==web", "app=web"),
        ("env in (b, a, b)", "env in (a,b)"),
        ("x notin (z)", "x notin (z)"),
        ("!spot,gpu", "gpu,!spot"),
        ("n>3", "n>3"),
        ("", ""),
    ],
)
def test_str_is_the_canonical_text(text: str, canonical: str) -> None:
    selector = parse_selector(text)
    assert str(selector) == canonical
    assert parse_selector(canonical) == selector


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("a=b=c", "expected ','"),
        ("a in (x", "missing ')'"),
        ("a in x", "expected '('"),
        ("!", "expected a label key"),
        ("=b", "expected a label key"),
        ("a b", "expected an operator"),
        ("a,,b", "expected a label key"),
        ("a,", "expected a label key"),
        ("-bad=x", "key '-bad'"),
        ("app=-x", "value '-x'"),
        ("n>x", "not an integer"),
        ("n>", "expected an integer"),
    ],
)
def test_bad_syntax_names_the_text(text: str, fragment: str) -> None:
    with pytest.raises(SelectorError) as info:
        parse_selector(text)
    assert fragment in str(info.value)
    assert repr(text) in str(info.value)
    assert isinstance(info.value, ValueError)


def test_from_label_selector() -> None:
    selector = Selector.from_label_selector(
        LabelSelector(
            match_labels={"app": "web"},
            match_expressions=(
                LabelSelectorRequirement(key="env", operator="In", values=("prod", "staging")),
                LabelSelectorRequirement(key="spot", operator="DoesNotExist"),
                LabelSelectorRequirement(key="tier", operator="Exists"),
                LabelSelectorRequirement(key="zone", operator="NotIn", values=("z9",)),
            ),
        )
    )
    assert str(selector) == "app=web,env in (prod,staging),!spot,tier,zone notin (z9)"
    assert selector.matches(WEB)
    assert not selector.matches({**WEB, "spot": "true"})
    assert not selector.matches(DB)


def test_empty_label_selector_selects_everything_and_none_nothing() -> None:
    everything = Selector.from_label_selector(LabelSelector())
    assert everything.empty
    assert everything.matches(BARE)
    nothing = Selector.from_label_selector(None)
    assert not nothing.empty
    assert not nothing.matches(WEB)
    assert Selector.everything().empty


@pytest.mark.parametrize(
    "requirement",
    [
        LabelSelectorRequirement(key="a", operator="Equals", values=("x",)),
        LabelSelectorRequirement(key="a", operator="In"),
        LabelSelectorRequirement(key="a", operator="Exists", values=("x",)),
        LabelSelectorRequirement(key="a b", operator="Exists"),
    ],
)
def test_bad_label_selectors(requirement: LabelSelectorRequirement) -> None:
    with pytest.raises(SelectorError):
        Selector.from_label_selector(LabelSelector(match_expressions=(requirement,)))


def test_from_labels() -> None:
    selector = Selector.from_labels({"tier": "frontend", "app": "web"})
    assert str(selector) == "app=web,tier=frontend"
    assert selector.matches(WEB)


def test_requirements_are_exposed_in_key_order() -> None:
    selector = parse_selector("b=1,a in (y,x)")
    assert list(selector) == [
        Requirement("a", Operator.IN, ("x", "y")),
        Requirement("b", Operator.EQUALS, ("1",)),
    ]


_names = st.from_regex(r"[a-z]([a-z0-9-]{0,6}[a-z0-9])?", fullmatch=True)
_values = st.one_of(st.just(""), _names)


@st.composite
def _requirements(draw: st.DrawFn) -> Requirement:
    key = draw(_names)
    op = draw(st.sampled_from(list(Operator)))
    if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        return Requirement(key, op)
    if op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        return Requirement(key, op, (str(draw(st.integers(-100, 100))),))
    if op in (Operator.IN, Operator.NOT_IN):
        values = draw(st.sets(_values, min_size=1, max_size=3))
        return Requirement(key, op, tuple(sorted(values)))
    return Requirement(key, op, (draw(_values),))


@given(
    st.lists(_requirements(), max_size=4),
    st.dictionaries(_names, st.one_of(_values, st.integers(-5, 5).map(str)), max_size=4),
)
def test_text_form_round_trips_and_matches_the_same(
    requirements: list[Requirement], labels: dict[str, str]
) -> None:
    selector = Selector.of(requirements)
    again = parse_selector(str(selector))
    assert again == selector
    assert again.matches(labels) == selector.matches(labels)
    assert selector.matches(labels) == all(r.matches(labels) for r in requirements)
