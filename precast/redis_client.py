"""Redis clients built from settings. The only place `redis` clients are constructed.

`RedisSettings.cluster` chooses redis-py's cluster client: the URL names one node, the client
reads the slot map from it and follows MOVED/ASK redirections and failovers itself.
"""

from __future__ import annotations

import redis
import redis.asyncio
from redis.exceptions import RedisClusterException

from precast.errors import Unreachable
from precast.settings import RedisSettings


def connect(settings: RedisSettings) -> redis.Redis | redis.RedisCluster:
    if settings.cluster:
        try:  # reads the slot map now
            return redis.RedisCluster.from_url(
                settings.url,
                socket_connect_timeout=settings.connect_timeout_s,
                socket_timeout=settings.connect_timeout_s,
            )
        except (redis.RedisError, RedisClusterException) as exc:
            raise Unreachable(
                "Redis Cluster",
                _redacted(settings.url),
                f"no slot map within {settings.connect_timeout_s:g}s: {type(exc).__name__}",
            ) from None
    return redis.Redis.from_url(
        settings.url,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=settings.connect_timeout_s,
        health_check_interval=30,
    )


def connect_async(settings: RedisSettings) -> redis.asyncio.Redis | redis.asyncio.RedisCluster:
    if settings.cluster:
        return redis.asyncio.RedisCluster.from_url(
            settings.url,
            socket_connect_timeout=settings.connect_timeout_s,
            socket_timeout=settings.connect_timeout_s,
        )
    return redis.asyncio.Redis.from_url(
        settings.url,
        socket_connect_timeout=settings.connect_timeout_s,
        socket_timeout=settings.connect_timeout_s,
        health_check_interval=30,
    )


def wait_reachable(settings: RedisSettings) -> None:
    """Raise `Unreachable` unless Redis (every master, for a cluster) answers PING within the
    connect timeout."""
    client = connect(settings)
    try:
        client.ping()
    except redis.RedisError as exc:
        raise Unreachable(
            "Redis Cluster" if settings.cluster else "Redis",
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


def close(client: redis.Redis | redis.RedisCluster) -> None:
    """Close a client and its sockets. redis-py's `RedisCluster.close()` (8.1) closes each
    node's client, but a node's client was handed its connection pool and does not disconnect
    it, so the sockets stay open; each node's pool is disconnected here."""
    client.close()
    if isinstance(client, redis.RedisCluster):
        # Every node the client learned of, not only the startup nodes: a command routed to any
        # node (CLUSTER NODES goes to a random one) opens a socket there.
        nodes = {
            **client.nodes_manager.startup_nodes,
            **client.nodes_manager.nodes_cache,
        }
        for node in nodes.values():
            if node.redis_connection is not None:
                node.redis_connection.close()
                node.redis_connection.connection_pool.disconnect()
