"""The fleet's side of the controller: what agents publish becomes objects in the store
(:mod:`~controller.fleet.ingest`, with :mod:`~controller.fleet.reports` and
:mod:`~controller.fleet.noderestriction` saying what a report may change), whether each node is
alive (:mod:`~controller.fleet.liveness`), and what each node gets back: its pods, NodeSLO and
collect policy (:mod:`~controller.fleet.nodefeed`)."""
