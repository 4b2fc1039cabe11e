"""An edge cache in front of the read API: the surrogate keys every answer carries
(`keys`) and the purges sent to the edge (`purge`). docs/api.md, "Behind a cache or CDN"."""
