"""Label selectors: the kubectl ``-l`` text form and ``meta/v1`` ``LabelSelector``.

Text syntax (requirements separated by commas, all must hold)::

    app=web   app==web   tier!=db   env in (prod,staging)   env notin (dev)   gpu   !spot
    replicas>2   replicas<5

Semantics follow Kubernetes: ``!=`` and ``notin`` also match objects without the label; ``>``
and ``<`` need the label to hold an integer. An empty selector matches everything;
:meth:`Selector.nothing` matches nothing (what a missing ``LabelSelector`` selects).
``str(selector)`` prints the canonical text form, requirements sorted by key.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass

from apis import validation
from apis.meta import LabelSelector

__all__ = ["Operator", "Requirement", "Selector", "SelectorError", "parse_selector"]


class SelectorError(ValueError):
    """A selector that does not parse or names an invalid key or value."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"invalid label selector {text!r}: {reason}")
        self.text = text
        self.reason = reason


class Operator(enum.StrEnum):
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    EXISTS = "exists"
    DOES_NOT_EXIST = "!"
    GREATER_THAN = "gt"
    LESS_THAN = "lt"


@dataclass(frozen=True, slots=True)
class Requirement:
    """One condition on one label key; ``values`` sorted and without duplicates."""

    key: str
    operator: Operator
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        op = self.operator
        value = labels.get(self.key)
        if op is Operator.EXISTS:
            return value is not None
        if op is Operator.DOES_NOT_EXIST:
            return value is None
        if op is Operator.EQUALS or op is Operator.IN:
            return value is not None and value in self.values
        if op is Operator.NOT_EQUALS or op is Operator.NOT_IN:
            return value is None or value not in self.values
        if value is None:
            return False
        try:
            have = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return have > bound if op is Operator.GREATER_THAN else have < bound

    def __str__(self) -> str:
        op = self.operator
        if op is Operator.EXISTS:
            return self.key
        if op is Operator.DOES_NOT_EXIST:
            return f"!{self.key}"
        if op is Operator.EQUALS:
            return f"{self.key}={self.values[0]}"
        if op is Operator.NOT_EQUALS:
            return f"{self.key}!={self.values[0]}"
        if op is Operator.GREATER_THAN:
            return f"{self.key}>{self.values[0]}"
        if op is Operator.LESS_THAN:
            return f"{self.key}<{self.values[0]}"
        return f"{self.key} {op.value} ({','.join(self.values)})"


@dataclass(frozen=True, slots=True)
class Selector:
    """A conjunction of requirements (immutable, hashable)."""

    requirements: tuple[Requirement, ...] = ()
    #: Matches no object at all (a selector that was never given).
    match_nothing: bool = False

    @classmethod
    def everything(cls) -> Selector:
        return _EVERYTHING

    @classmethod
    def nothing(cls) -> Selector:
        return _NOTHING

    @classmethod
    def of(cls, requirements: Iterable[Requirement]) -> Selector:
        return cls(tuple(sorted(requirements, key=lambda r: r.key)))

    @classmethod
    def from_labels(cls, labels: Mapping[str, str]) -> Selector:
        """``key=value`` for every pair (keys and values checked)."""
        text = ",".join(f"{k}={v}" for k, v in labels.items())
        return cls.of(_requirement(text, k, Operator.EQUALS, (v,)) for k, v in labels.items())

    @classmethod
    def from_label_selector(cls, selector: LabelSelector | None) -> Selector:
        """A ``meta/v1`` LabelSelector; ``None`` selects nothing, an empty one everything."""
        if selector is None:
            return _NOTHING
        text = _show_label_selector(selector)
        requirements = [
            _requirement(text, key, Operator.EQUALS, (value,))
            for key, value in selector.match_labels.items()
        ]
        for expr in selector.match_expressions:
            op = _EXPRESSION_OPERATORS.get(expr.operator)
            if op is None:
                raise SelectorError(
                    text,
                    f"{expr.operator!r} is not a valid label selector operator"
                    " (In, NotIn, Exists, DoesNotExist)",
                )
            requirements.append(_requirement(text, expr.key, op, expr.values))
        return cls.of(requirements)

    @property
    def empty(self) -> bool:
        """True when the selector matches everything."""
        return not self.requirements and not self.match_nothing

    def matches(self, labels: Mapping[str, str]) -> bool:
        if self.match_nothing:
            return False
        return all(req.matches(labels) for req in self.requirements)

    def __iter__(self) -> Iterator[Requirement]:
        return iter(self.requirements)

    def __str__(self) -> str:
        return ",".join(str(req) for req in self.requirements)


_EVERYTHING = Selector()
_NOTHING = Selector(match_nothing=True)

_EXPRESSION_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


def _show_label_selector(selector: LabelSelector) -> str:
    parts = [f"{k}={v}" for k, v in selector.match_labels.items()]
    parts.extend(f"{e.key} {e.operator} ({','.join(e.values)})" for e in selector.match_expressions)
    return ",".join(parts)


