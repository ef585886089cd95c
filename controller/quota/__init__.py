"""Elastic quota: which quota a pod belongs to, what the quota has used and requests, and
whether the pod may be admitted (:mod:`controller.quota.check`); the runtime quota of the tree,
by water filling of min, max and shared weight (:mod:`controller.quota.tree`); the status a
quota object is given (:mod:`controller.quota.status`); the plugin's args
(:mod:`controller.quota.args`); the revocation of what an over-used quota borrowed
(:mod:`controller.quota.revoke`).
"""
