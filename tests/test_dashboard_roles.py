"""The role matrix, over HTTP: for owner, admin, developer and marketer, every
dashboard page and action is allowed or refused (403) exactly as
svc_engine.roles.MATRIX says, which test_dashboard_rules.py checks against
SPEC.md rule 6 word for word. Every route the app declares must be listed here
with the action it needs, so a new page cannot skip the check."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable

import attrs
import pytest

from storage import accounts
from storage.lmdb_store import LmdbStore
from svc_engine.errors import Forbidden
from svc_engine.ids import new_id
from svc_engine.invites import new_invite
from svc_engine.keys import KeyKind, Mode
from svc_engine.links import new_link, new_slug, parse_link_create
from svc_engine.plans import Plan
from svc_engine.records import Role
from svc_engine.roles import MATRIX, Action
from svc_engine.webhook_delivery import DeliveryStatus
from tests.conftest import App
from tests.dashboard_support import Member, add_user, dashboard_of, owner, signed_in
from tests.dashboard_webhook_support import UNREACHABLE, make_delivery, make_endpoint
from web import tenancy
from web.dashboard.webhook_display import secret_check

Setup = Callable[[App, Member], Awaitable[tuple[str, dict[str, str]]]]


@attrs.frozen
class Case:
    method: str
    rule: str
    action: Action
    setup: Setup
    ok: int  # status when allowed


def fixed(path: str, data: dict[str, str] | None = None) -> Setup:
    async def setup(app: App, m: Member) -> tuple[str, dict[str, str]]:
        return path, dict(data or {})
    return setup


async def fresh_key(app: App, m: Member) -> tuple[str, dict[str, str]]:
    key_id, _ = await tenancy.create_key(app.services.store, app.project_id, KeyKind.SECRET,
                                         Mode.TEST, "to revoke", os.urandom,
                                         app.services.clock.now_ms())
    return f"/dashboard/settings/keys/{key_id}/revoke", {}


async def fresh_invite(app: App, m: Member) -> tuple[str, dict[str, str]]:
    _, inv = new_invite(os.urandom(48), app.org_id, f"{os.urandom(6).hex()}@example.com",
                        Role.DEVELOPER, owner(app).id, app.services.clock.now_ms())
    await accounts.create_invite(app.services.store, inv)
    return f"/dashboard/settings/team/invites/{inv.id}/revoke", {}


async def fresh_member(app: App, m: Member) -> str:
    user = await add_user(app, f"{os.urandom(6).hex()}@example.com", Role.DEVELOPER)
    return user.id


async def role_change(app: App, m: Member) -> tuple[str, dict[str, str]]:
    return f"/dashboard/settings/team/members/{await fresh_member(app, m)}/role", {
        "role": "marketer"}


async def removal(app: App, m: Member) -> tuple[str, dict[str, str]]:
    return f"/dashboard/settings/team/members/{await fresh_member(app, m)}/remove", {}


async def unique_invite(app: App, m: Member) -> tuple[str, dict[str, str]]:
    return "/dashboard/settings/team/invite", {"email": f"{os.urandom(6).hex()}@example.com",
                                               "role": "developer"}


async def this_project(app: App, m: Member) -> tuple[str, dict[str, str]]:
    return "/dashboard/workspace", {"project_id": app.project_id,
                                    "next": "/dashboard/settings/team"}


async def fresh_link(app: App) -> str:
    now = app.services.clock.now_ms()
    draft = parse_link_create({"path": "/matrix"}, allow_custom_slug=False, now_ms=now)
    link = new_link(draft, link_id=new_id(os.urandom(16)), project_id=app.project_id,
                    mode=Mode.TEST, domain=app.services.default_domain,
                    slug=new_slug(os.urandom(8)), now_ms=now)
    await app.services.links.create(link, org_id=app.org_id, quota=None, idem=None)
    return link.id


def on_link(suffix: str, data: dict[str, str] | None = None) -> Setup:
    async def setup(app: App, m: Member) -> tuple[str, dict[str, str]]:
        return f"/dashboard/links/{await fresh_link(app)}{suffix}", dict(data or {})
    return setup


async def simulate_a_tap(app: App, m: Member) -> tuple[str, dict[str, str]]:
    return f"/dashboard/build/debugger/simulate?device=android&link={await fresh_link(app)}", {}


async def unique_domain(app: App, m: Member) -> tuple[str, dict[str, str]]:
    return "/dashboard/build/domains", {"domain": f"go{os.urandom(4).hex()}.example.com"}


async def domain_removal(app: App, m: Member) -> tuple[str, dict[str, str]]:
    domain = f"go{os.urandom(4).hex()}.example.com"
    await app.services.links.add_domain(app.project_id, domain, set())
    return f"/dashboard/build/domains/{domain}/remove", {}


def on_webhook(suffix: str, data: dict[str, str] | None = None) -> Setup:
    async def setup(app: App, m: Member) -> tuple[str, dict[str, str]]:
        endpoint = await make_endpoint(app)
        return f"/dashboard/settings/webhooks/{endpoint.id}{suffix}", dict(data or {})
    return setup


def on_delivery(status: DeliveryStatus, suffix: str) -> Setup:
    async def setup(app: App, m: Member) -> tuple[str, dict[str, str]]:
        d = await make_delivery(app, await make_endpoint(app), status)
        return f"/dashboard/settings/webhooks/deliveries/{d.id}{suffix}", {}
    return setup


async def rotation(app: App, m: Member) -> tuple[str, dict[str, str]]:
    endpoint = await make_endpoint(app)
    return f"/dashboard/settings/webhooks/{endpoint.id}/rotate", {
        "secret_check": secret_check(endpoint)}


WEBHOOK_FORM = {"url": UNREACHABLE, "events": "click"}
CASES = [
    Case("GET", "/dashboard/build/sdk", Action.SDK_VIEW, fixed("/dashboard/build/sdk"), 200),
    Case("GET", "/dashboard/settings/keys", Action.KEYS_VIEW,
         fixed("/dashboard/settings/keys"), 200),
    Case("POST", "/dashboard/settings/keys", Action.KEYS_MANAGE,
         fixed("/dashboard/settings/keys", {"kind": "secret", "name": "matrix"}), 200),
    Case("POST", "/dashboard/settings/keys/<key_id>/revoke", Action.KEYS_MANAGE, fresh_key, 303),
    Case("GET", "/dashboard/settings/team", Action.TEAM_VIEW,
         fixed("/dashboard/settings/team"), 200),
    Case("POST", "/dashboard/settings/team/invite", Action.TEAM_MANAGE, unique_invite, 200),
    Case("POST", "/dashboard/settings/team/invites/<invite_id>/revoke", Action.TEAM_MANAGE,
         fresh_invite, 303),
    Case("POST", "/dashboard/settings/team/members/<user_id>/role", Action.TEAM_MANAGE,
         role_change, 303),
    Case("POST", "/dashboard/settings/team/members/<user_id>/remove", Action.TEAM_MANAGE,
         removal, 303),
    Case("GET", "/dashboard/settings/billing", Action.BILLING_VIEW,
         fixed("/dashboard/settings/billing"), 200),
    Case("POST", "/dashboard/settings/billing/plan", Action.BILLING_MANAGE,
         fixed("/dashboard/settings/billing/plan", {"plan": "scale"}), 303),
    Case("GET", "/dashboard/projects/new", Action.PROJECT_CREATE,
         fixed("/dashboard/projects/new"), 200),
    Case("POST", "/dashboard/projects/new", Action.PROJECT_CREATE,
         fixed("/dashboard/projects/new", {"name": "Matrix app"}), 200),
    Case("GET", "/dashboard/orgs/new", Action.ORG_CREATE, fixed("/dashboard/orgs/new"), 200),
    Case("POST", "/dashboard/orgs/new", Action.ORG_CREATE,
         fixed("/dashboard/orgs/new", {"name": "Side project"}), 303),
    Case("POST", "/dashboard/workspace", Action.SESSION, this_project, 303),
    Case("POST", "/dashboard/mode", Action.SESSION, fixed("/dashboard/mode", {"mode": "live"}),
         303),
    Case("POST", "/dashboard/sign-out", Action.SESSION, fixed("/dashboard/sign-out"), 303),
    Case("GET", "/dashboard/links", Action.LINKS_VIEW, fixed("/dashboard/links"), 200),
    Case("GET", "/dashboard/links/new", Action.LINKS_MANAGE, fixed("/dashboard/links/new"), 200),
    Case("POST", "/dashboard/links/new", Action.LINKS_MANAGE,
         fixed("/dashboard/links/new", {"path": "/made-here"}), 303),
    Case("GET", "/dashboard/links/<link_id>", Action.LINKS_VIEW, on_link(""), 200),
    Case("GET", "/dashboard/links/<link_id>/edit", Action.LINKS_MANAGE, on_link("/edit"), 200),
    Case("POST", "/dashboard/links/<link_id>/edit", Action.LINKS_MANAGE,
         on_link("/edit", {"path": "/changed"}), 303),
    Case("POST", "/dashboard/links/<link_id>/delete", Action.LINKS_MANAGE, on_link("/delete"),
         303),
    Case("GET", "/dashboard/links/<link_id>/qr.svg", Action.LINKS_VIEW, on_link("/qr.svg"), 200),
    Case("GET", "/dashboard/links/<link_id>/qr.png", Action.LINKS_VIEW, on_link("/qr.png"), 200),
    Case("GET", "/dashboard/live", Action.LIVE_VIEW, fixed("/dashboard/live"), 200),
    Case("GET", "/dashboard/live/events", Action.LIVE_VIEW,
         fixed("/dashboard/live/events?after=0"), 200),
    Case("GET", "/dashboard/build/debugger", Action.DEBUGGER_VIEW,
         fixed("/dashboard/build/debugger"), 200),
    Case("GET", "/dashboard/build/debugger/simulate", Action.DEBUGGER_VIEW, simulate_a_tap, 200),
    Case("GET", "/dashboard/build/platforms", Action.PLATFORMS_VIEW,
         fixed("/dashboard/build/platforms"), 200),
    Case("POST", "/dashboard/build/platforms", Action.PLATFORMS_MANAGE,
         fixed("/dashboard/build/platforms", {"android_package": "com.example.matrix"}), 303),
    Case("POST", "/dashboard/build/platforms/destinations", Action.PLATFORMS_MANAGE,
         fixed("/dashboard/build/platforms/destinations",
               {"sdk_allowed_hosts": "example.com"}), 303),
    Case("GET", "/dashboard/build/domains", Action.DOMAINS_VIEW,
         fixed("/dashboard/build/domains"), 200),
    Case("POST", "/dashboard/build/domains", Action.DOMAINS_MANAGE, unique_domain, 303),
    Case("POST", "/dashboard/build/domains/<domain>/remove", Action.DOMAINS_MANAGE,
         domain_removal, 303),
    Case("GET", "/dashboard/settings/webhooks", Action.WEBHOOKS_VIEW,
         fixed("/dashboard/settings/webhooks"), 200),
    Case("GET", "/dashboard/settings/webhooks/new", Action.WEBHOOKS_MANAGE,
         fixed("/dashboard/settings/webhooks/new"), 200),
    Case("POST", "/dashboard/settings/webhooks/new", Action.WEBHOOKS_MANAGE,
         fixed("/dashboard/settings/webhooks/new", WEBHOOK_FORM), 200),
    Case("GET", "/dashboard/settings/webhooks/<endpoint_id>", Action.WEBHOOKS_VIEW,
         on_webhook(""), 200),
    Case("GET", "/dashboard/settings/webhooks/<endpoint_id>/edit", Action.WEBHOOKS_MANAGE,
         on_webhook("/edit"), 200),
    Case("POST", "/dashboard/settings/webhooks/<endpoint_id>/edit", Action.WEBHOOKS_MANAGE,
         on_webhook("/edit", WEBHOOK_FORM), 303),
    Case("POST", "/dashboard/settings/webhooks/<endpoint_id>/test", Action.WEBHOOKS_MANAGE,
         on_webhook("/test"), 303),
    Case("POST", "/dashboard/settings/webhooks/<endpoint_id>/disable", Action.WEBHOOKS_MANAGE,
         on_webhook("/disable"), 303),
    Case("POST", "/dashboard/settings/webhooks/<endpoint_id>/enable", Action.WEBHOOKS_MANAGE,
         on_webhook("/enable"), 303),
    Case("POST", "/dashboard/settings/webhooks/<endpoint_id>/rotate", Action.WEBHOOKS_MANAGE,
         rotation, 200),
    Case("GET", "/dashboard/settings/webhooks/<endpoint_id>/delete", Action.WEBHOOKS_MANAGE,
         on_webhook("/delete"), 200),
    Case("POST", "/dashboard/settings/webhooks/<endpoint_id>/delete", Action.WEBHOOKS_MANAGE,
         on_webhook("/delete", {"confirm": "delete"}), 303),
    Case("GET", "/dashboard/settings/webhooks/deliveries", Action.WEBHOOKS_VIEW,
         fixed("/dashboard/settings/webhooks/deliveries"), 200),
    Case("GET", "/dashboard/settings/webhooks/deliveries/<delivery_id>", Action.WEBHOOKS_VIEW,
         on_delivery(DeliveryStatus.DELIVERED, ""), 200),
    Case("POST", "/dashboard/settings/webhooks/deliveries/<delivery_id>/retry",
         Action.WEBHOOKS_MANAGE, on_delivery(DeliveryStatus.FAILED, "/retry"), 303),
    Case("POST", "/dashboard/settings/webhooks/deliveries/<delivery_id>/resend",
         Action.WEBHOOKS_MANAGE, on_delivery(DeliveryStatus.DELIVERED, "/resend"), 303),
]
PUBLIC = {("GET", "/dashboard"), ("POST", "/dashboard/sign-in"),
          ("GET", "/dashboard/invite/<token>"), ("POST", "/dashboard/invite/<token>"),
          ("POST", "/dashboard/theme")}


async def test_every_route_is_in_the_matrix_with_its_action(app: App) -> None:
    dash = dashboard_of(app)
    declared = {(m, r.rule): r.action for r in dash.routes for m in r.methods}
    expected: dict[tuple[str, str], Action | None] = {(c.method, c.rule): c.action
                                                      for c in CASES}
    expected.update({k: None for k in PUBLIC})
    assert declared == expected
    quart_rules = {(m, rule.rule) for rule in app.front.dashboard.url_map.iter_rules()  # type: ignore[union-attr]
                   for m in rule.methods if m not in ("HEAD", "OPTIONS")}
    assert quart_rules - set(declared) == {("GET", "/dashboard/static/<path:filename>")}


@pytest.mark.parametrize("role", list(Role))
async def test_role_matrix(app: App, role: Role) -> None:
    user = owner(app) if role is Role.OWNER else await add_user(app, f"{role.value}@example.com",
                                                                role)
    seen: list[tuple[str, str, int]] = []
    for case in CASES:
        m = await signed_in(app, user)  # a fresh session each time: cases change it
        try:
            path, data = await case.setup(app, m)
            if case.method == "GET":
                r = await m.get(path)
            else:
                r = await m.post(path, data)
        finally:
            await m.aclose()
        allowed = role in MATRIX[case.action]
        seen.append((case.method, case.rule, r.status_code))
        assert r.status_code == (case.ok if allowed else 403), (role, case.method, path, r.text)
        if not allowed:
            assert "You don&#39;t have access" in r.text or "managed by" in r.text
    assert len(seen) == len(CASES)


async def test_marketer_sees_a_note_naming_who_can_help(app: App) -> None:
    dev = await add_user(app, "dev@example.com", Role.DEVELOPER)
    mkt = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    r = await mkt.get("/dashboard/settings/keys")
    assert r.status_code == 403
    assert "API keys are managed by owners, admins and developers" in r.text
    assert "owner@localhost" in r.text and dev.email in r.text
    assert "mkt@example.com</a>" not in r.text           # not listed as a contact
    assert "pk_test_" not in r.text and "sk_test_" not in r.text
    sdk = await mkt.get("/dashboard/build/sdk")
    assert sdk.status_code == 200
    assert app.keys["pk_test"] not in sdk.text and "pk_test_…" in sdk.text
    await mkt.aclose()


async def test_menus_are_not_the_only_guard(app: App) -> None:
    mkt = await signed_in(app, await add_user(app, "m2@example.com", Role.MARKETER))
    team = await mkt.get("/dashboard/settings/team")
    assert team.status_code == 200 and "Create invitation" not in team.text
    r = await mkt.post("/dashboard/settings/team/invite",
                       {"email": "x@example.com", "role": "owner"})
    assert r.status_code == 403
    assert accounts.list_invites(app.services.store, app.org_id,
                                 app.services.clock.now_ms()) == []
    await mkt.aclose()


async def test_every_post_needs_the_csrf_token(app: App) -> None:
    """Each form of the matrix, sent by an owner without its CSRF field: refused."""
    posts = [c for c in CASES if c.method == "POST"]
    for case in posts:
        m = await signed_in(app, owner(app))
        try:
            path, data = await case.setup(app, m)
            r = await m.post(path, data, csrf_token=None)
        finally:
            await m.aclose()
        assert r.status_code == 403 and "This form has expired" in r.text, (case.rule, r.text)
    signed_in_posts = {r.rule for r in dashboard_of(app).routes
                       if "POST" in r.methods and r.action is not None}
    assert {c.rule for c in posts} == signed_in_posts


async def test_open_invitations_take_seats_when_a_member_is_added(store: LmdbStore) -> None:
    """The plan's team size counts members and open invitations, as the
    dashboard's team page does: a Starter organization (3) with one member
    and two open invitations is full for `svc user create --org` too, and an
    invitation that expired frees its seat."""
    now = 1_800_000_000_000
    org = await tenancy.create_org(store, "Small Co", Plan.STARTER, os.urandom, now)
    first = await tenancy.create_user(store, "first@example.com", "a-long-password-1", os.urandom,
                                      now)
    await tenancy.add_member(store, org.id, first.id, Role.OWNER, now)
    invites = [new_invite(os.urandom(48), org.id, f"i{i}@example.com", Role.DEVELOPER, first.id,
                          now)[1] for i in range(2)]
    for invite in invites:
        await accounts.create_invite(store, invite)
    third = await tenancy.create_user(store, "third@example.com", "a-long-password-3",
                                      os.urandom, now)
    with pytest.raises(Forbidden, match="counting open invitations"):
        await tenancy.add_member(store, org.id, third.id, Role.DEVELOPER, now)
    assert len(store.members_of(org.id)) == 1
    later = invites[0].expires_at_ms + 1
    await tenancy.add_member(store, org.id, third.id, Role.DEVELOPER, later)
    assert len(store.members_of(org.id)) == 2
