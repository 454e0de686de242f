"""LmdbStore: the Store protocol on one LMDB environment.

Reads open a short read transaction in the calling thread (lock-free, about a
microsecond). Writes are ops handed to the one ``Writer``; see writer.py.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import attrs
import lmdb
import trio

from storage import layout
from storage.codec import decode, encode
from storage.data_file import RESTORE, cut_short
from storage.decode_cache import DecodeCache
from storage.file_ahead import FileAhead
from storage.schema import migrate, refuse_older
from storage.writer import Op, Pending, Writer, after_commit
from svc_engine.config import DEFAULT_MAP_SIZE
from svc_engine.deadlines import Deadline
from svc_engine.errors import (
    Conflict,
    MapUnavailable,
    NotFound,
    StoreDamaged,
    StoreUnreachable,
    ValidationError,
)
from svc_engine.idempotency import StoredResponse
from svc_engine.keys import ApiKey, Mode
from svc_engine.outbox import OutboxEvent
from svc_engine.plans import Plan, within
from svc_engine.records import Membership, Organization, Project, User, normalize_email
from svc_engine.settings import DeferredSettings
from svc_engine.store import IdemWrite, Store


def has_data(path: str) -> bool:
    """Whether the data dir ``path`` holds a store (``data.mdb``); a dir this
    process may not look into, or a path that is not a dir, is
    StoreUnreachable, not "no store" (``os.path.exists`` says False for
    both)."""
    try:
        os.stat(os.path.join(path, "data.mdb"))
    except FileNotFoundError:
        return False
    except OSError as e:
        raise unreachable(path, e) from None
    return True


def unreachable(path: str, error: BaseException) -> StoreUnreachable:
    """The one-line refusal of a data dir this process cannot use."""
    if isinstance(error, FileExistsError | NotADirectoryError) or (
            os.path.exists(path) and not os.path.isdir(path)):
        return StoreUnreachable(f"SVC_DATA_DIR: {path} is not a directory")
    reason = (getattr(error, "strerror", None) or str(error)).removeprefix(f"{path}: ")
    if not _denied(error):  # a symlink loop, a name too long, EIO...
        return StoreUnreachable(f"SVC_DATA_DIR: cannot use {path} ({reason}); check the "
                                f"path (--data / SVC_DATA_DIR) and the disk it is on")
    return StoreUnreachable(
        f"SVC_DATA_DIR: cannot use {path} ({reason}); run svc as the user that owns it, "
        f"or give that user access (chown -R; the files should be 0600, the dir 0700)")


def _denied(error: BaseException) -> bool:
    """Whether ``error`` is the system refusing this user (EACCES, EPERM),
    however it came: from the OS, or from LMDB as ReadonlyError or its text."""
    return (isinstance(error, PermissionError | lmdb.ReadonlyError)
            or getattr(error, "errno", None) in (errno.EACCES, errno.EPERM)
            or "Permission denied" in str(error))


class LmdbStore:
    def __init__(self, path: str, *, map_size: int = DEFAULT_MAP_SIZE, readonly: bool = False,
                 inline_commit: bool = False, upgrade: bool = True):
        """``upgrade``: migrate an older data dir to this svc's schema (``svc
        serve``); otherwise such a dir is refused, unchanged (SchemaTooOld).
        ``readonly``: no migration, no database created, no writes."""
        # Owner only: the store holds webhook signing secrets and the server
        # secret in clear (a umask of 022 made data.mdb world-readable).
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
        except OSError as e:
            raise unreachable(path, e) from None
        self.path = path
        if (why := cut_short(path)) is not None:
            raise StoreDamaged(f"{why}; {RESTORE}")
        try:
            self.env = lmdb.open(
                path,
                map_size=map_size,
                max_dbs=len(layout.DATABASES) + 16,
                subdir=True,
                sync=True,
                metasync=False,  # the writer syncs what must be durable: see writer.py
                readahead=False,
                max_readers=512,
                readonly=readonly,
                mode=0o600,
            )
        except (lmdb.ReadonlyError, PermissionError) as e:  # EACCES: another user's files
            raise unreachable(path, e) from None
        except lmdb.MemoryError as e:  # ENOMEM from mmap: not the machine's memory
            raise MapUnavailable(
                f"cannot map the store in {path}: SVC_MAP_SIZE asks for {_size_text(map_size)} of "
                "address space, more than this process may have (its limit, ulimit -v, or "
                "the machine's); raise the limit or set a smaller SVC_MAP_SIZE (the map is "
                "address space only: the file grows as the store does)") from e
        except lmdb.Error as e:
            if "Permission denied" in str(e):
                raise unreachable(path, e) from None
            raise
        self._db: dict[bytes, Any] = {}
        self._ahead = None if readonly else FileAhead.open(self.env)
        if readonly:
            for name in layout.DATABASES:
                try:
                    self._db[name] = self.env.open_db(name, create=False)
                except lmdb.NotFoundError:
                    continue
        else:
            if not upgrade:
                try:
                    refuse_older(self.env)
                except Exception:
                    self.env.close()
                    raise
            with self.env.begin(write=True) as txn:
                for name in layout.DATABASES:
                    self._db[name] = self.env.open_db(name, txn=txn)
            if self._ahead is not None:
                self._ahead.prepare()  # before a migration grows the store
            try:
                migrate(self.env, self._db, upgrade=upgrade)
            except Exception:
                self.env.close()
                raise
            self.env.sync(True)  # metasync is off: the writer's docstring says why
        self.writer = Writer(self.env, inline=inline_commit, ahead=self._ahead)
        self.cache = DecodeCache()
        # Called once a batch that queued an outbox event has committed: the
        # webhook dispatcher's wake-up (web/assembly.py sets it).
        self.on_outbox: Callable[[], None] | None = None

    def db(self, name: bytes) -> Any:
        return self._db[name]

    def close(self) -> None:
        if self._ahead is not None:
            self._ahead.close()
        self.env.close()

    # -- plumbing -----------------------------------------------------------

    @contextmanager
    def read(self) -> Iterator[lmdb.Transaction]:
        txn = self.env.begin(buffers=False)
        try:
            yield txn
        finally:
            txn.abort()

    def _get(self, dbname: bytes, key: bytes) -> bytes | None:
        with self.read() as txn:
            v = txn.get(key, db=self._db[dbname])
        return bytes(v) if v is not None else None

    def scan(self, dbname: bytes, prefix: bytes, *, reverse: bool = False,
             start: bytes | None = None, limit: int | None = None
             ) -> list[tuple[bytes, bytes]]:
        """Items whose key starts with ``prefix`` in key order (or reverse)."""
        out: list[tuple[bytes, bytes]] = []
        with self.read() as txn:
            cur = txn.cursor(db=self._db[dbname])
            if not reverse:
                ok = cur.set_range(start if start is not None else prefix)
                while ok:
                    k = bytes(cur.key())
                    if not k.startswith(prefix):
                        break
                    out.append((k, bytes(cur.value())))
                    if limit is not None and len(out) >= limit:
                        break
                    ok = cur.next()
            else:
                end = start if start is not None else layout.prefix_end(prefix)
                ok = cur.set_range(end)
                ok = cur.prev() if ok else cur.last()
                while ok:
                    k = bytes(cur.key())
                    if not k.startswith(prefix):
                        if k < prefix:
                            break
                        ok = cur.prev()
                        continue
                    out.append((bytes(k), bytes(cur.value())))
                    if limit is not None and len(out) >= limit:
                        break
                    ok = cur.prev()
        return out

    def scan_in(self, txn: lmdb.Transaction, dbname: bytes,
                prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Items whose key starts with ``prefix``, read inside ``txn`` (an op's
        write transaction sees its own and earlier ops' writes)."""
        out: list[tuple[bytes, bytes]] = []
        cur = txn.cursor(db=self._db[dbname])
        ok = cur.set_range(prefix)
        while ok:
            k = bytes(cur.key())
            if not k.startswith(prefix):
                break
            out.append((k, bytes(cur.value())))
            ok = cur.next()
        return out

    async def write(self, op: Op[Any]) -> Any:
        return await self.writer.write(op)

    async def submit(self, op: Op[Any], *, lazy: bool = False) -> Pending[Any]:
        return await self.writer.submit(op, lazy=lazy)

    def record_response(self, txn: lmdb.Transaction, idem: IdemWrite | None,
                         result: object) -> None:
        if idem is None:
            return
        status, ctype, body = idem.render(result)
        rec = StoredResponse(idem.fingerprint, status, ctype, body, idem.now_ms)
        k = layout.response_key(_idem_key(idem.scope, idem.key))
        at = layout.ms(idem.now_ms)
        txn.put(k, at, db=self._db[b"responses"])
        txn.put(at + k, encode(rec), db=self._db[b"responses_by_time"])

    # -- meta ---------------------------------------------------------------

    def meta(self, name: str) -> bytes | None:
        return self._get(b"meta", name.encode())

    async def put_meta(self, name: str, value: bytes) -> None:
        """Set ``name`` to ``value`` (unless it already is: no write then)."""
        db = self._db[b"meta"]

        def op(txn: lmdb.Transaction) -> None:
            if txn.get(name.encode(), db=db) != value:
                txn.put(name.encode(), value, db=db)

        if self.meta(name) != value:
            await self.write(op)

    async def put_meta_once(self, name: str, value: bytes) -> bytes:
        """Set ``name`` unless it is set; return the value that is stored."""
        db = self._db[b"meta"]

        def op(txn: lmdb.Transaction) -> bytes:
            old = txn.get(name.encode(), db=db)
            if old is not None:
                return bytes(old)
            txn.put(name.encode(), value, db=db)
            return value

        return await self.write(op)  # type: ignore[no-any-return]

    # -- tenancy --------------------------------------------------------------

    def get_org(self, org_id: str) -> Organization | None:
        raw = self._get(b"orgs", layout.uid(org_id))
        return self.cache.decode(Organization, raw) if raw else None

    def get_project(self, project_id: str) -> Project | None:
        raw = self._get(b"projects", layout.uid(project_id))
        return self.cache.decode(Project, raw) if raw else None

    def list_projects(self, org_id: str) -> list[Project]:
        out = []
        for k, _ in self.scan(b"projects_by_org", layout.uid(org_id)):
            p = self.get_project(layout.from_uid(k[16:32]))
            if p is not None:
                out.append(p)
        return sorted(out, key=lambda p: (p.created_at_ms, p.id))

    def all_orgs(self) -> list[Organization]:
        return [decode(Organization, v) for _, v in self.scan(b"orgs", b"")]

    def find_key(self, key_hash: bytes) -> ApiKey | None:
        raw = self._get(b"keys", key_hash)
        return self.cache.decode(ApiKey, raw) if raw else None

    def key_with_owners(self, key_hash: bytes,
                        ) -> tuple[ApiKey | None, Project | None, Organization | None]:
        """An API key, its project and the project's organization (None for
        what is missing), read in one transaction: what every API call reads."""
        db = self._db
        with self.read() as txn:
            raw = txn.get(key_hash, db=db[b"keys"])
            if raw is None:
                return None, None, None
            key = self.cache.decode(ApiKey, bytes(raw))
            raw = txn.get(layout.uid(key.project_id), db=db[b"projects"])
            if raw is None:
                return key, None, None
            project = self.cache.decode(Project, bytes(raw))
            raw = txn.get(layout.uid(project.org_id), db=db[b"orgs"])
        return key, project, self.cache.decode(Organization, bytes(raw)) if raw else None

    def list_keys(self, project_id: str) -> list[ApiKey]:
        out = []
        for _, h in self.scan(b"keys_by_project", layout.uid(project_id)):
            k = self.find_key(h)
            if k is not None:
                out.append(k)
        return sorted(out, key=lambda k: (k.created_at_ms, k.id))

    def get_user(self, user_id: str) -> User | None:
        raw = self._get(b"users", layout.uid(user_id))
        return decode(User, raw) if raw else None

    def find_user(self, email: str) -> User | None:
        uid = self._get(b"users_by_email", normalize_email(email).encode())
        return self.get_user(layout.from_uid(uid)) if uid else None

    def memberships_of(self, user_id: str) -> list[Membership]:
        out = []
        for k, _ in self.scan(b"members_by_user", layout.uid(user_id)):
            raw = self._get(b"members", k[16:32] + k[:16])
            if raw:
                out.append(decode(Membership, raw))
        return out

    def members_of(self, org_id: str) -> list[Membership]:
        return [decode(Membership, v) for _, v in self.scan(b"members", layout.uid(org_id))]

    async def create_org(self, org: Organization) -> None:
        await self.write(self.create_org_op(org))

    def create_org_op(self, org: Organization) -> Op[None]:
        db = self._db[b"orgs"]

        def op(txn: lmdb.Transaction) -> None:
            if not txn.put(layout.uid(org.id), encode(org), db=db, overwrite=False):
                raise Conflict(f"organization {org.id} exists")

        return op

    async def _evolve(self, dbname: bytes, cls: Any, record_id: str, what: str,
                      **changes: object) -> Any:
        """Change fields of one stored record in one op; NotFound when it is missing."""
        db = self._db[dbname]

        def op(txn: lmdb.Transaction) -> Any:
            raw = txn.get(layout.uid(record_id), db=db)
            if raw is None:
                raise NotFound(f"no {what} {record_id}")
            record = attrs.evolve(decode(cls, bytes(raw)), **changes)
            txn.put(layout.uid(record_id), encode(record), db=db)
            return record

        return await self.write(op)

    async def set_plan(self, org_id: str, plan: Plan) -> Organization:
        org: Organization = await self._evolve(b"orgs", Organization, org_id, "organization",
                                               plan=plan)
        return org

    async def create_project(self, project: Project, *, at_most: int | None = None) -> None:
        await self.write(self.create_project_op(project, at_most=at_most))

    def create_project_op(self, project: Project, *, at_most: int | None = None) -> Op[None]:
        """Store a new project; with ``at_most``, only while its organization
        has fewer (counted in the write, so two at once cannot both pass)."""
        projects, by_org = self._db[b"projects"], self._db[b"projects_by_org"]

        def op(txn: lmdb.Transaction) -> None:
            if at_most is not None:
                org = layout.uid(project.org_id)
                held = sum(1 for _ in prefix_keys(txn, by_org, org))
                if not within(at_most, held):
                    raise ValidationError("the plan allows no more projects", field="plan")
            pid = layout.uid(project.id)
            if not txn.put(pid, encode(project), db=projects, overwrite=False):
                raise Conflict(f"project {project.id} exists")
            txn.put(layout.uid(project.org_id) + pid, b"", db=by_org)

        return op

    async def set_project_suspended(self, project_id: str, suspended: bool) -> Project:
        project: Project = await self._evolve(b"projects", Project, project_id, "project",
                                              suspended=suspended)
        return project

    async def set_project_default_domain(self, project_id: str, domain: str) -> Project:
        project: Project = await self._evolve(b"projects", Project, project_id, "project",
                                              default_domain=domain)
        return project

    async def create_key(self, key: ApiKey) -> None:
        await self.write(self.create_key_op(key))

    def create_key_op(self, key: ApiKey) -> Op[None]:
        keys, by_project = self._db[b"keys"], self._db[b"keys_by_project"]

        def op(txn: lmdb.Transaction) -> None:
            if not txn.put(key.hash, encode(key), db=keys, overwrite=False):
                raise Conflict("key exists")
            txn.put(layout.uid(key.project_id) + layout.uid(key.id), key.hash, db=by_project)

        return op

    async def revoke_key(self, project_id: str, key_id: str, now_ms: int, *,
                         mode: Mode | None = None) -> ApiKey:
        """Revoke a key of the project (with ``mode``: only a key of that mode;
        another is NotFound, as the dashboard lists one mode's keys)."""
        keys, by_project = self._db[b"keys"], self._db[b"keys_by_project"]

        def op(txn: lmdb.Transaction) -> ApiKey:
            h = txn.get(layout.uid(project_id) + layout.uid(key_id), db=by_project)
            if h is None:
                raise NotFound(f"no key {key_id} in this project")
            raw = txn.get(h, db=keys)
            if raw is None:
                raise NotFound(f"no key {key_id} in this project")
            key = decode(ApiKey, bytes(raw))
            if mode is not None and key.mode is not mode:
                raise NotFound(f"no key {key_id} in this project and mode")
            if key.revoked_at_ms is None:
                key = attrs.evolve(key, revoked_at_ms=now_ms)
                txn.put(key.hash, encode(key), db=keys)
            return key

        return await self.write(op)  # type: ignore[no-any-return]

    async def create_user(self, user: User) -> None:
        await self.write(self.create_user_op(user))

    def create_user_op(self, user: User) -> Op[None]:
        users, by_email = self._db[b"users"], self._db[b"users_by_email"]

        def op(txn: lmdb.Transaction) -> None:
            email = normalize_email(user.email).encode()
            if not txn.put(email, layout.uid(user.id), db=by_email, overwrite=False):
                raise Conflict(f"a user with e-mail {user.email} exists")
            txn.put(layout.uid(user.id), encode(user), db=users)

        return op

    async def set_member(self, membership: Membership) -> None:
        await self.write(self.set_member_op(membership))

    def set_member_op(self, membership: Membership) -> Op[None]:
        members, by_user = self._db[b"members"], self._db[b"members_by_user"]

        def op(txn: lmdb.Transaction) -> None:
            o, u = layout.uid(membership.org_id), layout.uid(membership.user_id)
            txn.put(o + u, encode(membership), db=members)
            txn.put(u + o, b"", db=by_user)

        return op

    async def remove_member(self, org_id: str, user_id: str) -> None:
        members, by_user = self._db[b"members"], self._db[b"members_by_user"]

        def op(txn: lmdb.Transaction) -> None:
            o, u = layout.uid(org_id), layout.uid(user_id)
            if not txn.delete(o + u, db=members):
                raise NotFound("no such member")
            txn.delete(u + o, db=by_user)

        await self.write(op)

    # -- settings -------------------------------------------------------------

    def get_settings(self, project_id: str) -> DeferredSettings:
        raw = self._get(b"settings", layout.uid(project_id))
        return self.cache.decode(DeferredSettings, raw) if raw else DeferredSettings()

    async def put_settings(self, project_id: str, settings: DeferredSettings,
                           idem: IdemWrite | None) -> DeferredSettings:
        db = self._db[b"settings"]

        def op(txn: lmdb.Transaction) -> DeferredSettings:
            txn.put(layout.uid(project_id), encode(settings), db=db)
            self.record_response(txn, idem, settings)
            return settings

        return await self.write(op)  # type: ignore[no-any-return]

    # -- idempotency ------------------------------------------------------------

    def get_response(self, scope: str, key: str) -> StoredResponse | None:
        """The response recorded for ``key`` in ``scope``. The record is in two
        parts (schema 10): a small one under the key's hash in ``responses``,
        which a write (a random key) must reach, and the answer itself in
        ``responses_by_time``, which a write appends at the end; only a retry
        reads the second."""
        k = layout.response_key(_idem_key(scope, key))
        with self.read() as txn:  # buffers off: bytes
            at = txn.get(k, db=self._db[b"responses"])
            if at is None:
                return None
            raw = txn.get(bytes(at) + k, db=self._db[b"responses_by_time"])
        return decode(StoredResponse, bytes(raw)) if raw is not None else None

    async def purge_responses(self, before_ms: int, limit: int = 10_000) -> int:
        index, by_time = self._db[b"responses"], self._db[b"responses_by_time"]

        def op(txn: lmdb.Transaction) -> int:
            doomed: list[bytes] = []
            for k in txn.cursor(db=by_time).iternext(values=False):
                if len(doomed) >= limit or layout.from_ms(bytes(k)) >= before_ms:
                    break
                doomed.append(bytes(k))
            for k in doomed:
                if txn.get(k[8:], db=index) == k[:8]:  # not a later record of that key
                    txn.delete(k[8:], db=index)
                txn.delete(k, db=by_time)
            return len(doomed)

        return await self.write(op)  # type: ignore[no-any-return]

    # -- deadlines --------------------------------------------------------------

    def load_deadlines(self, *, after: Deadline | None = None,
                       limit: int | None = None) -> list[Deadline]:
        """Persisted deadlines in due order (the order of ``Deadline``
        itself: due ms, kind, ref), those after ``after`` only, at most
        ``limit``."""
        start = _deadline_key(after) + b"\x00" if after is not None else None
        return [decode(Deadline, v)
                for _, v in self.scan(b"deadlines", b"", start=start, limit=limit)]

    def deadline_kinds(self, among: Collection[str] | None = None) -> set[str]:
        """The kinds of the persisted deadlines (``first_deadlines``)."""
        return set(self.first_deadlines(among))

    def first_deadlines(self, among: Collection[str] | None = None) -> dict[str, Deadline]:
        """The earliest persisted deadline of each kind, read from their keys
        alone; with ``among``, of those kinds only, and the walk (in due
        order) stops once all are found, so a start reads only the deadlines
        due before the last of its recurring jobs', not a whole backlog of
        webhook attempts behind them (0.75 s a million)."""
        found: dict[str, Deadline] = {}
        wanted = None if among is None else set(among)
        if wanted is not None and not wanted:
            return found
        with self.read() as txn:
            for raw in txn.cursor(db=self._db[b"deadlines"]).iternext(values=False):
                key = bytes(raw)
                end = key.index(0, 8)
                kind = key[8:end].decode()
                if (wanted is None or kind in wanted) and kind not in found:
                    found[kind] = Deadline(due_ms=layout.from_ms(key[:8]), kind=kind,
                                           ref=key[end + 1:].decode())
                    if wanted is not None and len(found) == len(wanted):
                        break
        return found

    def persisted_deadlines(self, deadlines: Iterable[Deadline]) -> set[Deadline]:
        """Those of ``deadlines`` that are persisted (committed), in one read."""
        db = self._db[b"deadlines"]
        with self.read() as txn:
            return {d for d in deadlines if txn.get(_deadline_key(d), db=db) is not None}

    def put_deadline(self, txn: lmdb.Transaction, d: Deadline) -> None:
        """Persist ``d`` inside another op's transaction (same commit as its cause)."""
        txn.put(_deadline_key(d), encode(d), db=self._db[b"deadlines"])

    def delete_deadline(self, txn: lmdb.Transaction, d: Deadline) -> None:
        txn.delete(_deadline_key(d), db=self._db[b"deadlines"])

    async def add_deadlines(self, deadlines: Sequence[Deadline]) -> None:
        def op(txn: lmdb.Transaction) -> None:
            for d in deadlines:
                self.put_deadline(txn, d)

        await self.write(op)

    async def replace_deadline(self, old: Deadline, new: Deadline) -> None:
        def op(txn: lmdb.Transaction) -> None:
            self.delete_deadline(txn, old)
            self.put_deadline(txn, new)

        await self.write(op)

    async def remove_deadline(self, deadline: Deadline) -> None:
        def op(txn: lmdb.Transaction) -> None:
            self.delete_deadline(txn, deadline)

        await self.write(op)

    # -- outbox -----------------------------------------------------------------

    def wants_webhooks(self, txn: lmdb.Transaction, project_id: str, mode: str) -> bool:
        """Whether the project has a webhook endpoint in this mode, as seen by
        ``txn``. An endpoint receives only events that happen after it was
        added, so without one an event needs no outbox entry at all; deciding
        inside the recording transaction keeps that exact."""
        scope = layout.scope(project_id, mode)
        cur = txn.cursor(db=self._db[b"endpoints"])
        return bool(cur.set_range(scope)) and bytes(cur.key()).startswith(scope)

    def append_outbox(self, txn: lmdb.Transaction, event: OutboxEvent) -> None:
        """Queue ``event`` for the webhook dispatcher, inside the op recording it;
        the dispatcher is woken once the op's batch has committed
        (``on_outbox``). The caller asks ``wants_webhooks`` first, in the same
        transaction, and builds no event when the project has no endpoint in
        that mode (asking here again cost a cursor per event: 100 a batch of
        events). A write that queues nothing wakes nobody.

        Keyed by time, then project and mode, then event id: a conversion's
        id is the app's, which another project or the other mode may send in
        the same millisecond (keys of the former layout, time then id, are
        still read and acknowledged: the dispatcher uses the keys it read)."""
        key = (layout.ms(event.created_at_ms) + layout.scope(event.project_id, event.mode)
               + layout.uid(event.id))
        txn.put(key, encode(event), db=self._db[b"outbox"])
        if self.on_outbox is not None:
            after_commit(self.on_outbox)

    def read_outbox(self, limit: int = 256) -> list[tuple[bytes, OutboxEvent]]:
        return [(k, decode(OutboxEvent, v)) for k, v in self.scan(b"outbox", b"", limit=limit)]

    def ack_outbox(self, txn: lmdb.Transaction, key: bytes) -> None:
        """Remove a handled event, inside the op that queued its deliveries."""
        txn.delete(key, db=self._db[b"outbox"])

    # -- operations -------------------------------------------------------------

    def stats(self) -> dict[str, int]:
        """The map's size and the bytes of it in use (pages 0 to LMDB's last
        page: the file may run further, storage/file_ahead.py)."""
        info, st = self.env.info(), self.env.stat()
        return {"map_size": info["map_size"],
                "used_bytes": (info["last_pgno"] + 1) * st["psize"]}

    async def backup(self, dest: str) -> None:
        """A consistent compacted copy, taken from a read snapshot while serving."""
        try:
            os.makedirs(dest, mode=0o700, exist_ok=True)
            taken = bool(os.listdir(dest))
        except OSError as e:
            raise ValidationError(f"cannot make the backup directory {dest}: "
                                  f"{e.strerror or e}", field="dest") from None
        if taken:
            raise Conflict(f"backup destination {dest} is not empty")
        await trio.to_thread.run_sync(lambda: self.env.copy(dest, compact=True))
        for name in os.listdir(dest):  # LMDB makes the copy as the umask says
            os.chmod(os.path.join(dest, name), 0o600)


