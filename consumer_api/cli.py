"""`precast-api`: serve the newest precomputed prediction per device over HTTP."""

from __future__ import annotations

import argparse
import sys

from consumer_api.app import create_app
from consumer_api.materializer import Materializer
from consumer_api.settings import ApiSettings
from consumer_api.store import MemoryStore
from precast.kafka import Admin
from precast.runtime import run_cli, setup_logging
from precast.settings import load
from schemas.topics import catalog


def run(settings: ApiSettings) -> int:
    import uvicorn

    Admin(settings.kafka).wait_reachable()
    topics = catalog(settings.topics.prefix, settings.topics.partitions, settings.topics.replication_factor)
    store = MemoryStore()
    materializer = Materializer(settings.kafka, topics.predictions.name, topics.predictions.partitions,
                                store, settings.api.group_id)
    materializer.start()
    app = create_app(store, lambda: materializer.ready)
    print(f"precast-api: serving on http://{settings.api.host}:{settings.api.port}", file=sys.stderr, flush=True)
    try:
        uvicorn.run(app, host=settings.api.host, port=settings.api.port, log_level="warning",
                    access_log=False)
    finally:
        materializer.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="precast-api", description=__doc__)
    p.add_argument("--port", type=int)
    p.add_argument("--host")
    args = p.parse_args(argv)

    def body() -> int:
        overrides = {k: v for k, v in vars(args).items() if v is not None}
        settings = load(ApiSettings, api=overrides)
        setup_logging(settings.log_level)
        return run(settings)

    return run_cli("precast-api", body)


if __name__ == "__main__":
    sys.exit(main())
