"""The HTTP/1.1 server (web/server.py) against a small ASGI app: keep-alive,
pipelining, bodies read or left unread, 100-continue, HEAD, streamed answers,
application failures, malformed requests, the connection cap, TLS, timeouts
(on trio's in-memory streams with the autojump clock) and graceful shutdown."""

from __future__ import annotations

import logging
import os
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio
import trio.testing
import trustme

from web.server import HttpServer, ServerSettings

Message = dict[str, Any]
BIG = 300_000  # five pieces of a timed write (web/connection.py SEND_PIECE)
BIG_BODY = bytes(i % 251 for i in range(BIG))  # no two pieces alike: order shows


class App:
    """An ASGI app with one route per behaviour under test."""

    def __init__(self) -> None:
        self.clients: list[Any] = []
        self.release = trio.Event()
        self.entered = trio.Event()
        self.watcher_saw: list[str] = []
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.clients.append(scope["client"])
        self.scopes.append(scope)
        path = scope["path"]
        if path == "/echo":
            body = await _whole_body(receive)
            await _answer(send, 200, body)
        elif path == "/ext":  # what the server handed over with the scope, then receive()
            handed = scope["extensions"].get("svc.body")
            self.entered.set()
            body = await _whole_body(receive)
            await _answer(send, 200, repr(handed).encode() + b"|" + body)
        elif path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for part in (b"one,", b"two,", b"three"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
        elif path == "/split":  # a header value that would split the response
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"location", b"/x\r\nset-cookie: evil=1")]})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/big":
            await _answer(send, 200, BIG_BODY)
        elif path in ("/empty", "/not-modified"):
            status = 204 if path == "/empty" else 304
            await send({"type": "http.response.start", "status": status, "headers": []})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/bye":  # the application asks to close
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"connection", b"Close"), (b"content-length", b"3")]})
            await send({"type": "http.response.body", "body": b"bye"})
        elif path == "/boom":
            raise RuntimeError("boom")
        elif path == "/boom-head":  # the head given, no byte of the body yet
            await send({"type": "http.response.start", "status": 200, "headers": []})
            raise RuntimeError("boom")
        elif path == "/boom-late":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"part", "more_body": True})
            raise RuntimeError("boom")
        elif path == "/slow":
            self.entered.set()
            await self.release.wait()
            await _answer(send, 200, b"slow done")
        elif path == "/watch":  # like Quart: a task watches receive() for the disconnect
            async def watch() -> None:
                while True:
                    m = await receive()
                    if m["type"] == "http.disconnect":
                        self.watcher_saw.append("disconnect")
                        return

            async with trio.open_nursery() as nursery:
                nursery.start_soon(watch)
                await _answer(send, 200, b"watched")
        else:
            await _answer(send, 200, f"path={path} query={scope['query_string'].decode()}"
                          .encode())


async def _whole_body(receive: Any) -> bytes:
    body = b""
    while True:
        m = await receive()
        body += m.get("body", b"")
        if not m.get("more_body"):
            return body


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain"),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class Head:
    def __init__(self, status_code: int, headers: list[tuple[bytes, bytes]]) -> None:
        self.status_code = status_code
        self.headers = headers


