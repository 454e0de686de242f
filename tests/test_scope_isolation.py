"""A key reaches its own project and mode only (SPEC, Keys: "Keys belong to a
project and a mode (test or live)"): every API call that names a link, a
token or a domain of the other mode, or of another project, is answered as
for one that does not exist, and changes nothing.

Each refusal below is the only check on its path; a mutation audit (session
37) removed each in turn and the whole suite still passed, so these tests
name them one by one."""

from __future__ import annotations

import os
from typing import Any

from svc_engine.records import Plan
from tests.conftest import App
from tests.deferred_helpers import (
    ANDROID_UA,
    SDK,
    init_body,
    new_install,
    referrer_from_location,
)
from tests.test_deferred_api import init, setup, tap
from web import tenancy

DESKTOP_UA = "Mozilla/5.0 (X11; Linux x86_64; rv:140.0) Gecko/20100101 Firefox/140.0"


async def _link(app: App, key: str, **fields: Any) -> dict[str, Any]:
    async with app.client(key) as c:
        r = await c.post("/v1/links", json={"path": "/p", **fields})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def _other_project_key(app: App) -> str:
    """The test secret key of a project of another organization."""
    now = app.services.clock.now_ms()
    org = await tenancy.create_org(app.services.store, "Other Co", Plan.GROWTH, os.urandom, now)
    _, keys = await tenancy.create_project(app.services.store, org.id, "Other app",
                                           os.urandom, now)
    return next(v for v in keys.values() if v.startswith("sk_test_"))


def _not_found(r: Any) -> bool:
    return r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def _counts(app: App, key: str, link_id: str) -> tuple[Any, Any, Any]:
    """The link's clicks, opens and handoff opens, as its own key sees them."""
    async with app.client(key) as c:
        r = await c.get(f"/v1/analytics/links/{link_id}")
    assert r.status_code == 200, r.text
    return r.json()["clicks"], r.json()["opens"], r.json()["handoffOpens"]


async def _all_refused(app: App, link: dict[str, Any], *, domain: str | None = None) -> None:
    """Every call of the test project's keys naming ``link`` (of another
    mode or project), and ``domain``, is 404 ``not_found``."""
    async with app.client("sk_test") as c:
        refused = [
            await c.get(f"/v1/links/{link['id']}"),
            await c.patch(f"/v1/links/{link['id']}", json={"title": "changed"}),
            await c.delete(f"/v1/links/{link['id']}"),
            await c.post("/v1/handoffs", json={"linkId": link["id"], "userId": "u-1"}),
            await c.post("/v1/handoffs", json={"url": link["url"], "userId": "u-1"}),
            await c.get(f"/v1/analytics/links/{link['id']}"),
            await c.get(f"/v1/analytics/links/{link['id']}/funnel"),
            await c.get("/v1/analytics/summary", params={"linkId": link["id"]}),
        ]
        if domain is not None:
            refused.append(await c.delete(f"/v1/domains/{domain}"))
    async with app.client("pk_test", **SDK) as c:
        refused.append(await c.post("/v1/sdk/resolve",
                                    json={"url": link["url"], "installId": new_install()}))
    assert [r.status_code for r in refused] == [404] * len(refused)
    assert all(_not_found(r) for r in refused)


async def test_links_of_the_other_mode_are_not_found(app: App) -> None:
    await setup(app)
    live = await _link(app, "sk_live", title="LIVE")
    before = await _counts(app, "sk_live", live["id"])
    await _all_refused(app, live)
    async with app.client("sk_live") as c:
        after = await c.get(f"/v1/links/{live['id']}")
    assert after.status_code == 200 and after.json()["title"] == "LIVE"
    assert await _counts(app, "sk_live", live["id"]) == before


async def test_links_and_domains_of_another_project_are_not_found(app: App) -> None:
    await setup(app)
    theirs_key = await _other_project_key(app)
    theirs = await _link(app, theirs_key, title="THEIRS")
    async with app.client(theirs_key) as c:
        assert (await c.post("/v1/domains", json={"domain": "go.theirs.example"})
                ).status_code == 201
    before = await _counts(app, theirs_key, theirs["id"])
    await _all_refused(app, theirs, domain="go.theirs.example")
    async with app.client(theirs_key) as c:
        assert (await c.get(f"/v1/links/{theirs['id']}")).json()["title"] == "THEIRS"
        assert (await c.get("/v1/domains")).json()["custom"] == ["go.theirs.example"]
    assert app.services.links.domain_owner("go.theirs.example") is not None
    assert await _counts(app, theirs_key, theirs["id"]) == before


async def test_a_live_token_serves_no_test_mode_call_and_is_not_used_up(app: App) -> None:
    """A live link's web fallback token posted as ``svcToken`` with the test
    key made a test-mode handoff of the live link, and used the token up."""
    await setup(app, webFallbackTokens=True)
    async with app.client("sk_live") as c:
        assert (await c.patch("/v1/deferred/settings",
                              json={"webFallbackTokens": True})).status_code == 200
    live = await _link(app, "sk_live", webFallbackUrl="https://shop.example/landing")
    web_token = (await tap(app, live["slug"], DESKTOP_UA)).split("svc_token=")[1]
    store_referrer = referrer_from_location(await tap(app, live["slug"], ANDROID_UA))
    attribution = app.services.attribution
    async with app.client("sk_test") as c:
        wrong = await c.post("/v1/handoffs", json={"svcToken": web_token, "userId": "u-1"})
    assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "svcToken"
    status, body = await init(app, init_body(new_install(), "android",
                                             referrer=store_referrer))
    assert (status, body) == (200, {"link": None})
    store_token = store_referrer.removeprefix("svc_token=")
    for t in (web_token, store_token):
        token = attribution.get_token(t)
        assert token is not None and not token.used
    async with app.client("sk_live") as c:
        right = await c.post("/v1/handoffs", json={"svcToken": web_token, "userId": "u-1"})
    assert right.status_code == 201 and right.json()["linkId"] == live["id"]
