"""Descheduler tests: the framework, the evictor, the plugins, the loop and its metrics."""
