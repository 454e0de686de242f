"""Edges of the storage layer that the rest of the suite never reached: the
refusals of a data dir or backup destination that cannot be used, a data
file too short to hold even its meta pages or not an LMDB file at all, a
read-only open of a data dir older than some databases, a new data dir
opened without upgrading, the tenancy writes' refusals (a missing
organization, a taken id, key or e-mail, an unknown key or member), the
reverse scan's limit and start, the account store's sweeps and refusals
when an invitation is accepted, a link's clicks when its day totals count
clicks no longer stored, Live events' arrival cut, handoffs for a missing
link and their expiry sweep, a link domain no domain can be, the links
listing's exact channel filter, and the bounds of the event encoder's memos
(made-up event names and amounts) and an unhashable currency."""

from __future__ import annotations

import uuid
from pathlib import Path

import attrs
import lmdb
import pytest

from storage import accounts, event_records, layout
from storage.attribution_store import AttributionStore
from storage.dashboard_reads import (
    LATE_EVENT_MS,
    clicks_of_link,
    link_click_totals,
    recent_conversions,
    slugs_on_domain,
)
from storage.data_file import cut_short
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore, has_data, unreachable
from storage.schema import SCHEMA_VERSION, SchemaTooOld, migrate
from svc_engine.attribution import LANDING_OPEN_TTL_MS
from svc_engine.errors import (
    Conflict,
    LinkQuotaExceeded,
    NotFound,
    StoreDamaged,
    StoreUnreachable,
    ValidationError,
)
from svc_engine.handoffs import Handoff
from svc_engine.invites import new_invite
from svc_engine.keys import KeyKind, Mode, make_key
from svc_engine.links import Link
from svc_engine.plans import Plan
from svc_engine.platforms import Platforms, apply_platforms_patch
from svc_engine.records import Membership, Organization, Project, Role
from svc_engine.sessions import IDLE_MS, new_session
from tests.test_accounts_store import OWNER, _org_with_owner, _user
from tests.test_event_records import INSTALL, NOW, _iso, ev, new_events, record, registered
from tests.test_event_records import PROJECT as EVENTS_PROJECT
from tests.test_long_reads import DAY, DAY_0, ORG, PROJECT, link, write_clicks

ORG_ID = "5a5a5a5a-0000-4000-8000-000000000001"
PROJECT_ID = "5a5a5a5a-0000-4000-8000-000000000002"


# -- opening a data dir -------------------------------------------------------------------


def test_has_data_is_false_for_a_new_dir_and_refuses_a_file(tmp_path: Path) -> None:
    """A dir without a store is "no data"; a path that is a file is not a
    directory, said in one line, not taken for "no data"."""
    assert has_data(str(tmp_path / "none")) is False
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(StoreUnreachable, match=f"SVC_DATA_DIR: {afile} is not a directory"):
        has_data(str(afile))


