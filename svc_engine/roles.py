"""Who may do what in the dashboard: SPEC.md Authentication rule 6 as one table.

Rule 6, verbatim::

    Dashboard roles: API keys, Webhooks (add, edit, test, view deliveries):
    owners, admins, developers (marketers see a note to contact them).
    Team: everyone views, owners and admins manage. Billing: everyone views,
    owners manage. New project: owners and admins. New organization: anyone.

``MATRIX`` is that rule as data, plus the rows the spec leaves open (the SDK
page and the signed-in person's own session: workspace, mode, theme, sign out),
which everyone may use, and the rows of the later pages (see below). The
dashboard checks every page and action against this one table on the server,
and the role-matrix test reads the same table.
A role is per organization; "anyone" needs no membership at all.

Team changes follow two more rules (``check_*`` below), because otherwise an
admin could make themselves owner and so step around "Billing: owners manage":

1. Only an owner may grant the owner role, take it away, or remove an owner.
2. An organization always keeps at least one owner: nobody can demote or
   remove the last one.

Rows for pages rule 6 does not name (decisions):

- Links, Live events and the Debugger are read by every role: they show what
  the project's links do, nothing secret (no keys, no IP addresses).
- Links are created, edited and deleted by every role, marketers included:
  making campaign links is a marketer's job, and the plan's link quota is the
  limit that matters. ``LINKS_MANAGE`` is its own action so that can change.
- Platforms and Domains are seen by everyone and changed by owners, admins
  and developers, like API keys: they are app-signing and DNS settings, and a
  wrong one breaks universal links and app links for every link.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

from svc_engine.errors import Conflict, Forbidden, NotFound
from svc_engine.records import Membership, Role


class Action(enum.StrEnum):
    KEYS_VIEW = "keys.view"                # the API keys page
    KEYS_MANAGE = "keys.manage"            # create, revoke
    WEBHOOKS_VIEW = "webhooks.view"        # endpoints and their deliveries
    WEBHOOKS_MANAGE = "webhooks.manage"    # add, edit, test, on/off, rotate, delete, retry
    TEAM_VIEW = "team.view"
    TEAM_MANAGE = "team.manage"            # invite, change roles, remove
    BILLING_VIEW = "billing.view"          # plan, usage, what each plan includes
    BILLING_MANAGE = "billing.manage"      # change the plan
    PROJECT_CREATE = "project.create"
    ORG_CREATE = "org.create"
    SDK_VIEW = "sdk.view"                  # Build > SDK (key values need KEYS_VIEW)
    SESSION = "session"                    # own workspace, mode, theme, sign out
    LINKS_VIEW = "links.view"              # list, detail, QR code, analytics
    LINKS_MANAGE = "links.manage"          # create, edit, delete
    LIVE_VIEW = "live.view"                # Live events
    DEBUGGER_VIEW = "debugger.view"        # Build > Debugger, tap simulation (no writes)
    PLATFORMS_VIEW = "platforms.view"      # Build > Platforms, association files
    PLATFORMS_MANAGE = "platforms.manage"  # change iOS, Android, web fallback settings
    DOMAINS_VIEW = "domains.view"          # Build > Domains
    DOMAINS_MANAGE = "domains.manage"      # add, remove custom domains


EVERYONE = frozenset(Role)
_BUILDERS = frozenset({Role.OWNER, Role.ADMIN, Role.DEVELOPER})
_MANAGERS = frozenset({Role.OWNER, Role.ADMIN})
_OWNERS = frozenset({Role.OWNER})

MATRIX: dict[Action, frozenset[Role]] = {
    Action.KEYS_VIEW: _BUILDERS,
    Action.KEYS_MANAGE: _BUILDERS,
    Action.WEBHOOKS_VIEW: _BUILDERS,
    Action.WEBHOOKS_MANAGE: _BUILDERS,
    Action.TEAM_VIEW: EVERYONE,
    Action.TEAM_MANAGE: _MANAGERS,
    Action.BILLING_VIEW: EVERYONE,
    Action.BILLING_MANAGE: _OWNERS,
    Action.PROJECT_CREATE: _MANAGERS,
    Action.ORG_CREATE: EVERYONE,
    Action.SDK_VIEW: EVERYONE,
    Action.SESSION: EVERYONE,
    Action.LINKS_VIEW: EVERYONE,
    Action.LINKS_MANAGE: EVERYONE,
    Action.LIVE_VIEW: EVERYONE,
    Action.DEBUGGER_VIEW: EVERYONE,
    Action.PLATFORMS_VIEW: EVERYONE,
    Action.PLATFORMS_MANAGE: _BUILDERS,
    Action.DOMAINS_VIEW: EVERYONE,
    Action.DOMAINS_MANAGE: _BUILDERS,
}

# Allowed even to someone who belongs to no organization yet.
WITHOUT_MEMBERSHIP = frozenset({Action.ORG_CREATE, Action.SESSION})

# Refused roles see a note naming who can help instead of a bare refusal.
CONTACT_NOTE = frozenset({Action.KEYS_VIEW, Action.WEBHOOKS_VIEW})


def allows(role: Role | None, action: Action) -> bool:
    """True when ``role`` (None: no membership in the current organization) may."""
    if action in WITHOUT_MEMBERSHIP:
        return True
    return role is not None and role in MATRIX[action]


def who_may(action: Action) -> list[Role]:
    """The roles allowed ``action``, in the order owner, admin, developer, marketer."""
    return [r for r in Role if r in MATRIX[action]]


def check_invite(actor: Role | None, role: Role) -> None:
    """An invitation with ``role`` sent by someone with ``actor``'s role (None: no
    longer a member)."""
    if not allows(actor, Action.TEAM_MANAGE):
        raise Forbidden("only owners and admins manage the team")
    if role is Role.OWNER and actor is not Role.OWNER:
        raise Forbidden("only an owner can invite another owner")


def check_role_change(members: Sequence[Membership], actor: Role | None, target_user_id: str,
                      new_role: Role) -> Membership:
    """Validate giving ``target_user_id`` the role ``new_role``; returns the target."""
    if not allows(actor, Action.TEAM_MANAGE):
        raise Forbidden("only owners and admins manage the team")
    target = _find(members, target_user_id)
    if (target.role is Role.OWNER or new_role is Role.OWNER) and actor is not Role.OWNER:
        raise Forbidden("only an owner can grant or take away the owner role")
    if target.role is Role.OWNER and new_role is not Role.OWNER and _owners(members) <= 1:
        raise Conflict("an organization keeps at least one owner: make someone else owner "
                       "first")
    return target


def check_removal(members: Sequence[Membership], actor: Role | None,
                  target_user_id: str) -> Membership:
    """Validate removing ``target_user_id`` from the organization; returns the target."""
    if not allows(actor, Action.TEAM_MANAGE):
        raise Forbidden("only owners and admins manage the team")
    target = _find(members, target_user_id)
    if target.role is Role.OWNER and actor is not Role.OWNER:
        raise Forbidden("only an owner can remove an owner")
    if target.role is Role.OWNER and _owners(members) <= 1:
        raise Conflict("an organization keeps at least one owner: the last owner cannot be "
                       "removed")
    return target


def _find(members: Sequence[Membership], user_id: str) -> Membership:
    for m in members:
        if m.user_id == user_id:
            return m
    raise NotFound("no such member in this organization")


def _owners(members: Sequence[Membership]) -> int:
    return sum(1 for m in members if m.role is Role.OWNER)
