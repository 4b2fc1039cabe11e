"""The read API (Starlette)."""

from __future__ import annotations

import re
import time

import orjson
from prometheus_client import CONTENT_TYPE_LATEST, Counter, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from consumer_api.store import MemoryStore
from schemas.events import DEVICE_ID_PATTERN
from schemas.fleet import DEFAULT_STRATEGY

READS = Counter("precast_api_reads_total", "prediction reads", ["source"])
_DEVICE_ID = re.compile(DEVICE_ID_PATTERN)


def create_app(store: MemoryStore, is_ready) -> Starlette:
    fallback_candidates = [{"strategy": DEFAULT_STRATEGY, "score": 1.0}]

    async def get_prediction(request: Request) -> Response:
        device_id = request.path_params["device_id"]
        if not _DEVICE_ID.match(device_id):
            return JSONResponse({"error": "invalid device_id", "detail": f"must match {DEVICE_ID_PATTERN}"}, 400)
        entry = store.get(device_id)
        now = int(time.time() * 1000)
        if entry is None:
            READS.labels("fallback").inc()
            body = orjson.dumps({"device_id": device_id, "candidates": fallback_candidates, "model_version": None,
                                 "computed_at_ms": None, "source": "fallback"})
            return Response(body, 200, media_type="application/json")
        READS.labels("precomputed").inc()
        # Splice serving fields onto the stored bytes instead of re-encoding the document.
        body = entry.body[:-1] + b',"source":"precomputed","age_ms":' + str(now - entry.computed_at_ms).encode() + b"}"
        return Response(body, 200, media_type="application/json", headers={"X-Model-Version": entry.model_version})

    async def healthz(_: Request) -> Response:
        return JSONResponse({"status": "ok"})

    async def readyz(_: Request) -> Response:
        ok = is_ready()
        return JSONResponse({"status": "ok" if ok else "unavailable", "devices": len(store)}, 200 if ok else 503)

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)

    return Starlette(routes=[
        Route("/v1/devices/{device_id}/prediction", get_prediction),
        Route("/healthz", healthz),
        Route("/readyz", readyz),
        Route("/metrics", metrics),
    ])