class Client:
    """Raw bytes out, responses parsed by hand (content-length, chunked)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def _more(self) -> None:
        data = await self.stream.receive_some(65536)
        if not data:
            raise EOFError("closed")
        self.buffer += data

    async def _line(self, sep: bytes = b"\r\n") -> bytes:
        while sep not in self.buffer:
            await self._more()
        line, _, self.buffer = self.buffer.partition(sep)
        return line

    async def _take(self, n: int) -> bytes:
        while len(self.buffer) < n:
            await self._more()
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    async def response(self, *, head_only: bool = False) -> tuple[Head, bytes]:
        with trio.fail_after(10):
            block = await self._line(b"\r\n\r\n")
            status_line, *lines = block.split(b"\r\n")
            headers = [(k.strip().lower(), v.strip())
                       for k, _, v in (ln.partition(b":") for ln in lines)]
            head = Head(int(status_line.split(b" ")[1]), headers)
            fields = dict(headers)
            if head_only or head.status_code == 100:
                return head, b""
            if fields.get(b"transfer-encoding") == b"chunked":
                body = b""
                while True:
                    size = int(await self._line(), 16)
                    chunk = await self._take(size + 2)
                    if size == 0:
                        return head, body
                    body += chunk[:-2]
            return head, await self._take(int(fields.get(b"content-length", b"0")))

    async def expect_close(self) -> None:
        with trio.fail_after(10):
            while True:
                try:
                    await self._more()
                except (EOFError, trio.BrokenResourceError):
                    return


def get(path: str, *extra: bytes, method: bytes = b"GET") -> bytes:
    return (method + b" " + path.encode() + b" HTTP/1.1\r\nhost: t\r\n" + b"".join(extra)
            + b"\r\n")


@asynccontextmanager
async def listening(nursery: trio.Nursery, server: HttpServer
                    ) -> AsyncIterator[tuple[Callable[[], Awaitable[Client]], trio.Event]]:
    """``server`` serving on a loopback port: a ``connect`` that opens a client
    connection to it (closed at the end), and the event that stops it."""
    stop = trio.Event()
    binds = await nursery.start(server.serve, stop)
    port = int(binds[0].rsplit(":", 1)[1])
    opened: list[Client] = []

    async def connect() -> Client:
        opened.append(Client(await trio.open_tcp_stream("127.0.0.1", port)))
        return opened[-1]

    try:
        yield connect, stop
    finally:
        for c in opened:
            await trio.aclose_forcefully(c.stream)


@pytest.fixture
async def served(nursery: trio.Nursery) -> Any:
    app = App()
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, max_connections=4,
                                            shutdown_grace_s=5))
    async with listening(nursery, server) as (connect, stop):
        yield app, server, connect, stop


async def test_keep_alive_serves_many_requests_on_one_connection(served: Any) -> None:
    app, _, connect, _ = served
    c = await connect()
    for i in range(3):
        await c.stream.send_all(get(f"/r{i}?x={i}"))
        head, body = await c.response()
        assert head.status_code == 200
        assert body == f"path=/r{i} query=x={i}".encode()
        assert tuple(k for k, _ in head.headers if k == b"date") == (b"date", )
        assert not any(k == b"server" for k, _ in head.headers)
    assert len(set(app.clients)) == 1
    assert {scope["http_version"] for scope in app.scopes} == {"1.1"}


async def test_pipelined_requests_are_answered_in_order(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/a") + get("/b") + get("/c"))
    bodies = [(await c.response())[1] for _ in range(3)]
    assert bodies == [b"path=/a query=", b"path=/b query=", b"path=/c query="]


async def test_bodies_with_length_and_chunked(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/echo", b"content-length: 5\r\n", method=b"POST") + b"hello")
    assert (await c.response())[1] == b"hello"
    await c.stream.send_all(get("/echo", b"transfer-encoding: chunked\r\n", method=b"POST")
                            + b"3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
    assert (await c.response())[1] == b"abcde"


async def test_an_unread_small_body_does_not_spoil_the_connection(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/ignored", b"content-length: 3\r\n", method=b"POST") + b"xyz"
                            + get("/next"))
    assert (await c.response())[1] == b"path=/ignored query="
    assert (await c.response())[1] == b"path=/next query="


async def test_an_unread_large_body_gets_the_answer_then_a_close(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/ignored", b"content-length: 10000000\r\n", method=b"POST")
                            + b"x" * 1000)
    head, body = await c.response()
    assert head.status_code == 200 and body == b"path=/ignored query="
    # the answer says the connection closes, so a client sends no next request on it
    assert (b"connection", b"close") in head.headers
    await c.expect_close()


async def test_an_unread_body_all_here_keeps_the_connection_open(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/ignored", b"content-length: 1000\r\n", method=b"POST")
                            + b"x" * 1000 + get("/next"))
    head, _ = await c.response()
    assert b"connection" not in dict(head.headers)
    assert (await c.response())[1] == b"path=/next query="


async def test_expect_100_continue(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/echo", b"content-length: 4\r\nexpect: 100-continue\r\n",
                                method=b"POST"))
    interim, _ = await c.response()
    assert interim.status_code == 100
    await c.stream.send_all(b"ping")
    head, body = await c.response()
    assert head.status_code == 200 and body == b"ping"


async def test_head_has_headers_and_no_body(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/x", method=b"HEAD") + get("/y"))
    head, body = await c.response(head_only=True)
    assert head.status_code == 200 and body == b""
    assert dict(head.headers)[b"content-length"] == b"14"
    assert (await c.response())[1] == b"path=/y query="


async def test_streamed_answer_is_chunked(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/stream"))
    head, body = await c.response()
    assert dict(head.headers)[b"transfer-encoding"] == b"chunked"
    assert body == b"one,two,three"


@pytest.mark.parametrize("path", ["/boom", "/boom-head"])
async def test_application_failure_is_a_500_before_the_answer_started(served: Any,
                                                                       path: str) -> None:
    """Nothing of the answer sent yet (``/boom-head`` gave its head, not one
    byte went out): a clean 500 replaces it, and the connection goes on."""
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get(path))
    head, body = await c.response()
    assert head.status_code == 500 and b"internal_error" in body
    await c.stream.send_all(get("/after"))  # the connection is still good
    assert (await c.response())[1] == b"path=/after query="


async def test_application_failure_after_the_answer_started_cuts_the_connection(
        served: Any) -> None:
    """Bytes of the answer are out: the connection is closed mid-body (a
    chunked body without its last chunk says it broke); no second answer is
    written into the body (it once was: a 500 after the 200's first chunk)."""
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/boom-late"))
    await c.expect_close()
    assert c.buffer.startswith(b"HTTP/1.1 200 ")
    assert c.buffer.count(b"HTTP/1.1") == 1 and c.buffer.endswith(b"4\r\npart\r\n")


@pytest.mark.parametrize(("raw", "status", "code"), [
    (b"NONSENSE\r\n\r\n", 400, b"bad_request"),
    (b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 20_000 + b"\r\n\r\n", 431,
     b"headers_too_large"),
    (b"GET /\xff\xfe HTTP/1.1\r\nhost: t\r\n\r\n", 400, b"bad_request"),
    (b"GET /%ff HTTP/1.1\r\nhost: t\r\n\r\n", 400, b"bad_request"),
    # a length and a coding: framed apart by whatever stands between (smuggling)
    (b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 40\r\n"
     b"transfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: t\r\n\r\n",
     400, b"bad_request"),
    (b"POST /echo HTTP/1.1\r\nhost: t\r\ncontent-length: 5\r\n"
     b"transfer-encoding:\r\n chunked\r\n\r\n0\r\n\r\n", 400, b"bad_request"),  # folded
    (b"GET * HTTP/1.1\r\nhost: t\r\n\r\n", 400, b"bad_request"),  # "*" is OPTIONS' only
    # a coding other than chunked: 501 (RFC 9112 6.1), as h11 hints
    (b"POST /echo HTTP/1.1\r\nhost: t\r\ntransfer-encoding: gzip, chunked\r\n\r\n"
     b"0\r\n\r\n", 501, b"not_implemented"),
    (b"POST /echo HTTP/1.1\r\nhost: t\r\ntransfer-encoding: gzip\r\n\r\n", 501,
     b"not_implemented"),
    (b"GET http://u@t/ HTTP/1.1\r\nhost: t\r\n\r\n", 400, b"bad_request"),
])
async def test_malformed_requests_get_a_4xx_and_a_close(served: Any, raw: bytes,
                                                         status: int, code: bytes) -> None:
    app, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(raw)
    answer = b""
    with trio.fail_after(5):
        while True:
            data = await c.stream.receive_some(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(f"HTTP/1.1 {status} ".encode()), answer[:40]
    assert b"connection: close" in answer and b'"code":"' + code + b'"' in answer
    assert app.scopes == []


async def test_absolute_form_target(served: Any) -> None:
    """The target's authority is the host, whatever Host says (RFC 9112
    3.2.2); its path ends at the first "/" or "?" after the authority."""
    app, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(b"GET http://t/abs/path?q=1 HTTP/1.1\r\nhost: t\r\n\r\n")
    assert (await c.response())[1] == b"path=/abs/path query=q=1"
    assert app.scopes[0]["raw_path"] == b"/abs/path"
    await c.stream.send_all(b"GET http://go.other.test/same HTTP/1.1\r\nhost: t\r\n\r\n"
                            b"GET http://h?/x HTTP/1.1\r\nhost: t\r\n\r\n"
                            b"GET http://h:8080 HTTP/1.1\r\nhost: t\r\n\r\n"
                            b"OPTIONS * HTTP/1.1\r\nhost: t\r\n\r\n")
    assert [(await c.response())[1] for _ in range(4)] == [
        b"path=/same query=", b"path=/ query=/x", b"path=/ query=", b"path=/ query="]
    hosts = [[v for k, v in scope["headers"] if k == b"host"] for scope in app.scopes[1:]]
    assert hosts == [[b"go.other.test"], [b"h"], [b"h:8080"], [b"t"]]


async def test_an_upgrade_is_declined_and_the_connection_goes_on(served: Any) -> None:
    """A head h11 reads (bare line feeds) asking to switch protocols: answered
    as any request, and the request pipelined after it answered too."""
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(b"GET /a HTTP/1.1\nhost: t\nupgrade: websocket\n"
                            b"connection: Upgrade\n\n" + get("/b"))
    first, body = await c.response()
    assert body == b"path=/a query=" and b"connection" not in dict(first.headers)
    assert (await c.response())[1] == b"path=/b query="


async def test_a_body_h11_reads_unread_says_the_connection_closes(served: Any) -> None:
    """Answered before a body h11 reads came (bare line feeds here): the
    answer says the connection closes, as for a body read here."""
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(b"POST /ignored HTTP/1.1\nhost: t\ncontent-length: 10\n\nab")
    head, body = await c.response()
    assert body == b"path=/ignored query=" and (b"connection", b"close") in head.headers
    await c.expect_close()


async def test_a_close_with_requests_sent_past_it_is_staged(served: Any) -> None:
    """Requests pipelined after one asking to close are dropped, but the
    connection ends with the server's EOF after the answer, not a reset
    (RFC 9112 9.6)."""
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/a", b"connection: close\r\n") + get("/b") * 8000)
    head, body = await c.response()
    assert body == b"path=/a query=" and (b"connection", b"close") in head.headers
    with trio.fail_after(5):
        assert await c.stream.receive_some(65536) == b""  # EOF (a reset raises)


async def test_percent_encoded_path_is_decoded(served: Any) -> None:
    app, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/caf%C3%A9"))
    await c.response()
    assert app.scopes[0]["path"] == "/café" and app.scopes[0]["raw_path"] == b"/caf%C3%A9"


async def test_connections_over_the_cap_get_503(served: Any) -> None:
    _, server, connect, _ = served
    held = [await connect() for _ in range(4)]
    for h in held:
        await h.stream.send_all(get("/hold"))
        await h.response()
    extra = await connect()
    await extra.stream.send_all(get("/x"))
    head, body = await extra.response()
    assert head.status_code == 503 and dict(head.headers)[b"retry-after"] == b"1"
    assert b"overloaded" in body and server.refused == 1
    await held[0].stream.aclose()
    with trio.fail_after(5):
        while server.limiter.borrowed_tokens >= 4:
            await trio.sleep(0.01)
    again = await connect()
    await again.stream.send_all(get("/x"))
    assert (await again.response())[0].status_code == 200


async def test_a_watching_receive_sees_the_disconnect_after_the_answer(served: Any) -> None:
    app, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/watch") + get("/next"))
    assert (await c.response())[1] == b"watched"
    assert (await c.response())[1] == b"path=/next query="
    assert app.watcher_saw == ["disconnect"]


async def test_graceful_shutdown_finishes_in_flight_and_closes_idle(served: Any) -> None:
    app, _server, connect, stop = served
    idle = await connect()
    await idle.stream.send_all(get("/x"))
    await idle.response()
    busy = await connect()
    await busy.stream.send_all(get("/slow"))
    await app.entered.wait()
    stop.set()
    await idle.expect_close()  # idle keep-alive connections close at once
    app.release.set()
    head, body = await busy.response()
    assert body == b"slow done" and dict(head.headers)[b"connection"] == b"close"
    await busy.expect_close()


def _memory_server(app: App, **settings: Any) -> tuple[HttpServer, Any, Any]:
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, **settings))
    client_end, server_end = trio.testing.memory_stream_pair()
    return server, client_end, server_end


