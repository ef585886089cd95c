"""Scheduler plugins, one module each; :data:`controller.scheduler.profile.PLUGINS` lists them."""