def test_a_data_dir_that_cannot_be_looked_into_is_refused_with_the_reason(
        tmp_path: Path) -> None:
    """Any other error of looking into the dir (here a symlink loop) is
    refused in one line naming the dir and the system's reason once."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(StoreUnreachable) as info:
        has_data(str(loop))
    said = str(info.value)
    assert said.startswith(f"SVC_DATA_DIR: cannot use {loop} (Too many levels of symbolic "
                           "links); ")
    assert "\n" not in said and said.count(str(loop)) == 1
    # Not a matter of permissions: no advice to change the owner.
    assert said.endswith("check the path (--data / SVC_DATA_DIR) and the disk it is on")
    assert "chown" not in said


@pytest.mark.parametrize("error", [
    PermissionError(13, "Permission denied"),
    lmdb.ReadonlyError("/srv/data: Permission denied"),
    lmdb.Error("/srv/data: Permission denied"),
    OSError(1, "Operation not permitted"),
])
def test_a_data_dir_this_user_may_not_use_is_refused_with_what_to_do(
        error: BaseException) -> None:
    said = str(unreachable("/srv/data", error))
    assert said.startswith("SVC_DATA_DIR: cannot use /srv/data (")
    assert said.endswith("run svc as the user that owns it, or give that user access "
                         "(chown -R; the files should be 0600, the dir 0700)")


def test_a_data_dir_that_exists_as_a_dir_is_never_said_not_to_be_one(tmp_path: Path) -> None:
    said = str(unreachable(str(tmp_path), PermissionError(13, "Permission denied")))
    assert said == (f"SVC_DATA_DIR: cannot use {tmp_path} (Permission denied); run svc as "
                    "the user that owns it, or give that user access (chown -R; the files "
                    "should be 0600, the dir 0700)")


def test_a_data_dir_that_is_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(StoreUnreachable, match=f"^SVC_DATA_DIR: {afile} is not a directory$"):
        LmdbStore(str(afile), map_size=16 << 20)


def _data_file(tmp_path: Path, name: str, content: bytes) -> str:
    path = tmp_path / name
    path.mkdir()
    (path / "data.mdb").write_bytes(content)
    return str(path)


def test_a_data_file_shorter_than_its_meta_page_is_cut_short(tmp_path: Path) -> None:
    """A few bytes of a copy: shorter than the first meta page, so the store
    it held needs at least its two meta pages; an empty file is a new store."""
    short = _data_file(tmp_path, "short", b"\xde\xc0\xef\xbe" * 25)
    assert cut_short(short) == ("data.mdb is 100 bytes, but the store it holds needs 8,192: "
                                "the file was cut short (a copy that did not finish, a disk "
                                "that filled)")
    with pytest.raises(StoreDamaged, match=r"data\.mdb is 100 bytes.*restore the data directory"):
        LmdbStore(short, map_size=16 << 20)
    assert cut_short(_data_file(tmp_path, "empty", b"")) is None


def test_a_data_file_cut_inside_its_second_meta_page_is_cut_short(tmp_path: Path) -> None:
    """The first meta page whole, the second not: the store needs two pages,
    whatever the first one says of its last page."""
    whole = str(tmp_path / "whole")
    s = LmdbStore(whole, map_size=16 << 20)
    with s.env.begin(write=True) as txn:
        for i in range(2_000):
            txn.put(b"k%06d" % i, b"v" * 100, db=s.db(b"meta"))
    psize = s.env.stat()["psize"]
    s.close()
    data = (Path(whole) / "data.mdb").read_bytes()
    cut = _data_file(tmp_path, "cut", data[:psize + 100])
    assert cut_short(cut) == (f"data.mdb is {psize + 100:,} bytes, but the store it holds "
                              f"needs {2 * psize:,}: the file was cut short (a copy that did "
                              "not finish, a disk that filled)")
    with pytest.raises(StoreDamaged):
        LmdbStore(cut, map_size=16 << 20)


def test_a_data_file_that_is_no_lmdb_file_is_left_to_lmdb_to_refuse(tmp_path: Path) -> None:
    """Not LMDB's magic: no length to check; LMDB's own error is raised (not
    taken for a store cut short, nor for a permission problem)."""
    other = _data_file(tmp_path, "other", b"PK\x03\x04" + b"\x00" * 20_000)
    assert cut_short(other) is None
    with pytest.raises(lmdb.InvalidError):
        LmdbStore(other, map_size=16 << 20)


def test_a_read_only_open_skips_databases_an_older_data_dir_lacks(tmp_path: Path) -> None:
    """`svc doctor` and backups open read-only: a data dir from before a
    database existed still opens (nothing is created in it)."""
    path = str(tmp_path / "old")
    env = lmdb.open(path, max_dbs=8, subdir=True)
    meta = env.open_db(b"meta")
    with env.begin(write=True) as txn:
        txn.put(b"schema_version", b"8", db=meta)
        txn.put(b"server_secret", b"s", db=meta)
    env.close()
    s = LmdbStore(path, readonly=True)
    try:
        assert s.meta("server_secret") == b"s"
        with pytest.raises(KeyError):
            s.db(b"domains_by_project")
    finally:
        s.close()


def test_a_new_data_dir_opened_without_upgrading_is_made_at_this_schema(
        tmp_path: Path) -> None:
    path = str(tmp_path / "new")
    s = LmdbStore(path, map_size=16 << 20, upgrade=False)
    try:
        assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
    finally:
        s.close()
    s = LmdbStore(path, map_size=16 << 20, upgrade=False)  # this schema: no upgrade needed
    try:
        assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
        # migrate itself (the open refuses an older dir before it): nothing to do
        dbs = {name: s.db(name) for name in layout.DATABASES}
        assert migrate(s.env, dbs, upgrade=False) == SCHEMA_VERSION
    finally:
        s.close()


def test_migrate_without_upgrading_refuses_an_older_data_dir_unchanged(tmp_path: Path) -> None:
    """migrate's own guard (the store asks ``refuse_older`` before it)."""
    path = str(tmp_path / "v8")
    s = LmdbStore(path, map_size=16 << 20)
    with s.env.begin(write=True) as txn:
        txn.put(b"schema_version", b"8", db=s.db(b"meta"))
    s.close()
    env = lmdb.open(path, max_dbs=128, map_size=16 << 20)
    try:
        dbs = {b"meta": env.open_db(b"meta")}
        with pytest.raises(SchemaTooOld, match="data dir has schema 8, this svc uses"):
            migrate(env, dbs, upgrade=False)
        with env.begin() as txn:
            assert txn.get(b"schema_version", db=dbs[b"meta"]) == b"8"
    finally:
        env.close()


