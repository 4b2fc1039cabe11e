"""The one guard of the board's data endpoints (consumer_api.board.routes): the `board` scope,
the query parameters an endpoint knows, and for a device's endpoint a valid device ID and
something the board has for that device; each refusal answered as every /v1/* path answers it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from starlette.requests import Request
from starlette.responses import Response

from consumer_api.board.fleet_index import FleetIndex
from consumer_api.edge.error_bodies import auth_error, error
from consumer_api.edge.requests_in import unknown_params
from consumer_api.read.service import Service
from schemas.events import DEVICE_ID_PATTERN, is_device_id


class Guarded(Protocol):
    """What the guard needs of the endpoints it guards."""

    svc: Service
    index: FleetIndex


@dataclass(frozen=True)
class Lookup:
    """What a device's endpoint answers about: found on the fleet index, or 404 `code`."""

    find: Callable[[FleetIndex, str], Any]
    code: str
    detail: str  # `{device}`: the device ID's repr


SEEN = Lookup(FleetIndex.detail, "unknown_device", "the board has seen nothing of device {device}")
ANSWERED = Lookup(FleetIndex.latest, "no_answer", "no stored answer for device {device}")

Allowed = tuple[str, ...] | Callable[[Any], tuple[str, ...]]  # fixed, or read off the endpoints


def guarded(allowed: Allowed = (), device: Lookup | None = None) -> Callable[..., Any]:
    """The one guard of the board's data endpoints, in this order: the `board` scope (401/403),
    no unknown query parameter (400), and for a device's endpoint (`device`) its ID (400
    invalid_device_id) and something the board has for it (404); the handler then gets the
    device ID and what `device.find` found."""

    def wrap(handler: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        @functools.wraps(handler)
        async def endpoint(ep: Guarded, request: Request) -> Response:
            header = request.headers.get("authorization", "").encode() or None
            if status := ep.svc.check(header, "board"):
                return auth_error(status, "board")
            names = allowed(ep) if callable(allowed) else allowed
            if (bad := unknown_params(request, names)) is not None:
                return bad
            if device is None:
                return await handler(ep, request)
            d = request.path_params["device_id"]
            if not is_device_id(d):
                return error(
                    400,
                    "invalid_device_id",
                    f"device_id must match {DEVICE_ID_PATTERN}",
                    "device_id",
                )
            found = device.find(ep.index, d)
            if found is None:
                return error(404, device.code, device.detail.format(device=repr(d)), "device_id")
            return await handler(ep, request, d, found)

        return endpoint

    return wrap
