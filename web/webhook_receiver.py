"""``svc webhooks listen``: a sample receiver that verifies each delivery.

A tiny trio + h11 HTTP/1.1 server. Each POST is verified with
``svc_engine.signing.verify`` exactly as SPEC.md (Authentication, rule 5)
says a receiver should: the raw body is verified before it is parsed, the
timestamp must be within 5 minutes of this machine's clock, any ``v1`` entry
may match, compared in constant time. A verified delivery is printed as one
JSON line (``webhookId``, ``timestamp``, ``event``) and answered 200; a bad
signature or timestamp is answered 401 with the reason (and logged to stderr).
Anything but POST is 405; a body over 1 MiB is 413.

``serve_connection`` is the HTTP part alone (keep-alive, capped bodies), with
the request handling passed in; the tests' recording receiver reuses it.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable
from typing import TextIO

import attrs
import h11
import trio

from svc_engine import signing
from web.server import ListenFailed

MAX_BODY = 1 << 20
READ_CHUNK = 65_536

Reply = tuple[int, list[tuple[str, str]], bytes]


@attrs.frozen
class Received:
    """One request as it arrived: lower-case header names, the raw body."""

    method: str
    target: str
    headers: tuple[tuple[str, str], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        for key, value in self.headers:
            if key == name:
                return value
        return None


Handler = Callable[[Received], Awaitable[Reply]]


class _TooLarge(Exception):
    pass


async def serve_connection(stream: trio.abc.Stream, handler: Handler) -> None:
    """Serve HTTP/1.1 requests on one connection until it closes."""
    conn = h11.Connection(h11.SERVER)
    try:
        while True:
            try:
                request = await _next_request(stream, conn)
            except _TooLarge:
                await _reply(stream, conn, _json(413, {"error": "body over 1 MiB"}))
                return
            if request is None:
                return
            await _reply(stream, conn, await handler(request))
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (h11.ProtocolError, trio.BrokenResourceError, trio.ClosedResourceError):
        return
    finally:
        with trio.CancelScope(shield=True), contextlib.suppress(trio.BrokenResourceError,
                                                                trio.ClosedResourceError):
            await stream.aclose()


async def _next_request(stream: trio.abc.Stream, conn: h11.Connection) -> Received | None:
    head: h11.Request | None = None
    body: list[bytes] = []
    size = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(READ_CHUNK)))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            size += len(event.data)
            if size > MAX_BODY:
                raise _TooLarge
            body.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage) and head is not None:
            headers = tuple((k.decode("latin-1").lower(), v.decode("latin-1"))
                            for k, v in head.headers)
            return Received(head.method.decode("ascii"), head.target.decode("latin-1"),
                            headers, b"".join(body))
        elif isinstance(event, h11.ConnectionClosed) or event is h11.PAUSED:
            return None


async def _reply(stream: trio.abc.Stream, conn: h11.Connection, reply: Reply) -> None:
    status, headers, body = reply
    head = [(k, v) for k, v in headers if k.lower() != "content-length"]
    head.append(("content-length", str(len(body))))
    data = conn.send(h11.Response(status_code=status, headers=head)) or b""
    data += conn.send(h11.Data(data=body)) or b""
    data += conn.send(h11.EndOfMessage()) or b""
    await stream.send_all(data)


def _json(status: int, value: object) -> Reply:
    return status, [("content-type", "application/json")], json.dumps(value).encode()


def verifying_handler(secret: str, out: TextIO,
                      now_s: Callable[[], int] = lambda: int(time.time())) -> Handler:
    """Verify, print and answer one delivery (see the module docstring)."""
    signing.parse_secret(secret)  # a bad secret fails here, before serving

    async def handle(req: Received) -> Reply:
        if req.method != "POST":
            return _json(405, {"error": "method_not_allowed"})
        verdict = signing.verify(secret, dict(req.headers), req.body, now_s())
        if not verdict.ok:
            print(f"rejected: {verdict.reason} {verdict.detail}".rstrip(), file=sys.stderr,
                  flush=True)
            return _json(401, {"error": verdict.reason, "detail": verdict.detail})
        try:
            event: object = json.loads(req.body)
        except ValueError:
            event = req.body.decode("utf-8", errors="replace")
        line = {"webhookId": req.header("webhook-id"),
                "timestamp": int(req.header("webhook-timestamp") or 0), "event": event}
        print(json.dumps(line), file=out, flush=True)
        return _json(200, {"ok": True})

    return handle


async def listen(secret: str, host: str, port: int, out: TextIO = sys.stdout, *,
                 task_status: trio.TaskStatus[int] = trio.TASK_STATUS_IGNORED) -> None:
    """Serve the verifying receiver until cancelled; prints where it listens."""
    handler = verifying_handler(secret, out)
    try:
        listeners = await trio.open_tcp_listeners(port, host=host)
    except OSError as e:
        raise ListenFailed(f"cannot listen on {host}:{port}: {e.strerror or e}") from e
    bound = listeners[0].socket.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    print(f"svc webhooks: listening on http://{shown}:{bound}", file=out, flush=True)
    task_status.started(bound)

    async def on_connection(stream: trio.SocketStream) -> None:
        await serve_connection(stream, handler)

    await trio.serve_listeners(on_connection, listeners)
