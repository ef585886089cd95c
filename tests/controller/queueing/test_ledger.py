"""The quota ledger: one charge per holder, released exactly, summed up the quota path."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from controller.queueing.ledger import QuotaLedger

PATHS = {"team-a": ("team-a", "dept"), "team-b": ("team-b", "dept"), "dept": ("dept",)}


def ledger() -> QuotaLedger:
    return QuotaLedger(lambda quota: PATHS.get(quota, (quota,)))


def test_a_charge_counts_at_the_quota_and_every_ancestor() -> None:
    book = ledger()
    book.charge("u1", "team-a", {"cpu": 2000})
    book.charge("u2", "team-b", {"cpu": 1000}, non_preemptible=True)
    assert book.used("team-a") == {"cpu": 2000}
    assert book.used("dept") == {"cpu": 3000}
    assert book.non_preemptible_used("dept") == {"cpu": 1000}
    assert book.non_preemptible_used("team-a") == {}


def test_release_subtracts_exactly_what_was_charged() -> None:
    book = ledger()
    book.charge("u1", "team-a", {"cpu": 2000, "memory": 5})
    book.charge("u1", "team-a", {"cpu": 3000})  # replaces, does not add
    assert book.used("dept") == {"cpu": 3000, "memory": 0}
    released = book.release("u1")
    assert released is not None
    assert released.amounts == {"cpu": 3000}
    assert book.used("dept") == {"cpu": 0, "memory": 0}
    assert book.release("u1") is None  # a second release changes nothing
    assert book.used("team-a") == {"cpu": 0, "memory": 0}


def test_a_release_is_reported_once_along_the_path() -> None:
    book = ledger()
    book.charge("u1", "team-a", {"cpu": 1000})
    assert book.take_released() == set()  # charging frees nothing
    before = book.version("dept")
    book.release("u1")
    assert book.take_released() == {"team-a", "dept"}
    assert book.take_released() == set()
    assert book.version("dept") > before


def test_rebuild_moves_charges_to_the_new_paths() -> None:
    book = ledger()
    book.charge("u1", "team-a", {"cpu": 1000})
    book.rebuild(lambda quota: (quota, "other-dept") if quota != "other-dept" else (quota,))
    assert book.used("dept") == {}
    assert book.used("other-dept") == {"cpu": 1000}
    book.release("u1")
    assert book.used("other-dept") == {"cpu": 0}


ops = st.lists(
    st.tuples(
        st.sampled_from(["charge", "release"]),
        st.sampled_from(["u1", "u2", "u3"]),
        st.sampled_from(["team-a", "team-b"]),
        st.integers(0, 5000),
    ),
    max_size=30,
)


@settings(max_examples=80, deadline=None)
@given(ops)
def test_used_is_always_the_sum_of_the_live_charges(
    steps: list[tuple[str, str, str, int]],
) -> None:
    book = ledger()
    live: dict[str, tuple[str, int]] = {}
    for action, holder, quota, amount in steps:
        if action == "charge":
            book.charge(holder, quota, {"cpu": amount} if amount else {})
            if amount:
                live[holder] = (quota, amount)
            else:
                live.pop(holder, None)
        else:
            book.release(holder)
            live.pop(holder, None)
    for quota in PATHS:
        expected = sum(a for q, a in live.values() if quota in PATHS[q])
        assert book.used(quota).get("cpu", 0) == expected
    assert set(book.holders()) == set(live)
