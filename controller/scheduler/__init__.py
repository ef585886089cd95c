"""The central scheduler: a plugin framework over numpy node arrays, and its control loop.

Modules: :mod:`~controller.scheduler.framework` (status values, extension-point Protocols),
:mod:`~controller.scheduler.nodetable` (node resource arrays), :mod:`~controller.scheduler.podinfo`,
:mod:`~controller.scheduler.profile` (plugin registry, profiles), :mod:`~controller.scheduler.cycle`
(one scheduling attempt), :mod:`~controller.scheduler.scheduling_queue`,
:mod:`~controller.scheduler.explain` (FitError text), :mod:`~controller.scheduler.loop` (the
control loop), and the plugins under :mod:`controller.scheduler.plugins`.
"""
