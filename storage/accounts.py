"""Dashboard accounts in LMDB: sessions, invitations, team changes, usage counts.

Functions over an ``LmdbStore``: reads open a read transaction, writes are one
op each through the store's single writer. Team changes read the members and
write the change in the same op, so two owners demoting each other at once
cannot leave an organization without an owner.

Sessions and invitations are keyed by the SHA-256 of their token. Expired ones
are swept while creating new ones (a bounded sweep), so the databases stay the
size of what is live without a separate timer.
"""

from __future__ import annotations

import attrs
import lmdb

from storage import layout
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore
from svc_engine import roles
from svc_engine.errors import Conflict, Forbidden, Gone, NotFound
from svc_engine.invites import Invite, is_open
from svc_engine.plans import QUOTAS, within
from svc_engine.records import Membership, Organization, Role, User, normalize_email
from svc_engine.sessions import Session, is_live

SWEEP_LIMIT = 1000


# -- sessions -------------------------------------------------------------------

async def create_session(store: LmdbStore, session: Session) -> None:
    """Store a new session, sweeping up to ``SWEEP_LIMIT`` expired ones."""
    db = store.db(b"sessions")
    now = session.created_at_ms

    def op(txn: lmdb.Transaction) -> None:
        doomed = [bytes(k) for k, v in txn.cursor(db=db)
                  if not is_live(decode(Session, bytes(v)), now)][:SWEEP_LIMIT]
        for k in doomed:
            txn.delete(k, db=db)
        txn.put(session.token_hash, encode(session), db=db)

    await store.write(op)


def get_session(store: LmdbStore, token_hash: bytes) -> Session | None:
    with store.read() as txn:
        raw = txn.get(token_hash, db=store.db(b"sessions"))
    return decode(Session, bytes(raw)) if raw is not None else None


async def save_session(store: LmdbStore, session: Session) -> bool:
    """Overwrite a session that still exists; False when it was deleted meanwhile
    (signed out elsewhere), which is never undone."""
    db = store.db(b"sessions")

    def op(txn: lmdb.Transaction) -> bool:
        if txn.get(session.token_hash, db=db) is None:
            return False
        txn.put(session.token_hash, encode(session), db=db)
        return True

    return bool(await store.write(op))


async def delete_session(store: LmdbStore, token_hash: bytes) -> None:
    db = store.db(b"sessions")

    def op(txn: lmdb.Transaction) -> None:
        txn.delete(token_hash, db=db)

    await store.write(op)


# -- invitations ----------------------------------------------------------------

async def create_invite(store: LmdbStore, invite: Invite) -> None:
    """Store ``invite``, replacing an open invitation of the same address to the
    same organization, and sweeping expired ones. Refused when the e-mail is
    already a member or the plan's member quota (members plus open invitations)
    is reached."""
    db = store.db(b"invites")

    def op(txn: lmdb.Transaction) -> None:
        org = _org(store, txn, invite.org_id)
        members = _members(store, txn, invite.org_id)
        uid = txn.get(normalize_email(invite.email).encode(), db=store.db(b"users_by_email"))
        if uid is not None and any(m.user_id == layout.from_uid(bytes(uid)) for m in members):
            raise Conflict(f"{invite.email} is already a member")
        expired: list[bytes] = []
        replaced: list[bytes] = []
        pending = 0
        for k, v in txn.cursor(db=db):
            other = decode(Invite, bytes(v))
            if not is_open(other, invite.created_at_ms):
                expired.append(bytes(k))
            elif other.org_id == invite.org_id and other.email == invite.email:
                replaced.append(bytes(k))
            elif other.org_id == invite.org_id:
                pending += 1
        if not within(QUOTAS[org.plan].members, len(members) + pending):
            raise Forbidden(f"the {org.plan.value} plan allows {QUOTAS[org.plan].members} "
                            "team members, counting open invitations")
        for k in replaced + expired[:SWEEP_LIMIT]:
            txn.delete(k, db=db)
        txn.put(invite.token_hash, encode(invite), db=db)

    await store.write(op)


def find_invite(store: LmdbStore, token_hash: bytes) -> Invite | None:
    with store.read() as txn:
        raw = txn.get(token_hash, db=store.db(b"invites"))
    return decode(Invite, bytes(raw)) if raw is not None else None


def list_invites(store: LmdbStore, org_id: str, now_ms: int) -> list[Invite]:
    """Open invitations of an organization, newest first."""
    out = [decode(Invite, v) for _, v in store.scan(b"invites", b"")]
    mine = [i for i in out if i.org_id == org_id and is_open(i, now_ms)]
    return sorted(mine, key=lambda i: (-i.created_at_ms, i.id))


async def revoke_invite(store: LmdbStore, org_id: str, invite_id: str) -> Invite:
    db = store.db(b"invites")

    def op(txn: lmdb.Transaction) -> Invite:
        for k, v in txn.cursor(db=db):
            inv = decode(Invite, bytes(v))
            if inv.id == invite_id and inv.org_id == org_id:
                txn.delete(bytes(k), db=db)
                return inv
        raise NotFound("no such invitation")

    return await store.write(op)  # type: ignore[no-any-return]


@attrs.frozen
class Accepted:
    invite: Invite
    user_id: str
    joined: bool  # False when the person was a member already (role unchanged)


