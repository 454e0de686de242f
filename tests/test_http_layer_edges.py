"""Edges of the HTTP layer that the other tests leave unexercised.

web/connection.py: a head no parser could finish (a TLS handshake on the
plain port, a head growing past the limit without its end) refused at once;
a target neither origin nor absolute form; a client that resets or goes away
while the connection waits for a head, drains a refusal, sheds load, or
while the application answers (no traceback, the server goes on); a
chunked body with broken framing read by the API (400, then the close); a
framework's watcher that gets the disconnect only once the answer is out.
web/front.py: the ASGI lifespan, a Range ignored on the dashboard, HSTS on
the dashboard over TLS, a dashboard body refused by the connection counted
as its 413. web/http.py: the API's body timeout (408), a chunked body over
the limit (413), JSON nested too deep (400), a deep body whose long digits
are exact. web/client_facts.py: a GeoIP database that cannot be opened, and
a forwarded address the database cannot read.
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from typing import Any, cast

import attrs
import orjson
import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.errors import SvcError, ValidationError
from tests.conftest import App, running_app
from tests.test_chunked_bodies import chunked
from tests.test_server import Client, get
from web.client_facts import ClientFacts
from web.http import Request, inexact_integer
from web.network_keyring import NetworkKeyring
from web.server import HttpServer, ServerSettings

Message = dict[str, Any]
Asgi = Any


async def _answer(send: Any, status: int, body: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def _echo_path(scope: Message, receive: Any, send: Any) -> None:
    await _answer(send, 200, scope["path"].encode())


class Served:
    """``app`` behind an HttpServer on one in-memory connection; ``ended``
    is set when ``serve_stream`` returned (an exception escaping it fails
    the test through the nursery)."""

    def __init__(self, app: Asgi, **settings: Any) -> None:
        self.server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, **settings))
        client_end, self.server_end = trio.testing.memory_stream_pair()
        self.client = Client(client_end)
        self.ended = trio.Event()

    async def run(self) -> None:
        await self.server.serve_stream(self.server_end, ("10.0.0.1", 1), ("127.0.0.1", 80))
        self.ended.set()

    async def send(self, data: bytes) -> None:
        await self.client.stream.send_all(data)

    async def until_ended(self) -> None:
        with trio.fail_after(30):
            await self.ended.wait()


@asynccontextmanager
async def served(app: Asgi, **settings: Any) -> AsyncIterator[Served]:
    s = Served(app, **settings)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(s.run)
        yield s
        await s.until_ended()


async def _all_of(client: Client) -> bytes:
    """Everything the server sends until it closes."""
    out = client.buffer
    with trio.fail_after(30):
        while True:
            try:
                data = await client.stream.receive_some(65536)
            except trio.BrokenResourceError:
                break
            if not data:
                break
            out += data
    return out


async def _tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A connected loopback TCP pair: (client, server)."""
    listener = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = listener.socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listener.accept()
    await listener.aclose()
    return client, server


def _reset(stream: trio.SocketStream) -> None:
    """Close with a TCP reset (linger 0), as a client killed mid-connection."""
    stream.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    stream.socket.close()


async def _serve_tcp(server: HttpServer, stream: trio.SocketStream, ended: trio.Event) -> None:
    await server.serve_stream(stream, ("127.0.0.1", 1), ("127.0.0.1", 80))
    ended.set()


# -- web/connection.py ----------------------------------------------------------


async def test_a_tls_handshake_on_the_plain_port_is_refused_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    """Bytes that cannot start a request (a TLS ClientHello's first bytes,
    no line end in them) are a 400 at once, not a wait for a head's end
    until the keep-alive timeout."""
    async with served(_echo_path, keep_alive_s=5.0) as s:
        start = trio.current_time()
        await s.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x8a" * 32)
        head, body = await s.client.response()
        assert head.status_code == 400 and b'"code":"bad_request"' in body
        assert (b"connection", b"close") in head.headers
        assert trio.current_time() - start < 1.0
        await s.client.stream.aclose()


async def test_a_head_growing_past_the_limit_without_its_end_is_431_at_once(
        autojump_clock: trio.testing.MockClock) -> None:
    """A head still without its blank line once past ``max_header_bytes``
    is refused then (431), not buffered until it ends or times out."""
    async with served(_echo_path, keep_alive_s=5.0, max_header_bytes=4096) as s:
        start = trio.current_time()
        await s.send(b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + b"a" * 6000)
        head, body = await s.client.response()
        assert head.status_code == 431 and b'"code":"headers_too_large"' in body
        assert trio.current_time() - start < 1.0
        await s.client.stream.aclose()


