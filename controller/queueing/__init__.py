"""Koord-Queue job-level queueing: job extensions, queues, policies, admission."""
