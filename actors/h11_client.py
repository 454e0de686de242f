"""A lean HTTP/1.1 client on trio + h11: pinned addresses, a small keep-alive pool.

Theory of operation
-------------------
The caller (the webhook sender) has already decided which addresses may be
dialled; this module never resolves a name and never reads the environment
(no proxies). It speaks HTTP/1.1 only.

* An ``Origin`` is (vetted address, port, TLS host name or None for plain
  http). A connection belongs to one origin for its whole life, so a pooled
  connection can only ever reach the address it was vetted for.
* ``H11Client.request(addresses, port, tls_host, ...)`` takes an idle
  connection of one of those origins from the pool (first address first);
  failing that it calls ``dial`` (which tries the addresses in order) and, for
  https, wraps the socket in ``trio.SSLStream`` with SNI and certificate
  hostname verification for ``tls_host`` (never for the address), then
  handshakes. Then one exchange.
* An exchange drives h11's client state machine: Request, Data and
  EndOfMessage go out in one write; events are read until EndOfMessage,
  skipping 1xx answers and keeping at most ``read_limit`` body bytes. A body
  longer than that is cut: reading stops and the connection is closed.
  What an answer may cost is bounded too, as the server bounds a request's
  body (web/connection.py): at most ``MAX_INFORMATIONAL`` 1xx answers (more
  is a protocol error), and a body may come in at most ``CHUNK_FLOOR``
  pieces plus one per ``CHUNK_BYTES`` of it, and in at most twice its size
  plus ``WIRE_SLACK`` bytes read; past either it is cut as a long body is.
  Every ``CHECKPOINT_EVENTS`` events the exchange lets other tasks run. So
  a receiver sending endless ``100 Continue`` or a body in 1-byte chunks
  costs a few ms of the event loop, not seconds of it.
* A connection goes back to the pool only when both sides are DONE, nothing
  is left unread and ``start_next_cycle`` returned them to IDLE. So
  ``Connection: close``, an HTTP/1.0 answer without keep-alive, a body
  delimited by the end of the connection, a cut body, a protocol error, a
  peer that closed, or a cancelled exchange (the caller's deadline) all close
  it.
* The pool keeps idle connections LIFO per origin, at most
  ``max_idle_per_origin`` per origin and ``max_idle`` in all (more
  concurrent exchanges than that still run, on connections closed
  afterwards). An idle connection older than ``idle_s`` is closed (checked
  when taken, and by a sweep on pool activity at most once a second); one
  whose socket became readable while idle (the server closed it, or sent
  something unasked) is closed when taken instead of being used.
* There are no timeouts here: the caller puts one deadline around the whole
  request (connect, TLS, send, answer head and body).
"""

from __future__ import annotations

import select
import socket
import ssl
from collections import deque
from collections.abc import Awaitable, Callable, Sequence

import attrs
import h11
import trio

READ_CHUNK = 32 * 1024
MAX_INFORMATIONAL = 8
CHUNK_FLOOR = 1024
CHUNK_BYTES = 256
WIRE_SLACK = 64 * 1024
CHECKPOINT_EVENTS = 256
IDLE_S = 30.0
MAX_IDLE_PER_ORIGIN = 32
MAX_IDLE = 256

Dial = Callable[[Sequence[str], int], Awaitable[tuple[str, trio.SocketStream]]]
"""Connect to the first reachable of ``addresses`` on ``port``; returns (address, stream)."""


class IncompleteResponse(Exception):
    """The connection ended before a response head arrived.

    (A body cut short by the peer is h11's ``RemoteProtocolError``.)"""


@attrs.frozen
class Origin:
    address: str
    port: int
    tls_host: str | None
    """The name for SNI and certificate verification; None for plain http."""


@attrs.frozen
class Response:
    status: int
    headers: list[tuple[bytes, bytes]]
    """Lower-case names, as h11 gives them."""
    body: bytes
    """At most ``read_limit`` bytes."""
    complete: bool
    """False when the body was longer than ``read_limit`` and was cut."""
    reused: bool
    """Whether the exchange ran on a kept-alive connection."""

    def header(self, name: bytes) -> bytes | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


