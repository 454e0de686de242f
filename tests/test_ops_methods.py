"""/healthz and /metrics answer GET and HEAD only: any other method is the
405 ``method_not_allowed`` the rest of the service answers (the JSON error
body and ``Allow: GET, HEAD``), and /healthz keeps answering while the
service turns requests away (the front's in-flight cap, the server's load
shedding)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import attrs
import orjson
import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from tests.conftest import App, running_app
from web.server import HttpServer, ServerSettings

TOKEN = "scrape-token-0123456789"
OTHER_METHODS = ["POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


@pytest.fixture
async def metered(store: LmdbStore, config: Config) -> AsyncIterator[App]:
    async with running_app(store, attrs.evolve(config, metrics_token=TOKEN),
                           TrioWallClock()) as app:
        yield app


def _is_405(r: Any) -> None:
    assert r.status_code == 405, (r.status_code, r.text)
    assert r.headers["allow"] == "GET, HEAD"
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert error["code"] == "method_not_allowed" and error["message"]


@pytest.mark.parametrize("method", OTHER_METHODS)
async def test_healthz_answers_other_methods_405(app: App, method: str) -> None:
    async with app.client() as c:
        r = await c.request(method, "/healthz", content=b'{"x": 1}')
    _is_405(r)


async def test_healthz_get_and_head_stay_200(app: App) -> None:
    async with app.client() as c:
        got = await c.get("/healthz")
        head = await c.head("/healthz")
    assert got.status_code == 200 and got.json() == {"status": "ok"}
    assert head.status_code == 200 and head.content == b""


@pytest.mark.parametrize("method", OTHER_METHODS)
async def test_metrics_answer_other_methods_405_before_the_token(
        metered: App, method: str) -> None:
    async with metered.client() as c:
        with_token = await c.request(method, "/metrics",
                                     headers={"authorization": f"Bearer {TOKEN}"})
        without = await c.request(method, "/metrics")
        assert (await c.get("/metrics")).status_code == 401
        assert (await c.head("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
                ).status_code == 200
    _is_405(with_token)
    _is_405(without)


@pytest.mark.parametrize("method", ["GET", *OTHER_METHODS])
async def test_metrics_off_are_404_for_every_method(app: App, method: str) -> None:
    async with app.client() as c:
        r = await c.request(method, "/metrics")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_healthz_is_exempt_from_the_in_flight_cap(app: App) -> None:
    app.front.in_flight = app.front.max_in_flight  # at capacity
    try:
        async with app.client() as c:
            assert (await c.get("/healthz")).status_code == 200
            _is_405(await c.post("/healthz"))
            assert (await c.get("/v1/links")).status_code == 503
    finally:
        app.front.in_flight = 0


async def test_a_request_is_uncounted_only_while_its_body_is_awaited(app: App) -> None:
    """The cap counts work, not waiting for a client's body: each wait for a
    body part gives the request's place back, and once the body is whole a
    wait (Quart's for a disconnect while its handler works) keeps it."""
    front = app.front
    seen: list[int] = []
    messages = iter([{"type": "http.request", "body": b"{", "more_body": True},
                     {"type": "http.request", "body": b"}"},  # ASGI: more_body False
                     {"type": "http.disconnect"}])

    async def receive() -> dict[str, Any]:
        seen.append(front.in_flight)
        return next(messages)

    front.in_flight = 1  # the request's own place, as the front counts it
    try:
        aside = front._receive_aside(receive)
        assert [(await aside())["type"] for _ in range(3)] == [
            "http.request", "http.request", "http.disconnect"]
        assert seen == [0, 0, 1] and front.in_flight == 1
    finally:
        front.in_flight = 0


async def test_the_access_log_is_written_only_when_switched_on(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """SVC_ACCESS_LOG: off writes no line a request, on writes one."""
    lines: list[tuple[str, str, int]] = []
    monkeypatch.setattr("web.logs.access_line",
                        lambda method, path, status, ms: lines.append((method, path, status)))
    for on, path in ((False, "/healthz"), (True, "/no-such-slug")):
        app.front.access_log = on
        async with app.client() as c:
            await c.get(path)
    assert lines == [("GET", "/no-such-slug", 404)]


async def test_the_dashboard_is_under_the_in_flight_cap(app: App) -> None:
    """README: beyond ``SVC_MAX_IN_FLIGHT`` requests get a quick 503, the
    dashboard's pages as the API's."""
    app.front.in_flight = app.front.max_in_flight
    try:
        async with app.client() as c:
            for path in ("/dashboard", "/dashboard/sign-in"):
                r = await c.get(path)
                assert r.status_code == 503 and r.headers["retry-after"] == "1", path
                assert r.json()["error"]["code"] == "overloaded"
    finally:
        app.front.in_flight = 0
    async with app.client() as c:
        assert (await c.get("/dashboard")).status_code == 200
        assert (await c.get("/dashboard/no-such-page")).status_code == 404
        assert (await c.get("/healthz")).status_code == 200
    assert app.front.in_flight == 0  # every answered request gave its place back


async def _raw(server: HttpServer, request: bytes) -> tuple[int, dict[bytes, bytes], bytes]:
    """One request over an in-memory connection; (status, headers, body)."""
    client, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(server.serve_stream, server_end, ("10.0.0.1", 1), ("127.0.0.1", 80))
        await client.send_all(request)
        data = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in data:
                data += await client.receive_some(65536)
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            headers = {k.strip().lower(): v.strip()
                       for k, _, v in (ln.partition(b":") for ln in lines[1:])}
            while len(body) < int(headers.get(b"content-length", b"0")):
                body += await client.receive_some(65536)
        await client.aclose()
    return int(lines[0].split(b" ")[1]), headers, body


async def test_healthz_is_exempt_from_load_shedding_and_still_405s(app: App) -> None:
    server = HttpServer(app.front, ServerSettings(host="127.0.0.1", port=0))
    server.shedding = True
    status, _, _ = await _raw(server, b"GET /healthz HTTP/1.1\r\nhost: t\r\n\r\n")
    assert status == 200
    status, _, _ = await _raw(server, b"GET /healthz?probe=1 HTTP/1.1\r\nhost: t\r\n\r\n")
    assert status == 200  # a query does not make it another path
    status, headers, body = await _raw(
        server, b"POST /healthz HTTP/1.1\r\nhost: t\r\ncontent-length: 0\r\n\r\n")
    assert status == 405 and headers[b"allow"] == b"GET, HEAD"
    assert orjson.loads(body)["error"]["code"] == "method_not_allowed"
    status, _, _ = await _raw(server, b"GET /v1/links HTTP/1.1\r\nhost: t\r\n\r\n")
    assert status == 503  # everything else is shed
