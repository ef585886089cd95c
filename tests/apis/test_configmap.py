"""The core/v1 ConfigMap: what a manifest holds, the names it is reached by, its table."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from apis.codec import decode_documents, encode_json
from apis.core import ConfigMap
from apis.errors import DecodeError
from apis.kinds import default_registry
from controller.cli import printing

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)

MANIFEST = """\
apiVersion: v1
kind: ConfigMap
metadata:
  name: settings
  namespace: team-a
  creationTimestamp: "2026-03-01T08:00:00Z"
data:
  a.yaml: "x: 1"
  b: two
binaryData:
  c.bin: AAEC
immutable: true
"""


def test_a_manifest_keeps_data_binary_data_and_immutable() -> None:
    [config_map] = decode_documents(MANIFEST)
    assert isinstance(config_map, ConfigMap)
    assert config_map.data == {"a.yaml": "x: 1", "b": "two"}
    assert config_map.binary_data == {"c.bin": "AAEC"}
    assert config_map.immutable is True
    assert b'"binaryData":{"c.bin":"AAEC"}' in encode_json(config_map)


def test_an_unknown_field_is_refused() -> None:
    with pytest.raises(DecodeError, match="spec"):
        decode_documents(MANIFEST + "spec: {}\n")


@pytest.mark.parametrize("typed", ["cm", "configmaps", "configmap", "ConfigMap"])
def test_names_resolve(typed: str) -> None:
    kind = default_registry().resolve(typed)
    assert kind.type is ConfigMap
    assert kind.namespaced


@pytest.mark.parametrize(
    ("manifest", "cells"),
    [
        (MANIFEST, ["settings", "3", "60m"]),
        (MANIFEST.split("\ndata:")[0], ["settings", "0", "60m"]),
    ],
)
def test_the_table_counts_the_keys(manifest: str, cells: list[str]) -> None:
    kind = default_registry().for_type(ConfigMap)
    [config_map] = decode_documents(manifest)
    assert printing.headers(kind) == ["NAME", "DATA", "AGE"]
    assert printing.row(kind, config_map, now=NOW) == cells
