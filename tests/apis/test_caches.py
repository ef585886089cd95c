"""Named caches (apis/caches.py): bounded, cleared together, and identity caches documented
where the identity contract is (controller/store/snapshots.py)."""

from __future__ import annotations

import pytest

import controller.loops  # noqa: F401 - imports every loop, so every cache is registered
from apis import caches
from apis.codec import decode_json
from apis.core import ConfigMap
from controller.store import snapshots


def test_every_identity_cache_is_named_where_the_identity_contract_is() -> None:
    doc = snapshots.__doc__ or ""
    identity = [
        name
        for name, cache in caches.registered().items()
        if isinstance(cache, caches.IdentityCache) and not name.startswith("tests.")
    ]
    assert identity  # the queueing and scheduler ones at least
    for name in identity:
        assert f"``{name}``" in doc, name


#: one for the test below (a name is registered once per process)
_PROBE: caches.IdentityCache[list[int], int] = caches.IdentityCache(
    "tests.identity-probe", limit=2, contract="lists by identity, for the test"
)


def test_an_identity_cache_hits_only_for_the_very_object() -> None:
    cache = _PROBE
    try:
        one, equal = [1], [1]
        cache.put(one, 10)
        assert cache.get(one) == 10
        assert cache.get(equal) is None  # equal, but another object
        cache.put([2], 20)
        cache.put([3], 30)  # full: emptied first
        assert len(cache) == 1
        assert cache.get(one) is None
    finally:
        cache.clear()


def test_clear_all_empties_every_named_cache() -> None:
    decode_json(b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}', ConfigMap)
    assert any(len(cache) for cache in caches.registered().values())
    caches.clear_all()
    assert not any(len(cache) for cache in caches.registered().values())
    # and they fill again as they are used
    decode_json(b'{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}', ConfigMap)
    assert len(caches.registered()["codec.decoders"]) == 1


def test_a_name_is_registered_once() -> None:
    with pytest.raises(ValueError, match="exists already"):
        caches.Cache("codec.decoders", limit=1, contract="again")
