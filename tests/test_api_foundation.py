"""Cross-cutting HTTP behaviour and the settings API, through the ASGI front."""

from __future__ import annotations

import logging

import attrs
import orjson
import pytest

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.errors import ActorFailed
from tests.conftest import App, running_app


def _error(resp) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    body = resp.json()
    assert set(body) == {"error"} and {"code", "message"} <= set(body["error"])
    return resp.status_code, body["error"]["code"]


async def test_get_settings_returns_defaults(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.get("/v1/deferred/settings")
    assert r.status_code == 200
    assert r.json() == {"iosLandingPage": False, "webFallbackTokens": False,
                        "probabilisticMatching": False, "probabilisticIpMatching": False,
                        "probabilisticWindowMinutes": 120}


async def test_patch_applies_and_is_shared_by_both_modes(app: App) -> None:
    async with app.client("sk_live") as c:
        r = await c.patch("/v1/deferred/settings", json={"probabilisticMatching": True,
                                                          "probabilisticWindowMinutes": 30})
        assert r.status_code == 200
        assert r.json()["probabilisticMatching"] is True
    async with app.client("sk_test") as c:
        r = await c.get("/v1/deferred/settings")
    assert r.json()["probabilisticMatching"] is True
    assert r.json()["probabilisticWindowMinutes"] == 30
    # durable: the store holds it, not only the actor's memory
    assert app.services.store.get_settings(app.project_id).probabilistic_window_minutes == 30


@pytest.mark.parametrize("body,field", [
    ({"unknownSetting": True}, "unknownSetting"),
    ({"iosLandingPage": "yes"}, "iosLandingPage"),
    ({"probabilisticWindowMinutes": 14}, "probabilisticWindowMinutes"),
    ({"probabilisticWindowMinutes": 361}, "probabilisticWindowMinutes"),
])
async def test_patch_rejections_change_nothing(app: App, body: dict[str, object],
                                               field: str) -> None:
    async with app.client("sk_test") as c:
        r = await c.patch("/v1/deferred/settings", json={"iosLandingPage": True, **body})
        assert _error(r) == (400, "validation_error")
        assert r.json()["error"]["field"] == field
        assert (await c.get("/v1/deferred/settings")).json()["iosLandingPage"] is False


@pytest.mark.parametrize("raw", [b"{", b"[1,2", b"\xff\xfe", b"", b'"just a string"'])
async def test_malformed_bodies_are_400(app: App, raw: bytes) -> None:
    async with app.client("sk_test") as c:
        r = await c.patch("/v1/deferred/settings", content=raw)
    assert _error(r) == (400, "validation_error")


async def test_deep_json_is_400(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.patch("/v1/deferred/settings", content=b"[" * 5000 + b"]" * 5000)
    assert _error(r) == (400, "validation_error")


@pytest.mark.parametrize(("body", "deep"), [
    (b'{"a":1,"b":"x"}', False),
    (b"[" * 32 + b"]" * 32, False),  # the limit itself
    (b"[" * 33 + b"]" * 33, True),
    (b'{"a":' * 33 + b"1" + b"}" * 33, True),
    (b'{"s":"' + b"[{" * 40 + b'"}', False),  # brackets inside a string: walked, flat
    (b"[" + b",".join([b'{"a":[1]}'] * 40) + b"]", False),  # wide, three deep
])
def test_json_nesting_is_judged_by_levels_not_brackets(body: bytes, deep: bool) -> None:
    import orjson

    from web.http import too_deep

    assert too_deep(body, orjson.loads(body)) is deep


async def test_oversized_body_is_413(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.patch("/v1/deferred/settings", content=b" " * (2 << 20))
    assert _error(r) == (413, "payload_too_large")


async def test_non_json_content_type_is_415(app: App) -> None:
    async with app.client("sk_test", **{"content-type": "text/plain"}) as c:
        r = await c.patch("/v1/deferred/settings", content=b"{}")
    assert r.status_code == 415


@pytest.mark.parametrize("ctype", ["Application/JSON", "application/json; charset=UTF-8",
                                   "APPLICATION/JSON ; charset=utf-8",
                                   "application/vnd.example+json"])
async def test_json_media_types_are_matched_without_case(app: App, ctype: str) -> None:
    """RFC 9110: a media type's name is case-insensitive, and parameters follow."""
    async with app.client("sk_test", **{"content-type": ctype}) as c:
        r = await c.patch("/v1/deferred/settings", content=b'{"iosLandingPage": true}')
    assert r.status_code == 200, r.text


async def test_an_encoded_body_is_415_not_invalid_json(app: App) -> None:
    import gzip

    async with app.client("sk_test") as c:
        for coding, body in (("gzip", gzip.compress(b"{}")), ("br", b"{}")):
            r = await c.patch("/v1/deferred/settings", content=body,
                              headers={"content-encoding": coding})
            assert _error(r) == (415, "unsupported_media_type"), coding
            assert coding in r.json()["error"]["message"]
        ok = await c.patch("/v1/deferred/settings", content=b"{}",
                           headers={"content-encoding": "identity"})
    assert ok.status_code == 200


# -- authentication (SPEC.md Authentication, rule 4) --------------------------------

@pytest.mark.parametrize("auth", [None, "", "Bearer", "Basic dXNlcjpwYXNz", "Bearer nope",
                                  "Bearer sk_test_" + "A" * 32, "Bearer sk_live_" + "0" * 32])
async def test_missing_malformed_or_unknown_key_is_401(app: App, auth: str | None) -> None:
    headers = {} if auth is None else {"authorization": auth}
    async with app.client(**headers) as c:
        r = await c.get("/v1/deferred/settings")
    assert _error(r) == (401, "invalid_api_key")
    assert r.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize("key", ["pk_test", "pk_live"])
async def test_publishable_key_on_server_endpoint_is_403(app: App, key: str) -> None:
    async with app.client(key) as c:
        r = await c.get("/v1/deferred/settings")
    assert _error(r) == (403, "wrong_key_kind")


async def test_revoked_key_is_401(app: App) -> None:
    store = app.services.store
    key = next(k for k in store.list_keys(app.project_id) if k.name == "default sk_test")
    await store.revoke_key(app.project_id, key.id, 1)
    async with app.client("sk_test") as c:
        r = await c.get("/v1/deferred/settings")
    assert _error(r) == (401, "invalid_api_key")


async def test_suspended_project_is_403(app: App) -> None:
    await app.services.store.set_project_suspended(app.project_id, True)
    async with app.client("sk_test") as c:
        r = await c.get("/v1/deferred/settings")
    assert _error(r) == (403, "project_suspended")


async def test_rate_limit_gives_429_with_retry_after(app: App) -> None:
    app.front.api.limiter.rate = 2.0
    async with app.client("sk_test") as c:
        codes = [(await c.get("/v1/deferred/settings")).status_code for _ in range(6)]
        r = await c.get("/v1/deferred/settings")
    assert codes[:4] == [200] * 4 and 429 in codes
    assert _error(r) == (429, "rate_limited")
    assert int(r.headers["retry-after"]) >= 1


async def test_a_publishable_key_is_not_rate_limited_as_a_key(app: App) -> None:
    """Every install of an app sends the same publishable key: a per-key limit
    (100 a second by default) capped the whole app's launches and events, its
    installs refused with 429 however few each sent. The SDK's calls are
    limited per client address instead (SVC_RATE_LIMIT_PER_CLIENT)."""
    app.front.api.limiter.rate = 2.0
    async with app.client("pk_test") as c:
        codes = [(await c.post("/v1/sdk/resolve", json={
            "url": "http://svc.test/nope", "installId": "4f1c2a3b-5d6e-4f70-8a9b-0c1d2e3f4a5b",
        })).status_code for _ in range(10)]
    assert codes == [404] * 10
    app.front.client_limiter.rate = 2.0
    async with app.client("pk_test") as c:
        limited = [(await c.post("/v1/sdk/resolve", json={})).status_code for _ in range(10)]
    assert 429 in limited


# -- idempotency ----------------------------------------------------------------------

async def test_idempotent_replay_is_byte_for_byte(app: App) -> None:
    async with app.client("sk_test", **{"idempotency-key": "patch-1"}) as c:
        first = await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
        # The state moves on; a retry of the first request still gets its answer.
        async with app.client("sk_test") as other:
            await other.patch("/v1/deferred/settings", json={"webFallbackTokens": True})
        again = await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
    assert first.status_code == again.status_code == 200
    assert first.content == again.content
    assert again.headers["idempotent-replayed"] == "true"
    assert orjson.loads(again.content)["webFallbackTokens"] is False


async def test_same_key_other_body_is_409(app: App) -> None:
    async with app.client("sk_test", **{"idempotency-key": "patch-2"}) as c:
        await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
        r = await c.patch("/v1/deferred/settings", json={"iosLandingPage": False})
    assert _error(r) == (409, "idempotency_key_reused")
    assert app.services.store.get_settings(app.project_id).ios_landing_page is True


async def test_a_body_refused_on_its_own_is_400_under_a_used_key(app: App) -> None:
    """The body is checked before the key is looked up (README, API
    conventions): its own 400, not 409; the retry that succeeded replays."""
    async with app.client("sk_test", **{"idempotency-key": "patch-used"}) as c:
        assert (await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
                ).status_code == 200
        for bad in ({"nope": 1}, {"probabilisticWindowMinutes": 5}, {"iosLandingPage": "yes"},
                    []):
            assert _error(await c.patch("/v1/deferred/settings", json=bad)) == (
                400, "validation_error"), bad
        again = await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
    assert again.status_code == 200 and again.headers["idempotent-replayed"] == "true"


async def test_keys_are_scoped_per_mode(app: App) -> None:
    async with app.client("sk_test", **{"idempotency-key": "k"}) as c:
        await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
    async with app.client("sk_live", **{"idempotency-key": "k"}) as c:
        r = await c.patch("/v1/deferred/settings", json={"iosLandingPage": False})
    assert r.status_code == 200 and "idempotent-replayed" not in r.headers


async def test_malformed_idempotency_key_is_400(app: App) -> None:
    async with app.client("sk_test", **{"idempotency-key": "x" * 300}) as c:
        r = await c.patch("/v1/deferred/settings", json={})
    assert _error(r) == (400, "validation_error")


async def test_refused_request_is_not_recorded(app: App) -> None:
    async with app.client("sk_test", **{"idempotency-key": "k2"}) as c:
        r1 = await c.patch("/v1/deferred/settings", json={"nope": 1})
        r2 = await c.patch("/v1/deferred/settings", json={"nope": 1})
    assert r1.status_code == r2.status_code == 400
    assert "idempotent-replayed" not in r2.headers


# -- routing and failures ------------------------------------------------------------

async def test_unknown_api_path_is_json_404(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.get("/v1/nothing/here")
    assert _error(r) == (404, "not_found")


async def test_wrong_method_is_json_405_with_allow(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.delete("/v1/deferred/settings")
    assert _error(r) == (405, "method_not_allowed")
    assert r.headers["allow"] == "GET, PATCH"


async def test_head_on_an_api_read_is_its_get_without_a_body(app: App) -> None:
    """RFC 9110: a server supports HEAD wherever it supports GET; the API's
    reads answer it with the GET's status and headers (a pattern route too)."""
    async with app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/h"})).json()
        for path in ("/v1/openapi.json", "/v1/deferred/settings", f"/v1/links/{link['id']}"):
            got, head = await c.get(path), await c.head(path)
            assert (head.status_code, head.content) == (200, b""), path
            assert head.headers["content-type"] == got.headers["content-type"], path
            assert head.headers["content-length"] == str(len(got.content)), path
        assert (await c.head("/v1/nothing/here")).status_code == 404


async def test_healthz(app: App) -> None:
    async with app.client() as c:
        r = await c.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


async def test_actor_crash_is_500_then_recovers(app: App, monkeypatch: pytest.MonkeyPatch,
                                                caplog: pytest.LogCaptureFixture) -> None:
    actor = await app.services.registry.get(app.project_id)
    original = actor.patch_settings

    async def broken(patch: object, idem: object) -> object:
        def bug() -> None:
            raise RuntimeError("simulated bug")
        return await actor.mailbox.call(bug)

    monkeypatch.setattr(actor, "patch_settings", broken)
    async with app.client("sk_test") as c:
        with caplog.at_level(logging.ERROR, logger="svc.web"):
            r = await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
        assert _error(r) == (500, "internal_error")
        assert r.json()["error"]["message"] == "internal error; it has been logged"
        # the 500 is logged once, by its kind and route
        assert [rec.getMessage().split(":")[0] for rec in caplog.records
                if rec.name == "svc.web"] == ["ActorFailed on PATCH /v1/deferred/settings"]
        monkeypatch.setattr(actor, "patch_settings", original)
        r = await c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
    assert r.status_code == 200
    assert ActorFailed.status == 500


async def test_overload_gives_quick_503(app: App) -> None:
    app.front.in_flight = app.front.max_in_flight
    async with app.client("sk_test") as c:
        r = await c.get("/v1/deferred/settings")
    assert _error(r) == (503, "overloaded")
    assert r.headers["retry-after"] == "1"


async def test_the_per_client_limit_counts_an_ipv6_client_by_its_64(
        store: LmdbStore, config: Config) -> None:
    """Every address of an IPv6 /64 is one client's (a home's or a phone's
    subnet): counted address by address, a fresh one a request passed the
    limit. IPv4 clients are counted whole, and another /64 is another client."""
    from svc_engine.ratelimit import client_key

    assert client_key("203.0.113.7") == b"203.0.113.7"
    assert client_key("2001:db8:1:2::9") == client_key("[2001:db8:1:2:ffff::1]")
    assert client_key("2001:db8:1:2::9") != client_key("2001:db8:1:3::9")
    assert client_key("::ffff:203.0.113.7") == client_key("203.0.113.7")
    assert client_key("not:an address") == b"not:an address"
    limited = attrs.evolve(config, client_ip_header="X-Forwarded-For", rate_limit_per_client=5)
    async with running_app(store, limited, TrioWallClock()) as app, app.client() as c:
        async def status(client: str) -> int:
            r = await c.get("/v1/deferred/settings", headers={"x-forwarded-for": client})
            return r.status_code

        codes = [await status(f"2001:db8:1:2::{n:x}") for n in range(1, 31)]
        assert codes[0] == 401 and 429 in codes
        assert await status("2001:db8:1:3::1") == 401  # another /64
