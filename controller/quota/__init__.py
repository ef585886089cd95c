"""Elastic quota: which quota a pod belongs to, what the quota has used, and whether the pod
may be admitted (:mod:`controller.quota.check`); the plugin's args
(:mod:`controller.quota.args`).

The runtime quota tree (water filling of min/max/shared weight) is not here yet: checks read
each ElasticQuota's ``max`` until it arrives.
"""
