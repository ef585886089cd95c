"""The workload controllers ``koordpy up`` and ``koordpy simulate`` play in place of
Kubernetes' own: Deployment, ReplicaSet, StatefulSet, DaemonSet, batch Job (``job``, and
``jobconditions`` for how a Job ends, shared with the queue's path), and the garbage collector
of the pods and ReplicaSets they own (one module each; ``common`` holds what they share)."""