async def test_idle_keep_alive_connection_closes_after_the_timeout(
        autojump_clock: trio.testing.MockClock) -> None:
    app = App()
    server, client_end, server_end = _memory_server(app, keep_alive_s=5.0)
    closed_at: list[float] = []
    async with trio.open_nursery() as nursery:
        async def run() -> None:
            await server.serve_stream(server_end, ("10.0.0.1", 1), ("127.0.0.1", 80))
            closed_at.append(trio.current_time())

        nursery.start_soon(run)
        c = Client(client_end)
        start = trio.current_time()
        await c.stream.send_all(get("/x"))
        await c.response()
        await c.expect_close()
    assert closed_at[0] - start == pytest.approx(5.0, abs=0.01)


async def _stalled_write(read_every_s: float | None, path: str = "/big"
                         ) -> tuple[HttpServer, float, bytes]:
    """``GET path`` on a connection whose client takes 64 KiB every
    ``read_every_s`` seconds (None: never reads); how long the server kept
    the connection and the bytes the client got."""
    app = App()
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, send_timeout_s=60.0))
    client_end, server_end = trio.testing.lockstep_stream_pair()  # no buffer between them
    got = bytearray()
    served_for: list[float] = []
    with trio.fail_after(600):
        async with trio.open_nursery() as watch:
            watch.start_soon(server._watch_sends)
            async with trio.open_nursery() as nursery:
                start = trio.current_time()

                async def run() -> None:
                    await server.serve_stream(server_end, ("10.0.0.1", 1), ("127.0.0.1", 80))
                    served_for.append(trio.current_time() - start)

                nursery.start_soon(run)
                await client_end.send_all(get(path, b"connection: close\r\n"))
                while read_every_s is not None:
                    await trio.sleep(read_every_s)
                    try:
                        data = await client_end.receive_some(65536)
                    except trio.BrokenResourceError:
                        break
                    if not data:
                        break
                    got += data
            watch.cancel_scope.cancel()
    return server, served_for[0], bytes(got)


