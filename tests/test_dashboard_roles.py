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
from svc_engine.invites import new_invite
from svc_engine.keys import KeyKind, Mode
from svc_engine.records import Role
from svc_engine.roles import MATRIX, Action
from tests.conftest import App
from tests.dashboard_support import Member, add_user, dashboard_of, owner, signed_in
from web import tenancy

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
