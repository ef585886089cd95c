"""The Kubernetes transport the agent and the controller share: a connection to a real API
server (:mod:`runtime.kube.client`: kubeconfig or in-cluster credentials, a client-side rate
limit, the server's refusals as :mod:`runtime.kube.errors`) and one kind's objects kept in
memory by LIST and WATCH (:mod:`runtime.kube.reflector`). Nothing is imported here, so
importing one module never pulls in the other."""
