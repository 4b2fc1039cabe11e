"""The benchmarks: one module per `python -m bench NAME`, each defining `NAME`, `DESCRIPTION` and
`run(ctx) -> Report` (bench/__main__.py finds them here)."""
