"""Dashboard settings and workspace, in-process: API keys, team changes,
billing, organizations, projects, mode and theme."""

from __future__ import annotations

import re
import uuid

from svc_engine.keys import KeyKind, Mode, key_hash
from svc_engine.links import Link
from svc_engine.plans import Plan
from svc_engine.records import Role
from tests.conftest import App
from tests.dashboard_support import Member, add_user, browser, csrf_of, owner, signed_in

SECRET_VALUE = re.compile(r'id="new-key" class="mono reveal-value" type="text" value="([^"]+)"')


async def test_create_secret_key_shows_value_once_and_stores_only_its_hash(app: App) -> None:
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/settings/keys", {"kind": "secret", "name": "  CI   server "})
    assert r.status_code == 200 and "Copy this secret key now" in r.text
    found = SECRET_VALUE.search(r.text)
    assert found is not None
    value = found.group(1)
    assert value.startswith("sk_test_")
    stored = app.services.store.find_key(key_hash(value))
    assert stored is not None and stored.public_value is None and stored.name == "CI server"
    assert (stored.kind, stored.mode, stored.project_id) == (KeyKind.SECRET, Mode.TEST,
                                                             app.project_id)
    page = await m.get("/dashboard/settings/keys")
    assert value not in page.text and stored.hint in page.text and "CI server" in page.text
    with app.services.store.read() as txn:  # nowhere in the database
        for db in (b"keys", b"keys_by_project"):
            assert all(value.encode() not in bytes(v)
                       for _, v in txn.cursor(db=app.services.store.db(db)))
    async with app.client(value) as api:
        assert (await api.get("/v1/deferred/settings")).status_code == 200
    revoke = await m.post(f"/dashboard/settings/keys/{stored.id}/revoke")
    assert revoke.status_code == 303
    assert revoke.headers["location"] == "/dashboard/settings/keys?done=key-revoked"
    after = await m.get(revoke.headers["location"])
    assert "The key was revoked" in after.text and "Revoked" in after.text
    async with app.client(value) as api:
        assert (await api.get("/v1/deferred/settings")).status_code == 401
    await m.aclose()


async def test_keys_follow_the_mode_and_publishable_keys_stay_visible(app: App) -> None:
    m = await signed_in(app, owner(app))
    test_page = await m.get("/dashboard/settings/keys")
    assert app.keys["pk_test"] in test_page.text and app.keys["pk_live"] not in test_page.text
    assert (await m.post("/dashboard/mode", {"mode": "live",
                                             "next": "/dashboard/settings/keys"})
            ).headers["location"] == "/dashboard/settings/keys"
    live_page = await m.get("/dashboard/settings/keys")
    assert app.keys["pk_live"] in live_page.text and app.keys["pk_test"] not in live_page.text
    assert "Test mode" not in live_page.text
    r = await m.post("/dashboard/settings/keys", {"kind": "publishable", "name": ""})
    assert "Publishable key" in r.text and "pk_live_" in r.text
    sdk = await m.get("/dashboard/build/sdk")
    assert app.keys["pk_live"] in sdk.text and "svc_flutter: ^0.2.0" in sdk.text
    assert "baseUrl: 'http://svc.test'" in sdk.text
    assert (await m.post("/dashboard/mode", {"mode": "staging"})).status_code == 400
    for bad in ({"kind": "other"}, {"kind": "secret", "name": "x" * 101}):
        assert (await m.post("/dashboard/settings/keys", bad)).status_code == 400
    assert (await m.post("/dashboard/settings/keys/not-a-key/revoke")).status_code == 404
    # A key of the other mode (the page lists this mode's only) is not revoked
    # from here: a test-mode session could revoke the live secret key.
    test_secret = next(k for k in app.services.store.list_keys(app.project_id)
                       if k.mode is Mode.TEST and k.kind is KeyKind.SECRET)
    assert (await m.post(f"/dashboard/settings/keys/{test_secret.id}/revoke")
            ).status_code == 404
    assert all(k.revoked_at_ms is None for k in app.services.store.list_keys(app.project_id)
               if k.id == test_secret.id)
    await m.aclose()


