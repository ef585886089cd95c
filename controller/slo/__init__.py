"""koord-manager's NodeSLO rendering: ``slo-controller-config`` -> one NodeSLO per node.

:mod:`.config` parses and checks the ConfigMap's keys, :mod:`.render` gives a node its spec,
:mod:`.loop` is the ``nodeslo`` control loop that keeps the NodeSLOs current.
"""
