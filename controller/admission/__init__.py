"""Admission: what every write to the store passes through before it is stored, as the
Kubernetes API server runs its admission plugins and Koordinator's webhooks
(kubernetes.md; controller-spec §4.1).

- :mod:`controller.admission.base`: the plugin protocol, the read-only lookup a plugin gets,
  and the errors it raises to refuse a write;
- :mod:`controller.admission.chain`: the ordered name -> plugin table (:data:`PLUGINS`) and
  :func:`admit`, which the store calls inside the write's transaction;
- :mod:`controller.admission.poddefaults`: the defaults the API server gives a new pod;
- :mod:`controller.admission.priority`: pod priority from its PriorityClass;
- :mod:`controller.admission.elasticquota`: Koordinator's ElasticQuota webhook.

To add a plugin: write a pure function ``(obj, old, lookup) -> obj`` and add a
:class:`Registration` for it to :data:`PLUGINS`, among the mutating plugins when it changes the
object, else among the validating ones.
"""

from controller.admission.base import (
    AdmissionError,
    ForbiddenError,
    InvalidError,
    Lookup,
    Plugin,
    Registration,
)
from controller.admission.chain import PLUGINS, StoreLookup, admit, plugins_for

__all__ = [
    "PLUGINS",
    "AdmissionError",
    "ForbiddenError",
    "InvalidError",
    "Lookup",
    "Plugin",
    "Registration",
    "StoreLookup",
    "admit",
    "plugins_for",
]
