"""The Kubernetes transport: a connection to a real API server and the reflectors over it.

:mod:`controller.kube.client` sends requests (kubeconfig or in-cluster credentials, a
client-side rate limit, API server errors as :mod:`controller.errors`);
:mod:`controller.kube.reflector` keeps one kind's objects in memory by LIST and WATCH, the way
an informer does. Nothing is imported here, so importing one module never pulls in the other.
"""
