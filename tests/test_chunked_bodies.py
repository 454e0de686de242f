"""Chunked request bodies cost the one event loop in proportion to their
payload (web/connection.py, "Chunked bodies"): a body in tiny chunks, or
with bloated chunk framing, is answered 413 ``payload_too_large`` and the
connection closed; an unread one is skipped only within a bound, else the
connection closes; reading one yields to the other tasks. Bodies of normal
shapes, and keep-alive with them, are unaffected. Real sockets, except where
h11's events are counted (trio's in-memory streams)."""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import h11
import orjson
import pytest
import trio
import trio.testing

from svc_engine.errors import PayloadTooLarge, SvcError
from tests.server_process import ServerProcess
from tests.test_server import Client, Head, get, listening
from web import connection
from web.http import Request
from web.server import HttpServer, ServerSettings

CHUNKED = b"transfer-encoding: chunked\r\n"


def chunked(payload: bytes, size: int, ext: bytes = b"") -> bytes:
    """``payload`` framed in chunks of ``size`` bytes (each with extension
    ``ext``), with the last chunk."""
    return b"".join(b"%x%s\r\n%s\r\n" % (len(payload[i:i + size]), ext, payload[i:i + size])
                    for i in range(0, len(payload), size)) + b"0\r\n\r\n"


def post(path: str, body: bytes) -> bytes:
    return get(path, CHUNKED, method=b"POST") + body


class App:
    """``/read``: the body through web/http.py's ``Request.body`` (an error
    answered as the front does); ``/raw``: a bare ``receive`` loop that lets
    an error escape (as Quart's body reader does); anything else: answered
    without reading the body."""

    def __init__(self) -> None:
        self.errors: list[SvcError] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["path"] == "/read":
            try:
                body = await Request(scope, receive).body(1 << 20)
            except SvcError as e:
                self.errors.append(e)
                await _answer(send, e.status, orjson.dumps({"error": {"code": e.code}}))
                return
            await _answer(send, 200, body)
        elif scope["path"] == "/raw":
            body = b""
            while True:
                m = await receive()
                body += m.get("body", b"")
                if not m.get("more_body"):
                    break
            await _answer(send, 200, body)
        else:
            await _answer(send, 200, b"unread")


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture
async def served(nursery: trio.Nursery) -> Any:
    app = App()
    async with listening(nursery, HttpServer(app, ServerSettings(host="127.0.0.1", port=0))
                         ) as (connect, _):
        yield app, connect


async def _send_then_answer(c: Client, data: bytes) -> tuple[Head, bytes]:
    """Send ``data`` while reading the answer (the server answers, and stops
    reading, before the client is done sending)."""
    async def sending() -> None:
        try:
            await c.stream.send_all(data)
            assert isinstance(c.stream, trio.abc.HalfCloseableStream)
            await c.stream.send_eof()  # the server's drain then ends at once
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # the server closed its end: the rest is unwanted

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sending)
        answer = await c.response()
        await c.expect_close()
        nursery.cancel_scope.cancel()
    return answer


def _is_413(head: Head, body: bytes) -> bool:
    headers = dict(head.headers)
    return (head.status_code == 413 and headers.get(b"connection") == b"close"
            and headers.get(b"content-type") == b"application/json"
            and json.loads(body)["error"]["code"] == "payload_too_large")


async def _read_whole_or_refused(served: Any, payload: bytes, framed: bytes,
                                 refused: bytes | None) -> None:
    """POST ``framed`` (``payload`` in chunks) to ``/read`` on a new
    connection: read whole and echoed when ``refused`` is None, else 413
    with ``refused`` in its message."""
    app, connect = served
    c = await connect()
    if refused is not None:
        head, body = await _send_then_answer(c, post("/read", framed))
        assert _is_413(head, body) and refused in body, (head.status_code, body[:100])
        return
    await c.stream.send_all(post("/read", framed))
    head, body = await c.response()
    assert head.status_code == 200 and body == payload and app.errors == []


async def test_a_body_in_one_byte_chunks_is_413_and_the_connection_closes(
        served: Any) -> None:
    app, connect = served
    c = await connect()
    head, body = await _send_then_answer(c, post("/read", chunked(b"a" * 65536, 1)))
    assert _is_413(head, body), (head.status_code, head.headers, body)
    assert b"too many small chunks" in body
    # the application got PayloadTooLarge, as for a body over its limit; its
    # own answer was not sent (the connection's was complete)
    assert [type(e) for e in app.errors] == [PayloadTooLarge]


@pytest.mark.parametrize(("chunk", "refused"), [
    (20, True),  # 5,000 chunks: over at the 1,111th (1,024 + 22,220 // 256 = 1,110)
    (70, True),  # 1,429 chunks: over at the 1,410th (1,024 + 98,700 // 256 = 1,409)
    (72, False),  # 1,389 chunks: never over (1,024 + 99,936 // 256 = 1,414 at the end)
])
async def test_the_chunk_allowance_grows_one_per_256_bytes(
        served: Any, chunk: int, refused: bool) -> None:
    """SECURITY.md: at most 1,024 chunks plus one per 256 bytes of payload
    (1-byte chunks pass any rate, and chunks of 256 bytes or more any too)."""
    payload = bytes(i % 251 for i in range(100_000))
    await _read_whole_or_refused(served, payload, chunked(payload, chunk),
                                 b"too many small chunks" if refused else None)