@pytest.mark.parametrize("path", ["/big", "/small"])  # pieces, or one write inline
async def test_a_client_that_reads_nothing_is_cut_off(
        path: str, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "svc.server")
    server, served_for, got = await _stalled_write(None, path)
    assert 60 <= served_for <= 75 and got == b""  # within 1.25 timeouts
    assert server.stalled == 1 and server.connections == set()
    assert "took nothing of an answer for 60 s" in caplog.text


async def test_a_slow_reader_that_keeps_reading_gets_the_whole_answer(
        autojump_clock: trio.testing.MockClock) -> None:
    server, served_for, got = await _stalled_write(50.0)  # 64 KiB every 50 s: 250 s in all
    assert server.stalled == 0 and served_for > 200
    head, body = got.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200 ") and body == BIG_BODY  # every piece, in order


async def test_headers_dripping_in_are_cut_off(autojump_clock: trio.testing.MockClock) -> None:
    app = App()
    server, client_end, server_end = _memory_server(app, keep_alive_s=5.0)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, None, None)
        start = trio.current_time()
        await client_end.send_all(b"GET / HTTP/1.1\r\nhost: t\r\n")
        dripped = 0
        try:
            while True:
                await trio.sleep(1)
                await client_end.send_all(b"x-drip: 1\r\n")
                dripped += 1
        except trio.BrokenResourceError:
            pass
    assert 4 <= dripped <= 5 and trio.current_time() - start < 7
    assert app.scopes == []


