"""Runs the ASGI app in this process, on granian (default) or uvicorn (`PRECAST_API__SERVER`).

Granian's HTTP/1 parsing and response writing are in Rust; uvicorn's happen in Python per
request and per header. Measured side by side with the real app on the 2-core machine (python
-m bench api, BENCHMARKS.md) granian serves the hot GET at a clearly higher rate. The server
runs embedded in this process's event loop (uvloop), so the materializer thread, the view and
the app share one process exactly as with uvicorn; SIGTERM and SIGINT stop it gracefully
(lifespan shutdown flushes pending precompute requests)."""

from __future__ import annotations

import asyncio
import errno
import signal
import socket
from typing import Literal

from precast.errors import ConfigError, PrecastError

Server = Literal["granian", "uvicorn"]


class ServeError(PrecastError):
    """The HTTP server could not start or stopped on its own."""


def serve(app, host: str, port: int, server: Server = "granian") -> None:
    """Serve until SIGTERM/SIGINT; raises a one-line `PrecastError` when it cannot."""
    check_bind(host, port)
    if server == "uvicorn":
        import uvicorn

        # After its graceful shutdown uvicorn re-raises the signal to the handler it found; the
        # default one would kill the process before the materializer stops. A no-op handler
        # lets it return, so both servers stop the same way (exit 0).
        previous = {sig: signal.signal(sig, _noop) for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
        return
    import uvloop

    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(_granian(app, host, port))


async def _granian(app, host: str, port: int) -> None:
    from granian.constants import Interfaces
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
        log_level=LogLevels.error,
        log_access=False,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, srv.stop)
    try:
        await srv.serve()
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)
    if srv.interrupt_children and not srv.interrupt_signal:
        raise ServeError("the HTTP server stopped on its own (see the log above)")


def _noop(*_: object) -> None:
    return


def check_bind(host: str, port: int) -> None:
    """A one-line error for a taken port or an unusable address, before anything starts."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve PRECAST_API__HOST {host!r}: {exc.strerror}") from None
    family, kind, proto, _, addr = infos[0]
    with socket.socket(family, kind, proto) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as exc:
            why = "already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise ConfigError(f"cannot listen on {host}:{port}: {why}") from None
