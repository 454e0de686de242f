"""Schema version and migrations.

``SCHEMA_VERSION`` is stored in the ``meta`` database. On open, each migration
from the stored version up to the current one runs before the store is used,
in write transactions of bounded size: a migration that rewrites every record
of a kind (4: every retained event's dedup entry) does a slice per
transaction and records where it stopped, so a data dir of any size stays
under LMDB's dirty-page limit and a crash resumes where the last committed
slice ended. The version moves only when a migration has finished. A data
dir written by a newer version is refused rather than misread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import cbor2
import lmdb

from storage import install_rows, layout
from svc_engine.errors import StoreSchema

SCHEMA_VERSION = 11
_KEY = b"schema_version"
_RESUME = b"schema_resume"  # b"<version>:" + where the unfinished migration goes on
SLICE = 10_000  # records a resumable migration rewrites in one transaction
Databases = dict[bytes, Any]
Resume = bytes | None  # where a migration goes on in its next transaction; None: done


def _index_installs_by_time(txn: lmdb.Transaction, dbs: Databases, resume: bytes) -> Resume:
    """2: installs get a time index (project | mode | created ms | install id),
    so exports and Live events read a time range instead of every install."""
    index = dbs[b"installs_by_time"]
    cur = txn.cursor(db=dbs[b"installs"])
    ok, done, last = cur.set_range(resume), 0, b""
    while ok and done < SLICE:
        last = bytes(cur.key())
        created = int(cbor2.loads(bytes(cur.value()))["created_at_ms"])
        txn.put(last[:17] + created.to_bytes(8, "big") + last[17:], b"", db=index)
        done += 1
        ok = cur.next()
    return last + b"\x00" if ok else None


def _index_click_window(txn: lmdb.Transaction, dbs: Databases) -> None:
    """3: click-window taps get a cohort index (project | mode | iOS major |
    country | ms | click id) and a network index (project | mode | net hash |
    iOS major | ms | click id), both -> link id, so an iOS first launch reads
    its candidates instead of the whole window."""
    by_cohort, by_net = dbs[b"click_window_by_cohort"], dbs[b"click_window_by_net"]
    for key, raw in txn.cursor(db=dbs[b"click_window"]).iternext():
        k = bytes(key)
        scope, tail = k[:17], k[17:]
        m = cbor2.loads(bytes(raw))
        os_major, country, net = int(m["os_major"]), m.get("country"), m.get("net_hash")
        link = layout.uid(str(m["link_id"]))
        txn.put(layout.window_cohort_prefix(scope, os_major, country) + tail, link,
                db=by_cohort)
        if net is not None:
            txn.put(layout.window_net_prefix(scope, bytes(net), os_major) + tail, link,
                    db=by_net)


def _order_event_ids_by_time(txn: lmdb.Transaction, dbs: Databases, resume: bytes) -> Resume:
    """4: an event's dedup entry is keyed by install, the time the event says
    it occurred and id (was: install and id), so a batch's entries are written
    together instead of one page each (storage/event_records.py). The time
    comes from the stored event's ``occurredAt``."""
    from storage.event_records import dedup_key, event_json, sent_at_ms

    events = dbs[b"events"]

    def new_key(key: bytes, middle: bytes) -> bytes | None:
        scope, install, id16 = key[:17], key[17:33], key[33:]
        event_key = scope + middle + id16
        raw = txn.get(event_key, db=events)
        if raw is None:  # an entry whose event is gone has nothing to deduplicate
            return None
        return dedup_key(scope, install, sent_at_ms(event_json(event_key, bytes(raw))), id16)

    return _rekey(txn, dbs[b"event_ids"], 17 + 16 + 16, new_key, resume)