async def test_a_backup_destination_that_cannot_be_made_is_a_validation_error(
        store: LmdbStore, tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("x")
    with pytest.raises(ValidationError) as info:
        await store.backup(str(afile / "backup"))
    assert info.value.field == "dest"
    assert info.value.message == (  # the system's reason, once, not its whole repr
        f"cannot make the backup directory {afile / 'backup'}: Not a directory")


# -- tenancy ------------------------------------------------------------------------------


def _org(plan: Plan = Plan.STARTER) -> Organization:
    return Organization(id=ORG_ID, name="Org", plan=plan, created_at_ms=1)


def _project(n: int) -> Project:
    return Project(id=f"5a5a5a5a-0000-4000-8000-00000000010{n}", org_id=ORG_ID, name=f"p{n}",
                   salt=b"s" * 32, created_at_ms=n)


async def test_a_plan_set_for_an_unknown_organization_is_not_found(store: LmdbStore) -> None:
    with pytest.raises(NotFound, match=f"no organization {ORG_ID}"):
        await store.set_plan(ORG_ID, Plan.SCALE)
    assert store.get_org(ORG_ID) is None


async def test_create_project_keeps_to_at_most_and_refuses_a_taken_id(store: LmdbStore) -> None:
    await store.create_org(_org())
    await store.create_project(_project(1), at_most=2)
    with pytest.raises(Conflict, match="exists"):
        await store.create_project(attrs.evolve(_project(1), name="again"))
    await store.create_project(_project(2), at_most=2)
    with pytest.raises(ValidationError, match="the plan allows no more projects"):
        await store.create_project(_project(3), at_most=2)
    assert [p.name for p in store.list_projects(ORG_ID)] == ["p1", "p2"]


async def test_a_key_is_stored_once_and_an_unknown_one_is_not_revoked(store: LmdbStore) -> None:
    _, key = make_key("5a5a5a5a-0000-4000-8000-000000000201", PROJECT_ID, KeyKind.SECRET,
                      Mode.TEST, "k", b"\x01" * 24, 10)
    await store.create_key(key)
    with pytest.raises(Conflict, match="key exists"):
        await store.create_key(attrs.evolve(key, name="other"))
    assert [k.name for k in store.list_keys(PROJECT_ID)] == ["k"]
    unknown = "5a5a5a5a-0000-4000-8000-0000000002ff"
    with pytest.raises(NotFound, match=f"no key {unknown} in this project"):
        await store.revoke_key(PROJECT_ID, unknown, 20)
    found = store.find_key(key.hash)
    assert found is not None and found.revoked_at_ms is None
    # the dashboard revokes a key of the mode it shows: another mode's is not found
    with pytest.raises(NotFound, match="in this project and mode"):
        await store.revoke_key(PROJECT_ID, key.id, 20, mode=Mode.LIVE)
    assert store.find_key(key.hash) == found
    assert (await store.revoke_key(PROJECT_ID, key.id, 20, mode=Mode.TEST)).revoked_at_ms == 20
    assert (await store.revoke_key(PROJECT_ID, key.id, 30)).revoked_at_ms == 20  # once


async def test_a_second_user_with_the_same_email_in_any_case_is_refused(
        store: LmdbStore) -> None:
    first = _user(1, "ana@example.com", 1)
    await store.create_user(first)
    with pytest.raises(Conflict, match=r"a user with e-mail Ana@Example\.COM exists"):
        await store.create_user(_user(2, "Ana@Example.COM", 2))
    found = store.find_user("ANA@example.com")
    assert found is not None and found.id == first.id
    assert store.get_user(_user(2, "x", 2).id) is None


async def test_remove_member_removes_both_entries_and_refuses_a_non_member(
        store: LmdbStore) -> None:
    user = _user(1, "ana@example.com", 1)
    await store.set_member(Membership(org_id=ORG_ID, user_id=user.id, role=Role.ADMIN,
                                      created_at_ms=1))
    assert [m.user_id for m in store.memberships_of(user.id)] == [user.id]
    await store.remove_member(ORG_ID, user.id)
    assert store.members_of(ORG_ID) == [] and store.memberships_of(user.id) == []
    assert store.scan(b"members_by_user", b"") == []
    with pytest.raises(NotFound, match="no such member"):
        await store.remove_member(ORG_ID, user.id)


# -- the store's scan ---------------------------------------------------------------------


async def test_a_reverse_scan_keeps_to_its_limit_and_starts_before_start(
        store: LmdbStore) -> None:
    db = store.db(b"meta")

    def op(txn: lmdb.Transaction) -> None:
        for k in (b"a1", b"b1", b"b2", b"b3", b"c1", b"c2"):
            txn.put(k, k.upper(), db=db)

    await store.write(op)
    assert store.scan(b"meta", b"b", reverse=True, limit=2) == [(b"b3", b"B3"), (b"b2", b"B2")]
    # a start past the prefix's keys: the keys between are not the prefix's
    assert store.scan(b"meta", b"b", reverse=True, start=b"c9") == [
        (b"b3", b"B3"), (b"b2", b"B2"), (b"b1", b"B1")]
    assert store.scan(b"meta", b"b", reverse=True, start=b"b3") == [
        (b"b2", b"B2"), (b"b1", b"B1")]


# -- accounts -----------------------------------------------------------------------------


async def test_creating_a_session_sweeps_the_expired_ones(store: LmdbStore) -> None:
    _, old = new_session(bytes(range(48)), OWNER, 1_000_000)
    await accounts.create_session(store, old)
    _, live = new_session(bytes(range(1, 49)), OWNER, 1_000_000 + IDLE_MS - 1)
    await accounts.create_session(store, live)
    assert accounts.get_session(store, old.token_hash) is not None  # still live then
    _, new = new_session(bytes(range(2, 50)), OWNER, 1_000_000 + IDLE_MS)
    await accounts.create_session(store, new)
    assert accounts.get_session(store, old.token_hash) is None
    assert accounts.get_session(store, live.token_hash) is not None
    assert accounts.get_session(store, new.token_hash) is not None


async def test_creating_an_invitation_sweeps_the_expired_ones(store: LmdbStore) -> None:
    org = await _org_with_owner(store)
    _, old = new_invite(bytes(range(48)), org, "a@example.com", Role.ADMIN, OWNER, 1000)
    await accounts.create_invite(store, old)
    _, new = new_invite(bytes(range(1, 49)), org, "b@example.com", Role.ADMIN, OWNER,
                        old.expires_at_ms)
    await accounts.create_invite(store, new)
    assert accounts.find_invite(store, old.token_hash) is None
    assert accounts.find_invite(store, new.token_hash) is not None


async def test_an_invitation_accepted_as_a_new_account_of_a_known_email_is_refused(
        store: LmdbStore) -> None:
    org = await _org_with_owner(store)
    known = _user(1, "x@example.com", 1)
    await store.create_user(known)
    _, invite = new_invite(bytes(range(48)), org, "X@example.com", Role.ADMIN, OWNER, 1000)
    await accounts.create_invite(store, invite)
    with pytest.raises(Conflict, match="an account with this e-mail exists: sign in"):
        await accounts.accept_invite(store, invite.token_hash, 2000,
                                     new_user=_user(2, "x@example.com", 2000))
    assert store.find_user("x@example.com") == known
    assert accounts.find_invite(store, invite.token_hash) is not None  # still usable
    joined = await accounts.accept_invite(store, invite.token_hash, 3000,
                                          existing_user_id=known.id)
    assert joined.joined and joined.user_id == known.id


async def test_an_invitation_is_accepted_only_by_the_account_of_its_email(
        store: LmdbStore) -> None:
    org = await _org_with_owner(store)
    mine, other = _user(1, "x@example.com", 1), _user(2, "y@example.com", 1)
    await store.create_user(mine)
    await store.create_user(other)
    _, invite = new_invite(bytes(range(48)), org, "x@example.com", Role.ADMIN, OWNER, 1000)
    await accounts.create_invite(store, invite)
    with pytest.raises(Conflict, match="this invitation is for another account"):
        await accounts.accept_invite(store, invite.token_hash, 2000, existing_user_id=other.id)
    assert [m.user_id for m in store.members_of(org)] == [OWNER]
    assert accounts.find_invite(store, invite.token_hash) is not None


async def test_an_invitation_accepted_by_a_member_leaves_the_role_and_is_used(
        store: LmdbStore) -> None:
    """Invited, then made a member another way before accepting: the
    invitation is used up and the role the member has stays."""
    org = await _org_with_owner(store)
    member = _user(1, "x@example.com", 1)
    await store.create_user(member)
    _, invite = new_invite(bytes(range(48)), org, "x@example.com", Role.ADMIN, OWNER, 1000)
    await accounts.create_invite(store, invite)
    await store.set_member(Membership(org_id=org, user_id=member.id, role=Role.DEVELOPER,
                                      created_at_ms=1500))
    accepted = await accounts.accept_invite(store, invite.token_hash, 2000,
                                            existing_user_id=member.id)
    assert not accepted.joined and accepted.user_id == member.id
    roles = {m.user_id: m.role for m in store.members_of(org)}
    assert roles == {OWNER: Role.OWNER, member.id: Role.DEVELOPER}
    assert accounts.find_invite(store, invite.token_hash) is None


# -- dashboard reads ----------------------------------------------------------------------


async def test_a_links_clicks_when_its_day_totals_count_clicks_no_longer_stored(
        store: LmdbStore) -> None:
    """The day totals say which days to read and how many clicks each: when
    fewer are stored (a click lost), a day's search stops at the day's first
    millisecond and a day with none left is skipped, so no click is read
    twice nor under another day."""
    a = link(1)
    lost_a, c0, lost_b, c2 = await write_clicks(
        store, a, [DAY_0 - DAY + 5, DAY_0 + 5, DAY_0 + DAY + 5, DAY_0 + DAY + 9])
    doomed = [lost_a.id.encode(), lost_b.id.encode()]

    def lose(txn: lmdb.Transaction) -> None:
        db = store.db(b"clicks")
        for k, v in list(txn.cursor(db=db)):
            if any(d in bytes(v) for d in doomed):
                txn.delete(bytes(k), db=db)

    await store.write(lose)
    found = clicks_of_link(store, PROJECT, Mode.TEST, a.id)
    assert found.clicks == [c2, c0] and found.read == 2 and found.stopped_at_ms is None


async def test_live_events_show_only_events_received_since_the_poll(store: LmdbStore) -> None:
    """Events are keyed by when they occurred: one that occurred within
    ``LATE_EVENT_MS`` of the poll but arrived before it is not shown again."""
    events = await registered(store)
    shown = ev(0, occurredAt=_iso(NOW - 60_000))
    await record(events, [shown], now=NOW)
    late = ev(1, occurredAt=_iso(NOW - 120_000))
    await record(events, [late], now=NOW + 5_000)
    assert LATE_EVENT_MS > 120_000
    found = recent_conversions(store, EVENTS_PROJECT, Mode.LIVE,
                               since_ms=NOW + 1)
    assert [c.id for c in found] == [late["id"]]
    both = recent_conversions(store, EVENTS_PROJECT, Mode.LIVE,
                              since_ms=NOW)
    assert [c.id for c in both] == [shown["id"], late["id"]]
    assert all(c.install_id == INSTALL for c in both)


async def test_live_events_reach_back_late_event_ms_for_an_event_and_no_further(
        store: LmdbStore) -> None:
    """An event received since the poll shows when it occurred at most
    ``LATE_EVENT_MS`` before the poll's time, to the millisecond."""
    events = await registered(store)
    since = NOW + 60_000
    edge = ev(0, occurredAt=_iso(since - LATE_EVENT_MS))
    past = ev(1, occurredAt=_iso(since - LATE_EVENT_MS - 1))
    await record(events, [edge, past], now=since + 1_000)
    found = recent_conversions(store, EVENTS_PROJECT, Mode.LIVE, since_ms=since)
    assert [c.id for c in found] == [edge["id"]]
    assert found[0].occurred_at_ms == since - LATE_EVENT_MS
    assert found[0].received_at_ms == since + 1_000
    # from the start (the page's first read), every event
    assert len(recent_conversions(store, EVENTS_PROJECT, Mode.LIVE)) == 2


async def test_the_link_lists_click_totals_are_each_links_own_over_the_days_asked(
        store: LmdbStore) -> None:
    a, b = link(1), link(2)
    await write_clicks(store, a, [DAY_0 + 5, DAY_0 + 9, DAY_0 + DAY + 5, DAY_0 - DAY + 5])
    await write_clicks(store, b, [DAY_0 + 7])
    nobody = str(uuid.UUID(int=99))
    days = ["2026-02-16", "2026-02-17"]
    assert link_click_totals(store, PROJECT, Mode.TEST, [a.id, b.id, nobody], days) == {
        a.id: 3, b.id: 1, nobody: 0}
    assert link_click_totals(store, PROJECT, Mode.TEST, [a.id, b.id], ["2026-02-17"]) == {
        a.id: 1, b.id: 0}
    assert link_click_totals(store, PROJECT, Mode.LIVE, [a.id], days) == {a.id: 0}
    assert link_click_totals(store, PROJECT, Mode.TEST, [], days) == {}


async def test_a_domains_slug_count_is_its_own_deleted_links_too_up_to_the_cap(
        store: LmdbStore) -> None:
    """The domains page counts the slugs taken on each domain: not those of
    a domain whose name begins or ends the same, and at most ``cap``."""
    links = LinksStore(store)

    async def on(domain: str, i: int) -> Link:
        return await links.create(attrs.evolve(link(i), domain=domain), org_id=ORG,
                                  quota=None, idem=None)

    made = [await on("go.example.com", i) for i in range(3)]
    await on("go.example.co", 3)
    await on("go.example.com.au", 4)
    await on("ago.example.com", 5)
    await links.delete(PROJECT, "test", made[0].id, ORG, 6, None)
    assert slugs_on_domain(store, "go.example.com") == 3        # the deleted one's slug kept
    assert slugs_on_domain(store, "go.example.com", cap=2) == 2
    assert slugs_on_domain(store, "go.example.com", cap=3) == 3
    assert slugs_on_domain(store, "go.example.co") == 1
    assert slugs_on_domain(store, "go.example.com.au") == 1
    assert slugs_on_domain(store, "example.com") == 0


# -- handoffs -----------------------------------------------------------------------------


def _handoff(n: int, link_id: str, created: int, expires: int) -> Handoff:
    return Handoff(id=str(uuid.UUID(int=n + 1)), link_id=link_id, user_hash=b"u" * 32,
                   mode=Mode.TEST, created_at_ms=created, expires_at_ms=expires)


async def test_a_handoff_to_a_link_that_does_not_exist_is_not_found(store: LmdbStore) -> None:
    attribution = AttributionStore(store, "http://svc.test")
    missing = str(uuid.UUID(int=99))
    with pytest.raises(NotFound, match="the handoff's link does not exist"):
        await attribution.create_handoff(PROJECT, _handoff(0, missing, 1000, 2000), None)
    assert attribution.pending_handoffs(PROJECT, "test", b"u" * 32) == []


async def test_the_sweep_deletes_handoffs_at_their_expiry_only(store: LmdbStore) -> None:
    attribution = AttributionStore(store, "http://svc.test")
    made = await LinksStore(store).create(link(1), org_id=ORG, quota=None, idem=None)
    for n, expires in enumerate((5_000, 6_000, 6_001)):
        await attribution.create_handoff(PROJECT, _handoff(n, made.id, 1000 + n, expires), None)
    assert (await attribution.sweep(6_000, limit=1))["handoffs"] == 1  # at most the limit
    swept = await attribution.sweep(6_000)
    assert swept["handoffs"] == 1
    left = attribution.pending_handoffs(PROJECT, "test", b"u" * 32)
    assert [h.expires_at_ms for h in left] == [6_001]
    assert (await attribution.sweep(6_000))["handoffs"] == 0  # its time index went too
    assert len(store.scan(b"handoffs_by_time", b"")) == 1


async def test_the_sweep_deletes_tokens_at_their_expiry_and_at_most_its_limit(
        store: LmdbStore) -> None:
    """A token expires at ``expires_at_ms`` exactly (svc_engine/tokens.py):
    the sweep at that moment deletes it, a millisecond before keeps it."""
    attribution = AttributionStore(store, "http://svc.test")
    expiries = (5_000, 5_000, 6_000)

    def issue(txn: lmdb.Transaction) -> None:
        for n, expires in enumerate(expiries):
            text = f"token-{n}".encode()
            txn.put(text, b"x", db=store.db(b"tokens"))
            txn.put(layout.ms(expires) + text, b"", db=store.db(b"tokens_by_time"))

    await store.write(issue)
    assert (await attribution.sweep(4_999))["tokens"] == 0
    assert (await attribution.sweep(5_000, limit=1))["tokens"] == 1
    assert (await attribution.sweep(5_999))["tokens"] == 1
    assert [k for k, _ in store.scan(b"tokens", b"")] == [b"token-2"]
    assert (await attribution.sweep(6_000))["tokens"] == 1
    assert store.scan(b"tokens_by_time", b"") == []


async def test_the_sweep_deletes_continue_in_app_opens_after_7_days_at_most_its_limit(
        store: LmdbStore) -> None:
    attribution = AttributionStore(store, "http://svc.test")
    made = 1_000

    def opened(txn: lmdb.Transaction) -> None:
        for n in range(3):
            key = layout.scope(PROJECT, "test") + layout.uid(str(uuid.UUID(int=n + 1)))
            txn.put(key, layout.uid(str(uuid.UUID(int=99))) + layout.ms(made),
                    db=store.db(b"landing_opens"))

    await store.write(opened)
    assert (await attribution.sweep(made + LANDING_OPEN_TTL_MS))["landing_opens"] == 0
    late = made + LANDING_OPEN_TTL_MS + 1
    assert (await attribution.sweep(late, limit=2))["landing_opens"] == 2
    assert (await attribution.sweep(late, limit=2))["landing_opens"] == 1
    assert store.scan(b"landing_opens", b"") == []


# -- links --------------------------------------------------------------------------------


async def test_a_page_shows_only_its_own_projects_live_links_of_its_mode(
        store: LmdbStore) -> None:
    links = LinksStore(store)
    mine = await links.create(link(1), org_id=ORG, quota=None, idem=None)
    gone = await links.create(link(2), org_id=ORG, quota=None, idem=None)
    await links.delete(PROJECT, "test", gone.id, ORG, 2, None)
    assert links.shown(mine.id, PROJECT, Mode.TEST) == mine
    assert links.shown(mine.id, PROJECT, Mode.LIVE) is None
    assert links.shown(mine.id, PROJECT_ID, Mode.TEST) is None
    assert links.shown(gone.id, PROJECT, Mode.TEST) is None
    assert links.shown(str(uuid.UUID(int=7)), PROJECT, Mode.TEST) is None


async def test_the_organizations_link_count_follows_creates_and_deletes(
        store: LmdbStore) -> None:
    """The plan's link quota counts the organization's links not deleted."""
    links = LinksStore(store)
    made = [await links.create(link(i), org_id=ORG, quota=3, idem=None) for i in range(3)]
    assert links.org_link_count(ORG) == 3
    with pytest.raises(LinkQuotaExceeded):
        await links.create(link(3), org_id=ORG, quota=3, idem=None)
    await links.delete(PROJECT, "test", made[0].id, ORG, 2, None)
    assert links.org_link_count(ORG) == 2
    await links.create(link(3), org_id=ORG, quota=3, idem=None)  # room again
    for one in (made[1], made[2]):
        await links.delete(PROJECT, "test", one.id, ORG, 3, None)
    assert links.org_link_count(ORG) == 1 and links.org_link_count(ORG_ID) == 0


async def test_no_project_owns_what_no_domain_can_be(store: LmdbStore) -> None:
    """A Host header is the client's to write: empty, or longer than LMDB
    takes as a key, it is nobody's domain (not an LMDB error)."""
    links = LinksStore(store)
    assert links.domain_owner("") is None
    assert links.domain_owner("a" * 600 + ".example") is None


async def test_put_platforms_replaces_them_whole(store: LmdbStore) -> None:
    links = LinksStore(store)
    first = apply_platforms_patch(Platforms(), {"ios": {"bundleId": "com.example.app",
                                                        "teamId": "ABCDE12345"}})
    assert await links.put_platforms(PROJECT, first, None) == first
    second = apply_platforms_patch(Platforms(), {"web": {"fallbackUrl": "https://example.com/"}})
    assert await links.put_platforms(PROJECT, second, None) == second
    assert links.platforms(PROJECT) == second and second.ios == Platforms().ios


async def test_a_channel_filter_is_the_whole_channel_not_a_part(store: LmdbStore) -> None:
    """The channel's bytes are looked for in the record first; a channel that
    merely holds them ("email" for "mail") is still filtered out."""
    links = LinksStore(store)
    email = await links.create(link(1, channel="email"), org_id=ORG, quota=None, idem=None)
    mail = await links.create(link(2, channel="mail"), org_id=ORG, quota=None, idem=None)
    assert [x.id for x in links.list(PROJECT, "test", channel="mail").links] == [mail.id]
    assert [x.id for x in links.list(PROJECT, "test", channel="email").links] == [email.id]


# -- the event encoder's memos ------------------------------------------------------------


def test_the_event_name_memo_stays_bounded_with_made_up_names(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A client may send a new event name with every event: the remembered
    JSON pieces of names stay within ``_MEMO_MAX``, and events still read
    back with their own names."""
    monkeypatch.setattr(event_records, "_NAME_PIECE", {})
    cap = event_records._MEMO_MAX
    for batch in range(cap // 100 + 2):
        items = [ev(i, name=f"made-up {batch}-{i}") for i in range(100)]
        new = new_events(items)
        assert len(event_records._NAME_PIECE) <= cap
        assert new.json(99).count(f'"name":"made-up {batch}-99"'.encode()) == 1
    assert len(event_records._NAME_PIECE) < cap


def test_the_revenue_memo_of_one_currency_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """Amounts looked up one at a time (a batch mixing events with and
    without revenue): a currency's memo is cleared at ``_MEMO_MAX``."""
    monkeypatch.setattr(event_records, "_BY_KIND", {})
    cap = event_records._MEMO_MAX
    for batch in range(cap // 500 + 2):
        props: list[dict[str, object]] = [
            {"currency": "EUR", "revenue": batch * 500 + a + 0.25} for a in range(500)]
        found = event_records._revenues([*props, {"x": 1}])
        assert found is not None and found[-1] is None
        assert found[0] is not None and str(found[0][1]) == f"{batch * 500}.25"
        assert len(event_records._BY_KIND["EUR", float]) <= cap


def test_an_unhashable_currency_carries_no_revenue_and_spoils_no_other(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A currency sent as a list cannot be looked up in the memos: that event
    carries no revenue, the others of its batch theirs."""
    monkeypatch.setattr(event_records, "_BY_KIND", {})
    new = new_events([ev(0, properties={"currency": ["EUR"], "revenue": 1}),
                      ev(1, properties={"currency": "EUR", "revenue": 2})])
    assert new.revenue is not None
    assert [None if r is None else (r[0], str(r[1])) for r in new.revenue] == [
        None, ("EUR", "2")]
    alone = new_events([ev(0, properties={"currency": ["EUR"], "revenue": 1}),
                        ev(1, properties={"currency": ["USD"], "revenue": 1})])
    assert alone.revenue == (None, None)
