"""What a node's agent may write to its own Node, after Kubernetes' NodeRestriction admission.

A node reports through its own topics only (the broker's ACL sees to that); this module says
which of the Node's fields such a report may change. The ingest applies a report's status
whole (the agent's), keeps the spec (taints, unschedulable) of a stored Node, and passes
the labels and annotations through :func:`restricted` before it writes:

* **Registering** (no Node stored yet), a node may set any label except, as Kubernetes has
  it for kubelets, those in the ``node-restriction.kubernetes.io`` namespace (or a subdomain)
  and those in ``kubernetes.io`` / ``k8s.io`` (or a subdomain) outside the kubelet's own set
  (:data:`KUBELET_LABELS` and the ``kubelet.kubernetes.io`` / ``node.kubernetes.io``
  namespaces): the labels a machine is given, as the kubelet's ``--node-labels``. Those it
  may not set are left out of the Node it registers.
* **Afterwards** it may add, change or remove only the labels and annotations its agent owns:
  the kubelet's set above, koordpy's ``node.koordpy.io/`` labels, the GPU labels the agent
  takes from its Device (:data:`AGENT_LABELS`) and the CPU topology annotation
  (:data:`AGENT_ANNOTATIONS`) (see :func:`agent.node.build_node`). Every other label and
  annotation belongs to the cluster's administrators: a report that would change one (say
  ``karpenter.sh/capacity-type`` or ``node-role.kubernetes.io/control-plane``) is refused
  whole, as Kubernetes refuses the update, naming the keys.

A label the node registered with but does not own is the cluster's from then on: reporting it
unchanged is no change, and a report without it does not remove it.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping
from typing import Final

import msgspec

from apis import constants as k
from apis.core import Node

__all__ = [
    "AGENT_ANNOTATIONS",
    "AGENT_LABELS",
    "AGENT_LABEL_PREFIXES",
    "KUBELET_LABELS",
    "agent_owns_label",
    "restricted",
]

#: Labels a kubelet may set in the ``kubernetes.io`` and ``k8s.io`` namespaces.
KUBELET_LABELS: Final = frozenset(
    {
        "kubernetes.io/hostname",
        "kubernetes.io/os",
        "kubernetes.io/arch",
        "beta.kubernetes.io/os",
        "beta.kubernetes.io/arch",
        "beta.kubernetes.io/instance-type",
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/region",
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/zone",
    }
)
#: Label namespaces a kubelet may use whole (and their subdomains).
_KUBELET_NAMESPACES: Final = ("kubelet.kubernetes.io", "node.kubernetes.io")
_RESTRICTED_NAMESPACE: Final = "node-restriction.kubernetes.io"
_KUBERNETES_NAMESPACES: Final = ("kubernetes.io", "k8s.io")
#: Labels the koordpy agent sets from its Device, outside the kubelet's set.
AGENT_LABELS: Final = frozenset({k.LABEL_GPU_VENDOR, k.LABEL_GPU_MODEL, k.LABEL_GPU_DRIVER_VERSION})
#: Label prefixes that are the agent's own (how the node's cgroups are laid out).
AGENT_LABEL_PREFIXES: Final = ("node.koordpy.io/",)
#: Annotations the agent reports on its Node.
AGENT_ANNOTATIONS: Final = frozenset({k.ANNOTATION_NODE_CPU_TOPOLOGY})


def _in(namespace: str, domains: Iterable[str]) -> bool:
    return any(namespace == d or namespace.endswith("." + d) for d in domains)


def _namespace(key: str) -> str:
    prefix, slash, _ = key.partition("/")
    return prefix if slash else ""


@functools.lru_cache(maxsize=4096)  # a fleet's label keys are few; every report asks again
def _kubelet_may_set(key: str) -> bool:
    """Kubernetes' rule: no ``node-restriction.kubernetes.io`` label, and in ``kubernetes.io``
    or ``k8s.io`` only the kubelet's own."""
    namespace = _namespace(key)
    if _in(namespace, (_RESTRICTED_NAMESPACE,)):
        return False
    if _in(namespace, _KUBERNETES_NAMESPACES):
        return key in KUBELET_LABELS or _in(namespace, _KUBELET_NAMESPACES)
    return True


@functools.lru_cache(maxsize=4096)
def agent_owns_label(key: str) -> bool:
    """Whether the node's agent may add, change or remove label ``key`` on its Node."""
    if key in AGENT_LABELS or key.startswith(AGENT_LABEL_PREFIXES):
        return True
    return _in(_namespace(key), _KUBERNETES_NAMESPACES) and _kubelet_may_set(key)


def _changed(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Keys added, removed or given another value, sorted."""
    if old == new:
        return []
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def _kept(old: Mapping[str, str], new: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    """``new`` with each of ``keys`` as ``old`` has it (absent where ``old`` lacks it)."""
    out = dict(new)
    for key in keys:
        if key in old:
            out[key] = old[key]
        else:
            out.pop(key, None)
    return out


def restricted(
    stored: Node | None, merged: Node, *, ignore: Iterable[str] = ()
) -> tuple[Node, str | None]:
    """``merged`` as the node may write it over ``stored``, and what was held back (None:
    nothing): each label and annotation it may not change keeps its stored value.

    ``ignore``: annotation keys the controller itself keeps on the Node.
    """
    name = merged.metadata.name
    meta = merged.metadata
    if stored is None:
        bad = sorted(key for key in meta.labels if not _kubelet_may_set(key))
        if not bad:
            return merged, None
        why = f'node "{name}" is not allowed to set the following labels: {", ".join(bad)}'
        return _with(merged, _kept({}, meta.labels, bad), meta.annotations), why
    skip = frozenset(ignore)
    have = stored.metadata
    labels = [key for key in _changed(have.labels, meta.labels) if not agent_owns_label(key)]
    annotations = [
        key
        for key in _changed(have.annotations, meta.annotations)
        if key not in AGENT_ANNOTATIONS and key not in skip
    ]
    if not labels and not annotations:
        return merged, None
    said: list[str] = []
    if labels:
        said.append(f"is not allowed to modify labels: {', '.join(labels)}")
    if annotations:
        said.append(f"is not allowed to modify annotations: {', '.join(annotations)}")
    kept = _with(
        merged,
        _kept(have.labels, meta.labels, labels),
        _kept(have.annotations, meta.annotations, annotations),
    )
    return kept, f'node "{name}" {"; ".join(said)}'


def _with(node: Node, labels: dict[str, str], annotations: Mapping[str, str]) -> Node:
    meta = msgspec.structs.replace(node.metadata, labels=labels, annotations=dict(annotations))
    return msgspec.structs.replace(node, metadata=meta)
