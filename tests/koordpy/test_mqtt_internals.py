"""The MQTT bridge subclasses aiomqtt's client and reaches into paho's: the versions it is
written against are the ones installed, and every private member it uses is still there."""

from __future__ import annotations

from importlib.metadata import version

import aiomqtt
import paho.mqtt.client as paho
import pytest

from runtime.mqtt import PRIVATE_MEMBERS, WRITTEN_AGAINST


@pytest.mark.parametrize("package", sorted(WRITTEN_AGAINST))
def test_the_installed_version_is_the_one_the_bridge_is_written_against(package: str) -> None:
    assert version(package) == WRITTEN_AGAINST[package], (
        f"{package} {version(package)} is installed; runtime.mqtt is written against"
        f" {WRITTEN_AGAINST[package]}: check each of PRIVATE_MEMBERS in the new version"
        " before changing the pin"
    )


async def test_every_private_member_the_bridge_uses_exists() -> None:
    client = aiomqtt.Client("localhost")
    found = {
        "aiomqtt.Client": client,
        "paho.mqtt.client.Client": client._client,
    }
    assert isinstance(client._client, paho.Client)
    missing = [
        f"{owner}.{name}"
        for owner, names in PRIVATE_MEMBERS.items()
        for name in names
        if not hasattr(found[owner], name)
    ]
    assert not missing, f"gone from the installed aiomqtt/paho: {missing}"
    assert callable(paho.time_func)