@pytest.mark.parametrize(("ext", "refused"), [(900, False), (1600, True)])
async def test_chunk_framing_may_be_up_to_twice_the_payload(
        served: Any, ext: int, refused: bool) -> None:
    """400 chunks of 1,000 bytes: with 900 bytes of extension each the wire
    is 1.9 times the payload (served), with 1,600 bytes 2.6 times (413 once
    past twice the payload and ``WIRE_SLACK``)."""
    payload = bytes(i % 251 for i in range(400_000))
    framed = chunked(payload, 1000, b";" + b"e" * (ext - 1))
    ratio = len(framed) / len(payload)
    assert (ratio > 2.5) if refused else (1.8 < ratio < 2)
    await _read_whole_or_refused(served, payload, framed, b"framing" if refused else None)


@pytest.mark.parametrize(("size", "refused"), [(1028, False), (1029, True)])
async def test_the_chunk_allowance_is_exact(served: Any, size: int, refused: bool) -> None:
    """In 1-byte chunks, 1,028 is the most allowed (1,024 + 1,028 // 256 =
    1,028 chunks); the 1,029th chunk is one too many."""
    payload = b"b" * size
    await _read_whole_or_refused(served, payload, chunked(payload, 1),
                                 b"too many small chunks" if refused else None)


async def test_bloated_chunk_framing_is_413(served: Any) -> None:
    """Each chunk 1 byte of payload and 4 KiB of extension: few chunks, but
    the wire is mostly framing."""
    app, connect = served
    c = await connect()
    head, body = await _send_then_answer(
        c, post("/read", chunked(b"a" * 1000, 1, b";" + b"e" * 4096)))
    assert _is_413(head, body), (head.status_code, body)
    assert b"framing" in body
    assert [type(e) for e in app.errors] == [PayloadTooLarge]


