"""The destination allowlist of links made with the publishable key, through
the API (GET/PATCH /v1/link-destinations, POST /v1/sdk/links), across a
restart of the real process, and on the dashboard's Platforms page."""

from __future__ import annotations

import re
from typing import Any

import pytest

from svc_engine.destinations import LinkDestinations
from svc_engine.platforms import Platforms
from svc_engine.records import Role
from tests.conftest import App
from tests.dashboard_support import add_user, owner, signed_in
from tests.server_process import ServerProcess

HOSTS = ["Example.com", "*.cdn.example.org", "bücher.example."]
STORED = ["example.com", "*.cdn.example.org", "xn--bcher-kva.example"]
URL_FIELDS = ("iosFallbackUrl", "androidFallbackUrl", "webFallbackUrl", "ogImageUrl")
PHISH = "https://example.com.phish.example.net/login"


async def set_hosts(app: App, hosts: list[str], key: str = "sk_test") -> dict[str, Any]:
    async with app.client(key) as c:
        r = await c.patch("/v1/link-destinations", json={"sdkAllowedHosts": hosts})
    assert r.status_code == 200, r.text
    return r.json()  # type: ignore[no-any-return]


async def links_of(app: App, mode_key: str = "sk_test") -> list[dict[str, Any]]:
    async with app.client(mode_key) as c:
        r = await c.get("/v1/links")
    assert r.status_code == 200
    return r.json()["data"]  # type: ignore[no-any-return]


async def test_default_is_empty_and_allows_any_host(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.get("/v1/link-destinations")
    assert r.status_code == 200 and r.json() == {"sdkAllowedHosts": []}
    assert app.services.links.link_destinations(app.project_id) == LinkDestinations()
    async with app.client("pk_test") as c:
        r = await c.post("/v1/sdk/links", json={"path": "/p", "webFallbackUrl": PHISH})
    assert r.status_code == 201, r.text


async def test_patch_stores_normalised_hosts_for_both_modes(app: App) -> None:
    assert await set_hosts(app, HOSTS) == {"sdkAllowedHosts": STORED}
    async with app.client("sk_live") as c:  # one list a project, like its settings
        assert (await c.get("/v1/link-destinations")).json() == {"sdkAllowedHosts": STORED}
        assert (await c.patch("/v1/link-destinations", json={})).json() == {
            "sdkAllowedHosts": STORED}  # no field: no change
    assert app.services.links.link_destinations(app.project_id).sdk_allowed_hosts == tuple(
        STORED)
    assert await set_hosts(app, [], key="sk_live") == {"sdkAllowedHosts": []}


@pytest.mark.parametrize("field", URL_FIELDS)
async def test_a_publishable_key_link_to_another_host_is_refused_and_not_stored(
        app: App, field: str) -> None:
    await set_hosts(app, HOSTS)
    body = {"path": "/p", "webFallbackUrl": "https://example.com/ok", field: PHISH}
    for key in ("pk_test", "pk_live"):  # both modes' publishable keys
        for headers in ({}, {"idempotency-key": f"blocked-{field}-{key}"}):
            async with app.client(key, **headers) as c:
                r = await c.post("/v1/sdk/links", json=body)
            assert r.status_code == 400, r.text
            error = r.json()["error"]
            assert error["code"] == "destination_blocked" and error["field"] == field
            assert field in error["message"] and "example.com.phish.example.net" in (
                error["message"])
    assert await links_of(app) == [] and await links_of(app, "sk_live") == []
    assert app.services.links.org_link_count(app.org_id) == 0
    # the same key, once the host is allowed, is not stuck on the refusal
    await set_hosts(app, [*HOSTS, "*.phish.example.net"])
    async with app.client("pk_test", **{"idempotency-key": f"blocked-{field}-pk_test"}) as c:
        r = await c.post("/v1/sdk/links", json=body)
    assert r.status_code == 201, r.text


async def test_a_publishable_key_link_to_listed_hosts_is_created(app: App) -> None:
    await set_hosts(app, HOSTS)
    body = {"path": "/p", "iosFallbackUrl": "https://EXAMPLE.com./ios",
            "androidFallbackUrl": "https://shop.cdn.example.org/a",
            "webFallbackUrl": "https://bücher.example/w",
            "ogImageUrl": "https://img.cdn.example.org/i.png"}
    async with app.client("pk_live") as c:
        r = await c.post("/v1/sdk/links", json=body)
    assert r.status_code == 201, r.text
    assert [x["id"] for x in await links_of(app, "sk_live")] == [r.json()["id"]]
    async with app.client("pk_live") as c:  # a link without URLs has nothing to check
        assert (await c.post("/v1/sdk/links", json={"path": "/q"})).status_code == 201


@pytest.mark.parametrize("url", ["https://www.example.com/", "https://evil-example.com/",
                                 "https://cdn.example.org/", "http://93.184.216.34/",
                                 "http://[::1]/"])
async def test_near_misses_are_refused(app: App, url: str) -> None:
    await set_hosts(app, HOSTS)
    async with app.client("pk_test") as c:
        r = await c.post("/v1/sdk/links", json={"ogImageUrl": url})
    assert r.status_code == 400 and r.json()["error"]["code"] == "destination_blocked", r.text
    assert r.json()["error"]["field"] == "ogImageUrl"


async def test_secret_key_links_are_not_limited(app: App) -> None:
    await set_hosts(app, HOSTS)
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={"path": "/p", "webFallbackUrl": PHISH,
                                            "ogImageUrl": "https://elsewhere.example.net/i"})
        assert r.status_code == 201, r.text
        edited = await c.patch(f"/v1/links/{r.json()['id']}",
                               json={"iosFallbackUrl": "https://elsewhere.example.net/i"})
    assert edited.status_code == 200, edited.text
    # links are changed with a secret key only: the publishable key has no way around
    async with app.client("pk_test") as c:
        r = await c.patch(f"/v1/links/{r.json()['id']}", json={"webFallbackUrl": PHISH})
    assert r.status_code == 403 and r.json()["error"]["code"] == "wrong_key_kind"


