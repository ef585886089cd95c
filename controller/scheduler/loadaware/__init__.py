"""LoadAwareScheduling: node load thresholds and least-used scoring (controller-spec §5.1).

Pure functions and frozen values a scheduler plugin adapter calls; nothing here does I/O or
knows the scheduling framework:

- :mod:`.args` — ``LoadAwareSchedulingArgs`` with its defaults and validation, the resource
  vector, and the per-node thresholds (args overlaid with the node annotation).
- :mod:`.estimator` — the default pod usage estimator.
- :mod:`.usage` — a node's estimated usage as a cached record, cheap to update when a pod is
  assumed or forgotten.
- :mod:`.table` — the records of many nodes as numpy arrays; the vectorized filter and score.
"""
