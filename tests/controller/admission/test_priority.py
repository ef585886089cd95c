"""Pod priority from its PriorityClass at create, and the PriorityClass rules, through the
store (controller.admission.priority)."""

from __future__ import annotations

import msgspec
import pytest

from apis.core import Pod
from controller.errors import Forbidden, Invalid
from controller.store.cluster import Outcome
from controller.store.sqlite import Store
from tests.controller.admission.helpers import pod, priority_class


@pytest.fixture
def store() -> Store:
    return Store()


def stored_pod(store: Store, name: str) -> Pod:
    found = store.get(store.registry.for_type(Pod), name, "default")
    assert isinstance(found, Pod)
    return found


def test_a_pod_takes_the_value_and_preemption_policy_of_the_class_it_names(store: Store) -> None:
    store.apply(priority_class("gold", 1000, preemptionPolicy="Never"))
    saved = store.create(pod("web", priorityClassName="gold"))
    assert (saved.spec.priority, saved.spec.preemption_policy) == (1000, "Never")
    assert saved.spec.priority_class_name == "gold"


def test_a_class_without_a_policy_preempts_lower_priority(store: Store) -> None:
    store.apply(priority_class("silver", 500))
    saved = store.create(pod("web", priorityClassName="silver"))
    assert (saved.spec.priority, saved.spec.preemption_policy) == (500, "PreemptLowerPriority")


def test_a_pod_naming_no_class_takes_the_global_default(store: Store) -> None:
    store.apply(priority_class("low", 10))
    store.apply(priority_class("everyone", 77, globalDefault=True))
    saved = store.create(pod("web"))
    assert (saved.spec.priority, saved.spec.priority_class_name) == (77, "everyone")


def test_without_a_global_default_a_pod_naming_no_class_has_priority_zero(store: Store) -> None:
    store.apply(priority_class("low", 10))
    saved = store.create(pod("web"))
    assert (saved.spec.priority, saved.spec.priority_class_name) == (0, "")
    assert saved.spec.preemption_policy == "PreemptLowerPriority"


def test_a_class_that_does_not_exist_is_refused_and_nothing_is_stored(store: Store) -> None:
    with pytest.raises(Forbidden) as caught:
        store.create(pod("web", priorityClassName="gold"))
    assert str(caught.value) == (
        'pods "web" is forbidden: no PriorityClass with name gold was found'
    )
    assert caught.value.field == "spec.priorityClassName"
    assert caught.value.value == "gold"
    assert not store.exists(store.registry.for_type(Pod), "web", "default")


@pytest.mark.parametrize(
    ("name", "value"),
    [("system-cluster-critical", 2_000_000_000), ("system-node-critical", 2_000_001_000)],
)
def test_the_system_classes_exist_without_an_object(store: Store, name: str, value: int) -> None:
    assert store.create(pod("web", priorityClassName=name)).spec.priority == value


def test_koordinator_classes_exist_and_a_stored_class_of_the_same_name_wins(store: Store) -> None:
    assert store.create(pod("a", priorityClassName="koord-batch")).spec.priority == 5000
    store.apply(priority_class("koord-batch", 5100))
    assert store.create(pod("b", priorityClassName="koord-batch")).spec.priority == 5100


def test_a_pod_whose_priority_differs_from_its_class_is_refused(store: Store) -> None:
    store.apply(priority_class("gold", 1000))
    with pytest.raises(Forbidden, match=r"spec\.priority 5 must not be set") as caught:
        store.create(pod("web", priorityClassName="gold", priority=5))
    assert (caught.value.field, caught.value.value) == ("spec.priority", "5")
    assert store.create(pod("ok", priorityClassName="gold", priority=1000)).spec.priority == 1000


def test_a_pod_whose_preemption_policy_differs_from_its_class_is_refused(store: Store) -> None:
    store.apply(priority_class("gold", 1000, preemptionPolicy="Never"))
    with pytest.raises(Forbidden, match=r"spec\.preemptionPolicy PreemptLowerPriority"):
        store.create(pod("web", priorityClassName="gold", preemptionPolicy="PreemptLowerPriority"))