async def test_last_owner_is_protected_and_admins_cannot_touch_owners(app: App) -> None:
    me = owner(app)
    m = await signed_in(app, me)
    demote = await m.post(f"/dashboard/settings/team/members/{me.id}/role", {"role": "admin"})
    assert demote.status_code == 409 and "at least one owner" in demote.text
    leave = await m.post(f"/dashboard/settings/team/members/{me.id}/remove")
    assert leave.status_code == 409
    admin = await signed_in(app, await add_user(app, "admin@example.com", Role.ADMIN))
    r = await admin.post(f"/dashboard/settings/team/members/{me.id}/role", {"role": "developer"})
    assert r.status_code == 403 and "only an owner" in r.text
    assert (await admin.post(f"/dashboard/settings/team/members/{admin.user.id}/role",
                             {"role": "owner"})).status_code == 403
    assert (await admin.post(f"/dashboard/settings/team/members/{me.id}/remove")
            ).status_code == 403
    promote = await m.post(f"/dashboard/settings/team/members/{admin.user.id}/role",
                           {"role": "owner"})
    assert promote.status_code == 303
    # Two owners now: one may step down, and then the other is the last again.
    assert (await m.post(f"/dashboard/settings/team/members/{me.id}/role",
                         {"role": "developer"})).status_code == 303
    assert (await admin.post(f"/dashboard/settings/team/members/{admin.user.id}/remove")
            ).status_code == 409
    roles = {mb.user_id: mb.role for mb in app.services.store.members_of(app.org_id)}
    assert roles == {me.id: Role.DEVELOPER, admin.user.id: Role.OWNER}
    await m.aclose()
    await admin.aclose()


async def test_removed_member_loses_access_at_once(app: App) -> None:
    dev = await signed_in(app, await add_user(app, "gone@example.com", Role.DEVELOPER))
    assert (await dev.get("/dashboard/settings/keys")).status_code == 200
    m = await signed_in(app, owner(app))
    r = await m.post(f"/dashboard/settings/team/members/{dev.user.id}/remove")
    assert r.status_code == 303
    keys = await dev.get("/dashboard/settings/keys")
    assert keys.status_code == 403 and "not in an organization" in keys.text
    assert (await dev.get("/dashboard")).headers["location"] == "/dashboard/orgs/new"
    await m.aclose()
    await dev.aclose()


async def test_plan_change_by_owner_only_and_never_below_usage(app: App) -> None:
    store = app.services.store
    admin = await signed_in(app, await add_user(app, "a@example.com", Role.ADMIN))
    page = await admin.get("/dashboard/settings/billing")
    assert page.status_code == 200 and "Only owners change the plan" in page.text
    assert "Switch to Scale" not in page.text
    assert (await admin.post("/dashboard/settings/billing/plan", {"plan": "scale"})
            ).status_code == 403
    m = await signed_in(app, owner(app))
    billing = await m.get("/dashboard/settings/billing")
    assert "Switch to Starter" in billing.text and "Switch to Scale" in billing.text
    assert re.search(r"Projects</span><span class=\"meter-value\">1 ", billing.text)
    assert (await m.post("/dashboard/settings/billing/plan", {"plan": "scale"})
            ).status_code == 303
    org = store.get_org(app.org_id)
    assert org is not None and org.plan is Plan.SCALE
    await m.post("/dashboard/projects/new", {"name": "Second"})
    down = await m.post("/dashboard/settings/billing/plan", {"plan": "starter"})
    assert down.status_code == 400 and "2 projects" in down.text
    assert (await m.post("/dashboard/settings/billing/plan", {"plan": "gold"})).status_code == 400
    org = store.get_org(app.org_id)
    assert org is not None and org.plan is Plan.SCALE
    await m.aclose()
    await admin.aclose()


async def test_billing_counts_links_as_the_quota_does(app: App) -> None:
    """Live links of both modes, a deleted one not counted: the number link
    creation checks the plan's quota against."""
    links = app.services.links
    made = []
    for i, mode in enumerate((Mode.TEST, Mode.LIVE, Mode.LIVE)):
        made.append(await links.create(
            Link(id=str(uuid.uuid4()), project_id=app.project_id, mode=mode,
                 domain="svc.test", slug=f"counted{i}", path="/p", created_at_ms=1,
                 updated_at_ms=1), org_id=app.org_id, quota=None, idem=None))
    await links.delete(app.project_id, "live", made[2].id, app.org_id, 2, None)
    assert links.org_link_count(app.org_id) == 2
    m = await signed_in(app, owner(app))
    page = await m.get("/dashboard/settings/billing")
    assert re.search(r"Links</span><span class=\"meter-value\">2 ", page.text)
    await m.aclose()


async def test_billing_counts_team_members_and_refuses_a_plan_too_small_for_them(
        app: App) -> None:
    for n in range(3):
        await add_user(app, f"m{n}@example.com", Role.DEVELOPER)
    assert len(app.services.store.members_of(app.org_id)) == 4
    m = await signed_in(app, owner(app))
    page = await m.get("/dashboard/settings/billing")
    assert re.search(r"Team members</span><span class=\"meter-value\">4 ", page.text)
    down = await m.post("/dashboard/settings/billing/plan", {"plan": "starter"})
    assert down.status_code == 400
    assert "4 team members (the starter plan allows 3)" in down.text
    org = app.services.store.get_org(app.org_id)
    assert org is not None and org.plan is Plan.GROWTH
    await m.aclose()


