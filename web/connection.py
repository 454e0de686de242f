"""One client connection of the HTTP/1.1 server (web/server.py): its
requests read, handed to the ASGI application and answered.

Theory of operation, per connection (the server has accepted it, refused it
when over capacity and done the TLS handshake):

1. Waiting for a request's head (idle keep-alive, or headers dripping in) is
   bounded by ``keep_alive_s``; past it the connection is closed (slowloris).
   A head over ``max_header_bytes`` or a malformed request is answered with
   the 4xx h11 suggests and the connection is closed.
2. While the server sheds load, the request is answered ``503 overloaded``
   at once and the connection kept.
3. The application reads the body through ``receive`` (the request-body
   deadline is the front's, web/http.py) and answers through ``send``; the
   head and a body that arrives with it go out in one write.
4. If the client's body was not read to the end, or either side asked to
   close, the connection closes (after a bounded drain); otherwise the next
   request is read from the same connection. A body the application did not
   read is skipped only as far as it is already buffered, and a chunked one
   only within ``SKIP_EVENTS`` of h11's events; else the connection closes.
5. A write of the answer that the client does not take within
   ``send_timeout_s`` (it stopped reading: a stalled export, a peer gone
   without a reset) ends the connection: the server's watch
   (``HttpServer._watch_sends``) cancels its ``scope``, so a reader that
   never reads cannot hold a connection, its memory and what its request
   holds (a project's export slot) forever. It bounds each write of at most
   ``SEND_PIECE`` bytes, not the whole answer, nor progress within a piece
   (unlike nginx's ``send_timeout``): a client that takes at least 64 KiB a
   minute is never cut. A write only notes when it began
   (``sending_since``): a cancel scope of its own would cost every answer
   ~9 µs.

Request heads in the common form (CRLF lines, ``content-length`` or no
body) are parsed by web/request_head.py and their bodies read here; any
other head (chunked, ``100-continue``, malformed) goes to a fresh
``h11.Connection`` fed the buffered bytes, which parses that request and
hands back what follows it. The responses are written here
(``Connection._head``): h11's response side (event objects, header
validation by regular expressions, its state machine) was half of its cost
per request, and the application's responses are few and known. The framing
rules h11 applied are kept: ``content-length`` when the application gives
one, else chunked (HTTP/1.1) or until close (HTTP/1.0); no body for HEAD,
1xx, 204 and 304; ``connection: close`` when the connection will close; a
header name or value holding CR, LF or NUL is refused (500) rather than
written. With h11 not told of the response, a request h11 parses gets an
``h11.Connection`` of its own.

Chunked bodies: h11 hands over one event per chunk, about 5 µs of the one
event loop each, and the application's body limit (SVC_MAX_BODY_BYTES,
web/http.py) counts payload only, so a body sent in 1-byte chunks would cost
its reader seconds for a megabyte. The server does not know that limit (it
is the application's, per route), so it bounds the framing by the payload
instead: a body may come in at most ``CHUNK_FLOOR`` chunks plus one per
``CHUNK_BYTES`` bytes of payload, and its bytes on the wire (sizes,
extensions, line ends) may be at most twice its payload plus
``WIRE_SLACK``. A body over either bound is answered ``413
payload_too_large`` by the connection itself (``connection: close``) and
``receive`` raises ``PayloadTooLarge``, as ``Request.body`` does for a body
over the limit: the loop time a body costs is thus proportional to the
payload the application allows. Reading one yields to the other tasks every
``CHECKPOINT_CHUNKS`` chunks, so no body holds the loop for more than a few
milliseconds at a time. Requests without a body, and bodies with a
``content-length`` read here, do none of this.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import h11
import orjson
import trio

from svc_engine.errors import CodingNotImplemented, HeadersTooLarge, PayloadTooLarge
from web.http import CLIENT_GONE
from web.logs import loggable
from web.request_head import BODY_EXTENSION, Head, head_end, parse_head

if TYPE_CHECKING:
    from web.server import HttpServer

log = logging.getLogger("svc.server")
Scope = dict[str, Any]
Message = dict[str, Any]
AsgiApp = Callable[[Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
                   Awaitable[None]]

RECEIVE_SIZE = 65536
DRAIN_LIMIT = 1 << 20
ASGI = {"version": "3.0", "spec_version": "2.3"}
CLOSED = CLIENT_GONE  # what sending or receiving raises once the client is gone
_MIGHT_SWITCH = h11.MIGHT_SWITCH_PROTOCOL  # type: ignore[attr-defined]  # (not in h11.__all__)
SEND_PIECE = 65536  # the most one timed write carries
# a chunked body (module docstring): chunks allowed, whatever the payload,
# and one more per this many bytes of payload
CHUNK_FLOOR = 1024
CHUNK_BYTES = 256
WIRE_SLACK = 2 * RECEIVE_SIZE  # framing bytes beyond the payload's, one read past the body
CHECKPOINT_CHUNKS = 256  # about 1-3 ms of h11's work between two turns of the others
SKIP_EVENTS = 64  # the most h11 events spent skipping a body nobody reads
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def refusal(status: int, code: str, message: str, *, retry_after: bool = False) -> bytes:
    """A complete ``connection: close`` answer for when no request can be
    handed to the application (too many connections, a malformed request)."""
    body = orjson.dumps({"error": {"code": code, "message": message}})
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, b'').decode()}\r\n"
            "content-type: application/json\r\n"
            + ("retry-after: 1\r\n" if retry_after else "")
            + f"connection: close\r\ncontent-length: {len(body)}\r\n\r\n")
    return head.encode() + body


_SHED_BODY = orjson.dumps({"error": {"code": "overloaded",
                                     "message": "the service is at capacity; retry shortly"}})
_SHED = [(b"content-type", b"application/json"), (b"retry-after", b"1"),
         (b"content-length", str(len(_SHED_BODY)).encode())]
_INTERNAL = b'{"error":{"code":"internal_error","message":"internal error; it has been logged"}}'


class Connection:
    """One client connection: the bytes read ahead, the current request's
    body state (``body_left``, or ``h11`` for a request h11 parses, with what
    its body has cost: ``chunks``, ``payload`` and ``wire`` bytes) and its
    ASGI bridge."""

    def __init__(self, server: HttpServer, stream: trio.abc.Stream,
                 client: tuple[str, int] | None, addr: tuple[str, int] | None) -> None:
        self.server = server
        self.stream = stream
        # read, not yet parsed (a bytearray: taking from its front is O(1))
        self.pending = bytearray()
        self.eof = False  # the client closed its side
        self.h11: h11.Connection | None = None
        self.body_left = 0
        self.chunks = 0  # of the body h11 reads: chunks begun, payload and wire bytes
        self.payload = 0
        self.wire = 0
        self.body_refused = False  # answered 413 for its framing (module docstring)
        self.h11_body = False  # the head h11 parsed declared a body
        self.client = client
        self.addr = addr
        self.limit = server.settings.max_header_bytes
        self.idle: trio.CancelScope | None = None
        self.head = False
        self.keep_alive = True
        self.http10 = False
        self.started: tuple[int, list[tuple[bytes, bytes]]] | None = None
        self.head_sent = False
        self.chunked = False
        self.complete = False
        self.body_done = False
        self.response_sent: trio.Event | None = None
        self.scope = trio.CancelScope()  # the server's watch cancels a stalled write
        self.sending_since: float | None = None  # when the write under way began
        self.stalled = False

    def stall(self) -> None:
        """The client took nothing of a write for too long: end the connection."""
        self.stalled = True
        self.scope.cancel()

    def _new_h11(self) -> h11.Connection:
        return h11.Connection(h11.SERVER,
                              max_incomplete_event_size=self.server.settings.max_header_bytes)

    def shutdown(self) -> None:
        if self.idle is not None:
            self.idle.cancel()

    async def _next_head(self) -> Head | None:
        """The next request's head (``None``: the client closed); h11's
        RemoteProtocolError for a malformed one."""
        while True:
            end = head_end(self.pending)
            if end > 0:
                head = parse_head(bytes(self.pending[:end]))
                if head is None:
                    return await self._h11_head()
                if end > self.limit:
                    self._check_size(head)
                del self.pending[:end]
                self.body_left = head.content_length
                return head
            if end == 0 or len(self.pending) > self.limit:
                return await self._h11_head()  # h11 refuses it (400, 431)
            if self.eof:
                return await self._h11_head() if self.pending else None
            data = await self.stream.receive_some(RECEIVE_SIZE)
            if data:
                self.pending += data
            else:
                self.eof = True

    async def _h11_head(self) -> Head | None:
        """Hand the buffered bytes to h11 for this request."""
        self.h11 = conn = self._new_h11()
        self.chunks = self.payload = self.wire = 0
        self.body_refused = False
        if self.pending:
            conn.receive_data(bytes(self.pending))
            self.pending.clear()
        if self.eof:
            conn.receive_data(b"")
        event = await self._next_event(conn)
        if not isinstance(event, h11.Request):
            return None
        # h11's Headers iterate slowly: listed once per request
        head = Head(event.method, event.target, event.http_version, list(event.headers), -1)
        self._check_size(head)
        names = [name for name, _ in head.headers]  # (h11 lower-cases them)
        if b"transfer-encoding" in names and b"content-length" in names:
            # h11 frames by the coding; anything between the client and us may
            # have framed by the length: refused (RFC 9112 6.1), and closed
            raise h11.RemoteProtocolError("both Content-Length and Transfer-Encoding")
        self.h11_body = b"transfer-encoding" in names or any(
            name == b"content-length" and value.strip() != b"0" for name, value in head.headers)
        return head

    def _check_size(self, head: Head) -> None:
        """h11 bounds only a head still incomplete; one that arrived whole
        in a single read is measured here (names and values, as h11 counts)."""
        if sum(len(k) + len(v) for k, v in head.headers) > self.limit:
            raise h11.RemoteProtocolError("head too large", error_status_hint=431)

    async def _next_event(self, conn: h11.Connection) -> Any:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(bytes(await self.stream.receive_some(RECEIVE_SIZE)))

    async def run(self) -> None:
        server = self.server
        while not server.closing:
            with trio.move_on_after(server.settings.keep_alive_s) as idle:
                self.idle = idle
                self.h11 = None
                try:
                    head = await self._next_head()
                except h11.RemoteProtocolError as e:
                    await self._reject(e)
                    return
                except CLOSED:
                    return
                finally:
                    self.idle = None
            if idle.cancelled_caught or head is None:
                return  # idle too long, headers too slow, closed, or shutting down
            self._begin(head)
            if server.shedding and head.target.partition(b"?")[0] != b"/healthz":
                # liveness: busy, not dead (with or without a query, as the front)
                if not await self._shed():
                    return
            elif not await self._respond(head):
                return
            if not self._skip_buffered_body():
                await self._drain_and_close()
                return
            if not self.keep_alive:
                if self.pending:  # sent past the last request: closing now would reset
                    await self._drain_and_close()  # (and might erase the answer)
                return

    def _begin(self, head: Head) -> None:
        """A request starts: whether the connection can carry another one
        after it (h11's rule: HTTP/1.1 without ``connection: close``)."""
        self.head = head.method == b"HEAD"
        self.http10 = head.http_version != b"1.1"
        self.keep_alive = not self.http10 and not _says_close(head.headers)
        self.started = None
        self.head_sent = False
        self.chunked = False
        self.complete = False
        self.body_done = False
        self.response_sent = None

    def _body_still_coming(self) -> bool:
        """Whether part of the request's body has not arrived yet, so the
        connection will close after this answer (``_drain_and_close``): the
        answer then says so, or a client would send its next request on a
        connection about to close (an early 401 or 429 to a large body).
        Known for a body with a length read here; for one h11 reads (chunked,
        or an unusual head), not known without reading it, so any such body
        the application has not read to its end counts as still coming: the
        answer says it closes, and it does."""
        if self.h11 is None:
            return self.body_left > len(self.pending)
        return self.h11_body and not self.body_done

    def _skip_buffered_body(self) -> bool:
        """The response is out: consume what is buffered of a body the
        application did not read, without waiting, and take back from h11
        the bytes after its request. False when the body is not all here, or
        takes h11 more than ``SKIP_EVENTS`` events (the connection then
        closes after a bounded drain)."""
        conn = self.h11
        if conn is None:
            skip = min(self.body_left, len(self.pending))
            if skip:
                del self.pending[:skip]
                self.body_left -= skip
            return self.body_left == 0
        try:
            for _ in range(SKIP_EVENTS):  # more: not worth the loop's time, close
                if type(conn.next_event()) is not h11.Data:
                    break
        except h11.RemoteProtocolError:
            pass
        if conn.their_state is h11.SEND_BODY:
            return False
        # (an Upgrade request is always declined: its connection goes on as before)
        if conn.their_state is h11.DONE or conn.their_state is _MIGHT_SWITCH:
            data, self.eof = conn.trailing_data
            self.pending = bytearray(data)
        else:
            self.keep_alive = False  # h11 saw the client close, or must close
        return True

    async def _reject(self, error: h11.RemoteProtocolError) -> None:
        if error.error_status_hint == 431:
            answer = refusal(HeadersTooLarge.status, HeadersTooLarge.code,
                             "the request line and headers are too large")
        elif error.error_status_hint == CodingNotImplemented.status:  # h11's own hint
            answer = refusal(CodingNotImplemented.status, CodingNotImplemented.code,
                             "a request body's only transfer coding here is chunked")
        else:
            answer = refusal(400, "bad_request", "malformed HTTP request")
        await refuse(self.stream, answer)

    async def _shed(self) -> bool:
        self.server.shed += 1
        try:
            await self._send({"type": "http.response.start", "status": 503,
                              "headers": list(_SHED)})
            await self._send({"type": "http.response.body", "body": _SHED_BODY})
        except CLOSED:
            return False
        return True

    async def _respond(self, head: Head) -> bool:
        """Run the application for one request; False when the connection
        cannot carry another one."""
        scope = self._scope(head)
        if scope is None:
            await refuse(self.stream, refusal(400, "bad_request", "malformed request target"))
            return False
        try:
            await self.server.app(scope, self._receive, self._send)
        except CLOSED:
            return False
        except Exception as e:
            if isinstance(e, ExceptionGroup) and e.split(CLOSED)[1] is None:
                return False  # the client went away under a framework's task group (Quart-Trio)
            if self.body_refused:  # receive's PayloadTooLarge let through: answered already
                return self.complete  # then closed after a drain, as for any unread body
            log.exception("the application failed on %s %s", scope["method"],
                          loggable(scope["path"]))
            if self.head_sent or self.complete:
                return False  # the answer is under way: only closing can say it broke
            self.started = None  # a head the application began but never sent: a 500 instead
            try:
                await self._send({"type": "http.response.start", "status": 500,
                                  "headers": [(b"content-type", b"application/json")]})
                await self._send({"type": "http.response.body", "body": _INTERNAL})
            except (*CLOSED, ValueError):
                return False
        return self.complete  # False: the application ended without a whole response

    def _scope(self, head: Head) -> Scope | None:
        target = head.target
        headers = head.headers
        if not target.startswith(b"/"):
            if target == b"*":  # asterisk form: the server as a whole, for OPTIONS only
                if head.method != b"OPTIONS":
                    return None
                target = b"/"
            else:  # absolute form: its authority is the host (RFC 9112 3.2.2), not Host
                scheme_end = target.find(b"://")
                if scheme_end <= 0:
                    return None
                rest = target[scheme_end + 3:]
                end = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0),
                          default=len(rest))
                authority, target = rest[:end], rest[end:]
                if not authority or b"@" in authority:
                    return None
                target = target if target.startswith(b"/") else b"/" + target
                headers = [(k, v) for k, v in headers if k.lower() != b"host"]
                headers.append((b"host", authority))
        raw_path, _, query = target.partition(b"?")
        try:
            path = unquote(raw_path.decode("ascii"), errors="strict")
        except UnicodeDecodeError:
            return None
        return {
            "type": "http", "asgi": ASGI,
            "http_version": "1.1" if head.http_version == b"1.1" else "1.0",
            "method": head.method.decode("ascii"), "scheme": self.server.scheme,
            "path": path, "raw_path": raw_path, "query_string": query, "root_path": "",
            "headers": headers, "client": self.client, "server": self.addr,
            "extensions": self._extensions(),
        }

    def _extensions(self) -> dict[str, Any]:
        """``svc.body``: the whole request body, when it arrived with the head
        (web/http.py then reads it without waiting; ``receive`` still hands it
        over to an application that asks, and an unread body is skipped)."""
        if self.h11 is None and len(self.pending) >= self.body_left:
            return {BODY_EXTENSION: bytes(self.pending[:self.body_left])}
        return {}

    async def _receive(self) -> Message:
        if self.body_done:  # a framework watching for the client to go away
            if self.complete:
                return {"type": "http.disconnect"}
            if self.response_sent is None:
                self.response_sent = trio.Event()
            await self.response_sent.wait()
            return {"type": "http.disconnect"}
        conn = self.h11
        if conn is None:
            return await self._receive_counted()
        if conn.they_are_waiting_for_100_continue:
            await self.stream.send_all(
                conn.send(h11.InformationalResponse(status_code=100, headers=[])))
        chunks: list[bytes] = []
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    if chunks:
                        break
                    read = await self.stream.receive_some(RECEIVE_SIZE)
                    self.wire += len(read)
                    if self.wire > 2 * self.payload + WIRE_SLACK:
                        await self._refuse_body("the request body's chunk framing is too large")
                    conn.receive_data(bytes(read))
                elif type(event) is h11.Data:
                    data = event.data
                    chunks.append(bytes(data))
                    self.payload += len(data)
                    if event.chunk_start:
                        self.chunks += 1
                        if self.chunks > CHUNK_FLOOR + self.payload // CHUNK_BYTES:
                            await self._refuse_body(
                                "the request body came in too many small chunks")
                        if not self.chunks % CHECKPOINT_CHUNKS:
                            await trio.lowlevel.checkpoint()
                elif type(event) is h11.EndOfMessage:
                    self.body_done = True
                    break
                else:  # ConnectionClosed or PAUSED: the body ended early
                    return self._disconnect()
        except (*CLOSED, h11.RemoteProtocolError):
            return self._disconnect()
        return {"type": "http.request", "body": b"".join(chunks),
                "more_body": not self.body_done}

    async def _refuse_body(self, message: str) -> None:
        """A chunked body over the framing bounds (module docstring): answer
        413 unless an answer has begun, and raise ``PayloadTooLarge`` to the
        application (its answer is then not sent: this one is complete).
        The connection closes after it."""
        self.body_refused = True
        self.body_done = True
        self.keep_alive = False
        if not self.head_sent and not self.complete:
            body = orjson.dumps({"error": {"code": PayloadTooLarge.code, "message": message}})
            self.started = None
            await self._send({"type": "http.response.start", "status": PayloadTooLarge.status,
                              "headers": [(b"content-type", b"application/json"),
                                          (b"content-length", b"%d" % len(body))]})
            await self._send({"type": "http.response.body", "body": body})
        raise PayloadTooLarge(message)

    async def _receive_counted(self) -> Message:
        """The next piece of a ``content-length`` body: what is buffered, else
        one read."""
        if self.body_left and not self.pending:
            if self.eof:
                return self._disconnect()
            try:
                data = await self.stream.receive_some(RECEIVE_SIZE)
            except CLOSED:
                return self._disconnect()
            if not data:
                self.eof = True
                return self._disconnect()
            self.pending += data
        body = bytes(self.pending[:self.body_left])
        if body:
            del self.pending[:len(body)]
            self.body_left -= len(body)
        self.body_done = self.body_left == 0
        return {"type": "http.request", "body": body, "more_body": not self.body_done}

    def _disconnect(self) -> Message:
        """The body ended before its end (the client went, or its framing
        broke): the connection closes after the answer, which says so."""
        self.body_done = True
        self.keep_alive = False
        if self.response_sent is None:  # (an Event has no truth value: trio refuses it)
            self.response_sent = trio.Event()
        self.response_sent.set()
        return {"type": "http.disconnect"}

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "http.response.start":
            headers = list(message.get("headers", ()))
            self.started = (int(message["status"]), headers)
            return
        if kind != "http.response.body" or self.complete:
            return
        out = b""
        if self.started is not None:
            status, headers = self.started
            self.started = None
            out = self._head(status, headers)
            self.head_sent = True
        body = message.get("body", b"")
        more = message.get("more_body", False)
        if self.chunked:
            if body:
                out += b"%x\r\n%s\r\n" % (len(body), body)
            if not more:
                out += b"0\r\n\r\n"
        elif body and not self.head:
            out += body
        if not more:
            self.complete = True
        if len(out) > SEND_PIECE:
            await self._write_pieces(out)
        elif out:  # the usual answer: one timed write, no coroutine of its own
            self.sending_since = trio.current_time()
            await self.stream.send_all(out)
            self.sending_since = None
        if self.complete and self.response_sent is not None:
            self.response_sent.set()

    async def _write_pieces(self, out: bytes) -> None:
        """Send ``out`` in pieces of at most ``SEND_PIECE`` bytes, each timed
        by the server's watch from when it began."""
        view = memoryview(out)
        for start in range(0, len(out), SEND_PIECE):
            self.sending_since = trio.current_time()
            await self.stream.send_all(view[start:start + SEND_PIECE])
        self.sending_since = None

    def _head(self, status: int, headers: list[tuple[bytes, bytes]]) -> bytes:
        """The status line and headers, with the framing h11 would choose;
        ValueError for a header that would split the response."""
        headers.append(self.server.date.header())
        names = [name.lower() for name, _ in headers]
        bodiless = self.head or status < 200 or status in (204, 304)
        if b"content-length" not in names and not bodiless:
            if self.http10:
                self.keep_alive = False  # the end of the body is the close
            else:
                headers.append((b"transfer-encoding", b"chunked"))
                self.chunked = not self.head
        if b"connection" in names and _says_close(headers):
            self.keep_alive = False
        if self._body_still_coming():
            self.keep_alive = False  # answered before the body came: closed after it
        if self.server.closing or not self.keep_alive:
            self.keep_alive = False
            if not _says_close(headers):
                headers.append((b"connection", b"close"))
        lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b""))]
        lines += [b"%s: %s" % pair for pair in headers]
        head = b"\r\n".join(lines)
        if head.count(b"\n") != len(lines) - 1 or head.count(b"\r") != len(lines) - 1 \
                or b"\0" in head:
            raise ValueError("a response header holds CR, LF or NUL")
        return head + b"\r\n\r\n"

    async def _drain_and_close(self) -> None:
        """The response is out but the client's body was not read (413, an
        early error): stop sending and read a bounded amount of what the
        client still sends, so closing does not reset the connection before
        the client has read the answer."""
        await refuse(self.stream, b"")


async def refuse(stream: trio.abc.Stream, answer: bytes) -> None:
    """Send ``answer`` (if any), stop sending, read a bounded amount of what
    the client still sends (so closing does not reset the connection before
    it read the answer) and close."""
    with trio.move_on_after(1):
        try:
            if answer:
                await stream.send_all(answer)
            if isinstance(stream, trio.SocketStream):
                await stream.send_eof()
            drained = 0
            while drained < DRAIN_LIMIT:
                data = await stream.receive_some(RECEIVE_SIZE)
                if not data:
                    break
                drained += len(data)
        except (*CLOSED, ssl.SSLError):
            pass
    await trio.aclose_forcefully(stream)


def _says_close(headers: Any) -> bool:
    """Whether a ``connection`` header lists ``close``."""
    for name, value in headers:
        if name.lower() == b"connection" and b"close" in [
                token.strip() for token in value.lower().split(b",")]:
            return True
    return False