async def test_tls_keep_alive(nursery: trio.Nursery, tmp_path: Any) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = str(tmp_path / "c.pem"), str(tmp_path / "k.pem")
    cert.private_key_and_cert_chain_pem.write_to_path(certfile)
    cert.private_key_pem.write_to_path(keyfile)
    app = App()
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, certfile=certfile,
                                            keyfile=keyfile))
    binds = await nursery.start(server.serve, trio.Event())
    assert binds[0].startswith("https://")
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    tcp = await trio.open_tcp_stream("127.0.0.1", int(binds[0].rsplit(":", 1)[1]))
    c = Client(trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1"))
    for path in ("/one", "/two"):
        await c.stream.send_all(get(path))
        _head, body = await c.response()
        assert body == f"path={path} query=".encode()
    assert app.scopes[0]["scheme"] == "https"
    await trio.aclose_forcefully(c.stream)
    nursery.cancel_scope.cancel()


def test_the_smoothed_loop_delay_decides_shedding() -> None:
    server = HttpServer(App(), ServerSettings(host="127.0.0.1", port=0, max_lag_s=0.05))
    server.observe_lag(0.2)  # one pause of the process: not yet overload
    assert not server.shedding and server.lag_s == pytest.approx(0.05)
    for _ in range(5):
        server.observe_lag(0.2)
    assert server.shedding
    for _ in range(12):
        server.observe_lag(0.0)
    assert not server.shedding


async def test_while_shedding_requests_get_a_quick_503_on_a_kept_connection(
        served: Any) -> None:
    app, server, connect, _ = served
    server.shedding = True
    c = await connect()
    await c.stream.send_all(get("/x") + get("/y", method=b"HEAD"))
    head, body = await c.response()
    assert head.status_code == 503 and dict(head.headers)[b"retry-after"] == b"1"
    assert b"overloaded" in body
    head, body = await c.response(head_only=True)
    assert head.status_code == 503
    assert app.scopes == [] and server.shed == 2
    server.shedding = False
    await c.stream.send_all(get("/z"))
    assert (await c.response())[1] == b"path=/z query="


async def test_a_body_cut_off_by_the_client_is_never_handed_over_as_whole() -> None:
    from web.http import Request

    seen: list[object] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        try:
            seen.append(await Request(scope, receive).body(1 << 20))
        except Exception as e:  # recorded for the assertion
            seen.append(e)

    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0))
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, None, None)
        await client_end.send_all(get("/echo", b"content-length: 10\r\n", method=b"POST")
                                  + b"{}   ")
        await client_end.aclose()
    assert len(seen) == 1 and "closed before the whole body" in str(seen[0])


