"""The controller's objects, behind one seam.

- :mod:`controller.store.cluster`: the :class:`~controller.store.cluster.Cluster` Protocol
  every control loop and ``koordpy simulate`` is written against, and the contract they may
  rely on (snapshots, delayed visibility of their own writes, opaque versions);
- :mod:`controller.store.memory`: the in-memory backend (``koordpy simulate``);
- :mod:`controller.store.sqlite`: the SQLite backend (``koordpy up``, ``koordpy controller
  run``), the in-memory one written through to a state file
  (:mod:`controller.store.persistence`);
- :mod:`controller.store.snapshots` and :mod:`controller.store.watching`: the immutable views
  and ordered watches the backends serve; :mod:`controller.store.encoding`: objects as stored.

Nothing is imported here, so that importing the seam never imports a backend.
"""
