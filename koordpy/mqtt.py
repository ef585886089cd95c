"""MQTT between agents and the controller: connection settings and the bus bridge.

The fleet's wire protocol (``koordpy/v1/nodes/{node}/{leaf}``, MQTT 5, QoS 1, JSON bodies) is
the in-process bus's (:mod:`koordpy.bus`) carried over a broker. Each daemon keeps a local
:class:`~koordpy.bus.Bus`; an :class:`MqttBridge` mirrors chosen topics between that bus and
the broker, so every component that speaks the bus works unchanged in a fleet.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

__all__ = ["DEFAULT_MAX_PAYLOAD", "MqttSettings"]

#: Largest body a node may send (a NodeMetric of a 250-pod node is about 150 KiB).
DEFAULT_MAX_PAYLOAD: Final = 1024 * 1024

_Seconds = Annotated[float, msgspec.Meta(gt=0)]
_Port = Annotated[int, msgspec.Meta(ge=1, le=65535)]


class MqttSettings(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """How to reach the broker (``[report.mqtt]`` of the agent, ``[mqtt]`` of the controller)."""

    #: Broker host name or address. Default ``localhost``.
    host: str = "localhost"
    #: Broker port. Default 1883 (8883 is the usual TLS port).
    port: _Port = 1883
    #: Use TLS. On as soon as ``ca_file`` or ``cert_file`` is set; with none of them the
    #: system's CAs verify the broker. Default off.
    tls: bool = False
    #: CA bundle (PEM) that signed the broker's certificate. Default: the system's CAs.
    ca_file: str = ""
    #: Client certificate and key (PEM) for brokers that require one (mutual TLS).
    cert_file: str = ""
    key_file: str = ""
    #: Skip verifying the broker's certificate and host name (testing only).
    tls_insecure: bool = False
    #: User name to authenticate as. Default: the agent's node name; the controller's
    #: ``controller``. Empty with a client certificate: the broker names us by the certificate.
    username: str = ""
    #: File whose first line is the password (never the password itself in the config).
    password_file: str = ""
    #: MQTT client id. Default ``koordpy-agent-{node}`` / ``koordpy-controller``.
    client_id: str = ""
    #: Seconds between keep-alive pings; the broker publishes the will after 1.5 times this
    #: without traffic. Default 30.
    keepalive: Annotated[int, msgspec.Meta(ge=5, le=65535)] = 30
    #: Jittered backoff between reconnect attempts: first delay and cap, seconds.
    reconnect_min: _Seconds = 1.0
    reconnect_max: _Seconds = 30.0
    #: Events (unretained messages) kept while disconnected; the oldest are dropped beyond.
    #: Retained topics keep only their newest body. Default 1000.
    max_queued_events: Annotated[int, msgspec.Meta(ge=0)] = 1000
    #: Largest body sent or accepted, bytes; a larger one is dropped and counted.
    max_payload: Annotated[int, msgspec.Meta(ge=1024)] = DEFAULT_MAX_PAYLOAD
    #: Seconds a clean shutdown waits for queued messages (the final ``offline``) to go out.
    flush_timeout: _Seconds = 3.0

    def __post_init__(self) -> None:
        if bool(self.cert_file) != bool(self.key_file):
            raise ValueError("cert_file and key_file must be given together")
        if self.reconnect_min > self.reconnect_max:
            raise ValueError(
                f"reconnect_min ({self.reconnect_min}) must not exceed "
                f"reconnect_max ({self.reconnect_max})"
            )

    @property
    def uses_tls(self) -> bool:
        return self.tls or bool(self.ca_file) or bool(self.cert_file)