def test_the_service_configuration_reaches_the_server() -> None:
    from svc_engine.config import Config
    from web.main import server_settings

    s = server_settings(Config(max_lag_ms=50, max_connections=7, shutdown_grace_s=3))
    assert (s.max_lag_s, s.max_connections, s.shutdown_grace_s) == (0.05, 7, 3.0)
    assert s.certfile is None and s.keyfile is None
    tls = server_settings(Config(certfile="c.pem", keyfile="k.pem"))
    assert (tls.certfile, tls.keyfile) == ("c.pem", "k.pem")
    assert server_settings(Config(certfile="c.pem")).certfile is None  # both or neither


async def test_http_1_0_is_answered_then_closed(served: Any) -> None:
    app, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(b"GET /old HTTP/1.0\r\n\r\n")
    head, body = await c.response()
    assert head.status_code == 200 and body == b"path=/old query="
    assert app.scopes[-1]["http_version"] == "1.0"
    assert dict(head.headers)[b"connection"] == b"close"
    await c.expect_close()


async def test_a_streamed_answer_to_http_1_0_ends_with_the_close(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(b"GET /stream HTTP/1.0\r\n\r\n")
    block = await c._line(b"\r\n\r\n")
    assert b"transfer-encoding" not in block.lower() and b"connection: close" in block
    await c.expect_close()
    assert c.buffer == b"one,two,three"


@pytest.mark.parametrize("ask", [b"connection: close\r\n", b"Connection: keep-alive, CLOSE\r\n"])
async def test_a_client_asking_to_close_gets_its_answer_then_the_close(served: Any,
                                                                       ask: bytes) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/last", ask) + get("/never"))
    head, body = await c.response()
    assert body == b"path=/last query=" and dict(head.headers)[b"connection"] == b"close"
    await c.expect_close()
    assert c.buffer == b""  # the pipelined second request was not answered


async def test_an_application_asking_to_close_closes(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/bye"))
    head, body = await c.response()
    assert body == b"bye" and dict(head.headers)[b"connection"] == b"Close"
    await c.expect_close()


async def test_a_header_that_would_split_the_answer_is_a_500(served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/split") + get("/next"))
    head, body = await c.response()
    assert head.status_code == 500 and b"internal_error" in body
    assert not any(k == b"set-cookie" for k, _ in head.headers)
    assert (await c.response())[1] == b"path=/next query="  # still in step


@pytest.mark.parametrize(("path", "status"), [("/empty", 204), ("/not-modified", 304)])
async def test_no_content_has_no_body(served: Any, path: str, status: int) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get(path) + get("/next"))
    head, _ = await c.response(head_only=True)
    assert head.status_code == status and b"transfer-encoding" not in dict(head.headers)
    assert (await c.response())[1] == b"path=/next query="  # nothing between the two


async def test_a_port_in_use_is_a_plain_error() -> None:
    from web.server import ListenFailed

    taken = trio.socket.socket()
    await taken.bind(("127.0.0.1", 0))
    taken.listen(1)
    port = taken.getsockname()[1]
    server = HttpServer(App(), ServerSettings(host="127.0.0.1", port=port))
    with taken, pytest.raises(ListenFailed, match=f"cannot listen on 127.0.0.1:{port}"):
        await server.serve(trio.Event())


def test_the_service_says_so_when_its_port_is_taken(tmp_path: Any) -> None:
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "web.cli", "serve", "--port", str(port), "--data",
             str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"svc: cannot listen on 127.0.0.1:{port}" in done.stderr
    assert "SVC_PORT or --port" in done.stderr
    assert "Traceback" not in done.stderr
    # An address that is not this machine's: the hint names the host, not the port.
    elsewhere = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--port", "0", "--host", "192.0.2.1",
         "--data", str(tmp_path / "data")], capture_output=True, text=True, timeout=60)
    assert elsewhere.returncode == 1 and "Traceback" not in elsewhere.stderr
    assert "SVC_HOST or --host" in elsewhere.stderr, elsewhere.stderr


