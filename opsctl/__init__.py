"""SRE tools behind the `precast` CLI: replay, backfill, dead letters, purge, lag, rebuild.

Small modules by noun; none imports an application package (producers, workers,
consumer_api): they meet the pipeline through topics, `schemas` and the serving store.
"""
