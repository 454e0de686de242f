"""A custom domain answers only its project (README, Endpoints): another
project of the same organization may neither make links on it nor claim the
service's own host; its association files name its project's apps however
the Host header is written, at the domain's root under a public URL with a
path. Rules a mutation audit (session 37) broke without a failing test."""

from __future__ import annotations

from typing import Any

import attrs

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.plans import Plan
from tests.conftest import App, running_app
from tests.dashboard_support import owner, signed_in
from tests.test_dashboard_links import post_form
from tests.test_platforms import apple_matches
from web import tenancy

SHOP = {"ios": {"bundleId": "com.example.shop", "teamId": "ABCDE12345"}}
OTHER = {"ios": {"bundleId": "com.other.app", "teamId": "ZZZZZ99999"}}


async def _second_project(app: App) -> dict[str, str]:
    """Keys of a second project of the same organization (on the Scale plan)."""
    await app.services.store.set_plan(app.org_id, Plan.SCALE)
    _, keys = await tenancy.create_project(app.services.store, app.org_id, "Other",
                                           app.services.random, app.services.clock.now_ms())
    return keys


async def _apps_at(app: App, host: str) -> list[list[str]]:
    async with app.client(host=host) as c:
        doc = (await c.get("/.well-known/apple-app-site-association")).json()
    return [d["appIDs"] for d in doc["applinks"]["details"]]


async def test_no_link_on_another_project_s_domain(app: App) -> None:
    theirs = await _second_project(app)
    async with app.client("sk_test") as c:
        assert (await c.post("/v1/domains", json={"domain": "go.a.example"})).status_code == 201
    async with app.client(theirs["sk_test"]) as c:
        r = await c.post("/v1/links", json={"domain": "go.a.example", "slug": "hijack"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_domain"
        assert (await c.get("/v1/links")).json()["data"] == []
    assert app.services.links.domain_owner("go.a.example") == app.project_id


async def test_no_dashboard_link_on_another_project_s_domain(app: App) -> None:
    """The dashboard's form follows the API's rule: its project's domains or
    the service's own, never another project's."""
    theirs = await _second_project(app)
    async with app.client(theirs["sk_test"]) as c:
        assert (await c.post("/v1/domains", json={"domain": "go.b.example"})).status_code == 201
    m = await signed_in(app, owner(app))
    r = await post_form(m, "/dashboard/links/new",
                        [("path", "/p"), ("slug", "hijack"), ("domain", "go.b.example")])
    await m.aclose()
    assert r.status_code == 400 and "go.b.example is not a domain of this project" in r.text
    assert app.services.links.by_slug("go.b.example", "hijack") is None
    assert app.services.links.list(app.project_id, "test").links == []


async def test_the_service_s_host_without_its_port_cannot_be_claimed(
        store: LmdbStore, config: Config) -> None:
    """Served on a port, the default domain is host:port; its bare host is
    the same machine: a project claiming it took the shared association file
    over (it named that project's apps only)."""
    on_port = attrs.evolve(config, public_url="http://links.example:8080")
    async with running_app(store, on_port, TrioWallClock()) as app:
        theirs = await _second_project(app)
        async with app.client("sk_test") as c:
            await c.patch("/v1/platforms", json=SHOP)
        async with app.client(theirs["sk_test"]) as c:
            await c.patch("/v1/platforms", json=OTHER)
            claim = await c.post("/v1/domains", json={"domain": "links.example"})
        assert claim.status_code == 400 and claim.json()["error"]["code"] == "invalid_domain"
        named = [a for ids in await _apps_at(app, "links.example:8080") for a in ids]
        assert sorted(named) == ["ABCDE12345.com.example.shop", "ZZZZZ99999.com.other.app"]


async def test_a_custom_domain_names_its_apps_however_its_host_is_written(app: App) -> None:
    theirs = await _second_project(app)
    async with app.client(theirs["sk_test"]) as c:
        await c.patch("/v1/platforms", json=OTHER)
        assert (await c.post("/v1/domains", json={"domain": "other.example"})).status_code == 201
    async with app.client("sk_test") as c:
        await c.patch("/v1/platforms", json=SHOP)
    for host in ("other.example", "other.example:443", "Other.Example", "other.example."):
        assert await _apps_at(app, host) == [["ZZZZZ99999.com.other.app"]], host


async def test_a_custom_domain_s_links_open_the_app_under_a_public_url_with_a_path(
        store: LmdbStore, config: Config) -> None:
    under = attrs.evolve(config, public_url="https://example.com/go")
    async with running_app(store, under, TrioWallClock()) as app:
        async with app.client("sk_test") as c:
            await c.patch("/v1/platforms", json=SHOP)
            assert (await c.post("/v1/domains", json={"domain": "go.custom.example"})
                    ).status_code == 201
            link = (await c.post("/v1/links", json={"domain": "go.custom.example",
                                                    "slug": "spring"})).json()
        assert link["url"] == "https://go.custom.example/spring"
        async with app.client(host="go.custom.example") as c:
            doc = (await c.get("/.well-known/apple-app-site-association")).json()
    [detail] = doc["applinks"]["details"]
    assert apple_matches(detail["components"], "/spring")


async def test_a_refused_body_is_its_400_under_a_used_key_on_every_settings_route(
        app: App) -> None:
    """README: a body is checked before its key is looked up, so a key sent
    again with a body refused on its own gets that refusal, not 409."""
    cases: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        ("/v1/platforms", {"web": {"fallbackUrl": "https://example.com/"}},
         {"web": {"fallbackUrl": "ftp://nope"}}),
        ("/v1/link-destinations", {"sdkAllowedHosts": ["example.com"]},
         {"sdkAllowedHosts": 5}),
    ]
    async with app.client("sk_test") as c:
        for path, good, bad in cases:
            key = {"idempotency-key": f"k{path}"}
            assert (await c.patch(path, json=good, headers=key)).status_code == 200
            again = await c.patch(path, json=bad, headers=key)
            assert again.status_code == 400, (path, again.text)


async def test_a_project_adding_its_own_domain_back_keeps_its_links_there(app: App) -> None:
    """Only a domain that changed hands gives its slugs up (README): the
    project that removed its domain and added it back lost every link on it
    (404), their slugs free for any new link."""
    await app.services.store.set_plan(app.org_id, Plan.SCALE)
    async with app.client("sk_test") as c:
        assert (await c.post("/v1/domains", json={"domain": "go.a.example"})).status_code == 201
        ln = (await c.post("/v1/links", json={"domain": "go.a.example", "slug": "summer",
                                              "webFallbackUrl": "https://a.example/s"})).json()
        assert (await c.delete("/v1/domains/go.a.example")).status_code == 200
        assert (await c.post("/v1/domains", json={"domain": "go.a.example"})).status_code == 201
        taken = await c.post("/v1/links", json={"domain": "go.a.example", "slug": "summer"})
    assert taken.status_code == 400 and "is taken" in taken.json()["error"]["message"]
    found = app.services.links.by_slug("go.a.example", "summer")
    assert found is not None and found.id == ln["id"]
    async with app.client(host="go.a.example", **{"user-agent": "Mozilla/5.0 (X11; Linux "
                                                  "x86_64; rv:140.0) Gecko Firefox/140.0"}) as c:
        r = await c.get("/summer")
    assert r.status_code == 302 and r.headers["location"].startswith("https://a.example/s")
