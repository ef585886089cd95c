"""The controller's side of Kubernetes: its client raising the controller's errors
(:mod:`controller.kube.client`, over :mod:`runtime.kube`), leader election by Lease
(:mod:`controller.kube.election`), the CRDs made from koordpy's types
(:mod:`controller.kube.crds`) and a one-off read of a cluster (:mod:`controller.kube.snapshot`).
Nothing is imported here, so importing one module never pulls in the others.
"""