@pytest.mark.parametrize(("body", "field"), [
    ({"sdkAllowedHosts": ["https://example.com"]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": ["example.com/path"]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": ["example.com:443"]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": ["127.0.0.1"]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": ["*.com"]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": ["localhost"]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": [7]}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": "example.com"}, "sdkAllowedHosts"),
    ({"sdkAllowedHosts": [f"h{i}.example.com" for i in range(101)]}, "sdkAllowedHosts"),
    ({"allowedHosts": ["example.com"]}, "allowedHosts"),
])
async def test_bad_entries_are_refused_and_change_nothing(app: App, body: dict[str, Any],
                                                         field: str) -> None:
    await set_hosts(app, ["example.com"])
    async with app.client("sk_test", **{"idempotency-key": "bad-entries"}) as c:
        r = await c.patch("/v1/link-destinations", json=body)
        assert r.status_code == 400, r.text
        error = r.json()["error"]
        assert (error["code"], error["field"]) == ("validation_error", field)
        assert (await c.get("/v1/link-destinations")).json() == {
            "sdkAllowedHosts": ["example.com"]}
        # the refusal was not recorded against the key
        ok = await c.patch("/v1/link-destinations", json={"sdkAllowedHosts": ["a.example"]})
    assert ok.status_code == 200


async def test_keys_and_idempotency(app: App) -> None:
    async with app.client("pk_test") as c:
        for method in ("GET", "PATCH"):
            r = await c.request(method, "/v1/link-destinations", json={"sdkAllowedHosts": []})
            assert r.status_code == 403 and r.json()["error"]["code"] == "wrong_key_kind"
    async with app.client("sk_test", **{"idempotency-key": "dest-1"}) as c:
        first = await c.patch("/v1/link-destinations", json={"sdkAllowedHosts": ["a.example"]})
        await set_hosts(app, ["b.example"])
        replay = await c.patch("/v1/link-destinations", json={"sdkAllowedHosts": ["a.example"]})
        other = await c.patch("/v1/link-destinations", json={"sdkAllowedHosts": ["c.example"]})
    assert first.status_code == 200 and replay.content == first.content
    assert replay.headers["idempotent-replayed"] == "true" and other.status_code == 409
    assert app.services.links.link_destinations(app.project_id).sdk_allowed_hosts == (
        "b.example",)  # the replay wrote nothing


@pytest.mark.e2e
def test_the_list_survives_a_restart(server_factory: type[ServerProcess]) -> None:
    srv = server_factory().start()
    with srv.client("sk_live") as c:
        r = c.patch("/v1/link-destinations", json={"sdkAllowedHosts": HOSTS})
        assert r.status_code == 200 and r.json() == {"sdkAllowedHosts": STORED}
    srv.kill()  # right after the acknowledgement
    again = server_factory(srv.data_dir, bootstrap=False).start()
    again.info = srv.info
    with again.client("sk_test") as c:
        assert c.get("/v1/link-destinations").json() == {"sdkAllowedHosts": STORED}
    with again.client("pk_live") as c:
        blocked = c.post("/v1/sdk/links", json={"webFallbackUrl": PHISH})
        ok = c.post("/v1/sdk/links", json={"webFallbackUrl": "https://example.com/x"})
    assert blocked.status_code == 400 and blocked.json()["error"]["code"] == (
        "destination_blocked")
    assert ok.status_code == 201, ok.text
    again.stop()


# -- dashboard -----------------------------------------------------------------------------

TEXTAREA = re.compile(r'<textarea id="pf-sdk_allowed_hosts"[^>]*>(.*?)</textarea>', re.S)


async def test_dashboard_form_saves_and_shows_the_list(app: App) -> None:
    m = await signed_in(app, owner(app))
    page = await m.get("/dashboard/build/platforms")
    found = TEXTAREA.search(page.text)
    assert page.status_code == 200 and found is not None and found.group(1) == ""
    assert 'action="/dashboard/build/platforms/destinations"' in page.text
    assert "Save allowed hosts" in page.text
    r = await m.post("/dashboard/build/platforms/destinations",
                     {"sdk_allowed_hosts": "Example.com\r\n*.cdn.example.org, bücher.example.\n\n"})
    assert r.status_code == 303
    assert r.headers["location"] == "/dashboard/build/platforms?done=destinations-saved"
    assert app.services.links.link_destinations(app.project_id).sdk_allowed_hosts == tuple(
        STORED)
    assert app.services.links.platforms(app.project_id) == Platforms()  # untouched
    shown = await m.get(r.headers["location"])
    found = TEXTAREA.search(shown.text)
    assert found is not None and found.group(1) == "\n".join(STORED)
    assert "Links the app makes from now on are checked against these hosts." in shown.text
    async with app.client("pk_test") as c:  # and the API enforces what the page saved
        r = await c.post("/v1/sdk/links", json={"webFallbackUrl": PHISH})
    assert r.status_code == 400 and r.json()["error"]["code"] == "destination_blocked"
    # emptying the field empties the list
    assert (await m.post("/dashboard/build/platforms/destinations",
                         {"sdk_allowed_hosts": "  "})).status_code == 303
    assert app.services.links.link_destinations(app.project_id) == LinkDestinations()
    await m.aclose()


async def test_dashboard_bad_entry_names_the_field_and_saves_nothing(app: App) -> None:
    await set_hosts(app, ["example.com"])
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/build/platforms/destinations",
                     {"sdk_allowed_hosts": "good.example\nhttps://bad.example/"})
    assert r.status_code == 400
    assert "Not saved: check the allowed hosts below." in r.text
    assert 'id="pf-sdk_allowed_hosts-error"' in r.text and "is not a host name" in r.text
    found = TEXTAREA.search(r.text)
    assert found is not None and found.group(1) == "good.example\nhttps://bad.example/"
    assert app.services.links.link_destinations(app.project_id).sdk_allowed_hosts == (
        "example.com",)
    await m.aclose()


