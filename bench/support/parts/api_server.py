"""The read API as `python -m bench api` runs it: the real app (consumer_api.cli.build, real
materializer, the configured server: PRECAST_API__SERVER)
plus two comparison endpoints on the same server and event loop:

- /bench/constant — a constant body of the same size as a typical answer, sent by the same kind
  of plain ASGI code as the fast path (the ceiling for "answer from memory");
- /bench/ondemand/{device_id} — what serving without precompute costs: build the features of
  the device's latest heartbeat and run the ONNX model for this one request, then top-K and JSON.

Run: python -m bench.support.parts.api_server PORT (settings from PRECAST_* like precast-api)."""

from __future__ import annotations

import sys

import numpy as np
import orjson

from consumer_api.cli import build
from consumer_api.serve import ServerLimits, serve
from consumer_api.settings import ApiSettings
from precast.fleet import load_fleet
from precast.settings import load
from producers.simulator import Fleet
from schemas.validation import Rejected, validate_event
from workers.model.inference import ModelSession
from workers.model.topk import top_k
from workers.settings import DEFAULT_MODEL_DIR

CONSTANT = (
    b'{"device_id":"dev-000001","candidates":[{"strategy":"remote_restart","score":0.71},'
    b'{"strategy":"monitor_only","score":0.2},{"strategy":"firmware_rollback","score":0.05}],'
    b'"model_version":"1.0.0","computed_at_ms":1800000000000,"valid_until_ms":1800003600000,'
    b'"produced_at_ms":1800000000020,"trigger":"heartbeat","lineage":[],"source":"precomputed",'
    b'"age_ms":25,"delay_origin":"cache"}'
)
_HEADERS = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(CONSTANT))]


class OnDemand:
    """Per-request inference over the latest heartbeat of each simulated device."""

    def __init__(self, devices: int) -> None:
        self.model = ModelSession(DEFAULT_MODEL_DIR, provider="cpu", intra_op_threads=1)
        fleet = Fleet(devices, seed=42)
        self.rows = {e.device_id: e for e in fleet.heartbeats(devices, 1_800_000_000_000)}

    def answer(self, device_id: str) -> bytes | None:
        e = self.rows.get(device_id)
        if e is None:
            return None
        # the spec's own path of a per-request inference: validate, state columns, features
        fleet = load_fleet()
        got = validate_event("heartbeats", device_id.encode(), orjson.dumps(e))
        if isinstance(got, Rejected):  # the simulator's own events: not expected
            return None
        state = np.array([fleet.features.state_row(got.event)], dtype=np.float64)
        x = fleet.features.build(state, fleet.context.columns([None], np.zeros(1, dtype=np.int64)))
        probs = self.model.predict(x)
        idx, scores = top_k(probs, 3)
        labels = self.model.labels
        return orjson.dumps(
            {
                "device_id": device_id,
                "candidates": [
                    {"strategy": labels[c], "score": round(float(s), 6)}
                    for c, s in zip(idx[0], scores[0], strict=True)
                ],
                "model_version": self.model.version,
                "source": "on_demand",
            }
        )


def wrap(app, ondemand: OnDemand):
    async def bench_app(scope, receive, send):
        if scope["type"] == "http":
            path = scope["path"]
            if path == "/bench/constant":
                await send({"type": "http.response.start", "status": 200, "headers": _HEADERS})
                await send({"type": "http.response.body", "body": CONSTANT})
                return
            if path.startswith("/bench/ondemand/"):
                body = ondemand.answer(path[16:]) or b'{"error":"unknown device"}'
                await send(
                    {
                        "type": "http.response.start",
                        "status": 200,
                        "headers": [
                            (b"content-type", b"application/json"),
                            (b"content-length", b"%d" % len(body)),
                        ],
                    }
                )
                await send({"type": "http.response.body", "body": body})
                return
        await app(scope, receive, send)

    return bench_app


def main() -> int:
    port = int(sys.argv[1])
    devices = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    settings = load(ApiSettings)
    built = build(settings)
    sys.setswitchinterval(0.001)
    built.materializer.start()
    try:
        serve(
            wrap(built.app, OnDemand(devices)),
            "127.0.0.1",
            port,
            settings.api.server,
            ServerLimits.from_options(settings.api),
        )
    finally:
        built.materializer.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
