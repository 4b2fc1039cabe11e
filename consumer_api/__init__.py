"""Read API: the newest precomputed prediction per device, served from memory or Redis."""
