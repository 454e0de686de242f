"""The dashboard keeps to the signed-in member's organization, project and
mode, and to its own session: rules a mutation audit (session 37) could
break in the views without a failing test. Another organization's link by
its id on the Links and Debugger pages; what is made in live mode made in
live mode; the SDK guide's key of the mode, active; a signed-in form refusing
the signed-out page's CSRF token; every cookie Secure behind a TLS proxy;
the sign-in throttle counting failures only, at every door."""

from __future__ import annotations

import html
import os
import re

import attrs
import httpx

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.ids import new_id
from svc_engine.keys import KeyKind, Mode
from svc_engine.links import new_link, new_slug, parse_link_create
from svc_engine.plans import Plan
from svc_engine.records import Role
from tests.conftest import App, running_app
from tests.dashboard_support import (
    OWNER_EMAIL,
    add_user,
    browser,
    csrf_of,
    dashboard_of,
    owner,
    password_of,
    signed_in,
)
from web import tenancy
from web.dashboard.webhook_access import tables_of

THEIRS = "https://other-tenant.example/private-campaign"
IPHONE = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
          "(KHTML, like Gecko) Version/17.4 Mobile/15E148 Safari/604.1")


async def _their_link(app: App) -> str:
    """A link of another organization's project, same mode, same domain."""
    store, now = app.services.store, app.services.clock.now_ms()
    org = await tenancy.create_org(store, "Other Co", Plan.GROWTH, os.urandom, now)
    project, _ = await tenancy.create_project(store, org.id, "Other app", os.urandom, now)
    draft = parse_link_create({"path": "/secret", "webFallbackUrl": THEIRS},
                              allow_custom_slug=False, now_ms=now)
    link = new_link(draft, link_id=new_id(os.urandom(16)), project_id=project.id,
                    mode=Mode.TEST, domain=app.services.default_domain,
                    slug=new_slug(os.urandom(8)), now_ms=now)
    await app.services.links.create(link, org_id=org.id, quota=None, idem=None)
    return link.id


async def test_another_organization_s_link_is_not_found_on_links_and_debugger(
        app: App) -> None:
    link_id = await _their_link(app)
    m = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    try:
        for path in (f"/dashboard/links/{link_id}", f"/dashboard/links/{link_id}/edit",
                     f"/dashboard/links/{link_id}/qr.svg", f"/dashboard/links/{link_id}/qr.png",
                     f"/dashboard/build/debugger/simulate?device=desktop&link={link_id}"):
            r = await m.get(path)
            assert r.status_code == 404 and THEIRS not in r.text, path
        r = await m.get(f"/dashboard/build/debugger?link={link_id}")
        assert THEIRS not in r.text and "No link of this project matches" in r.text
    finally:
        await m.aclose()
    link = app.services.links.get(link_id)
    assert link is not None and not link.deleted


async def test_what_is_made_in_live_mode_is_live(app: App) -> None:
    m = await signed_in(app, owner(app))
    try:
        await m.post("/dashboard/mode", {"mode": "live", "next": "/dashboard/links"})
        key = await m.post("/dashboard/settings/keys", {"kind": "secret", "name": "in live"})
        shown = re.findall(r"sk_(?:test|live)_[A-Za-z0-9]{20,}", key.text)
        [made] = [k for k in app.services.store.list_keys(app.project_id)
                  if k.name == "in live"]
        assert made.mode is Mode.LIVE and shown and all(s.startswith("sk_live_") for s in shown)
        created = await m.post("/dashboard/links/new", {"path": "/made-in-live"})
        assert created.status_code == 303
        assert (await m.get(created.headers["location"])).status_code == 200
        links = app.services.links
        assert [ln.path for ln in links.list(app.project_id, "live").links] == ["/made-in-live"]
        assert links.list(app.project_id, "test").links == []
        async with app.client("sk_test") as c:
            assert (await c.post("/v1/links", json={"path": "/made-in-test"})).status_code == 201
        listed = (await m.get("/dashboard/links")).text  # the mode's links, not the other's
        assert "/made-in-live" in listed and "/made-in-test" not in listed
        await m.post("/dashboard/settings/webhooks/new",
                     {"url": "https://localhost:9/live-hook", "events": "click"})
        tables = tables_of(dashboard_of(app))
        assert [e.url for e in tables.endpoints(app.project_id, Mode.LIVE)] == [
            "https://localhost:9/live-hook"]
        assert tables.endpoints(app.project_id, Mode.TEST) == []
    finally:
        await m.aclose()


async def test_the_debugger_explains_a_live_click_in_live_mode(app: App) -> None:
    async with app.client("sk_live") as c:
        ln = (await c.post("/v1/links", json={"path": "/live-tap"})).json()
    async with app.client(**{"user-agent": IPHONE}) as c:
        await c.get(f"/{ln['slug']}")
    await app.flush()
    m = await signed_in(app, owner(app))
    try:
        await m.post("/dashboard/mode", {"mode": "live", "next": "/dashboard/build/debugger"})
        listing = await m.get("/dashboard/build/debugger")
        found = re.search(r'href="(/dashboard/build/debugger\?click=[^"]+)"', listing.text)
        assert found is not None
        r = await m.get(html.unescape(found.group(1)))
        assert r.status_code == 200 and "No such click" not in r.text
    finally:
        await m.aclose()


