"""Runs an ASGI app in this process, on granian (default) or uvicorn (`PRECAST_API__SERVER`);
the auditor's API runs on uvicorn with the same limits (`uvicorn_server`).

Granian's HTTP/1 parsing and response writing are in Rust; uvicorn's happen in Python per
request and per header. Measured side by side with the real app on the 2-core machine (python
-m bench api, BENCHMARKS.md) granian serves the hot GET at a clearly higher rate. The server
runs embedded in this process's event loop (uvloop), so the materializer thread, the view and
the app share one process exactly as with uvicorn; SIGTERM and SIGINT stop it gracefully
(lifespan shutdown flushes pending precompute requests).

Capacity is configured on purpose (`ServerLimits`, from PRECAST_API__* or PRECAST_AUDIT__*): both servers get the
same backlog, connection ceiling, keep-alive and header timeouts, and the process raises its
soft open-file limit to the hard one so that ten thousand sockets fit. Granian's own defaults
(a backlog of 128 and backpressure derived from it) let 128 idle sockets stop a replica."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource
import signal
import socket
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from precast.errors import ConfigError, PrecastError
from precast.http.reaper import Reaper

log = logging.getLogger("precast.api")

Server = Literal["granian", "uvicorn"]


class ServeError(PrecastError):
    """The HTTP server could not start or stopped on its own."""


class HasLimits(Protocol):
    """A settings block with the four connection limits (ApiOptions, AuditSettings)."""

    backlog: int
    max_connections: int
    keepalive_s: float
    header_timeout_s: float


@dataclass(frozen=True)
class ServerLimits:
    backlog: int = 4_096
    max_connections: int = 16_384
    keepalive_s: float = 5.0
    header_timeout_s: float = 15.0
    setting_prefix: str = "PRECAST_API"  # names the settings in one-line errors

    @classmethod
    def from_options(cls, opts: HasLimits, setting_prefix: str = "PRECAST_API") -> ServerLimits:
        return cls(
            opts.backlog,
            opts.max_connections,
            opts.keepalive_s,
            opts.header_timeout_s,
            setting_prefix,
        )


def uvicorn_server(app: Any, host: str, port: int, limits: ServerLimits) -> Any:
    """A `uvicorn.Server` with these limits, for a caller that runs and stops it itself."""
    import uvicorn

    from precast.http.uvicorn_protocol import guarded_protocol

    return uvicorn.Server(
        uvicorn.Config(
            app,
            host=host,
            port=port,
            log_level="warning",
            access_log=False,
            http=guarded_protocol(limits.header_timeout_s),
            backlog=limits.backlog,
            limit_concurrency=limits.max_connections,
            # uvicorn takes whole seconds; never round a short timeout down to "none"
            timeout_keep_alive=max(1, round(limits.keepalive_s)),
        )
    )


def serve(
    app: Any,
    host: str,
    port: int,
    server: Server = "granian",
    limits: ServerLimits | None = None,
) -> None:
    """Serve until SIGTERM/SIGINT; raises a one-line `PrecastError` when it cannot."""
    limits = limits or ServerLimits()
    check_bind(host, port, limits.setting_prefix)
    raise_open_files(limits.max_connections, limits.setting_prefix)
    if server == "uvicorn":
        # After its graceful shutdown uvicorn re-raises the signal to the handler it found; the
        # default one would kill the process before the materializer stops. A no-op handler
        # lets it return, so both servers stop the same way (exit 0).
        previous = {sig: signal.signal(sig, _noop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            uvicorn_server(app, host, port, limits).run()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_granian(app, host, port, limits))


def raise_open_files(wanted: int, setting_prefix: str = "PRECAST_API") -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (each connection is a descriptor); say
    so in one line when the hard limit is below what `wanted` connections need."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, wanted + 1_024)
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit from %d to %d: %s", soft, target, exc)
    if soft < wanted + 256:
        log.warning(
            "open-file limit %d is below %s__MAX_CONNECTIONS=%d (+256 for the process); "
            "raise the hard limit (ulimit -Hn, LimitNOFILE=, docker --ulimit nofile=)",
            soft,
            setting_prefix,
            wanted,
        )
    return soft


async def _granian(app: Any, host: str, port: int, limits: ServerLimits) -> None:
    from granian.constants import Interfaces
    from granian.http import HTTP1Settings
    from granian.log import LogLevels
    from granian.server.embed import Server as Embedded

    # Errors only: granian warns "Embedded server is experimental!" on every start, and the
    # embedded mode is what keeps one process (see the module docstring).
    srv = Embedded(
        app,
        address=host,
        port=port,
        interface=Interfaces.ASGI,
        websockets=False,
        runtime_threads=1,
        backlog=limits.backlog,
        # granian counts connections against backpressure, idle ones included
        backpressure=limits.max_connections,
        http1_settings=HTTP1Settings(
            header_read_timeout=int(limits.header_timeout_s * 1000), keep_alive=True
        ),
        log_level=LogLevels.error,
        log_access=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, srv.stop)
    reaper = Reaper(port, limits.header_timeout_s).start()
    try:
        await srv.serve()
    finally:
        reaper.stop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    if srv.interrupt_children and not srv.interrupt_signal:
        raise ServeError("the HTTP server stopped on its own (see the log above)")


def _noop(*_: object) -> None:
    return


def check_bind(host: str, port: int, setting_prefix: str = "PRECAST_API") -> None:
    """A one-line error for a taken port or an unusable address, before anything starts."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(
            f"cannot resolve {setting_prefix}__HOST {host!r}: {exc.strerror}"
        ) from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            why = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise ConfigError(f"cannot listen on {host}:{port}: {why}") from None
