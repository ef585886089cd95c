"""Which dependents the garbage collector deletes."""

from __future__ import annotations

import msgspec

from apis.core import Pod
from apis.meta import OwnerReference
from controller.workloads.gc import orphans
from tests.controller.workloads.objects import pod


def owned(name: str, *refs: tuple[str, str, str]) -> Pod:
    base = pod(name)
    owners = tuple(
        OwnerReference(api_version=api, kind=kind, name="o", uid=uid) for api, kind, uid in refs
    )
    return msgspec.structs.replace(
        base, metadata=msgspec.structs.replace(base.metadata, owner_references=owners)
    )


def test_only_dependents_of_vanished_workloads_are_orphans() -> None:
    live = {"uid-rs"}
    objects = [
        owned("of-live-rs", ("apps/v1", "ReplicaSet", "uid-rs")),
        owned("of-gone-rs", ("apps/v1", "ReplicaSet", "uid-gone")),
        owned("of-gone-sts", ("apps/v1", "StatefulSet", "uid-gone")),
        owned("of-gone-job", ("batch/v1", "Job", "uid-gone")),
        owned(
            "two-owners-one-left",
            ("apps/v1", "DaemonSet", "uid-gone"),
            ("apps/v1", "ReplicaSet", "uid-rs"),
        ),
        owned("bare"),
    ]
    found = orphans(objects, frozenset(live))
    assert [o.metadata.name for o in found] == ["of-gone-rs", "of-gone-sts"]