def _decisions_into_the_time_index(txn: lmdb.Transaction, dbs: Databases,
                                   resume: bytes) -> Resume:
    """5: a first launch's decision is the value of the install's key in
    ``installs_by_time`` (was: its own database keyed by install id, one more
    tree, four more pages, to write in every commit of a first launch);
    ``install_decisions`` is emptied. A decision whose install is gone is
    dropped (nothing can show it)."""
    decisions, installs, by_time = (dbs[b"install_decisions"], dbs[b"installs"],
                                    dbs[b"installs_by_time"])
    moved, more = _first_slice(txn, decisions)
    for key, value in moved:
        txn.delete(key, db=decisions)
        raw = txn.get(key, db=installs)
        if raw is not None:
            created = int(cbor2.loads(bytes(raw))["created_at_ms"])
            txn.put(key[:17] + created.to_bytes(8, "big") + key[17:], value, db=by_time)
    return b"" if more else None


def _first_slice(txn: lmdb.Transaction, db: Any) -> tuple[list[tuple[bytes, bytes]], bool]:
    """The first ``SLICE`` items of ``db``, and whether more follow. For a
    migration that moves every item out of ``db``: each slice starts at the
    beginning again (resume b"")."""
    cur = txn.cursor(db=db)
    items: list[tuple[bytes, bytes]] = []
    ok = cur.first()
    while ok and len(items) < SLICE:
        items.append((bytes(cur.key()), bytes(cur.value())))
        ok = cur.next()
    return items, ok


def _window_without_time_index(txn: lmdb.Transaction, dbs: Databases) -> None:
    """6: the click window's expiry sweep reads ``click_window`` itself (each
    project and mode's oldest entries), so ``click_window_by_time``, one more
    tree written with every iPhone tap and every consumed tap, is emptied."""
    txn.drop(dbs[b"click_window_by_time"], delete=False)


def _cohort_index_by_link(txn: lmdb.Transaction, dbs: Databases) -> None:
    """7: the click window's cohort index is keyed project | mode | iOS major |
    country | quarter hour | link id | ms | click id -> nothing (was: ... | ms
    | click id -> link id), so a launch seeks from link to link instead of
    reading every tap of its cohort (storage/click_window_store.py). Rebuilt
    from the entries, as schema 3 built it: one record per tap of the last 6
    hours."""
    by_cohort = dbs[b"click_window_by_cohort"]
    txn.drop(by_cohort, delete=False)
    for key, raw in txn.cursor(db=dbs[b"click_window"]).iternext():
        k = bytes(key)
        m = cbor2.loads(bytes(raw))
        txn.put(_window_cohort_key(k, m), b"", db=by_cohort)


def _window_cohort_key(entry_key: bytes, m: dict[str, Any]) -> bytes:
    """The schema-7 cohort key of the window entry stored under ``entry_key``
    (project | mode | ms | click id) as the map ``m``."""
    return layout.window_cohort_key(
        layout.window_cohort_prefix(entry_key[:17], int(m["os_major"]), m.get("country")),
        layout.uid(str(m["link_id"])), entry_key[17:])


def _hashes_into_cohort_index(txn: lmdb.Transaction, dbs: Databases) -> None:
    """8: a tap's network hash is kept in its cohort row's value (was: in its
    entry), so a match deletes the tap's two index rows, and so its hash,
    and leaves the entry to the sweep (storage/click_window_store.py). Each
    entry with a hash gives it to its cohort row and is written without it:
    one record per tap of the last 6 hours."""
    by_cohort = dbs[b"click_window_by_cohort"]
    cur = txn.cursor(db=dbs[b"click_window"])
    ok = cur.first()
    while ok:
        m = cbor2.loads(bytes(cur.value()))
        if m.get("net_hash") is not None:
            key = bytes(cur.key())
            txn.put(_window_cohort_key(key, m), bytes(m["net_hash"]), db=by_cohort)
            cur.put(key, cbor2.dumps({**m, "net_hash": None}))  # the cursor stays on it
        ok = cur.next()


