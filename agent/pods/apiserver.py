"""Pods bound to this node, watched on the API server (``[pods] source = "apiserver"``).

For a node whose kubelet cannot be asked (or no kubelet at all: the tests' kwok nodes), the
pods come from a reflector over ``pods`` with the field selector ``spec.nodeName=<node>``
(:class:`agent.report.kubernetes.NodeObjects` runs it, so the one list and watch serve
everything that reads pods). The list is in the order of namespace and name, the kubelet's
order does not exist here; a pod the watch deletes leaves at once. ``synced`` is set once the
first list is in.
"""

from __future__ import annotations

import logging

from agent.pods.base import PodCache
from apis.core import Pod
from runtime.kube.reflector import Reflector

__all__ = ["ApiServerPodSource"]

_log = logging.getLogger(__name__)


class ApiServerPodSource(PodCache):
    """Follows ``reflector`` (pods of this node) into :attr:`pods`; a component whose
    :meth:`run` only follows: the reflector runs elsewhere."""

    def __init__(self, reflector: Reflector, *, name: str = "pods/apiserver") -> None:
        super().__init__(name)
        self._reflector = reflector

    def refresh(self) -> bool:
        """Take what the reflector holds now; True when the pods changed."""
        held = self._reflector.objects
        return self._replace(tuple(p for key in sorted(held) if isinstance(p := held[key], Pod)))

    async def run(self) -> None:
        await self._reflector.synced.wait()
        while True:
            version = self._reflector.version
            self.refresh()
            await self._reflector.changed_after(version)