@pytest.mark.parametrize(("size", "status"), [(4096, 200), (4097, 431)])
async def test_a_whole_head_is_measured_as_h11_counts_up_to_the_limit(
        size: int, status: int) -> None:
    """A head that arrived whole in one read is held to ``max_header_bytes``
    by its names and values (as h11 counts): exactly the limit is served."""
    value = b"a" * (size - len(b"host") - len(b"t") - len(b"x-big"))
    async with served(_echo_path, max_header_bytes=4096) as s:
        await s.send(b"GET / HTTP/1.1\r\nhost: t\r\nx-big: " + value + b"\r\n\r\n")
        head, _ = await s.client.response()
        assert head.status_code == status
        await s.client.stream.aclose()


@pytest.mark.parametrize("target", [b"example.com/x", b"://x/y", b"http:///x", b"http://?q=1",
                                    b"http://u@h/x"])  # no authority, or a user in it
async def test_a_target_neither_origin_nor_absolute_form_is_a_400(target: bytes) -> None:
    seen: list[Message] = []

    async def app(scope: Message, receive: Any, send: Any) -> None:
        seen.append(scope)
        await _answer(send, 200, b"served")

    async with served(app) as s:
        await s.send(b"GET " + target + b" HTTP/1.1\r\nhost: t\r\n\r\n")
        await s.client.stream.send_eof()
        answer = await _all_of(s.client)
    assert answer.startswith(b"HTTP/1.1 400 "), answer[:60]
    assert b"malformed request target" in answer and b"connection: close" in answer
    assert seen == []


async def test_a_client_reset_while_idle_ends_only_its_connection() -> None:
    """A reset while the connection waits for the next head: the
    connection ends, nothing escapes to the server's task."""
    server = HttpServer(_echo_path, ServerSettings(host="127.0.0.1", port=0))
    client, stream = await _tcp_pair()
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_tcp, server, stream, ended)
        c = Client(client)
        await client.send_all(get("/one"))
        assert (await c.response())[1] == b"/one"
        _reset(client)
        with trio.fail_after(10):
            await ended.wait()
    assert server.connections == set()


async def test_a_body_message_without_more_body_is_its_last() -> None:
    """ASGI: ``more_body`` left out means False; the body ends there and no
    further message is waited for."""
    messages = [{"type": "http.request", "body": b'{"a": ', "more_body": True},
                {"type": "http.request", "body": b"1}"}]

    async def receive() -> Message:
        if not messages:
            raise AssertionError("waited for a message after the last")
        return messages.pop(0)

    scope = {"method": "POST", "path": "/b", "headers": []}
    assert await Request(scope, receive).body(1 << 20) == b'{"a": 1}'


async def test_a_client_reset_mid_body_is_a_body_cut_off() -> None:
    """A reset while the application waits for the rest of a body with a
    Content-Length: it is told the client went away (web/http.py: 400, the
    body never acted on), not handed the stream's error."""
    seen: list[object] = []
    first_piece = trio.Event()

    async def app(scope: Message, receive: Any, send: Any) -> None:
        async def receiving() -> Message:
            message = await receive()
            first_piece.set()
            return cast(Message, message)

        try:
            seen.append(await Request(scope, receiving).body(1 << 20))
        except SvcError as e:
            seen.append(e)

    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0))
    client, stream = await _tcp_pair()
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_tcp, server, stream, ended)
        await client.send_all(get("/b", b"content-length: 10\r\n", method=b"POST") + b"ab")
        with trio.fail_after(10):
            await first_piece.wait()
        await trio.testing.wait_all_tasks_blocked()  # the server waits for the rest
        _reset(client)
        with trio.fail_after(10):
            await ended.wait()
    assert len(seen) == 1 and isinstance(seen[0], ValidationError), seen
    assert "closed before the whole body arrived" in str(seen[0])


async def test_a_client_reset_during_a_refusal_s_drain_ends_quietly() -> None:
    """A malformed request is answered 400 and the server drains what the
    client still sends; a reset then ends the drain without an error."""
    server = HttpServer(_echo_path, ServerSettings(host="127.0.0.1", port=0))
    client, stream = await _tcp_pair()
    ended = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_serve_tcp, server, stream, ended)
        await client.send_all(b"NONSENSE\r\n\r\n")
        answer = b""
        with trio.fail_after(10):
            while data := await client.receive_some(65536):  # up to the server's EOF
                answer += data
        assert answer.startswith(b"HTTP/1.1 400 ")
        _reset(client)  # the server is draining: it reads the reset
        with trio.fail_after(10):
            await ended.wait()