@pytest.mark.parametrize(("env", "said"), [
    ({"SVC_CERTFILE": "/nonexistent/cert.pem", "SVC_KEYFILE": "/nonexistent/key.pem"},
     "svc: validation_error: SVC_CERTFILE/SVC_KEYFILE: cannot load /nonexistent/cert.pem"),
    ({"SVC_WEBHOOK_CA_BUNDLE": "/nonexistent/ca.pem"},
     "svc: validation_error: SVC_WEBHOOK_CA_BUNDLE: cannot load /nonexistent/ca.pem"),
    ({"SVC_GEOIP_DB": "/nonexistent/country.mmdb"},
     "svc: validation_error: SVC_GEOIP_DB: cannot open /nonexistent/country.mmdb"),
    ({"SVC_GEOIP_DB": "/etc/hostname"},  # readable, but no MaxMind database
     "svc: validation_error: SVC_GEOIP_DB: cannot open /etc/hostname as a MaxMind"),
    ({"SVC_LOG_LEVEL": "verbose"}, "svc: validation_error: SVC_LOG_LEVEL: 'verbose'"),
    ({"SVC_CERTFILE": "/nonexistent/cert.pem"},
     "svc: validation_error: SVC_CERTFILE and SVC_KEYFILE go together"),
])
def test_the_service_refuses_a_setting_it_cannot_use_in_one_line(
        tmp_path: Any, env: dict[str, str], said: str) -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--port", "0", "--data",
         str(tmp_path / "data")], capture_output=True, text=True, timeout=60,
        env={**os.environ, **env})
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(said), done.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made


def test_the_service_says_so_when_it_cannot_map_its_store(tmp_path: Any) -> None:
    """The default map (256 GiB of address space) under an address-space
    limit of 8 GiB: one line naming the setting, no traceback, exit 1; the
    data dir (LMDB wrote its two meta pages before the map failed) opens
    afterwards within the limit."""
    import resource
    import subprocess
    import sys

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))

    env = {k: v for k, v in os.environ.items() if k != "SVC_MAP_SIZE"}
    done = subprocess.run(
        [sys.executable, "-m", "web.cli", "serve", "--port", "0", "--data",
         str(tmp_path / "data")], capture_output=True, text=True, timeout=60,
        preexec_fn=limited, env=env)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("svc: cannot map the store in "), lines
    assert "SVC_MAP_SIZE asks for 256 GiB" in lines[0] and "ulimit -v" in lines[0]
    from storage.lmdb_store import LmdbStore

    store = LmdbStore(str(tmp_path / "data"), map_size=64 << 20)
    try:
        assert store.meta("schema_version") is not None
    finally:
        store.close()


