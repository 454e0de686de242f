"""The HTTP/1.1 server: trio and h11, serving the ASGI front.

Why not Hypercorn: on one core Hypercorn's trio worker spends about 300 µs on
each request before the application runs (tasks, locks, channels and cancel
scopes per request); a bare trio + h11 loop spends about 70 µs. The redirect
and SDK paths are cheap enough that the server layer was most of their cost
(bench/README.md has the profile and the before/after ratios). So this module
is the server: it listens, admits connections and sheds load; one task per
connection (web/connection.py) reads its requests and calls the ASGI
application once per request, in that task, through a minimal ASGI bridge
(``http`` scopes only; the front answers everything, the Quart-Trio
dashboard included).

Theory of operation:

1. A connection over ``max_connections`` gets ``503`` with ``Retry-After``
   and is closed (after draining what the client sent, so it reads the answer).
2. TLS, when configured, is handshaken within the keep-alive timeout.
3. Each connection is then served by a ``web.connection.Connection`` (its
   docstring has the rest: heads, bodies, keep-alive, framing).

Overload: a watchdog task sleeps ``LAG_PROBE_S`` at a time and measures how
late it wakes up. That delay is how long every runnable task waits for its
turn, the queue in front of the application (a request passes through it
several times). While its moving average exceeds ``max_lag_s`` new requests
are answered at once with ``503 overloaded`` and ``Retry-After: 1`` (a few
microseconds each, the connection kept), so the work admitted shrinks until the delay is back
under the limit, instead of every request queueing for seconds.

Shutdown: listeners close at once, idle connections close, busy ones finish
their current response (marked ``connection: close``) within the grace
period, after which they are cancelled.
"""

from __future__ import annotations

import errno
import logging
import socket
import ssl
import time
from email.utils import formatdate
from typing import Any

import attrs
import trio

from web.connection import CLOSED, AsgiApp, Connection, refusal, refuse

log = logging.getLogger("svc.server")
_GONE_BEFORE_ACCEPT = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM}


class ListenFailed(OSError):
    """The address to serve on could not be bound (in use, not allowed).
    ``in_use``: the port is taken (another svc?), rather than the host
    unknown or not this machine's."""

    in_use: bool = False

    @classmethod
    def of(cls, host: str, port: int, error: OSError) -> ListenFailed:
        failed = cls(f"cannot listen on {host}:{port}: {error.strerror or error}")
        failed.in_use = error.errno in (errno.EADDRINUSE, errno.EACCES)
        return failed


@attrs.frozen
class ServerSettings:
    host: str
    port: int
    max_connections: int = 1024
    keep_alive_s: float = 5.0
    send_timeout_s: float = 60.0
    max_header_bytes: int = 16 * 1024
    max_lag_s: float = 0.0
    shutdown_grace_s: float = 10.0
    certfile: str | None = None
    keyfile: str | None = None


_OVER_CAPACITY = refusal(503, "overloaded", "too many connections; retry shortly",
                         retry_after=True)
LAG_PROBE_S = 0.005
LAG_WEIGHT = 0.25
LAG_REPORT_S = 10.0


class _Date:
    """The ``date`` header, formatted at most once a second."""

    def __init__(self) -> None:
        self.second = -1
        self.value = b""

    def header(self) -> tuple[bytes, bytes]:
        now = int(time.time())
        if now != self.second:
            self.second = now
            self.value = formatdate(now, usegmt=True).encode()
        return (b"date", self.value)