async def test_dashboard_roles_csrf_and_workspace(app: App) -> None:
    mkt = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    page = await mkt.get("/dashboard/build/platforms")
    assert page.status_code == 200 and "Save allowed hosts" not in page.text
    found = re.search(r'<textarea id="pf-sdk_allowed_hosts"[^>]*>', page.text)
    assert found is not None and " readonly" in found.group(0)
    assert (await mkt.post("/dashboard/build/platforms/destinations",
                           {"sdk_allowed_hosts": "evil.example"})).status_code == 403
    dev = await signed_in(app, await add_user(app, "dev@example.com", Role.DEVELOPER))
    assert (await dev.post("/dashboard/build/platforms/destinations",
                           {"sdk_allowed_hosts": "evil.example"},
                           csrf_token=None)).status_code == 403
    assert (await dev.post("/dashboard/build/platforms/destinations",
                           {"sdk_allowed_hosts": "evil.example",
                            "ws": f"{app.project_id}:live"})).status_code == 409
    assert app.services.links.link_destinations(app.project_id) == LinkDestinations()
    assert (await dev.post("/dashboard/build/platforms/destinations",
                           {"sdk_allowed_hosts": "dev.example",
                            "ws": f"{app.project_id}:test"})).status_code == 303
    assert app.services.links.link_destinations(app.project_id).sdk_allowed_hosts == (
        "dev.example",)
    await mkt.aclose()
    await dev.aclose()
