"""What the agent and the controller both run on, importing neither: a daemon's lifecycle
(:mod:`~runtime.lifecycle`), logging (:mod:`~runtime.logs`), TOML config files
(:mod:`~runtime.configfile`), Prometheus exposition (:mod:`~runtime.exposition`), the in-process
bus of topics (:mod:`~runtime.bus`) and its bridge to an MQTT broker (:mod:`~runtime.mqtt`, with
the wire codec :mod:`~runtime.mqttwire` and bodies in parts :mod:`~runtime.mqttparts`)."""