async def test_requests_h11_parses_and_common_ones_alternate_on_one_connection(
        served: Any) -> None:
    """Chunked bodies, bare-LF heads and 100-continue go through h11; the
    plain requests around them, pipelined in the same writes, still arrive
    whole and in order."""
    _, _, connect, _ = served
    c = await connect()
    chunked = (get("/echo", b"transfer-encoding: chunked\r\n", method=b"POST")
               + b"3\r\nabc\r\n0\r\n\r\n")
    plain = get("/echo", b"content-length: 2\r\n", method=b"POST") + b"hi"
    bare_lf = b"GET /lf HTTP/1.1\nhost: t\n\n"
    await c.stream.send_all(plain + chunked + plain + bare_lf + chunked + get("/last"))
    bodies = [(await c.response())[1] for _ in range(6)]
    assert bodies == [b"hi", b"abc", b"hi", b"path=/lf query=", b"abc", b"path=/last query="]


async def test_a_body_arriving_a_byte_at_a_time_is_whole() -> None:
    seen: list[bytes] = []

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        body = await _whole_body(receive)
        seen.append(body)
        await _answer(send, 200, body)

    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0))
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, None, None)
        c = Client(client_end)
        for byte in get("/echo", b"content-length: 5\r\n", method=b"POST") + b"hello":
            await client_end.send_all(bytes([byte]))
        head, body = await c.response()
        assert head.status_code == 200 and body == b"hello"
        await client_end.send_all(get("/echo", b"content-length: 3\r\n", method=b"POST")
                                  + b"abc")
        assert (await c.response())[1] == b"abc"
        await client_end.aclose()
    assert seen == [b"hello", b"abc"]


async def test_a_head_cut_off_by_the_close_gets_a_400() -> None:
    server = HttpServer(App(), ServerSettings(host="127.0.0.1", port=0))
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, None, None)
        await client_end.send_all(b"GET / HTTP/1.1\r\nhost: t\r\n")
        await client_end.send_eof()  # the client stops sending, mid-head
        c = Client(client_end)
        head, _ = await c.response()
        assert head.status_code == 400


async def test_a_body_that_came_with_its_head_is_handed_over_in_the_scope(
        served: Any) -> None:
    """web/http.py reads such a body without waiting; an application reading
    receive() still gets it, and a body still on its way is not in the scope."""
    app, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(get("/ext", b"content-length: 5\r\n", method=b"POST") + b"hello")
    assert (await c.response())[1] == b"b'hello'|hello"
    app.entered = trio.Event()
    await c.stream.send_all(get("/ext", b"content-length: 5\r\n", method=b"POST") + b"he")
    with trio.fail_after(5):
        await app.entered.wait()  # the application started before the rest arrived
    await c.stream.send_all(b"llo")
    assert (await c.response())[1] == b"None|hello"
    await c.stream.send_all(get("/ext"))
    assert (await c.response())[1] == b"b''|"


async def test_the_request_reads_a_handed_over_body_with_its_limit() -> None:
    from svc_engine.errors import PayloadTooLarge
    from web.http import Request

    async def never() -> dict[str, Any]:
        raise AssertionError("receive() is not needed")

    scope = {"method": "POST", "path": "/", "headers": [(b"content-length", b"5")],
             "extensions": {"svc.body": b"hello"}}
    assert await Request(scope, never).body(5) == b"hello"
    with pytest.raises(PayloadTooLarge):
        await Request(scope, never).body(4)


async def test_a_streamed_body_of_exactly_the_limit_is_read() -> None:
    """A body that arrives after its head, in pieces, with its Content-Length:
    exactly the limit is read whole (SVC_MAX_BODY_BYTES: larger is 413), one
    byte over is refused before any of it is read."""
    from svc_engine.errors import PayloadTooLarge
    from web.http import Request

    def streamed(size: int) -> Request:
        pieces = [b"a" * (size // 2), b"b" * (size - size // 2)]

        async def receive() -> dict[str, Any]:
            body = pieces.pop(0)
            return {"type": "http.request", "body": body, "more_body": bool(pieces)}

        scope = {"method": "POST", "path": "/",
                 "headers": [(b"content-length", str(size).encode())]}
        return Request(scope, receive)

    assert await streamed(1024).body(1024) == b"a" * 512 + b"b" * 512
    with pytest.raises(PayloadTooLarge):
        await streamed(1025).body(1024)


async def test_hundreds_of_requests_pipelined_in_one_write_are_all_answered(
        served: Any) -> None:
    _, _, connect, _ = served
    c = await connect()
    await c.stream.send_all(b"".join(get(f"/p{i}") for i in range(300)))
    bodies = [(await c.response())[1] for _ in range(300)]
    assert bodies == [f"path=/p{i} query=".encode() for i in range(300)]
