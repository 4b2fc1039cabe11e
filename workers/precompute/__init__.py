"""The precompute worker, by stage: state/, decide/, ingest/, score/, publish/ (no stage imports
a later one), over the shared items, metrics and config; the parts are wired at the top
(pipeline, loop, rebalance, outputs, assembly) and built from settings by cli.build."""
