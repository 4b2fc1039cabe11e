"""Redis clients built from settings. The only place `redis` clients are constructed."""

from __future__ import annotations

import redis
import redis.asyncio

from precast.errors import Unreachable
from precast.settings import RedisSettings


def connect(settings: RedisSettings) -> redis.Redis:
    return redis.Redis.from_url(
        settings.url,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=settings.connect_timeout_s,
        health_check_interval=30,
    )


def connect_async(settings: RedisSettings) -> redis.asyncio.Redis:
    return redis.asyncio.Redis.from_url(
        settings.url,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=settings.connect_timeout_s,
        health_check_interval=30,
    )


def wait_reachable(settings: RedisSettings) -> None:
    """Raise `Unreachable` unless Redis answers PING within the connect timeout."""
    client = redis.Redis.from_url(
        settings.url,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=settings.connect_timeout_s,
    )
    try:
        client.ping()
    except redis.RedisError as exc:
        raise Unreachable(
            "Redis",
            _redacted(settings.url),
            f"no PING answer within {settings.connect_timeout_s:g}s: {type(exc).__name__}",
        ) from None
    finally:
        client.close()


def _redacted(url: str) -> str:
    """The URL without its password, for error lines."""
    if "@" not in url:
        return url
    scheme, rest = url.split("://", 1) if "://" in url else ("", url)
    return f"{scheme}://***@{rest.rsplit('@', 1)[1]}"