def _index_domains_by_project(txn: lmdb.Transaction, dbs: Databases) -> None:
    """Schema 9: each custom domain also under its project, so a project's
    domains are one range instead of a scan of every project's."""
    into = dbs[b"domains_by_project"]
    for domain, pid in txn.cursor(db=dbs[b"domains"]):
        txn.put(bytes(pid) + bytes(domain), b"", db=into)


def _responses_in_two_parts(txn: lmdb.Transaction, dbs: Databases, resume: bytes) -> Resume:
    """10: an idempotency record is its creation time (8 bytes) under the
    16-byte hash of its scope and key in ``responses``, and the whole record,
    answer included, under created ms | that hash in ``responses_by_time``
    (was: the whole record under scope | key in ``idem``, and created ms |
    scope | key -> nothing in ``idem_by_time``). A write reaches a random
    leaf of the first tree, now shallow and many records a page, and appends
    to the second (bench/README.md, session 22). ``idem`` and
    ``idem_by_time`` are emptied, a slice at a time: about a day of records."""
    idem, old_by_time = dbs[b"idem"], dbs[b"idem_by_time"]
    index, by_time = dbs[b"responses"], dbs[b"responses_by_time"]
    moved, more = _first_slice(txn, idem)
    for key, value in moved:
        m = cbor2.loads(value)
        at = int(m["at"]).to_bytes(8, "big")
        k = layout.response_key(key)
        txn.put(k, at, db=index)
        txn.put(at + k, value, db=by_time)
        txn.delete(key, db=idem)
        txn.delete(at + key, db=old_by_time)
    if more:
        return b""
    txn.drop(old_by_time, delete=False)  # rows whose record was gone, if any
    return None


def _installs_into_their_time_rows(txn: lmdb.Transaction, dbs: Databases,
                                   resume: bytes) -> Resume:
    """11: an install is kept in its ``installs_by_time`` row, with how its
    first launch was judged (storage/install_rows.py), and ``installs``
    holds its creation time only (was: the whole install there, the decision
    alone in the row). Every install is rewritten, a slice a transaction,
    in key order; an entry that is already 8 bytes long is done."""
    installs, by_time = dbs[b"installs"], dbs[b"installs_by_time"]
    old: list[tuple[bytes, bytes]] = []
    cur = txn.cursor(db=installs)
    ok = cur.set_range(resume)
    while ok and len(old) < SLICE:
        value = bytes(cur.value())
        if len(value) != 8:
            old.append((bytes(cur.key()), value))
        ok = cur.next()
    for key, value in old:
        m = cbor2.loads(value)
        at = int(m["created_at_ms"]).to_bytes(8, "big")
        row = install_rows.row_key(key, at)
        judged = txn.get(row, db=by_time)
        decision = cbor2.loads(bytes(judged)) if judged else None
        # an InstallRow of version 1, written as such whatever the class becomes
        txn.put(row, cbor2.dumps({"v": 1, "install": m, "decision": decision}), db=by_time)
        txn.put(key, at, db=installs)
    return old[-1][0] + b"\x00" if ok else None  # ok: the slice is full, more may follow


def _rekey(txn: lmdb.Transaction, db: Any, old_size: int,
           new_key: Callable[[bytes, bytes], bytes | None], resume: bytes) -> Resume:
    """Give the next ``SLICE`` keys of ``db`` from ``resume`` on that are
    ``old_size`` bytes long their new key (None: drop the entry), value
    unchanged; where to go on, or None when none was left. Old and new keys
    share the database (the new ones are longer, so never taken for old), and
    the slice is read before any of it is rewritten."""
    old: list[tuple[bytes, bytes]] = []
    cur = txn.cursor(db=db)
    ok = cur.set_range(resume)
    while ok and len(old) < SLICE:
        key = bytes(cur.key())
        if len(key) == old_size:
            old.append((key, bytes(cur.value())))
        ok = cur.next()
    if not old:
        return None
    for key, value in old:
        txn.delete(key, db=db)
        moved = new_key(key, value)
        if moved is not None:
            txn.put(moved, value, db=db)
    return old[-1][0] + b"\x00"