async def accept_invite(store: LmdbStore, token_hash: bytes, now_ms: int, *,
                        new_user: User | None = None,
                        existing_user_id: str | None = None) -> Accepted:
    """Use an invitation once: delete it, create ``new_user`` (or take the existing
    account that proved its password) and add the membership, all in one commit."""
    invites, users, by_email = store.db(b"invites"), store.db(b"users"), store.db(
        b"users_by_email")

    def op(txn: lmdb.Transaction) -> Accepted:
        raw = txn.get(token_hash, db=invites)
        invite = decode(Invite, bytes(raw)) if raw is not None else None
        if invite is None or not is_open(invite, now_ms):
            raise Gone("this invitation link was used already or has expired")
        email = normalize_email(invite.email).encode()
        uid = txn.get(email, db=by_email)
        if new_user is not None:
            if uid is not None:
                raise Conflict("an account with this e-mail exists: sign in to accept")
            txn.put(email, layout.uid(new_user.id), db=by_email)
            txn.put(layout.uid(new_user.id), encode(new_user), db=users)
            user_id = new_user.id
        elif uid is None or layout.from_uid(bytes(uid)) != existing_user_id:
            raise Conflict("this invitation is for another account")
        else:
            user_id = existing_user_id
        members = _members(store, txn, invite.org_id)
        # The inviter must still be allowed to send it: an admin removed (or
        # made a developer) since would otherwise go on granting the role.
        inviter = next((m for m in members if m.user_id == invite.invited_by), None)
        try:
            roles.check_invite(inviter.role if inviter is not None else None, invite.role)
        except Forbidden:
            raise Gone("this invitation was withdrawn: the person who sent it can no "
                       "longer invite to this role; ask an owner or admin for a new one"
                       ) from None
        txn.delete(token_hash, db=invites)
        if any(m.user_id == user_id for m in members):
            return Accepted(invite, user_id, joined=False)
        org = _org(store, txn, invite.org_id)
        if not within(QUOTAS[org.plan].members, len(members)):
            raise Forbidden(f"the {org.plan.value} plan's team is full; ask an owner to "
                            "upgrade")
        _put_member(store, txn, Membership(org_id=invite.org_id, user_id=user_id,
                                           role=invite.role, created_at_ms=now_ms))
        return Accepted(invite, user_id, joined=True)

    return await store.write(op)  # type: ignore[no-any-return]


# -- team -------------------------------------------------------------------------

async def change_role(store: LmdbStore, org_id: str, actor: Role, user_id: str,
                      new_role: Role, *, actor_id: str | None = None) -> Membership:
    """Give a member ``new_role`` under the team rules of svc_engine.roles.
    ``actor_id``: the acting member, whose role is read in the write (a role
    read before it may have changed since: an admin demoted meanwhile)."""

    def op(txn: lmdb.Transaction) -> Membership:
        members = _members(store, txn, org_id)
        target = roles.check_role_change(members, _acting(members, actor, actor_id), user_id,
                                         new_role)
        changed = attrs.evolve(target, role=new_role)
        _put_member(store, txn, changed)
        return changed

    return await store.write(op)  # type: ignore[no-any-return]


async def remove_member(store: LmdbStore, org_id: str, actor: Role, user_id: str, *,
                        actor_id: str | None = None) -> Membership:
    """Remove a member under the team rules of svc_engine.roles (``actor_id``:
    as for :func:`change_role`)."""

    def op(txn: lmdb.Transaction) -> Membership:
        members = _members(store, txn, org_id)
        target = roles.check_removal(members, _acting(members, actor, actor_id), user_id)
        o, u = layout.uid(org_id), layout.uid(user_id)
        txn.delete(o + u, db=store.db(b"members"))
        txn.delete(u + o, db=store.db(b"members_by_user"))
        return target

    return await store.write(op)  # type: ignore[no-any-return]


# -- usage --------------------------------------------------------------------------

# -- plumbing -------------------------------------------------------------------------

def _acting(members: list[Membership], actor: Role, actor_id: str | None) -> Role | None:
    """The acting member's role as the write reads it (None: no longer one)."""
    if actor_id is None:
        return actor
    return next((m.role for m in members if m.user_id == actor_id), None)


def _members(store: LmdbStore, txn: lmdb.Transaction, org_id: str) -> list[Membership]:
    prefix = layout.uid(org_id)
    cur = txn.cursor(db=store.db(b"members"))
    out = []
    ok = cur.set_range(prefix)
    while ok and bytes(cur.key()).startswith(prefix):
        out.append(decode(Membership, bytes(cur.value())))
        ok = cur.next()
    return out


def _org(store: LmdbStore, txn: lmdb.Transaction, org_id: str) -> Organization:
    raw = txn.get(layout.uid(org_id), db=store.db(b"orgs"))
    if raw is None:
        raise NotFound(f"no organization {org_id}")
    return decode(Organization, bytes(raw))


def _put_member(store: LmdbStore, txn: lmdb.Transaction, m: Membership) -> None:
    o, u = layout.uid(m.org_id), layout.uid(m.user_id)
    txn.put(o + u, encode(m), db=store.db(b"members"))
    txn.put(u + o, b"", db=store.db(b"members_by_user"))
