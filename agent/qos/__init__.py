"""QoS strategies: pure decisions from a node snapshot (see :mod:`agent.qos.framework`).

The table of strategies the agent runs is :data:`agent.qos.registry.STRATEGIES`; the loop that
feeds them snapshots and carries out their outcomes is :mod:`agent.qos.loop`.
"""
