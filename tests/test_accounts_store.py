"""The account store's own guards, which the dashboard's checks before it do
not replace (a race between two tabs, a check made before a slow password
hash): a signed-out session stays signed out, an invitation is revoked only
by its organization, an expired one is refused however late the page
checked, and accepting one never takes a team past its plan. Rules a
mutation audit (session 38) broke without a failing test."""

from __future__ import annotations

import attrs
import pytest

from storage import accounts
from storage.accounts import _put_member
from storage.lmdb_store import LmdbStore
from svc_engine.errors import Forbidden, Gone, NotFound
from svc_engine.invites import new_invite
from svc_engine.plans import QUOTAS, Plan
from svc_engine.records import Membership, Organization, Role, User
from svc_engine.sessions import new_session
from web import tenancy
from web.services import system_random

OWNER = "11111111-1111-4111-8111-111111111111"


def _user(n: int, email: str, at_ms: int) -> User:
    return User(id=f"2222222{n}-2222-4222-8222-222222222222", email=email,
                password_hash="x", created_at_ms=at_ms)


async def _org_with_owner(store: LmdbStore, name: str = "A") -> str:
    org = await tenancy.create_org(store, name, Plan.GROWTH, system_random, 1)
    await store.write(lambda txn: _put_member(store, txn, Membership(
        org_id=org.id, user_id=OWNER, role=Role.OWNER, created_at_ms=1)))
    return org.id


async def test_a_save_racing_a_sign_out_does_not_bring_the_session_back(
        store: LmdbStore) -> None:
    _, session = new_session(bytes(range(48)), OWNER, 1_000_000)
    await accounts.create_session(store, session)
    loaded = accounts.get_session(store, session.token_hash)  # another tab read it
    assert loaded is not None
    await accounts.delete_session(store, session.token_hash)  # signed out here
    touched = attrs.evolve(loaded, last_seen_ms=2_000_000)
    assert await accounts.save_session(store, touched) is False
    assert accounts.get_session(store, session.token_hash) is None


async def test_an_invitation_is_revoked_only_by_its_organization(store: LmdbStore) -> None:
    mine, theirs = await _org_with_owner(store, "A"), await _org_with_owner(store, "B")
    _, invite = new_invite(bytes(range(48)), theirs, "x@example.com", Role.ADMIN, OWNER, 1000)
    await accounts.create_invite(store, invite)
    with pytest.raises(NotFound):
        await accounts.revoke_invite(store, mine, invite.id)
    assert [i.id for i in accounts.list_invites(store, theirs, 2000)] == [invite.id]
    await accounts.revoke_invite(store, theirs, invite.id)
    assert accounts.list_invites(store, theirs, 2000) == []


async def test_an_invitation_accepted_at_its_expiry_is_refused(store: LmdbStore) -> None:
    org = await _org_with_owner(store)
    _, invite = new_invite(bytes(range(48)), org, "x@example.com", Role.ADMIN, OWNER, 1000)
    await accounts.create_invite(store, invite)
    late = invite.expires_at_ms
    with pytest.raises(Gone):
        await accounts.accept_invite(store, invite.token_hash, late,
                                     new_user=_user(0, "x@example.com", late))
    assert [m.user_id for m in store.members_of(org)] == [OWNER]
    joined = await accounts.accept_invite(store, invite.token_hash, late - 1,
                                          new_user=_user(0, "x@example.com", late - 1))
    assert joined.joined


async def test_accepting_invitations_never_takes_a_team_past_its_plan(store: LmdbStore) -> None:
    """Invitations sent on Growth, the organization moved to Starter (3
    members) before they were accepted: the one that would make a fourth
    member is refused."""
    org = await _org_with_owner(store)
    invites = []
    for i in range(3):
        _, invite = new_invite(bytes([i + 1]) * 48, org, f"p{i}@example.com", Role.DEVELOPER,
                               OWNER, 1000)
        await accounts.create_invite(store, invite)
        invites.append(invite)
    await store.set_plan(org, Plan.STARTER)
    assert QUOTAS[Plan.STARTER].members == 3
    for i, invite in enumerate(invites[:2]):
        await accounts.accept_invite(store, invite.token_hash, 2000,
                                     new_user=_user(i, invite.email, 2000))
    with pytest.raises(Forbidden, match="team is full"):
        await accounts.accept_invite(store, invites[2].token_hash, 2000,
                                     new_user=_user(2, invites[2].email, 2000))
    assert len(store.members_of(org)) == 3


@pytest.mark.parametrize("order", ["theirs after", "theirs before"])
async def test_an_organizations_members_and_invitations_are_its_own(
        store: LmdbStore, order: str) -> None:
    """Members are read by a prefix of the organization's id: another's, the
    next in key order or the one before, are not counted as this team's."""
    ids = ["00000000-0000-4000-8000-00000000000a", "ffffffff-ffff-4fff-bfff-fffffffffffa"]
    mine_id, theirs_id = ids if order == "theirs after" else ids[::-1]
    for org_id in (mine_id, theirs_id):
        await store.create_org(Organization(id=org_id, name="Org", plan=Plan.STARTER,
                                            created_at_ms=1))
        await store.write(lambda txn, o=org_id: _put_member(store, txn, Membership(
            org_id=o, user_id=OWNER, role=Role.OWNER, created_at_ms=1)))
    theirs_user = _user(1, "theirs@example.com", 1)
    await store.create_user(theirs_user)
    await store.write(lambda txn: _put_member(store, txn, Membership(
        org_id=theirs_id, user_id=theirs_user.id, role=Role.DEVELOPER, created_at_ms=1)))
    # their member is not one of mine: inviting them here is no conflict, and
    # the starter plan's 3 seats count only my owner and this invitation
    _, invite = new_invite(bytes(range(48)), mine_id, "theirs@example.com", Role.DEVELOPER,
                           OWNER, 1000)
    await accounts.create_invite(store, invite)
    _, theirs_invite = new_invite(bytes(range(1, 49)), theirs_id, "x@example.com",
                                  Role.DEVELOPER, OWNER, 1000)
    await accounts.create_invite(store, theirs_invite)
    assert [i.id for i in accounts.list_invites(store, mine_id, 2000)] == [invite.id]
    assert accounts.list_invites(store, mine_id, invite.expires_at_ms) == []  # expired
    joined = await accounts.accept_invite(store, invite.token_hash, 2000,
                                          existing_user_id=theirs_user.id)
    assert joined.joined
    changed = await accounts.change_role(store, mine_id, Role.OWNER, theirs_user.id, Role.ADMIN)
    assert changed.org_id == mine_id
    assert {m.user_id: m.role for m in store.members_of(theirs_id)} == {
        OWNER: Role.OWNER, theirs_user.id: Role.DEVELOPER}
