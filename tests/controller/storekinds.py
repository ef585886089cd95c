"""Two small kinds for store tests: a namespaced ``Widget`` and a cluster-scoped ``Gadget``."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TypeVar

import msgspec

from apis.kinds import Kind, Registry
from apis.meta import Model, Object, ObjectMeta
from apis.resources import ResourceList
from controller.store.memory import MemoryStore

ObjT = TypeVar("ObjT", bound=Object)


class WidgetSpec(Model):
    size: int = 0
    color: str = ""
    resources: ResourceList = msgspec.field(default_factory=ResourceList)


class WidgetStatus(Model):
    phase: str = ""
    ready: int = 0


class Widget(Object):
    api_version: str = "test.koordpy.io/v1"
    kind: str = "Widget"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: WidgetSpec = msgspec.field(default_factory=WidgetSpec)
    status: WidgetStatus = msgspec.field(default_factory=WidgetStatus)


class GadgetSpec(Model):
    mode: str = ""


class Gadget(Object):
    api_version: str = "test.koordpy.io/v1"
    kind: str = "Gadget"
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: GadgetSpec = msgspec.field(default_factory=GadgetSpec)


WIDGETS = Kind(Widget, "widgets", namespaced=True, short_names=("wd",))
GADGETS = Kind(Gadget, "gadgets", namespaced=False, short_names=("gd",))
REGISTRY = Registry([WIDGETS, GADGETS])

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


class FakeClock:
    """A clock that only moves when told to."""

    def __init__(self, start: datetime = EPOCH) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


def widget(
    name: str = "",
    namespace: str = "",
    *,
    size: int = 1,
    color: str = "",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    finalizers: tuple[str, ...] = (),
    generate_name: str = "",
    resource_version: str = "",
    phase: str = "",
) -> Widget:
    return Widget(
        metadata=ObjectMeta(
            name=name,
            generate_name=generate_name,
            namespace=namespace,
            labels=labels or {},
            annotations=annotations or {},
            finalizers=finalizers,
            resource_version=resource_version,
        ),
        spec=WidgetSpec(size=size, color=color),
        status=WidgetStatus(phase=phase),
    )


def gadget(name: str, *, mode: str = "", labels: dict[str, str] | None = None) -> Gadget:
    return Gadget(metadata=ObjectMeta(name=name, labels=labels or {}), spec=GadgetSpec(mode=mode))


def as_widgets(objs: Iterable[Object]) -> list[Widget]:
    """``objs``, checked to be Widgets."""
    found = list(objs)
    assert all(isinstance(obj, Widget) for obj in found)
    return [obj for obj in found if isinstance(obj, Widget)]


def creating(obj: ObjT) -> Callable[[MemoryStore], ObjT]:
    """An op for ``Store.submit`` that creates ``obj``."""
    return lambda store: store.create(obj)


def applying(obj: ObjT) -> Callable[[MemoryStore], ObjT]:
    """An op for ``Store.submit`` that applies ``obj`` and returns the stored object."""
    return lambda store: store.apply(obj)[0]
