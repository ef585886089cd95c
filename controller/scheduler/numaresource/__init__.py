"""NodeNUMAResource core: CPU binding of LSE/LSR pods (controller-spec §5.2).

Pure functions, no scheduler framework: a plugin adapter calls them.

* :mod:`~controller.scheduler.numaresource.topology`: a node's CPU topology from its
  ``node.koordinator.sh/cpu-topology`` annotation.
* :mod:`~controller.scheduler.numaresource.policy`: which pods get CPUs bound, with which policy,
  and
  why a node cannot take them (the §10 messages).
* :mod:`~controller.scheduler.numaresource.allocator`: which CPUs a pod gets from a node's free
  ones.
* :mod:`~controller.scheduler.numaresource.status`: the
  ``scheduling.koordinator.sh/resource-status``
  annotation and the cpu list format.
* :mod:`~controller.scheduler.numaresource.args`: ``NodeNUMAResourceArgs``.
"""