async def test_organizations_projects_and_the_switcher(app: App) -> None:
    m = await signed_in(app, owner(app))
    assert (await m.get("/dashboard/orgs/new")).status_code == 200
    r = await m.post("/dashboard/orgs/new", {"name": "  Side Co  "})
    assert r.status_code == 303 and r.headers["location"].startswith("/dashboard/projects/new")
    form = await m.get(r.headers["location"])
    assert form.status_code == 200
    assert "Side Co" in form.text and "0 of 1 projects used" in form.text
    made = await m.post("/dashboard/projects/new", {"name": "Side app"})
    assert made.status_code == 200 and "Side app is ready" in made.text
    assert len(re.findall(r'value="(sk_(?:test|live)_\w+)"', made.text)) == 2
    full = await m.get("/dashboard/projects/new")
    assert "all are in use" in full.text
    refused = await m.post("/dashboard/projects/new", {"name": "Third"})
    assert refused.status_code == 400 and "starter plan allows no more projects" in refused.text
    sdk = await m.get("/dashboard/build/sdk")
    assert "Side app" in sdk.text and "My organization" in sdk.text  # both in the switcher
    back = await m.post("/dashboard/workspace", {"project_id": app.project_id,
                                                 "next": "/dashboard/build/sdk"})
    assert back.status_code == 303
    sdk = await m.get("/dashboard/build/sdk")
    assert app.project_id in sdk.text
    assert (await m.post("/dashboard/orgs/new", {"name": " "})).status_code == 400
    other = await signed_in(app, await add_user(app, "x@example.com", Role.OWNER,
                                                org_id=None))
    stranger = await other.post("/dashboard/workspace", {"project_id": made.text and
                                                         _project_of(app, "Side app")})
    assert stranger.status_code == 404
    await m.aclose()
    await other.aclose()


def _project_of(app: App, name: str) -> str:
    for org in app.services.store.all_orgs():
        for p in app.services.store.list_projects(org.id):
            if p.name == name:
                return p.id
    raise AssertionError(name)


async def test_theme_is_a_cookie_and_works_signed_out(app: App) -> None:
    async with browser(app) as c:
        page = await c.get("/dashboard")
        assert 'data-theme="system"' in page.text
        r = await c.post("/dashboard/theme", data={"csrf": csrf_of(page.text), "theme": "dark",
                                                   "next": "/dashboard"})
        assert r.status_code == 303 and "svc_theme=dark" in r.headers["set-cookie"]
        cookie = r.headers["set-cookie"].lower()  # a year, the dashboard's, never for scripts
        assert "max-age=31536000" in cookie and "path=/dashboard" in cookie
        assert "httponly" in cookie and "samesite=lax" in cookie
        assert 'data-theme="dark"' in (await c.get("/dashboard")).text
        bad = await c.post("/dashboard/theme", data={"csrf": csrf_of(page.text), "theme": "red"})
        assert bad.status_code == 400
    m: Member = await signed_in(app, owner(app))
    r = await m.post("/dashboard/theme", {"theme": "light", "next": "/dashboard/settings/team"})
    assert r.headers["location"] == "/dashboard/settings/team"
    assert 'data-theme="light"' in (await m.get("/dashboard/settings/team")).text
    await m.aclose()


async def test_front_routes_only_the_dashboard_paths_to_it(app: App) -> None:
    async with browser(app) as c:
        css = await c.get("/dashboard/static/dashboard.css")
        assert css.status_code == 200 and "prefers-color-scheme" in css.text
        missing = await c.get("/dashboard/nope")
        assert missing.status_code == 404 and "Page not found" in missing.text
        other = await c.get("/dashboardx")
        assert other.status_code == 404 and "dashboard.css" not in other.text  # a slug
        wrong = await c.put("/dashboard/settings/keys")
        assert wrong.status_code == 405 and "GET" in wrong.headers["allow"]


async def test_projects_made_at_once_stay_within_the_plan(app: App) -> None:
    """The plan's project limit was read before the write: three forms sent
    at once on a Starter organization (one project) made three."""
    import os

    import trio

    from svc_engine.errors import ValidationError
    from svc_engine.plans import QUOTAS
    from web import tenancy

    store = app.services.store
    now = app.services.clock.now_ms()
    org = await tenancy.create_org(store, "Small Co", Plan.STARTER, os.urandom, now)
    limit = QUOTAS[Plan.STARTER].projects
    assert limit is not None
    made: list[str] = []
    refused: list[str] = []

    async def one(n: int) -> None:
        try:
            project, _ = await tenancy.create_project(store, org.id, f"App {n}", os.urandom,
                                                      now)
            made.append(project.id)
        except ValidationError as e:
            refused.append(e.field or "")

    async with trio.open_nursery() as nursery:
        for n in range(limit + 2):
            nursery.start_soon(one, n)
    assert len(made) == limit and refused == ["plan"] * 2
    assert [p.id for p in store.list_projects(org.id)] == made