async def test_a_shed_request_from_a_client_already_gone_ends_quietly() -> None:
    async def app(scope: Message, receive: Any, send: Any) -> None:
        raise AssertionError("shed requests never reach the application")

    s = Served(app)
    s.server.shedding = True
    await s.send(get("/x"))
    await s.client.stream.aclose()  # gone before the 503 is written
    with trio.fail_after(10):
        await s.run()
    assert s.server.shed == 1


def _gone_app(gone: trio.Event, how: str) -> Asgi:
    """An application that answers only once its client has gone: plainly,
    from a task of its own (as Quart-Trio), or failing (then its 500)."""

    async def app(scope: Message, receive: Any, send: Any) -> None:
        await gone.wait()
        if how == "plain":
            await _answer(send, 200, b"late")
        elif how == "task":
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_answer, send, 200, b"late")
        else:
            raise RuntimeError("broken")

    return app


@pytest.mark.parametrize(("how", "logged"), [("plain", 0), ("task", 0), ("failing", 1)])
async def test_a_client_gone_before_the_answer_is_no_application_error(
        how: str, logged: int, caplog: pytest.LogCaptureFixture) -> None:
    """Answering a client that went away is not the application failing:
    no error is logged for it (a failing application is logged once, and
    its 500 has nowhere to go), and the connection ends quietly."""
    caplog.set_level(logging.INFO)
    gone = trio.Event()
    s = Served(_gone_app(gone, how))
    async with trio.open_nursery() as nursery:
        nursery.start_soon(s.run)
        await s.send(get("/x"))
        await trio.testing.wait_all_tasks_blocked()
        await s.client.stream.aclose()
        gone.set()
        await s.until_ended()
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == logged, [r.getMessage() for r in errors]
    assert all("the application failed on GET /x" in r.getMessage() for r in errors)


