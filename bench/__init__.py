"""Benchmarks: each prints its own figures, the same work done by a baseline, and the ratio.

Run one with ``python -m bench.<name>`` (``make bench`` runs them all). They are not tests:
nothing here asserts a timing; a benchmark prints its targets with PASS or FAIL.
"""
