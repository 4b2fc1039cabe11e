"""Precompute workers: device events in, top-K service strategies per device out."""