async def test_a_watching_receive_gets_the_disconnect_only_after_the_answer() -> None:
    """Quart-Trio watches ``receive`` for the disconnect once the body is
    read, and cancels the request when it comes: it must come only when the
    answer is out, however long the application takes to answer."""
    order: list[str] = []

    async def app(scope: Message, receive: Any, send: Any) -> None:
        body = await receive()
        assert body == {"type": "http.request", "body": b"hi", "more_body": False}

        async def watch() -> None:
            message = await receive()
            order.append(message["type"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch)
            await trio.testing.wait_all_tasks_blocked()  # the watcher waits
            order.append("answering")
            await _answer(send, 200, b"watched")
            order.append("answered")

    async with served(app) as s:
        await s.send(get("/w", b"content-length: 2\r\n", method=b"POST") + b"hi")
        with trio.fail_after(10):
            assert (await s.client.response())[1] == b"watched"
        await s.client.stream.aclose()
    assert order == ["answering", "answered", "http.disconnect"]


# -- the service's front behind its own server ------------------------------------


@asynccontextmanager
async def front_served(app: App) -> AsyncIterator[Served]:
    async with served(app.front) as s:
        yield s


def _bearer(app: App, key: str = "sk_test") -> bytes:
    return b"authorization: Bearer " + app.keys[key].encode() + b"\r\n"


async def test_a_chunked_body_with_broken_framing_is_a_400_then_the_close(app: App) -> None:
    """The API reading a chunked body whose framing breaks half way: 400
    ``validation_error`` (the body never arrived whole), and the connection
    closes after it (the request after it is not read from broken framing).
    The answer says so (``connection: close``): without it a client sends
    its next request on a connection about to close."""
    async with front_served(app) as s:
        await s.send(get("/v1/links", b"transfer-encoding: chunked\r\n"
                         b"content-type: application/json\r\n" + _bearer(app), method=b"POST")
                     + b"3\r\n{\"p\r\nzz\r\n")
        head, body = await s.client.response()
        assert head.status_code == 400, body
        assert (b"connection", b"close") in head.headers
        assert orjson.loads(body)["error"]["code"] == "validation_error"
        with suppress(trio.BrokenResourceError):
            await s.send(get("/healthz"))
        assert await _all_of(s.client) == b""  # closed: /healthz was not answered


async def test_a_dashboard_body_refused_by_the_connection_counts_as_its_413(
        app: App) -> None:
    """A sign-in form in one-byte chunks: the connection answers 413 and
    Quart answers nothing; the front still records the 413 (metrics, log)."""
    async with front_served(app) as s:
        await s.send(get("/dashboard/sign-in", b"transfer-encoding: chunked\r\n"
                         b"content-type: application/x-www-form-urlencoded\r\n",
                         method=b"POST") + chunked(b"email=a%40b.c&" + b"x" * 8000, 1))
        await s.client.stream.send_eof()
        answer = await _all_of(s.client)
    assert answer.startswith(b"HTTP/1.1 413 ") and b"payload_too_large" in answer
    metrics = app.front.metrics.render().decode()
    assert 'svc_http_requests_total{family="dashboard",code="4xx"} 1' in metrics, metrics


async def test_a_chunked_api_body_over_the_limit_is_413(store: LmdbStore,
                                                        config: Config) -> None:
    """No Content-Length to refuse early: the body is counted as it comes
    and refused once past SVC_MAX_BODY_BYTES."""
    small = attrs.evolve(config, max_body_bytes=1000)
    async with running_app(store, small, TrioWallClock()) as app:
        payload = orjson.dumps({"path": "/p", "params": {"x": "y" * 1200}})
        async with front_served(app) as s:
            await s.send(get("/v1/links", b"transfer-encoding: chunked\r\n"
                             b"content-type: application/json\r\n" + _bearer(app),
                             method=b"POST") + chunked(payload, 400))
            head, body = await s.client.response()
            assert head.status_code == 413, body
            assert orjson.loads(body)["error"]["code"] == "payload_too_large"
            await s.client.stream.aclose()


def _sized(size: int) -> bytes:
    """A link's JSON body of exactly ``size`` bytes (blanks after it, which JSON allows)."""
    body = orjson.dumps({"path": "/p"})
    return body + b" " * (size - len(body))


async def test_a_body_of_exactly_the_limit_is_taken_one_byte_more_is_413(
        store: LmdbStore, config: Config) -> None:
    """SVC_MAX_BODY_BYTES is the largest body taken: with its Content-Length
    declared (refused before it is read) and arrived whole with the head on
    the service's own server (taken from the head's read)."""
    small = attrs.evolve(config, max_body_bytes=1000)
    async with running_app(store, small, TrioWallClock()) as app:
        async with app.client("sk_test") as c:
            assert (await c.post("/v1/links", content=_sized(1000))).status_code == 201
            r = await c.post("/v1/links", content=_sized(1001))
            assert r.status_code == 413 and r.json()["error"]["code"] == "payload_too_large"
        for size, status in ((1000, 201), (1001, 413)):
            async with front_served(app) as s:
                await s.send(get("/v1/links", b"content-type: application/json\r\n"
                                 + _bearer(app) + b"content-length: %d\r\n" % size,
                                 method=b"POST") + _sized(size))
                head, body = await s.client.response()
                assert head.status_code == status, body
                await s.client.stream.aclose()


# -- web/front.py ----------------------------------------------------------------


async def test_the_front_completes_the_asgi_lifespan(app: App) -> None:
    incoming = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[Message] = []

    async def receive() -> Message:
        if not incoming:
            raise AssertionError("read past the shutdown")
        return incoming.pop(0)

    async def send(message: Message) -> None:
        sent.append(message)

    with trio.fail_after(5):
        await app.front({"type": "lifespan", "asgi": {"version": "3.0"}}, receive, send)
    assert sent == [{"type": "lifespan.startup.complete"},
                    {"type": "lifespan.shutdown.complete"}]


@pytest.mark.parametrize("headers", [{"range": "bytes=-5"}, {"range": "bytes=0-4"},
                                     {"range": "bytes=0-4", "if-range": "x"}])
async def test_a_range_on_the_dashboard_gets_the_whole_file(app: App,
                                                            headers: dict[str, str]) -> None:
    async with app.client() as c:
        whole = await c.get("/dashboard/static/favicon.svg")
        part = await c.get("/dashboard/static/favicon.svg", headers=headers)
    assert whole.status_code == 200 and len(whole.content) > 5
    assert (part.status_code, part.content) == (200, whole.content)
    assert "content-range" not in part.headers


@pytest.mark.parametrize("tls", [True, False])
async def test_the_dashboard_sends_hsts_only_over_tls(store: LmdbStore, config: Config,
                                                      tls: bool) -> None:
    if tls:
        config = attrs.evolve(config, certfile="cert.pem", keyfile="key.pem")
    async with running_app(store, config, TrioWallClock()) as app, app.client() as c:
        for path in ("/dashboard", "/dashboard/static/favicon.svg"):
            hsts = (await c.get(path)).headers.get("strict-transport-security")
            assert hsts == ("max-age=31536000; includeSubDomains" if tls else None), path


# -- web/http.py -----------------------------------------------------------------


async def test_an_api_body_that_stops_coming_is_a_408(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock) -> None:
    """SVC_BODY_TIMEOUT: a body that stopped half way is 408
    ``request_timeout`` after the timeout, not a request held forever."""
    quick = attrs.evolve(config, body_timeout_s=3)
    async with running_app(store, quick, TrioWallClock()) as app:
        parts = [{"type": "http.request", "body": b'{"path": "/', "more_body": True}]
        sent: list[Message] = []

        async def receive() -> Message:
            if not parts:
                await trio.sleep_forever()  # the rest never comes
            return parts.pop(0)

        async def send(message: Message) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/v1/links",
                 "raw_path": b"/v1/links", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"svc.test"), (b"content-length", b"100"),
                             (b"content-type", b"application/json"),
                             (b"authorization", f"Bearer {app.keys['sk_test']}".encode())],
                 "client": ("127.0.0.1", 5000), "server": ("svc.test", 80)}
        start = trio.current_time()
        with trio.fail_after(60):
            await app.front(scope, receive, send)
        took = trio.current_time() - start
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = orjson.loads(next(m["body"] for m in sent if m["type"] == "http.response.body"))
    assert status == 408 and body["error"]["code"] == "request_timeout"
    assert took == pytest.approx(3, abs=0.1)


