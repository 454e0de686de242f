"""The answers of the served OpenAPI document against a real run: every
operation is called on the service in-process (real LMDB, real handlers,
webhooks sent to a real receiver), and every answer, success or error, must
be documented for its status and fit the documented schema with no field the
schema does not name (tests/openapi_contract.py). A field added to a JSON
serializer without the document, an error status the document does not list,
or a Retry-After it does not mention fails here."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import cbor2
import pytest
import trio
import trustme

from actors.clock import TrioWallClock
from storage import layout
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.plans import Plan
from tests.conftest import App, running_app
from tests.deferred_helpers import SDK, init_body, new_install
from tests.openapi_contract import Recorder, contract_of
from tests.webhook_receiver_fixture import (
    Receiver,
    make_ca,
    ok,
    running_receiver,
    status,
    webhook_config,
)
from web.api_events import OPENAPI_PATHS as EVENTS_DOCUMENTED
from web.auth import RateLimiter

EP = "/v1/webhooks/endpoints"
DL = "/v1/webhooks/deliveries"
MISSING = "9b9c8d7e-0000-4000-8000-000000000000"


@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    return make_ca(tmp_path)


@pytest.fixture
def config(data_dir: str, ca: tuple[trustme.CA, str]) -> Config:
    return webhook_config(data_dir, ca[1])  # overrides conftest's: trust the test CA


@pytest.fixture
async def receiver(ca: tuple[trustme.CA, str], app: App) -> AsyncIterator[Receiver]:
    async with running_receiver(ca[0], app.services.clock) as r:
        yield r


async def _until(check: Callable[[], bool], timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.005)


def _event(name: str = "purchase", **extra: Any) -> dict[str, Any]:
    return {"id": new_install(), "name": name, "occurredAt": "2026-09-01T10:00:00Z", **extra}


async def _links_and_domains(app: App, rec: Recorder) -> dict[str, Any]:
    async with rec.client(app, "sk_test") as c:
        assert (await c.get("/v1/openapi.json")).status_code == 200
        assert (await c.post("/v1/domains", json={"domain": "go.example.com"})).status_code == 201
        await c.get("/v1/domains")
        await c.post("/v1/domains", json={"domain": "go.example.com"})  # 400: in use
        await c.post("/v1/domains", json={"domain": "svc.test"})  # 400: the service's own
        await c.post("/v1/domains", json={"domain": "gone.example.com"})
        await c.delete("/v1/domains/gone.example.com")
        await c.delete("/v1/domains/other.example.com")  # 404
        await c.delete("/v1/domains/1.2.3.4")  # 400
        full: dict[str, Any] = (await c.post("/v1/links", json={
            "path": "/p/1", "params": {"a": "b", "n": 1.5, "ok": True}, "title": "T",
            "campaign": "c", "channel": "ch", "tags": ["x"], "webFallbackUrl": "https://e.example/",
            "iosFallbackUrl": "https://i.example/", "androidFallbackUrl": "https://a.example/",
            "ogTitle": "o", "ogDescription": "d", "ogImageUrl": "https://e.example/i.png",
            "expiresAt": "2099-01-01T00:00:00Z", "slug": "full"})).json()
        await c.post("/v1/links", json={"path": "/p/1", "slug": "full"})  # 400: taken
        await c.post("/v1/links", json={"domain": "go.example.com", "slug": "on-custom"})
        await c.post("/v1/links", json={"domain": "x.example.net"})  # 400 invalid_domain
        await c.post("/v1/links", json={"webFallbackUrl": "ftp://x.example/"})  # blocked
        await c.get("/v1/links", params={"limit": 1})
        await c.get("/v1/links", params={"limit": 0})  # 400
        await c.get(f"/v1/links/{full['id']}")
        await c.get("/v1/links/not-a-uuid")  # 400
        await c.patch(f"/v1/links/{full['id']}", json={"title": None, "tags": ["y"]})
        gone = (await c.post("/v1/links", json={"path": "/gone"})).json()
        await c.delete(f"/v1/links/{gone['id']}")
        for method in ("GET", "PATCH", "DELETE"):  # 404s
            await c.request(method, f"/v1/links/{gone['id']}", json={})
        r = await c.post("/v1/links", json={"path": "/i"}, headers={"idempotency-key": "k1"})
        assert r.status_code == 201
        replay = await c.post("/v1/links", json={"path": "/i"}, headers={"idempotency-key": "k1"})
        assert replay.headers["idempotent-replayed"] == "true"
        await c.post("/v1/links", json={"path": "/j"}, headers={"idempotency-key": "k1"})  # 409
        await c.post("/v1/links", json={}, headers={"idempotency-key": "has space"})  # 400
        await c.post("/v1/links", content=b"{}", headers={"content-type": "text/plain"})  # 415
        await c.post("/v1/links", content=b"{nope")  # 400: not JSON
        await c.post("/v1/sdk/links", json={})  # 403: a secret key on an SDK call
        for method, path, body in (
                ("GET", "/v1/deferred/settings", None),
                ("PATCH", "/v1/deferred/settings", {"webFallbackTokens": True}),
                ("PATCH", "/v1/deferred/settings", {"probabilisticWindowMinutes": 1}),
                ("GET", "/v1/platforms", None),
                ("PATCH", "/v1/platforms", {"ios": {"appStoreId": "1234567890",
                                                    "bundleId": "com.example.app",
                                                    "teamId": "ABCDE12345"},
                                            "android": {"packageName": "com.example.app"}}),
                ("PATCH", "/v1/platforms", {"web": {"fallbackUrl": "ftp://x.example/"}}),
                ("GET", "/v1/link-destinations", None),
                ("PATCH", "/v1/link-destinations", {"sdkAllowedHosts": []})):
            await c.request(method, path, json=body)
    async with rec.client(app) as c:
        await c.get("/v1/links")  # 401
    async with rec.client(app, "pk_test", **SDK) as c:
        await c.get("/v1/links")  # 403
        await c.post("/v1/sdk/links", json={"path": "/from/app"})
    return full


async def _sdk_events_and_analytics(app: App, rec: Recorder, link: dict[str, Any]) -> None:
    install, other = new_install(), new_install()
    async with rec.client(app, "pk_test", **SDK) as pk, rec.client(app, "sk_test") as sk:
        await pk.post("/v1/sdk/init", json=init_body(install, "ios"),
                      headers={"idempotency-key": "launch-1"})
        await pk.post("/v1/sdk/init", json=init_body(install, "ios"),
                      headers={"idempotency-key": "launch-2"})  # 409 install_id_conflict
        await pk.post("/v1/sdk/resolve", json={"url": link["url"], "installId": install})
        await pk.post("/v1/sdk/resolve", json={"url": "https://svc.test/nope",
                                               "installId": install})  # 404
        await pk.post("/v1/sdk/handoffs/claim", json={"userId": "u1", "installId": install})
        await sk.post("/v1/handoffs", json={"userId": "u1", "linkId": link["id"]})
        await sk.post("/v1/handoffs", json={"userId": "u1", "linkId": MISSING})  # 404
        await pk.post("/v1/sdk/handoffs/claim", json={"userId": "u1", "installId": install})
        await pk.post("/v1/sdk/handoffs/claim", json={"userId": "u1", "installId": other})
        await pk.post("/v1/sdk/events", json={"installId": install, "events": [
            _event(linkId=link["id"], properties={"value": 3}), _event(name="")]})
        await pk.post("/v1/sdk/events", json={"installId": other, "events": [_event()]})
        day = {"from": "2026-08-01", "to": "2026-09-30"}
        await sk.get("/v1/analytics/summary", params={**day, "top": 5})
        await sk.get("/v1/analytics/summary", params={"linkId": MISSING})  # 404
        await sk.get("/v1/analytics/summary", params={"from": "yesterday"})  # 400
        await sk.get(f"/v1/analytics/links/{link['id']}", params=day)
        await sk.get(f"/v1/analytics/links/{link['id']}/funnel", params=day)
        for fmt in ("csv", "ndjson"):
            await sk.get("/v1/export/conversions", params={**day, "format": fmt})


async def _webhooks(app: App, rec: Recorder, receiver: Receiver) -> None:
    assert app.services.webhooks is not None
    tables = app.services.webhooks.tables

    def _status(delivery_id: str) -> str | None:
        d = tables.delivery(delivery_id)
        return None if d is None else d.status.value

    async with rec.client(app, "sk_test") as c:
        ep = (await c.post(EP, json={"url": receiver.url, "description": "orders"})).json()
        await c.post(EP, json={"url": "http://hooks.example.com/"})  # 400
        await c.get(EP)
        await c.get(f"{EP}/{ep['id']}")
        await c.get(f"{EP}/not-a-uuid")  # 404
        await c.patch(f"{EP}/{ep['id']}", json={"events": ["click", "install"]})
        view = (await c.post(f"{EP}/{ep['id']}/test")).json()
        await _until(lambda: _status(view["id"]) == "Delivered")
        await c.get(DL)
        await c.get(DL, params={"endpointId": ep["id"], "status": "delivered"})
        await c.get(DL, params={"status": "nope"})  # 400
        await c.get(DL, params={"bogus": "1"})  # 400
        await c.get(DL, params={"endpointId": MISSING})  # 404
        await c.get(f"{DL}/{view['id']}")
        await c.get(f"{DL}/{MISSING}")  # 404
        await c.post(f"{DL}/{view['id']}/retry")  # 409: not Failed
        receiver.respond = status(500)  # a failed manual attempt: Failed at once
        await c.post(f"{DL}/{view['id']}/resend")
        await _until(lambda: _status(view["id"]) == "Failed")
        await c.get(f"{DL}/{view['id']}")  # with a response and two attempts
        receiver.respond = ok
        await c.post(f"{DL}/{view['id']}/retry")
        await _until(lambda: _status(view["id"]) == "Delivered")
        await c.post(f"{EP}/{ep['id']}/disable")
        await c.post(f"{EP}/{ep['id']}/test")  # 409: Off
        await c.post(f"{EP}/{ep['id']}/enable")
        await c.post(f"{EP}/{ep['id']}/rotate-secret")
        await c.delete(f"{EP}/{ep['id']}")
        await c.get(f"{EP}/{ep['id']}")  # 404
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    gone = "9b9c8d7e-0000-4000-8000-000000000000"
    async with rec.client(app, "sk_test") as c:  # 403 forbidden below Growth, each route
        for method, path, body in (("GET", EP, None), ("POST", EP, {"url": receiver.url}),
                                   ("POST", f"{EP}/{gone}/test", None), ("GET", DL, None),
                                   ("GET", f"{DL}/{gone}", None),
                                   ("POST", f"{DL}/{gone}/retry", None),
                                   ("POST", f"{DL}/{gone}/resend", None)):
            r = await c.request(method, path, json=body)
            assert r.status_code == 403 and r.json()["error"]["code"] == "forbidden", path


async def test_every_operation_answers_as_documented(app: App, receiver: Receiver) -> None:
    contract, rec = await contract_of(app, aside=EVENTS_DOCUMENTED)
    link = await _links_and_domains(app, rec)
    await _sdk_events_and_analytics(app, rec, link)
    await _webhooks(app, rec, receiver)
    assert rec.problems == [], "\n".join(rec.problems)
    answered = {(m, p) for m, p, status in rec.seen if status < 300}
    assert set(contract.operations()) - answered == set()
    statuses = {s for _, _, s in rec.seen}
    assert {400, 401, 403, 404, 409, 415} <= statuses, statuses


async def test_a_suspended_project_s_answer_is_documented(app: App) -> None:
    _contract, rec = await contract_of(app)
    await app.services.store.set_project_suspended(app.project_id, True)
    async with rec.client(app, "sk_test") as c:
        r = await c.get("/v1/links")
    assert r.status_code == 403 and r.json()["error"]["code"] == "project_suspended"
    assert rec.problems == [], "\n".join(rec.problems)


async def test_events_and_analytics_answer_as_documented(app: App) -> None:
    _contract, rec = await contract_of(app)
    async with rec.client(app, "sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/e"})).json()
    await _sdk_events_and_analytics(app, rec, link)
    assert rec.problems == [], "\n".join(rec.problems)


async def test_a_param_float_past_64_bits_is_answered_as_documented(app: App) -> None:
    """``1e20`` is a float the parser keeps, and JSON Schema calls an integer
    past 64 bits (which a request may not send as an integer): the answers
    that carry it back (the link, the resolved link) must still fit."""
    _contract, rec = await contract_of(app)
    async with rec.client(app, "pk_test") as c:
        r = await c.post("/v1/sdk/links", json={"path": "/p", "params": {"big": 1e20}})
    assert r.status_code == 201 and r.json()["params"] == {"big": 1e20}
    assert rec.problems == [], "\n".join(rec.problems)


async def test_limits_answer_as_documented(store: LmdbStore, config: Config) -> None:
    """413, the per-key and per-client rate limits, the link quota and the
    admission cap: each answered as documented, Retry-After included."""
    config = attrs.evolve(config, rate_limit_per_key=1, max_body_bytes=4096)
    async with running_app(store, config, TrioWallClock()) as app:
        _contract, rec = await contract_of(app)
        async with rec.client(app, "sk_test") as c:
            assert (await c.post("/v1/links", json={"title": "t" * 5000})).status_code == 413
            codes = [(await c.get("/v1/links")).status_code for _ in range(4)]
        assert 429 in codes, codes
        await store.set_plan(app.org_id, Plan.STARTER)
        await store.write(lambda txn: txn.put(b"org_links:" + layout.uid(app.org_id),
                                              cbor2.dumps(10**6), db=store.db(b"meta")))
        async with rec.client(app, "pk_test", **SDK) as c:
            assert (await c.post("/v1/sdk/links", json={})).status_code == 429
        app.front.client_limiter = RateLimiter(1)  # the per-client limit, on a key-less call
        async with rec.client(app) as c:
            codes = [(await c.get("/v1/openapi.json")).status_code for _ in range(4)]
        assert 429 in codes, codes
        app.front.client_limiter = RateLimiter(0)
        app.front.max_in_flight = 0  # at capacity: 503 overloaded
        async with rec.client(app, "pk_test", **SDK) as c:
            assert (await c.post("/v1/sdk/init", json=init_body(new_install(), "ios"))
                    ).status_code == 503
    assert rec.problems == [], "\n".join(rec.problems)
    assert {413, 429, 503} <= {s for _, _, s in rec.seen}
