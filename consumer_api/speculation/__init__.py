"""Speculative work asked of the workers: precompute requests within a budget shared by the
replicas, and read hints (which devices clients read, prefetch or watch)."""