async def test_a_form_made_for_one_mode_is_not_applied_in_another(app: App) -> None:
    """Each form carries the project and mode it was made for (``ws``). The
    add-endpoint form said "test mode", but sent after another tab switched
    the session to Live it made a live endpoint; the same with new keys."""
    m = await signed_in(app, owner(app))
    form = (await m.get("/dashboard/settings/webhooks/new")).text
    ws = re.search(r'name="ws" value="([^"]+)"', form)
    assert ws is not None and ws.group(1) == f"{app.project_id}:test"
    assert (await m.post("/dashboard/mode", {"mode": "live", "ws": ws.group(1)})
            ).status_code == 303  # switching is never refused for the page it came from
    keys_before = len(app.services.store.list_keys(app.project_id))
    stale = await m.post("/dashboard/settings/webhooks/new", {
        "url": "https://hooks.example.com/a", "events": "click", "ws": ws.group(1)})
    assert stale.status_code == 409 and "Nothing was changed" in stale.text
    key = await m.post("/dashboard/settings/keys", {"kind": "secret", "ws": ws.group(1)})
    assert key.status_code == 409
    assert app.services.webhooks is not None
    tables = app.services.webhooks.tables
    assert tables.endpoints(app.project_id, Mode.LIVE) == []
    assert tables.endpoints(app.project_id, Mode.TEST) == []
    assert len(app.services.store.list_keys(app.project_id)) == keys_before
    fresh = (await m.get("/dashboard/settings/keys")).text
    assert f'name="ws" value="{app.project_id}:live"' in fresh
    made = await m.post("/dashboard/settings/keys", {"kind": "secret",
                                                     "ws": f"{app.project_id}:live"})
    assert made.status_code == 200 and "sk_live_" in made.text
    await m.aclose()


async def test_live_events_of_an_organization_with_no_project_yet(app: App) -> None:
    """A new organization has no project until one is made: Live events (open
    to every role) was a 500, its feed too."""
    m = await signed_in(app, owner(app))
    made = await m.post("/dashboard/orgs/new", {"name": "Side project"})
    assert made.status_code == 303
    for path in ("/dashboard/live", "/dashboard/live/events"):
        r = await m.get(path)
        assert r.status_code < 500, (path, r.status_code)
    await m.aclose()


async def test_switching_mode_or_project_leaves_the_old_scope_s_pages(app: App) -> None:
    """A switch went back to ``next`` as it was: the links list's second page
    (its cursor, of the other mode: "invalid cursor"), or a link's own page
    (404 in the other mode). And a page a POST rendered (a refused
    invitation, a rotated secret) sent the switch, and the theme, to its
    path with GET: 405."""
    import html

    m = await signed_in(app, owner(app))
    cursor = "0" * 64
    link = "0190e1a2-0000-7000-8000-000000000abc"
    for next_, went in [(f"/dashboard/links?cursor={cursor}&q=sale", "/dashboard/links?q=sale"),
                        (f"/dashboard/links/{link}/edit", "/dashboard/links"),
                        (f"/dashboard/settings/webhooks/{link}", "/dashboard/settings/webhooks"),
                        ("/dashboard/settings/team", "/dashboard/settings/team")]:
        r = await m.post("/dashboard/mode", {"mode": "live", "next": next_})
        assert (r.status_code, r.headers["location"]) == (303, went), next_
        assert (await m.get(went)).status_code == 200, went
    refused = await m.post("/dashboard/settings/team/invite",
                           {"email": owner(app).email, "role": "developer"})
    assert refused.status_code >= 400
    here = {html.unescape(v) for v in re.findall(r'name="next" value="([^"]*)"', refused.text)}
    assert here == {"/dashboard/settings/team"}
    await m.aclose()


async def test_a_refused_invitation_keeps_the_role_chosen(app: App) -> None:
    """It fell back to Developer: mending the e-mail and sending again
    invited with more rights than chosen."""
    m = await signed_in(app, owner(app))
    refused = await m.post("/dashboard/settings/team/invite",
                           {"email": owner(app).email, "role": "marketer"})
    assert refused.status_code >= 400

    def chosen(page: str) -> list[str]:
        select = page[page.index('id="invite-role"'):]
        return re.findall(r'<option value="(\w+)" selected>', select[:select.index("</select>")])

    assert chosen(refused.text) == ["marketer"]
    odd = await m.post("/dashboard/settings/team/invite", {"email": "x", "role": "boss"})
    assert chosen(odd.text) == ["developer"]
    await m.aclose()
