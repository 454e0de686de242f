"""Settings > Team: everyone sees the members and open invitations; owners and
admins invite, change roles and remove (SPEC.md rule 6), under the owner rules
of svc_engine.roles (only owners touch the owner role; the last owner stays).

The service sends no e-mail: inviting shows the inviter a single-use link to
pass on (svc_engine/invites.py), this once; only its hash is kept.
"""

from __future__ import annotations

import attrs
from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from storage import accounts
from svc_engine import roles
from svc_engine.errors import CallerError
from svc_engine.invites import INVITE_TTL_MS, Invite, check_email, new_invite, parse_role
from svc_engine.plans import QUOTAS
from svc_engine.records import Role
from svc_engine.roles import Action
from web.dashboard.context import Dashboard, Viewer, see_other

ROLE_HELP = {
    Role.OWNER: "Everything, including billing and the owner role.",
    Role.ADMIN: "The team, new projects, API keys and webhooks.",
    Role.DEVELOPER: "API keys, webhooks and the build tools.",
    Role.MARKETER: "Views the team, billing and the SDK guide; no API keys or webhooks.",
}


@attrs.frozen
class MemberRow:
    user_id: str
    email: str
    role: Role
    joined_ms: int
    is_me: bool


@attrs.frozen
class InviteRow:
    invite: Invite
    inviter: str


@attrs.frozen
class NewInvite:
    email: str
    role: Role
    link: str


def register(dash: Dashboard) -> None:
    dash.notices.update({
        "role-changed": "The role was changed.",
        "member-removed": "The member was removed from the organization.",
        "invite-revoked": "The invitation was withdrawn; its link no longer works.",
    })

    def rows(viewer: Viewer) -> tuple[list[MemberRow], list[InviteRow]]:
        assert viewer.org is not None
        members = []
        for m in dash.store.members_of(viewer.org.id):
            user = dash.store.get_user(m.user_id)
            members.append(MemberRow(m.user_id, user.email if user else "(deleted account)",
                                     m.role, m.created_at_ms, m.user_id == viewer.user.id))
        members.sort(key=lambda r: (list(Role).index(r.role), r.email))
        invites = []
        for inv in accounts.list_invites(dash.store, viewer.org.id, dash.now_ms()):
            inviter = dash.store.get_user(inv.invited_by)
            invites.append(InviteRow(inv, inviter.email if inviter else ""))
        return members, invites

    async def team_page(viewer: Viewer, *, status: int = 200, error: str | None = None,
                        invited: NewInvite | None = None, form_email: str = "",
                        form_role: str = "developer") -> Response:
        assert viewer.org is not None
        members, invites = rows(viewer)
        limit = QUOTAS[viewer.org.plan].members
        actor = viewer.role
        assert actor is not None
        grantable = [r for r in Role if r is not Role.OWNER or actor is Role.OWNER]
        if form_role not in {r.value for r in grantable}:  # none selected: the first, owner
            form_role = Role.DEVELOPER.value
        return await dash.render(
            "team.html", viewer, status=status, error=error, invited=invited,
            members=members, invites=invites, limit=limit, roles=list(Role),
            grantable=grantable, role_help=ROLE_HELP, form_email=form_email,
            form_role=form_role,
            ttl_days=INVITE_TTL_MS // (24 * 3600 * 1000),
            full=limit is not None and len(members) + len(invites) >= limit)

    @dash.page("/dashboard/settings/team", Action.TEAM_VIEW)
    async def team(viewer: Viewer) -> ResponseReturnValue:
        return await team_page(viewer)

    @dash.page("/dashboard/settings/team/invite", Action.TEAM_MANAGE, methods=("POST",),
               endpoint="invite_member", once=True)
    async def invite_member(viewer: Viewer) -> ResponseReturnValue:
        assert viewer.org is not None and viewer.role is not None
        form = await request.form
        raw_email = form.get("email", "")
        try:
            email = check_email(raw_email)
            role = parse_role(form.get("role", ""))
            roles.check_invite(viewer.role, role)
            token, invite = new_invite(dash.services.random(48), viewer.org.id, email, role,
                                       viewer.user.id, dash.now_ms())
            await accounts.create_invite(dash.store, invite)
        except CallerError as e:
            # the role as chosen: it fell back to Developer, and a second
            # submit, the e-mail mended, invited with more rights than meant
            return await team_page(viewer, status=e.status, error=e.message,
                                   form_email=raw_email, form_role=form.get("role", ""))
        link = f"{dash.dashboard_url()}/invite/{token}"
        return await team_page(viewer, invited=NewInvite(email, role, link))

    @dash.page("/dashboard/settings/team/invites/<invite_id>/revoke", Action.TEAM_MANAGE,
               methods=("POST",), once=True)
    async def revoke_invite(viewer: Viewer, invite_id: str) -> ResponseReturnValue:
        assert viewer.org is not None
        try:
            await accounts.revoke_invite(dash.store, viewer.org.id, invite_id)
        except CallerError as e:
            return await team_page(viewer, status=e.status, error=e.message)
        return see_other(url_for("team", done="invite-revoked"))

    @dash.page("/dashboard/settings/team/members/<user_id>/role", Action.TEAM_MANAGE,
               methods=("POST",))
    async def change_role(viewer: Viewer, user_id: str) -> ResponseReturnValue:
        assert viewer.org is not None and viewer.role is not None
        try:
            role = parse_role((await request.form).get("role", ""))
            await accounts.change_role(dash.store, viewer.org.id, viewer.role, user_id, role,
                                       actor_id=viewer.user.id)
        except CallerError as e:
            return await team_page(viewer, status=e.status, error=e.message)
        return see_other(url_for("team", done="role-changed"))

    @dash.page("/dashboard/settings/team/members/<user_id>/remove", Action.TEAM_MANAGE,
               methods=("POST",), once=True)
    async def remove_member(viewer: Viewer, user_id: str) -> ResponseReturnValue:
        assert viewer.org is not None and viewer.role is not None
        try:
            await accounts.remove_member(dash.store, viewer.org.id, viewer.role, user_id,
                                         actor_id=viewer.user.id)
        except CallerError as e:
            return await team_page(viewer, status=e.status, error=e.message)
        if user_id == viewer.user.id:
            return see_other(url_for("home"))
        return see_other(url_for("team", done="member-removed"))