class HttpServer:
    def __init__(self, app: AsgiApp, settings: ServerSettings) -> None:
        self.app = app
        self.settings = settings
        self.limiter = trio.CapacityLimiter(settings.max_connections)
        self.refused = 0
        self.shed = 0
        self.stalled = 0  # connections ended because the client took nothing for too long
        self.shedding = False
        self.lag_s = 0.0
        self.closing = False
        self.connections: set[Connection] = set()
        self.date = _Date()
        self.ssl_context = tls_context(settings) if settings.certfile else None
        self.scheme = "https" if self.ssl_context else "http"

    async def serve(self, stop: trio.Event, *,
                    task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED) -> None:
        s = self.settings
        try:
            listeners = await trio.open_tcp_listeners(s.port, host=s.host or None,
                                                      backlog=1024)
        except OSError as e:
            raise ListenFailed.of(s.host or "*", s.port, e) from e
        binds = [_bind_name(self.scheme, ln.socket.getsockname()) for ln in listeners]
        async with trio.open_nursery() as connections:
            async with trio.open_nursery() as acceptors:
                for listener in listeners:
                    acceptors.start_soon(self._accept, listener, connections)
                if s.max_lag_s > 0:
                    acceptors.start_soon(self._watch_lag)
                acceptors.start_soon(self._watch_sends)
                task_status.started(binds)
                await stop.wait()
                acceptors.cancel_scope.cancel()
            self._begin_shutdown()
            connections.cancel_scope.deadline = trio.current_time() + s.shutdown_grace_s

    async def _accept(self, listener: trio.SocketListener, nursery: trio.Nursery) -> None:
        """Accept every connection waiting, then wait for the socket to be
        readable again. (``listener.accept()`` takes one connection per turn
        of the event loop: under load, with hundreds of tasks runnable, a
        burst of new connections was admitted over seconds.)"""
        async with listener:
            sock = listener.socket
            while True:
                await trio.lowlevel.wait_readable(sock)
                while True:
                    try:
                        raw, _ = sock._sock.accept()  # type: ignore[attr-defined]
                    except BlockingIOError:
                        break
                    except OSError as e:
                        if e.errno in _GONE_BEFORE_ACCEPT:
                            continue  # the client gave up while queued: next one
                        log.error("accept failed: %s", e)  # out of descriptors, memory
                        await trio.sleep(0.1)
                        break
                    raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    stream = trio.SocketStream(trio.socket.from_stdlib_socket(raw))
                    nursery.start_soon(self._connection, stream)

    async def _watch_lag(self) -> None:
        reported_at, reported = trio.current_time(), 0
        while True:
            before = trio.current_time()
            await trio.sleep(LAG_PROBE_S)
            now = trio.current_time()
            self.observe_lag(now - before - LAG_PROBE_S)
            if now - reported_at >= LAG_REPORT_S:
                if self.shed > reported:
                    log.warning("overloaded: %d requests answered 503 in the last %.0f s "
                                "(event-loop delay over %.0f ms)", self.shed - reported,
                                now - reported_at, self.settings.max_lag_s * 1000)
                reported_at, reported = now, self.shed

    async def _watch_sends(self) -> None:
        """End every connection whose current write has taken ``send_timeout_s``
        or more (the client stopped reading), checking four times a timeout:
        a stalled write ends within 1.25 timeouts."""
        limit = self.settings.send_timeout_s
        while True:
            await trio.sleep(limit / 4)
            self.end_stalled(trio.current_time())

    def end_stalled(self, now: float) -> None:
        limit = self.settings.send_timeout_s
        for conn in list(self.connections):
            since = conn.sending_since
            if since is not None and now - since >= limit and not conn.stalled:
                self.stalled += 1
                conn.stall()

    def observe_lag(self, sample_s: float) -> None:
        """Fold one probe's lateness into the smoothed delay (a moving average
        over about ``1 / LAG_WEIGHT`` probes, so one pause of the process does
        not refuse anyone) and decide whether new requests are refused."""
        self.lag_s += (max(0.0, sample_s) - self.lag_s) * LAG_WEIGHT
        self.shedding = self.lag_s > self.settings.max_lag_s

    def _begin_shutdown(self) -> None:
        self.closing = True
        for conn in list(self.connections):
            conn.shutdown()

    async def _connection(self, stream: trio.SocketStream) -> None:
        try:
            self.limiter.acquire_on_behalf_of_nowait(stream)
        except trio.WouldBlock:
            self.refused += 1
            await refuse(stream, _OVER_CAPACITY)
            return
        try:
            await self._serve_stream(stream)
        finally:
            self.limiter.release_on_behalf_of(stream)

    async def _serve_stream(self, tcp: trio.SocketStream) -> None:
        try:
            client = _address(tcp.socket.getpeername())
            server = _address(tcp.socket.getsockname())
        except OSError:
            await tcp.aclose()
            return
        stream: trio.abc.Stream = tcp
        if self.ssl_context is not None:
            tls = trio.SSLStream(tcp, self.ssl_context, server_side=True,
                                 https_compatible=True)
            shaken = False
            with trio.move_on_after(self.settings.keep_alive_s):
                try:
                    await tls.do_handshake()
                    shaken = True
                except (*CLOSED, ssl.SSLError):
                    pass
            if not shaken:
                await trio.aclose_forcefully(tcp)
                return
            stream = tls
        await self.serve_stream(stream, client, server)

    async def serve_stream(self, stream: trio.abc.Stream, client: tuple[str, int] | None,
                           server: tuple[str, int] | None) -> None:
        """Serve one connection's requests until it closes (any byte stream:
        the tests drive it over trio's in-memory streams with a fake clock)."""
        conn = Connection(self, stream, client, server)
        self.connections.add(conn)
        try:
            with conn.scope:
                await conn.run()
        finally:
            self.connections.discard(conn)
            await trio.aclose_forcefully(stream)
        if conn.stalled:
            log.info("connection closed: the client took nothing of an answer for %g s",
                     self.settings.send_timeout_s)



def _address(sockaddr: Any) -> tuple[str, int] | None:
    if isinstance(sockaddr, tuple) and len(sockaddr) >= 2:
        return (str(sockaddr[0]), int(sockaddr[1]))
    return None


def _bind_name(scheme: str, sockaddr: Any) -> str:
    host, port = sockaddr[0], sockaddr[1]
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def tls_context(settings: ServerSettings) -> ssl.SSLContext:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    assert settings.certfile is not None
    ctx.load_cert_chain(settings.certfile, settings.keyfile)
    ctx.set_alpn_protocols(["http/1.1"])
    return ctx
