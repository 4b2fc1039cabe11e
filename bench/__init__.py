"""Benchmarks against the local stack: `python -m bench NAME` or `python -m bench all`."""