def test_under_a_global_default_a_pod_naming_no_class_may_not_set_another_priority(
    store: Store,
) -> None:
    store.apply(priority_class("everyone", 77, globalDefault=True))
    with pytest.raises(Forbidden, match="PriorityClass everyone is 77"):
        store.create(pod("web", priority=3))


def test_without_any_class_a_pod_keeps_the_priority_it_sets(store: Store) -> None:
    assert store.create(pod("web", priority=3)).spec.priority == 3


def test_the_same_manifest_applied_again_is_unchanged_and_keeps_the_priority(
    store: Store,
) -> None:
    store.apply(priority_class("gold", 1000))
    manifest = pod("web", priorityClassName="gold")
    first, outcome = store.apply(manifest)
    assert outcome is Outcome.CREATED
    again, outcome = store.apply(manifest)
    assert outcome is Outcome.UNCHANGED
    assert again.spec.priority == 1000
    assert again.metadata.resource_version == first.metadata.resource_version


def test_an_update_keeps_the_priority_even_when_the_class_is_gone(store: Store) -> None:
    gold = store.apply(priority_class("gold", 1000))[0]
    saved = store.create(pod("web", priorityClassName="gold"))
    store.delete(store.registry.for_object(gold), "gold")
    relabelled = msgspec.structs.replace(
        saved, metadata=msgspec.structs.replace(saved.metadata, labels={"app": "web"})
    )
    updated = store.update(relabelled)
    assert (updated.spec.priority, updated.metadata.labels) == (1000, {"app": "web"})


def test_a_class_and_a_pod_naming_it_in_one_transaction(store: Store) -> None:
    results = store.apply_many([priority_class("gold", 1000), pod("web", priorityClassName="gold")])
    assert [r[1] for r in results if not isinstance(r, Exception)] == [Outcome.CREATED] * 2
    assert stored_pod(store, "web").spec.priority == 1000


# --- PriorityClass rules -------------------------------------------------------------------------


def test_only_one_class_may_be_the_global_default(store: Store) -> None:
    store.apply(priority_class("first", 1, globalDefault=True))
    with pytest.raises(Forbidden, match="first is already the global default") as caught:
        store.apply(priority_class("second", 2, globalDefault=True))
    assert caught.value.field == "globalDefault"
    store.apply(priority_class("first", 1, globalDefault=True))  # itself again: fine


def test_a_class_value_cannot_change(store: Store) -> None:
    store.apply(priority_class("gold", 1000))
    with pytest.raises(Invalid, match="value: Forbidden: may not be changed in an update"):
        store.apply(priority_class("gold", 2000))


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("system-mine", 10, 'metadata.name: Invalid value: "system-mine"'),
        (
            "huge",
            1_000_000_001,
            "value: Forbidden: maximum allowed value of a user defined priority is 1000000000",
        ),
        ("system-node-critical", 5, 'value: Invalid value: "5"'),
    ],
)
def test_reserved_class_names_and_values_are_refused(
    store: Store, name: str, value: int, shown: str
) -> None:
    with pytest.raises(Invalid, match=shown):
        store.apply(priority_class(name, value))


def test_an_unknown_preemption_policy_is_refused(store: Store) -> None:
    with pytest.raises(Invalid, match='preemptionPolicy: Unsupported value: "Sometimes"'):
        store.apply(priority_class("gold", 1, preemptionPolicy="Sometimes"))


def test_a_global_default_written_in_the_same_transaction_applies(store: Store) -> None:
    results = store.apply_many(
        [pod("before"), priority_class("everyone", 77, globalDefault=True), pod("after")]
    )
    assert not [r for r in results if isinstance(r, Exception)]
    assert stored_pod(store, "before").spec.priority == 0
    assert stored_pod(store, "after").spec.priority == 77
