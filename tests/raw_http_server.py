"""Test support: local HTTP/1.1 servers whose answers are raw bytes.

Requests are parsed with h11 (server role) and recorded; answers are written
as raw bytes, so a test controls the framing exactly (``Connection: close``,
chunked, HTTP/1.0, a body cut short, a body that never ends). Each accepted
connection is counted with the local address it arrived on; plain or TLS
(a trustme certificate), on one or more loopback addresses sharing a port.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import h11
import trio

NO_CONTENT = b"HTTP/1.1 204 No Content\r\n\r\n"


@attrs.frozen
class Seen:
    request: h11.Request
    body: bytes

    @property
    def headers(self) -> list[tuple[str, str]]:
        return [(k.decode(), v.decode()) for k, v in self.request.headers]


class Peer:
    """One accepted connection."""

    def __init__(self, stream: trio.abc.Stream, server: Server) -> None:
        self.stream = stream
        self.server = server
        self._h11 = h11.Connection(h11.SERVER)

    async def request(self) -> Seen | None:
        """The next request (recorded on the server); None once the client closed."""
        if self._h11.their_state is h11.DONE:
            data, closed = self._h11.trailing_data
            self._h11 = h11.Connection(h11.SERVER)
            if data:
                self._h11.receive_data(data)
            if closed:
                self._h11.receive_data(b"")
        head: h11.Request | None = None
        body = b""
        while True:
            event = self._h11.next_event()
            if event is h11.NEED_DATA:
                self._h11.receive_data(bytes(await self.stream.receive_some(65536)))
            elif isinstance(event, h11.Request):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                seen = Seen(head, body)
                self.server.seen.append(seen)
                return seen
            else:
                return None

    async def send(self, raw: bytes) -> None:
        await self.stream.send_all(raw)


Handler = Callable[[Peer], Awaitable[None]]


def answering(raw: bytes) -> Handler:
    """Answer every request of a connection with ``raw`` (keep-alive if it says so)."""
    async def handle(peer: Peer) -> None:
        while await peer.request() is not None:
            await peer.send(raw)

    return handle


def answering_once(raw: bytes) -> Handler:
    """Answer one request with ``raw``, then close the connection."""
    async def handle(peer: Peer) -> None:
        if await peer.request() is not None:
            await peer.send(raw)

    return handle


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.port = 0
        self.connections = 0
        self.local_addresses: list[str] = []
        self.seen: list[Seen] = []
        self.sni: list[str | None] = []
        self.finished = 0
        """Connections whose handler has returned (or failed)."""

    async def serve_connection(self, stream: trio.abc.Stream) -> None:
        self.connections += 1
        transport: Any = getattr(stream, "transport_stream", stream)
        self.local_addresses.append(transport.socket.getsockname()[0])
        try:
            await self.handler(Peer(stream, self))
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError):
            pass
        finally:
            self.finished += 1
            await trio.aclose_forcefully(stream)


@asynccontextmanager
async def serving(handler: Handler, *, tls: ssl.SSLContext | None = None,
                  hosts: Sequence[str] = ("127.0.0.1",)) -> AsyncIterator[Server]:
    """Serve ``handler`` on ``hosts`` (one port for all) until the block ends."""
    server = Server(handler)
    if tls is not None:
        tls.sni_callback = lambda obj, name, ctx: server.sni.append(name)
    listeners: list[Any] = []
    for host in hosts:
        found = await trio.open_tcp_listeners(server.port, host=host)
        server.port = found[0].socket.getsockname()[1]
        listeners += found
    if tls is not None:
        listeners = [trio.SSLListener(lis, tls, https_compatible=True) for lis in listeners]
    async with trio.open_nursery() as n:
        n.start_soon(trio.serve_listeners, server.serve_connection, listeners)
        yield server
        n.cancel_scope.cancel()
