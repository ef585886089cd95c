"""The client side of the ``koordpy`` command: ``apply``, ``get``, ``describe`` and ``delete``
over the controller's API (:mod:`~controller.cli.commands`) and how objects are printed
(:mod:`~controller.cli.printing`)."""
