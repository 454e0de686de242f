"""A cap on concurrent connections for Hypercorn's trio worker.

Hypercorn 0.18 has no connection limit, so its per-connection server class
(``hypercorn.trio.run.TCPServer``, pinned by pyproject.toml) is replaced by a
subclass that takes a slot of a ``trio.CapacityLimiter`` without waiting. A
connection over the cap gets ``503`` with ``Retry-After: 1`` and is closed at
once, so a flood of connections cannot exhaust file descriptors or memory.
Together with Hypercorn's keep-alive timeout (idle connections and slowly
sent headers are closed after 5 s) and the request-body deadline in
web/http.py, slow clients cannot hold the service (slowloris). A connection
the client closed before sending anything keeps its slot until that 5 s timer
fires (Hypercorn notices it only then).
"""

from __future__ import annotations

import trio
from hypercorn.trio import run as hypercorn_run
from hypercorn.trio.tcp_server import TCPServer

_REFUSAL = (b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
            b"retry-after: 1\r\nconnection: close\r\ncontent-length: 77\r\n\r\n"
            b'{"error":{"code":"overloaded","message":"too many connections; retry shortly"}}')


class CappedTCPServer(TCPServer):
    limiter: trio.CapacityLimiter = trio.CapacityLimiter(1024)
    refused = 0

    async def run(self) -> None:
        try:
            self.limiter.acquire_on_behalf_of_nowait(self)
        except trio.WouldBlock:
            CappedTCPServer.refused += 1
            await self._refuse()
            return
        try:
            await super().run()
        finally:
            self.limiter.release_on_behalf_of(self)

    async def _refuse(self) -> None:
        """Answer 503, stop sending, drain what the client sent (closing with
        unread data would reset the connection before it reads the answer)."""
        with trio.move_on_after(1):
            try:
                await self.stream.send_all(_REFUSAL)
                await self.stream.send_eof()
                while await self.stream.receive_some(65536):
                    pass
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError,
                    AttributeError):
                pass
        with trio.move_on_after(1):
            await self.stream.aclose()


def install(max_connections: int) -> trio.CapacityLimiter:
    limiter = trio.CapacityLimiter(max_connections)
    CappedTCPServer.limiter = limiter
    hypercorn_run.TCPServer = CappedTCPServer  # type: ignore[attr-defined]  # private name
    return limiter
