"""Many single-key script calls on a Redis Cluster, pipelined per master.

A cluster refuses a script whose keys live in different slots (CROSSSLOT), and redis-py's
cluster pipeline refuses EVALSHA altogether. So the store's batched compare-and-set becomes one
call per key, queued on a plain pipeline to the master that owns the key: one round trip per
master and batch, as on a single Redis. The scripts are idempotent (newest-wins, delete-if-same),
so a key whose call failed while a slot moved or a master failed over is simply sent again once
the client has re-read the topology.
"""

from __future__ import annotations

import functools
import time
from collections import defaultdict
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, ParamSpec, TypeVar

import redis
from redis.commands.core import Script
from redis.exceptions import RedisClusterException

AnyRedis = redis.Redis | redis.RedisCluster
P = ParamSpec("P")
T = TypeVar("T")


def cluster_errors_as_redis_errors(fn: Callable[P, T]) -> Callable[P, T]:
    """redis-py raises `RedisClusterException` (not a `RedisError`) when no node answers for the
    slot map; callers handle `RedisError` (fallback answers, retry), so give them one."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return fn(*args, **kwargs)
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"Redis Cluster: {exc}") from exc

    return wrapper


def async_cluster_errors_as_redis_errors(
    fn: Callable[P, Coroutine[Any, Any, T]],
) -> Callable[P, Coroutine[Any, Any, T]]:
    @functools.wraps(fn)
    async def wrapper(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(*args, **kwargs)
        except RedisClusterException as exc:
            raise redis.ConnectionError(f"Redis Cluster: {exc}") from exc

    return wrapper


# Longest a batch keeps retrying keys whose master is unreachable or moved: covers a failover
# (cluster-node-timeout + election, ~3 s with the local stack's 2 s timeout) with room to spare.
RETRY_FOR_S = 15.0
RETRY_PAUSE_S = 0.25


def per_key_script(
    client: redis.RedisCluster,
    script: Script,
    keys: Sequence[str | bytes],
    args: Sequence[Any],
    shared: Sequence[Any],
) -> list[int]:
    """`script(keys=[keys[i]], args=[*shared, args[i]])` for every i; the results in order."""
    out: list[int] = [0] * len(keys)
    pending = list(range(len(keys)))
    give_up = time.monotonic() + RETRY_FOR_S
    while True:
        failed, error = _run_once(client, script, keys, args, shared, pending, out)
        if not failed:
            return out
        if time.monotonic() > give_up:
            assert error is not None
            raise error
        time.sleep(RETRY_PAUSE_S)
        try:
            client.nodes_manager.initialize()  # who owns which slot now
        except (redis.RedisError, RedisClusterException) as exc:
            error = exc  # no node answers yet: keep the old map, try again
        pending = failed


def _run_once(
    client: redis.RedisCluster,
    script: Script,
    keys: Sequence[str | bytes],
    args: Sequence[Any],
    shared: Sequence[Any],
    pending: list[int],
    out: list[int],
) -> tuple[list[int], Exception | None]:
    by_node: dict[str, list[int]] = defaultdict(list)
    for i in pending:
        by_node[client.get_node_from_key(keys[i]).name].append(i)  # type: ignore[no-untyped-call]
    failed: list[int] = []
    error: Exception | None = None
    for name, idx in by_node.items():
        node = client.get_node(node_name=name)  # type: ignore[no-untyped-call]
        conn = node.redis_connection if node is not None else None
        if conn is None:
            failed += idx
            continue
        pipe = conn.pipeline(transaction=False)
        for i in idx:
            script(keys=[keys[i]], args=[*shared, args[i]], client=pipe)
        try:
            results = pipe.execute(raise_on_error=False)
        except (redis.ConnectionError, redis.TimeoutError, redis.ResponseError) as exc:
            # The master died or is not a master any more (a ResponseError is also what
            # loading the script on a node that went read-only returns).
            failed += idx
            error = exc
            continue
        for i, r in zip(idx, results, strict=True):
            if isinstance(r, Exception):  # MOVED, CLUSTERDOWN, TRYAGAIN: send it again
                failed.append(i)
                error = r
            else:  # a script over one key answers a one-item table or a count
                out[i] = int(r[0] if isinstance(r, list) else r)
    if failed and error is None:
        error = redis.ConnectionError("no connection to the master of some keys")
    return failed, error
