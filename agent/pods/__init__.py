"""Where the agent learns which pods run on its node.

Every source implements :class:`agent.pods.base.PodSource`: a component whose ``run()`` keeps
``pods`` current and sets ``synced`` after its first successful read.

* :mod:`agent.pods.kubelet`: the kubelet's ``/pods`` endpoint (HTTPS with a bearer token, or
  the read-only HTTP port), polled;
* :mod:`agent.pods.static`: a pods file (YAML ``PodList`` or Pod documents), re-read when it
  changes; for nodes that run no kubelet;
* :mod:`agent.pods.bindings`: the controller's retained ``koordpy/v1/nodes/{node}/pods``
  topic on the in-process bus.
"""
