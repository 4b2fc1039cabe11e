"""Building a read-API app over an in-memory view for tests (no broker needed)."""

from __future__ import annotations

import time

import orjson

from consumer_api.app import create_app
from consumer_api.board.fleet_index import FleetIndex
from consumer_api.board.routes import Board
from consumer_api.read.service import Service
from consumer_api.settings import ApiOptions
from consumer_api.speculation.precompute_budget import LocalBudget
from consumer_api.speculation.precompute_requests import PrecomputeAsker
from precast.kafka import Producer
from precast.serving import Entry, MemoryStore, entry_from_prediction


def now_ms() -> int:
    return int(time.time() * 1000)


def prediction(
    device: str,
    computed: int,
    *,
    horizon_ms: int = 60_000,
    produced: int | None = None,
    received: int | None = None,
    version: str = "1.0.0",
    purge: bool = False,
    inference_ms: int | None = None,
) -> Entry:
    produced = computed + 20 if produced is None else produced
    doc = {
        "schema_version": 1,
        "device_id": device,
        "candidates": []
        if purge
        else [
            {"strategy": "remote_restart", "score": 0.7},
            {"strategy": "monitor_only", "score": 0.2},
        ],
        "model_version": version,
        "computed_at_ms": computed,
        "valid_until_ms": computed + horizon_ms,
        "produced_at_ms": produced,
        "trigger": "purge" if purge else "heartbeat",
        "lineage": [],
    }
    if inference_ms is not None:
        doc["inference_ms"] = inference_ms
    return entry_from_prediction(orjson.dumps(doc), produced + 5 if received is None else received)


def make_service(
    view: MemoryStore | None = None,
    producer: Producer | None = None,
    topic: str = "unused",
    **options,
) -> Service:
    opts = ApiOptions(**options)
    view = MemoryStore(int(opts.grace_s * 1000)) if view is None else view
    budget = LocalBudget(opts.precompute_budget_per_s, opts.precompute_burst)
    asker = PrecomputeAsker(producer, topic, int(opts.request_window_s * 1000), budget=budget)
    return Service(opts, view, None, asker)


def make_board(svc: Service, **kw) -> Board:
    o = svc.options
    return Board(
        FleetIndex(
            default_strategy=o.default_strategy,
            serve_stale=o.expired == "stale",
            grace_ms=int(o.grace_s * 1000),
            history_depth=o.board_history_depth,
            history_devices=o.board_history_devices,
        ),
        **kw,
    )


def make_app(svc: Service, board: Board | None = None):
    """The app with the board (a fresh FleetIndex unless one is given)."""
    return create_app(svc, board if board is not None else make_board(svc))