def _requirement(text: str, key: str, op: Operator, values: Iterable[str]) -> Requirement:
    """A checked requirement: valid key, values as the operator needs them."""
    problems = validation.qualified_name(key)
    if problems:
        raise SelectorError(text, f"key {key!r}: {'; '.join(problems)}")
    unique = tuple(sorted(set(values)))
    if op in (Operator.EXISTS, Operator.DOES_NOT_EXIST):
        if unique:
            raise SelectorError(text, f"key {key!r}: values must be empty for {op.name}")
        return Requirement(key, op)
    if op in (Operator.IN, Operator.NOT_IN):
        if not unique:
            raise SelectorError(text, f"key {key!r}: values must be non-empty for {op.value}")
    elif len(unique) != 1:
        raise SelectorError(text, f"key {key!r}: exactly one value is needed")
    if op in (Operator.GREATER_THAN, Operator.LESS_THAN):
        if not re.fullmatch(r"-?\d+", unique[0]):
            raise SelectorError(text, f"key {key!r}: {unique[0]!r} is not an integer")
        return Requirement(key, op, unique)
    for value in unique:
        problems = validation.label_value(value)
        if problems:
            raise SelectorError(text, f"value {value!r}: {'; '.join(problems)}")
    return Requirement(key, op, unique)


# --- the text form ------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|=|!|\(|\)|,|>|<)|(?P<word>[^\s=!(),<>]+))",
)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, offset) tokens; kind is "op" or "word"; trailing whitespace is dropped."""
    found: list[tuple[str, str, int]] = []
    pos = 0
    while (match := _TOKEN.match(text, pos)) is not None:
        kind = "op" if match["op"] is not None else "word"
        found.append((kind, match[kind], match.start(kind)))
        pos = match.end()
    return found


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> tuple[str, str, int] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> tuple[str, str, int] | None:
        token = self.peek()
        if token is not None:
            self.pos += 1
        return token

    def fail(self, reason: str) -> SelectorError:
        return SelectorError(self.text, reason)

    def where(self, token: tuple[str, str, int] | None) -> str:
        if token is None:
            return "at end of input"
        return f"at {token[1]!r} (offset {token[2]})"

    def word(self, what: str) -> str:
        token = self.take()
        if token is None or token[0] != "word":
            raise self.fail(f"expected {what} {self.where(token)}")
        return token[1]

    def parse(self) -> Selector:
        requirements: list[Requirement] = []
        if self.peek() is None:
            return _EVERYTHING
        while True:
            requirements.append(self.requirement())
            token = self.take()
            if token is None:
                break
            if token[:2] != ("op", ","):
                raise self.fail(f"expected ',' between requirements {self.where(token)}")
        return Selector.of(requirements)

    def requirement(self) -> Requirement:
        token = self.peek()
        if token is not None and token[:2] == ("op", "!"):
            self.take()
            key = self.word("a label key after '!'")
            return _requirement(self.text, key, Operator.DOES_NOT_EXIST, ())
        key = self.word("a label key")
        token = self.peek()
        if token is None or token[:2] == ("op", ","):
            return _requirement(self.text, key, Operator.EXISTS, ())
        self.take()
        kind, text, _ = token
        if kind == "word" and text in ("in", "notin"):
            op = Operator.IN if text == "in" else Operator.NOT_IN
            return _requirement(self.text, key, op, self.value_set())
        simple = {
            "=": Operator.EQUALS,
            "==": Operator.EQUALS,
            "!=": Operator.NOT_EQUALS,
            ">": Operator.GREATER_THAN,
            "<": Operator.LESS_THAN,
        }
        if kind != "op" or text not in simple:
            raise self.fail(
                f"expected an operator (=, ==, !=, in, notin, >, <) after {key!r}"
                f" {self.where(token)}"
            )
        value = ""
        nxt = self.peek()
        if nxt is not None and nxt[0] == "word":
            value = nxt[1]
            self.take()
        elif simple[text] in (Operator.GREATER_THAN, Operator.LESS_THAN):
            raise self.fail(f"expected an integer after {key}{text} {self.where(nxt)}")
        return _requirement(self.text, key, simple[text], (value,))

    def value_set(self) -> list[str]:
        token = self.take()
        if token is None or token[:2] != ("op", "("):
            raise self.fail(f"expected '(' {self.where(token)}")
        values: list[str] = []
        expect_value = True
        while True:
            token = self.take()
            if token is None:
                raise self.fail("missing ')'")
            kind, text, _ = token
            if kind == "op" and text == ")":
                if expect_value:
                    values.append("")  # "()" and "(a,)" hold the empty value, as in Kubernetes
                return values
            if kind == "op" and text == ",":
                if expect_value:
                    values.append("")
                expect_value = True
                continue
            if kind != "word" or not expect_value:
                raise self.fail(f"expected a value, ',' or ')' {self.where(token)}")
            values.append(text)
            expect_value = False


def parse_selector(text: str) -> Selector:
    """Parse the kubectl ``-l`` form; raises :class:`SelectorError` naming the text."""
    return _Parser(text).parse()