def _nested(depth: int) -> bytes:
    return b'{"path": "/p", "params": {"x": ' + b"[" * depth + b"]" * depth + b"}}"


@pytest.mark.parametrize("depth", [40, 300])  # 300: past what orjson writes back (254)
async def test_json_nested_too_deep_is_a_400(app: App, depth: int) -> None:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", content=_nested(depth))
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "validation_error"
    assert error["message"] == "JSON nested deeper than 32 levels"


def test_a_body_nested_past_orjson_with_only_exact_long_numbers_is_exact() -> None:
    """Nested past the 254 levels orjson writes, its integers are walked:
    19 digits within the bounds, and digits in a string, are kept as sent;
    a 20-digit integer past 2^64-1 is still found."""
    exact = b"[" * 300 + b'1234567890123456789, "123456789012345678901234"' + b"]" * 300
    assert inexact_integer(exact) is None
    past = b"[" * 300 + b"98765432109876543210" + b"]" * 300
    assert inexact_integer(past) == ("98765432109876543210", "[0]" * 300)


# -- web/client_facts.py ---------------------------------------------------------


def _request(*headers: tuple[str, str]) -> Request:
    scope = {"method": "GET", "path": "/abc", "query_string": b"",
             "client": ("198.51.100.1", 50000),
             "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]}

    async def receive() -> Message:
        raise AssertionError("no body is read")

    return Request(scope, receive)


def test_a_geoip_database_that_cannot_be_opened_is_logged_and_done_without(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "svc.client")
    missing = str(tmp_path / "nope.mmdb")
    facts = ClientFacts(Config(geoip_db=missing, country_header="CF-IPCountry"),
                        cast(NetworkKeyring, None))
    [record] = caplog.records
    assert record.getMessage().startswith(f"cannot open SVC_GEOIP_DB {missing}: ")
    assert facts.country(_request(("cf-ipcountry", "fr"))) == "FR"
    assert facts.country(_request()) is None


class _Reader:
    """A MaxMind reader's ``get``: ValueError for what is not an address
    (as maxminddb's), else the record."""

    def get(self, ip: str) -> object:
        ipaddress.ip_address(ip)
        return {"country": {"iso_code": "DE"}}


def test_a_forwarded_value_that_is_no_address_has_no_country(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import maxminddb

    monkeypatch.setattr(maxminddb, "open_database", lambda path: _Reader())
    facts = ClientFacts(Config(geoip_db="/geo.mmdb", client_ip_header="X-Forwarded-For"),
                        cast(NetworkKeyring, None))
    assert facts.country(_request(("x-forwarded-for", "192.0.2.7"))) == "DE"
    for junk in ("unknown", "192.0.2.7:443", "_hidden"):
        assert facts.country(_request(("x-forwarded-for", junk))) is None, junk