async def test_the_sdk_guide_shows_the_active_publishable_key_of_the_mode(app: App) -> None:
    m = await signed_in(app, owner(app))
    try:
        r = await m.get("/dashboard/build/sdk")
        assert app.keys["pk_test"] in r.text and app.keys["pk_live"] not in r.text
        store = app.services.store
        pk = next(k for k in store.list_keys(app.project_id)
                  if k.kind is KeyKind.PUBLISHABLE and k.mode is Mode.TEST)
        await store.revoke_key(app.project_id, pk.id, app.services.clock.now_ms(),
                               mode=Mode.TEST)
        r = await m.get("/dashboard/build/sdk")
        assert app.keys["pk_test"] not in r.text and "No active publishable key" in r.text
    finally:
        await m.aclose()


async def test_a_signed_in_form_refuses_the_signed_out_page_s_token(app: App) -> None:
    """The sign-in page hands out a token for its nonce cookie; one who got
    both there and planted the cookie (a sibling subdomain can) must not
    pass a signed-in form with them."""
    async with browser(app) as stranger:
        page = await stranger.get("/dashboard")
        nonce, token = stranger.cookies["svc_csrf"], csrf_of(page.text)
    m = await signed_in(app, owner(app))
    try:
        m.client.cookies.set("svc_csrf", nonce, domain="svc.test", path="/dashboard")
        before = len(app.services.store.list_keys(app.project_id))
        r = await m.post("/dashboard/settings/keys", {"kind": "secret", "name": "forged"},
                         csrf_token=token)
        assert r.status_code == 403
        assert len(app.services.store.list_keys(app.project_id)) == before
    finally:
        await m.aclose()


async def test_every_cookie_is_secure_behind_a_tls_proxy(store: LmdbStore,
                                                         config: Config) -> None:
    """README's production example: `--public-url https://...` behind a
    proxy, no certificate of its own: the session cookie above all."""
    https = attrs.evolve(config, public_url="https://svc.test")
    async with running_app(store, https, TrioWallClock()) as app:
        transport = httpx.ASGITransport(app=app.front)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="https://svc.test") as c:
            page = await c.get("/dashboard")
            nonce = page.headers.get("set-cookie", "")
            r = await c.post("/dashboard/sign-in", data={
                "csrf": csrf_of(page.text), "email": OWNER_EMAIL, "password": password_of(app)})
    session = r.headers.get("set-cookie", "")
    assert r.status_code == 303 and session.startswith("svc_session=")
    for cookie in (nonce, session):
        assert "; Secure" in cookie and "HttpOnly" in cookie and "SameSite=Lax" in cookie


async def test_right_sign_ins_are_never_throttled(app: App) -> None:
    statuses = []
    for _ in range(7):
        async with browser(app) as c:
            token = csrf_of((await c.get("/dashboard")).text)
            statuses.append((await c.post("/dashboard/sign-in", data={
                "csrf": token, "email": OWNER_EMAIL, "password": password_of(app)})).status_code)
    assert statuses == [303] * 7


async def test_an_invitation_s_password_check_is_throttled_like_a_sign_in(app: App) -> None:
    """An invitation to an existing account asks that account's password: a
    sign-in by another door. Unthrottled, an admin inviting someone's e-mail
    had an endless password oracle for that account."""
    await add_user(app, "victim@example.com", password="victim-password-1")
    m = await signed_in(app, owner(app))
    try:
        page = await m.post("/dashboard/settings/team/invite",
                            {"email": "victim@example.com", "role": "marketer"})
        path = "/dashboard/invite/" + page.text.split("/dashboard/invite/")[1].split('"')[0]
    finally:
        await m.aclose()
    async with browser(app) as c:
        token = csrf_of((await c.get(path)).text)
        statuses = [(await c.post(path, data={"csrf": token, "password": f"guess-{i}"})
                     ).status_code for i in range(7)]
    assert statuses[:5] == [400] * 5 and set(statuses[5:]) == {429}


async def test_an_admin_cannot_invite_an_owner(app: App) -> None:
    """Only owners grant owner (svc_engine/roles.py): the invitation was
    made, took a seat, and only its acceptance was refused."""
    from storage import accounts
    admin = await signed_in(app, await add_user(app, "admin@example.com", Role.ADMIN))
    try:
        r = await admin.post("/dashboard/settings/team/invite",
                             {"email": "boss@example.com", "role": "owner"})
        assert r.status_code == 403
        assert accounts.list_invites(app.services.store, app.org_id,
                                     app.services.clock.now_ms()) == []
        ok = await admin.post("/dashboard/settings/team/invite",
                              {"email": "dev@example.com", "role": "developer"})
        assert ok.status_code == 200
    finally:
        await admin.aclose()