async def connect_tcp(address: str, port: int) -> trio.SocketStream:
    """Connect to an IP address (no name resolution happens here)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = trio.socket.socket(family, socket.SOCK_STREAM)
    try:
        await sock.connect((address, port))
    except BaseException:
        sock.close()
        raise
    return trio.SocketStream(sock)


async def dial_in_order(addresses: Sequence[str], port: int) -> tuple[str, trio.SocketStream]:
    """Try each address in turn; the last failure is raised if none connects."""
    error: Exception | None = None
    for address in addresses:
        try:
            return address, await connect_tcp(address, port)
        except OSError as e:
            error = e
    raise error or OSError("no address to connect to")


class Connection:
    """One HTTP/1.1 connection to one origin."""

    def __init__(self, origin: Origin, stream: trio.abc.Stream, sock: trio.socket.SocketType
                 ) -> None:
        self.origin = origin
        self._stream = stream
        self._sock = sock
        self._h11 = h11.Connection(h11.CLIENT)
        self._poller = select.poll()
        self._poller.register(sock.fileno(), select.POLLIN | select.POLLPRI)
        self.idle_since = 0.0
        self.exchanges = 0

    @classmethod
    async def open(cls, origin: Origin, tcp: trio.SocketStream,
                   ssl_context: ssl.SSLContext) -> Connection:
        """Wrap ``tcp`` (already connected to ``origin.address``); TLS handshake for https."""
        if origin.tls_host is None:
            return cls(origin, tcp, tcp.socket)
        tls = trio.SSLStream(tcp, ssl_context, server_hostname=origin.tls_host,
                             https_compatible=True)
        try:
            await tls.do_handshake()
        except BaseException:
            tcp.socket.close()
            raise
        return cls(origin, tls, tcp.socket)

    @property
    def reusable(self) -> bool:
        return (self._h11.our_state is h11.IDLE and self._h11.their_state is h11.IDLE
                and self._sock.fileno() != -1)

    def quiet(self) -> bool:
        """True when the idle socket has nothing to read (no close, no stray bytes)."""
        if self._sock.fileno() == -1:
            return False
        return not self._poller.poll(0)

    def close(self) -> None:
        """Close at once (no TLS close_notify: HTTP framing does not need it)."""
        self._sock.close()

    async def exchange(self, request: h11.Request, body: bytes, read_limit: int) -> Response:
        """Send one request and read its answer; see the module docstring."""
        conn = self._h11
        reused = self.exchanges > 0
        self.exchanges += 1
        out = conn.send(request) or b""
        if body:
            out += conn.send(h11.Data(data=body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        await self._stream.send_all(out)
        head: h11.Response | None = None
        parts: list[bytes] = []
        size = wire = events = informational = 0
        while True:
            event = conn.next_event()
            events += 1
            if not events % CHECKPOINT_EVENTS:
                await trio.lowlevel.checkpoint()
            if event is h11.NEED_DATA:
                data = await self._stream.receive_some(READ_CHUNK)
                if not data and head is None:
                    raise IncompleteResponse("the connection closed before an answer arrived")
                wire += len(data)
                if head is not None and wire > 2 * size + WIRE_SLACK:
                    return self._cut(head, parts, read_limit, reused, whole=False)
                conn.receive_data(bytes(data))
            elif type(event) is h11.Data:
                parts.append(event.data)
                size += len(event.data)
                if size >= read_limit:
                    return self._cut(head, parts, read_limit, reused)
                if len(parts) > CHUNK_FLOOR + size // CHUNK_BYTES:
                    return self._cut(head, parts, read_limit, reused, whole=False)
            elif type(event) is h11.Response:
                head = event
                # the body's, from here (h11 bounds the head): what of it
                # came in the head's read is read already, not counted yet
                wire = len(conn.trailing_data[0])
            elif type(event) is h11.EndOfMessage:
                assert head is not None  # h11 sends EndOfMessage only after a Response
                self._next_cycle()
                return Response(head.status_code, list(head.headers), b"".join(parts), True,
                                reused)
            elif type(event) is h11.ConnectionClosed:
                raise IncompleteResponse("the connection closed before an answer arrived")
            else:  # InformationalResponse (1xx): wait for the final answer, a few at most
                informational += 1
                if informational > MAX_INFORMATIONAL:
                    raise h11.RemoteProtocolError(
                        f"more than {MAX_INFORMATIONAL} informational (1xx) answers")

    def _next_cycle(self) -> None:
        """Ready for another exchange if both sides are DONE and nothing else came
        (no stray bytes, no end of stream: a body delimited by the close ends here)."""
        conn = self._h11
        if (conn.our_state is h11.DONE and conn.their_state is h11.DONE
                and conn.trailing_data == (b"", False)):
            conn.start_next_cycle()

    def _cut(self, head: h11.Response | None, parts: list[bytes], read_limit: int,
             reused: bool, *, whole: bool = True) -> Response:
        """The answer with its body cut at ``read_limit``, or where its framing
        passed the bounds (``whole=False``: reading stops, the connection
        closes)."""
        assert head is not None
        body = b"".join(parts)
        complete = (whole and len(body) == read_limit
                    and type(self._h11.next_event()) is h11.EndOfMessage)
        if complete:
            self._next_cycle()
        return Response(head.status_code, list(head.headers), body[:read_limit], complete,
                        reused)


class Pool:
    """Idle keep-alive connections by origin; see the module docstring."""

    def __init__(self, *, idle_s: float = IDLE_S, max_idle_per_origin: int = MAX_IDLE_PER_ORIGIN,
                 max_idle: int = MAX_IDLE) -> None:
        self._idle_s = idle_s
        self._per_origin = max_idle_per_origin
        self._max_idle = max_idle
        self._idle: dict[Origin, deque[Connection]] = {}
        self._count = 0
        self._next_sweep = 0.0

    @property
    def idle(self) -> int:
        return self._count

    def take(self, origin: Origin) -> Connection | None:
        stack = self._idle.get(origin)
        if not stack:
            return None
        now = trio.current_time()
        while stack:
            conn = stack.pop()
            self._count -= 1
            if now - conn.idle_since < self._idle_s and conn.quiet():
                return conn
            conn.close()
        return None

    def give(self, conn: Connection) -> None:
        """Keep ``conn`` for reuse if it is reusable and there is room, else close it."""
        now = trio.current_time()
        if now >= self._next_sweep:
            self._sweep(now)
        stack = self._idle.get(conn.origin)
        if stack is None:
            stack = self._idle[conn.origin] = deque()
        if not conn.reusable or len(stack) >= self._per_origin or self._count >= self._max_idle:
            conn.close()
            return
        conn.idle_since = now
        stack.append(conn)
        self._count += 1

    def _sweep(self, now: float) -> None:
        self._next_sweep = now + 1.0
        for origin in list(self._idle):
            stack = self._idle[origin]
            while stack and now - stack[0].idle_since >= self._idle_s:
                stack.popleft().close()
                self._count -= 1
            if not stack:
                del self._idle[origin]

    def close(self) -> None:
        for stack in self._idle.values():
            for conn in stack:
                conn.close()
        self._idle.clear()
        self._count = 0


class H11Client:
    """Requests to vetted addresses over pooled HTTP/1.1 connections."""

    def __init__(self, ssl_context: ssl.SSLContext, *, dial: Dial = dial_in_order,
                 pool: Pool | None = None) -> None:
        self._ssl = ssl_context
        self._dial = dial
        self.pool = pool if pool is not None else Pool()

    async def request(self, addresses: Sequence[str], port: int, tls_host: str | None,
                      request: h11.Request, body: bytes, read_limit: int) -> Response:
        conn = None
        for address in addresses:
            conn = self.pool.take(Origin(address, port, tls_host))
            if conn is not None:
                break
        if conn is None:
            address, tcp = await self._dial(addresses, port)
            conn = await Connection.open(Origin(address, port, tls_host), tcp, self._ssl)
        try:
            response = await conn.exchange(request, body, read_limit)
        except BaseException:
            conn.close()
            raise
        self.pool.give(conn)
        return response

    def close(self) -> None:
        self.pool.close()