def _idem_key(scope: str, key: str) -> bytes:
    return scope.encode() + b"\x00" + key.encode()


def _deadline_key(d: Deadline) -> bytes:
    return layout.ms(d.due_ms) + d.kind.encode() + b"\x00" + d.ref.encode()


def _conforms(store: LmdbStore) -> Store:
    """mypy checks here that LmdbStore implements the Store protocol."""
    return store


def prefix_keys(txn: lmdb.Transaction, db: Any, prefix: bytes, *,
                reverse: bool = False) -> Iterator[bytes]:
    """The keys of ``db`` that start with ``prefix``, in key order (or
    reverse), read inside ``txn``."""
    cur = txn.cursor(db=db)
    if reverse:
        ok = cur.set_range(layout.prefix_end(prefix))
        ok = cur.prev() if ok else cur.last()
    else:
        ok = cur.set_range(prefix)
    while ok:
        key = bytes(cur.key())
        if not key.startswith(prefix):
            return
        yield key
        ok = cur.prev() if reverse else cur.next()


def _size_text(n: int) -> str:
    unit, name = next((u, s) for u, s in ((2**40, "TiB"), (2**30, "GiB"), (2**20, "MiB"), (1, "B"))
                      if n >= u or u == 1)
    return f"{n / unit:,.0f} {name}" if n % unit == 0 else f"{n / unit:,.1f} {name}"
