"""The operator app behind the `precast` CLI: the local stack, the demo and the SRE tools.

- `cli`: the entry point; builds the parser from the command registry and runs one command.
- `commands/`: one module per command (`precast replay` is `commands/replay.py`), each a
  `commands.base.Command` declaring its arguments and its run, or its actions.
- `toolkit/`: what several commands share (time and offset ranges, the range reader, record
  filters, checkpoints and resume, the copier, the live-target guard, pacing, the serving store).
- `stack/` (the local Kafka, Redis and Prometheus), `observe/` (rules and dashboards as code),
  `dataset/` (the point-in-time dataset builder), and `settings` (the one settings model).

None imports an application package (producers, workers, consumer_api, auditor): they meet the
pipeline through topics, `schemas`, `precast` and the serving store.
"""