async def test_an_application_letting_the_refusal_escape_gets_no_500(
        served: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Quart's body reader does not catch what ``receive`` raises: the 413
    stands, and nothing is logged as an application failure."""
    _, connect = served
    c = await connect()
    with caplog.at_level(logging.ERROR, logger="svc.server"):
        head, body = await _send_then_answer(c, post("/raw", chunked(b"a" * 20000, 1)))
    assert _is_413(head, body), (head.status_code, body)
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]


@pytest.mark.parametrize(("size", "chunk"), [(65536, 8192), (300, 100), (1 << 20, 256),
                                             (1024, 1), (70000, 1000)])
async def test_bodies_of_normal_shapes_are_read_whole(served: Any, size: int,
                                                      chunk: int) -> None:
    """KiB chunks; a small body in a few; a megabyte in 256-byte chunks (the
    bound's rate); 1024 one-byte chunks (the floor); chunks across reads."""
    app, connect = served
    c = await connect()
    payload = bytes(i % 251 for i in range(size))
    await c.stream.send_all(post("/read", chunked(payload, chunk)))
    head, body = await c.response()
    assert head.status_code == 200 and body == payload
    assert b"connection" not in dict(head.headers) and app.errors == []


async def test_keep_alive_with_normal_bodies_is_unaffected(served: Any) -> None:
    _, connect = served
    c = await connect()
    payload = b"x" * 65536
    for _ in range(3):
        await c.stream.send_all(post("/read", chunked(payload, 8192)))
        head, body = await c.response()
        assert head.status_code == 200 and body == payload
        await c.stream.send_all(post("/read", chunked(b"abcde", 2)))
        assert (await c.response())[1] == b"abcde"
        await c.stream.send_all(get("/read", b"content-length: 3\r\n", method=b"POST") + b"xyz")
        assert (await c.response())[1] == b"xyz"


async def test_an_unread_chunked_body_closes_the_connection_and_says_so(served: Any) -> None:
    """Answered before its chunked body was read (an early 401, say): whether
    all of it is here is not known without reading it, so the answer says
    the connection closes, and it does, without a reset (the request sent
    after it is read and dropped, not answered)."""
    _, connect = served
    c = await connect()
    await c.stream.send_all(post("/ignored", chunked(b"q" * 3000, 1000)) + get("/read"))
    head, body = await c.response()
    assert body == b"unread" and dict(head.headers)[b"connection"] == b"close"
    await c.expect_close()
    assert c.buffer == b""


async def test_an_unread_body_of_tiny_chunks_closes_the_connection(served: Any) -> None:
    """All of it here (one write, under one read), yet not skipped: more than
    ``SKIP_EVENTS`` chunks. The request sent after it is never answered."""
    _, connect = served
    c = await connect()
    await c.stream.send_all(post("/ignored", chunked(b"a" * 8000, 1)) + get("/read"))
    head, body = await c.response()
    assert head.status_code == 200 and body == b"unread"
    await c.expect_close()
    assert c.buffer == b""


class Counting:
    """An ``h11.Connection`` that counts the ``Data`` events it hands over."""

    def __init__(self, conn: h11.Connection) -> None:
        self.conn = conn
        self.data = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)

    def next_event(self) -> Any:
        event = self.conn.next_event()
        if type(event) is h11.Data:
            self.data += 1
        return event


def _counting_server(app: Any, monkeypatch: pytest.MonkeyPatch
                     ) -> tuple[HttpServer, list[Counting]]:
    made: list[Counting] = []
    new_h11 = connection.Connection._new_h11

    def counted(self: connection.Connection) -> Any:
        made.append(Counting(new_h11(self)))
        return made[-1]

    monkeypatch.setattr(connection.Connection, "_new_h11", counted)
    return HttpServer(app, ServerSettings(host="127.0.0.1", port=0)), made


@pytest.mark.parametrize("path", ["/read", "/ignored"])
async def test_the_events_spent_on_a_body_of_tiny_chunks_are_bounded(
        path: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """64 KiB of payload in 1-byte chunks was 65,536 of h11's events, read or
    not; now about ``CHUNK_FLOOR`` when read, ``SKIP_EVENTS`` when not."""
    server, made = _counting_server(App(), monkeypatch)
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, None, None)
        await client_end.send_all(post(path, chunked(b"a" * 65536, 1)))
        await client_end.send_eof()
        c = Client(client_end)
        head, _ = await c.response()
        await c.expect_close()
    assert head.status_code == (413 if path == "/read" else 200)
    assert len(made) == 1 and 0 < made[0].data < 2000
    # the bounds: read, the floor and the rate's share (plus skipping after
    # the 413); unread, the skip's
    bound = (connection.CHUNK_FLOOR + 65536 // connection.CHUNK_BYTES + connection.SKIP_EVENTS
             if path == "/read" else connection.SKIP_EVENTS)
    assert made[0].data <= bound


async def test_reading_a_body_of_many_chunks_lets_other_tasks_run(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """1,024 one-byte chunks (accepted) arrive in one read: another task runs
    while they are read, not only before and after."""
    server, made = _counting_server(App(), monkeypatch)
    seen: list[int] = []
    client_end, server_end = trio.testing.memory_stream_pair()
    payload = b"a" * 1024  # CHUNK_FLOOR: accepted whatever their size

    async def watch() -> None:
        while True:
            seen.append(made[0].data if made else 0)
            await trio.sleep(0)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(watch)
        nursery.start_soon(server.serve_stream, server_end, None, None)
        await client_end.send_all(post("/read", chunked(payload, 1)))
        head, body = await Client(client_end).response()
        nursery.cancel_scope.cancel()
    assert head.status_code == 200 and body == payload
    assert [n for n in seen if 0 < n < len(payload)]


@pytest.mark.e2e
def test_the_service_refuses_tiny_chunks_on_the_api_and_the_dashboard(
        server_factory: type[ServerProcess]) -> None:
    """The real front: an API route read with a publishable key, and the
    dashboard's sign-in form (read before any credential); a normal chunked
    body still gets through."""
    srv = server_factory().start()
    port = int(srv.url.rsplit(":", 1)[1])
    key = srv.info["keys"]["pk_test"].encode()
    init = orjson.dumps({"installId": "6f1d3c1e-8a9b-4c2d-9e3f-1a2b3c4d5e6f",
                         "isFirstLaunch": True, "sdkVersion": "0.2.0", "platform": "android"})
    api = (b"POST /v1/sdk/init HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + key
           + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
           b"Connection: close\r\n\r\n")
    sign_in = (b"POST /dashboard/sign-in HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Content-Type: application/x-www-form-urlencoded\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")

    def exchange(data: bytes) -> bytes:
        """Under the server's drain after a refusal (1 MiB): all of it is
        read, so the answer is not lost to a reset."""
        assert len(data) < connection.DRAIN_LIMIT
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        return answer

    tiny_json = chunked(init + b" " * 100_000, 1)
    for refused in (exchange(api + tiny_json),
                    exchange(sign_in + chunked(b"email=a%40b.c&" + b"x" * 65536, 1))):
        assert refused.startswith(b"HTTP/1.1 413 "), refused[:200]
        assert b"connection: close" in refused and b"payload_too_large" in refused
    accepted = exchange(api + chunked(init + b" " * 65536, 8192))
    assert accepted.startswith(b"HTTP/1.1 20"), accepted[:300]
    srv.stop()
    logs = srv.logs()
    assert "application failed" not in logs and "Traceback" not in logs
    # the access log has the status sent, the dashboard's too (Quart answers nothing)
    assert "POST /v1/sdk/init 413" in logs and "POST /dashboard/sign-in 413" in logs, logs