def _once(migration: Callable[[lmdb.Transaction, Databases], None]) -> Migration:
    """A migration done in one transaction (its data is small)."""

    def run(txn: lmdb.Transaction, dbs: Databases, resume: bytes) -> Resume:
        migration(txn, dbs)
        return None

    return run


Migration = Callable[[lmdb.Transaction, Databases, bytes], Resume]


# version N -> the migration bringing data from N-1 to N: called with a write
# transaction, the databases and where it stopped (b"" at first) until it
# returns None.
MIGRATIONS: dict[int, Migration] = {
    2: _index_installs_by_time,
    3: _once(_index_click_window),  # one record per tap of the last 6 hours
    4: _order_event_ids_by_time,
    5: _decisions_into_the_time_index,
    6: _once(_window_without_time_index),
    7: _once(_cohort_index_by_link),  # one record per tap of the last 6 hours
    8: _once(_hashes_into_cohort_index),  # the taps of the last 6 hours with a hash
    9: _once(_index_domains_by_project),  # one record per custom domain
    10: _responses_in_two_parts,  # every idempotency record: a day of writes
    11: _installs_into_their_time_rows,  # every install
}


class SchemaTooNew(StoreSchema):
    """The data dir was written by a newer svc."""


class SchemaTooOld(StoreSchema):
    """The data dir needs an upgrade this command does not make."""


def refuse_older(env: lmdb.Environment) -> None:
    """SchemaTooOld for a data dir older than this svc's schema, read before
    anything is created in it (a command that does not upgrade leaves it as
    it was); a new dir, or one of this schema or newer, passes."""
    try:
        meta = env.open_db(b"meta", create=False)
    except lmdb.NotFoundError:
        return
    with env.begin() as txn:
        current = stored_version(txn, meta)
    if current is not None and current < SCHEMA_VERSION:
        raise _too_old(current)


def _too_old(current: int) -> SchemaTooOld:
    return SchemaTooOld(
        f"data dir has schema {current}, this svc uses {SCHEMA_VERSION}: `svc serve` "
        "upgrades it at start; this command does not change it (`svc backup` copies it as "
        "it is: take one first)")


def stored_version(txn: lmdb.Transaction, meta: Any) -> int | None:
    raw = txn.get(_KEY, db=meta)
    return int(bytes(raw).decode()) if raw is not None else None


def migrate(env: lmdb.Environment, dbs: Databases, *, upgrade: bool = True) -> int:
    """Bring the data dir to ``SCHEMA_VERSION`` (a new one is stamped with it).
    Not ``upgrade``: an older data dir is refused (SchemaTooOld), not changed."""
    meta = dbs[b"meta"]
    with env.begin(write=True) as txn:
        current = stored_version(txn, meta)
        if current is None:
            txn.put(_KEY, str(SCHEMA_VERSION).encode(), db=meta)
            return SCHEMA_VERSION
    if current > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"data dir has schema {current}, this svc knows up to {SCHEMA_VERSION}: upgrade svc"
        )
    if current < SCHEMA_VERSION and not upgrade:
        raise _too_old(current)
    while current < SCHEMA_VERSION:
        version = current + 1
        with env.begin(write=True) as txn:
            mark = b"%d:" % version
            saved = txn.get(_RESUME, db=meta)
            resume = bytes(saved)[len(mark):] if saved and bytes(saved).startswith(mark) \
                else b""
            goes_on = MIGRATIONS[version](txn, dbs, resume)
            if goes_on is None:
                txn.delete(_RESUME, db=meta)
                txn.put(_KEY, str(version).encode(), db=meta)
                current = version
            else:
                txn.put(_RESUME, mark + goes_on, db=meta)
    return SCHEMA_VERSION
