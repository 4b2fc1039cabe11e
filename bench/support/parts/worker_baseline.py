"""One bounded worker run in a process of its own, over the source tree on PYTHONPATH: how
`bench worker` times main's worker (an export of the commit before the tracing spans) against
this tree's, alternated, on the same backlog (bench.support.parts.worker_tracing).

Only interfaces both trees have are used here (assemble, the model registry, the configs), and
nothing of `bench`: the modules come from whichever tree PYTHONPATH names. Run as
`python -P worker_baseline.py '<json>'`; prints {"rate": events/s, "cpu": seconds}."""

from __future__ import annotations

import json
import sys
import time


def main(argv: list[str]) -> int:
    args = json.loads(argv[0])
    from precast.kafka import TopicPartitionOffset
    from precast.settings import KafkaSettings
    from schemas.topics import catalog
    from workers.model.inference import ModelSession
    from workers.model.registry import ModelRegistry
    from workers.precompute.assembly import assemble
    from workers.precompute.loop import LoopConfig, tune_gc
    from workers.precompute.pipeline import PipelineConfig
    from workers.settings import DEFAULT_MODEL_DIR

    topics = catalog(args["prefix"], args["partitions"])
    hb = topics.heartbeats.name
    ends = {int(p): e for p, e in args["ends"].items()}
    registry = ModelRegistry(lambda p: ModelSession(p, provider="cpu"), path=DEFAULT_MODEL_DIR)
    w = assemble(
        KafkaSettings(bootstrap_servers=args["bootstrap"]),
        topics,
        registry,
        PipelineConfig(max_batch=2_000),
        LoopConfig(group_id=args["group"]),
        assignment=[TopicPartitionOffset(hb, p, 0) for p in ends],
        stop_at={(hb, p): e for p, e in ends.items()},
    )
    tune_gc()
    t0, cpu0 = time.perf_counter(), time.process_time()
    w.run()
    el, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    w.close()
    print(json.dumps({"rate": sum(ends.values()) / el, "cpu": cpu}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
