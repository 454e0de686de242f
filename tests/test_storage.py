"""The LMDB store: group commit, op isolation, durability, map-full, backup."""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import cbor2
import lmdb
import pytest
import trio
from hypothesis import example, given
from hypothesis import strategies as st

from storage import layout
from storage.lmdb_store import LmdbStore
from storage.schema import SCHEMA_VERSION, SchemaTooNew
from storage.writer import FailureLog, Pending, Writer, after_commit
from svc_engine.config import DEFAULT_MAP_SIZE
from svc_engine.deadlines import Deadline
from svc_engine.errors import (
    Conflict,
    MapUnavailable,
    StorageUnavailable,
    StoreDamaged,
    StoreFull,
    ValidationError,
)
from svc_engine.idempotency import fingerprint
from svc_engine.settings import DeferredSettings
from svc_engine.store import IdemWrite
from tests.migration_helpers import cut_migration, power_cut_on_slice, reopened


async def test_writes_queued_together_commit_in_one_batch(store: LmdbStore) -> None:
    db = store.db(b"meta")
    pendings = []
    for i in range(50):
        def op(txn: lmdb.Transaction, i: int = i) -> int:
            txn.put(f"k{i}".encode(), b"v", db=db)
            return i
        pendings.append(store.writer.submit_nowait(op))
    results = [await p.wait() for p in pendings]
    assert results == list(range(50))
    stats = store.writer.statistics()
    assert stats.batches == 1 and stats.largest_batch == 50
    assert store.meta("k49") == b"v"


async def test_a_batch_takes_at_most_max_batch_ops(store: LmdbStore) -> None:
    """Ops queued beyond ``max_batch`` wait for the next batch."""
    writer = Writer(store.env, max_batch=3, inline=True)
    db = store.db(b"meta")
    async with trio.open_nursery() as nursery:
        await nursery.start(writer.run)
        pendings = [writer.submit_nowait(
            lambda txn, i=i: txn.put(f"b{i}".encode(), b"v", db=db)) for i in range(7)]
        for p in pendings:
            await p.wait()
        writer.close()
    stats = writer.statistics()
    assert (stats.batches, stats.ops, stats.largest_batch) == (3, 7, 3)
    assert store.meta("b6") == b"v"


async def test_a_batch_cancelled_while_it_commits_still_answers_its_writers(
        store: LmdbStore) -> None:
    """The service cancelled (shut down) while a batch commits: the batch
    finishes and every op in it gets its answer, so no caller whose write
    is on disk waits for ever or is told it failed."""
    writer = Writer(store.env, inline=True)
    db = store.db(b"meta")
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            await nursery.start(writer.run)

            def op(txn: lmdb.Transaction) -> str:
                txn.put(b"mid-commit", b"v", db=db)
                scope.cancel()  # while the writer is inside the batch
                return "kept"

            pending = writer.submit_nowait(op)
            await trio.sleep_forever()
    assert scope.cancelled_caught and pending.done
    assert await pending.wait() == "kept" and store.meta("mid-commit") == b"v"


async def test_put_meta_writes_only_a_changed_value_and_put_meta_once_only_the_first(
        store: LmdbStore) -> None:
    await store.put_meta("served", b"a.example")
    assert store.meta("served") == b"a.example"
    batches = store.writer.statistics().batches
    await store.put_meta("served", b"a.example")  # unchanged: no write at all
    assert store.writer.statistics().batches == batches
    await store.put_meta("served", b"b.example")
    assert store.meta("served") == b"b.example"
    assert store.writer.statistics().batches == batches + 1
    assert await store.put_meta_once("secret", b"first") == b"first"
    assert await store.put_meta_once("secret", b"second") == b"first"
    assert store.meta("secret") == b"first"


async def test_scan_in_reads_the_prefix_as_the_op_s_own_transaction_sees_it(
        store: LmdbStore) -> None:
    db = store.db(b"meta")

    def op(txn: lmdb.Transaction) -> list[tuple[bytes, bytes]]:
        for key in (b"pa", b"pb\x00", b"pb\xff", b"pc", b"p"):
            txn.put(key, key.upper(), db=db)
        return store.scan_in(txn, b"meta", b"pb")

    assert await store.write(op) == [(b"pb\x00", b"PB\x00"), (b"pb\xff", b"PB\xff")]


async def test_wants_webhooks_only_for_an_endpoint_of_that_project_and_mode(
        store: LmdbStore) -> None:
    """Endpoints are keyed project | mode | ...: an endpoint of a scope after
    this one (another project, the other mode) is not this one's."""
    first, second = str(uuid.UUID(int=1)), str(uuid.UUID(int=2))
    txn = store.env.begin(write=True)
    try:
        txn.put(layout.scope(second, "test") + layout.uid(str(uuid.UUID(int=9))), b"",
                db=store.db(b"endpoints"))
        assert not store.wants_webhooks(txn, first, "test")
        assert not store.wants_webhooks(txn, first, "live")
        assert not store.wants_webhooks(txn, second, "live")
        assert store.wants_webhooks(txn, second, "test")
    finally:
        txn.abort()  # nothing kept


async def test_a_failing_op_does_not_spoil_its_batch(store: LmdbStore) -> None:
    db = store.db(b"meta")

    def good(txn: lmdb.Transaction) -> str:
        txn.put(b"good", b"1", db=db)
        return "ok"

    def bad(txn: lmdb.Transaction) -> None:
        txn.put(b"bad", b"1", db=db)
        raise ValidationError("nope")

    p1, p2, p3 = (store.writer.submit_nowait(good), store.writer.submit_nowait(bad),
                  store.writer.submit_nowait(good))
    assert await p1.wait() == "ok"
    with pytest.raises(ValidationError):
        await p2.wait()
    assert await p3.wait() == "ok"
    assert store.meta("good") == b"1"
    assert store.meta("bad") is None  # the child transaction was aborted


async def test_a_batch_runs_once_and_again_only_when_an_op_raises(store: LmdbStore) -> None:
    """Ops write straight into the batch's transaction; when one raises, the
    attempt is dropped and the batch runs again, one child transaction per op,
    so only the second run's writes are kept."""
    db = store.db(b"meta")
    runs: list[str] = []

    def counting(name: str) -> Any:
        def op(txn: lmdb.Transaction) -> str:
            runs.append(name)
            txn.put(name.encode(), str(runs.count(name)).encode(), db=db)
            if name == "bad":
                raise ValidationError("nope")
            return name
        return op

    first = [store.writer.submit_nowait(counting(n)) for n in ("a", "b")]
    assert [await p.wait() for p in first] == ["a", "b"]
    assert runs == ["a", "b"]  # no op raised: one run each

    runs.clear()
    second = [store.writer.submit_nowait(counting(n)) for n in ("c", "bad", "d")]
    assert await second[0].wait() == "c"
    with pytest.raises(ValidationError):
        await second[1].wait()
    assert await second[2].wait() == "d"
    assert runs == ["c", "bad", "c", "bad", "d"]  # the attempt stopped at "bad"
    assert store.meta("c") == b"2"  # the second run's write
    assert store.meta("d") == b"1" and store.meta("bad") is None


async def test_a_batch_someone_may_wait_for_is_flushed_before_it_is_done(
        data_dir: str) -> None:
    """metasync is off: a commit's meta page is flushed by a second sync, made
    for every batch holding an op that is not lazy, before any op of it is
    reported done; a batch of lazy ops only (clicks) skips it."""
    store = LmdbStore(data_dir, map_size=64 << 20)
    db = store.db(b"meta")
    syncs: list[tuple[bytes | None, list[bool]]] = []
    pendings: list[Pending[Any]] = []

    def sync() -> None:  # what the flush would make durable, and who was told
        with store.read() as txn:
            syncs.append((txn.get(b"last", db=db), [p.done for p in pendings]))
        store.env.sync(True)

    def put(value: bytes) -> Any:
        return lambda txn: txn.put(b"last", value, db=db)

    writer = Writer(store.env, sync=sync)
    try:
        async with trio.open_nursery() as n:
            await n.start(writer.run)
            pendings[:] = [writer.submit_nowait(put(b"1"), lazy=True),
                           writer.submit_nowait(put(b"2"), lazy=True)]
            await pendings[1].wait()
            assert syncs == []  # lazy only: one flush (LMDB's own), no second
            pendings[:] = [writer.submit_nowait(put(b"3"), lazy=True),
                           writer.submit_nowait(put(b"4"))]
            await pendings[1].wait()
            assert syncs == [(b"4", [False, False])]  # committed, flushed, then done
            writer.close()
    finally:
        store.close()


async def test_after_commit_runs_once_a_batch_when_the_write_is_readable(
        store: LmdbStore) -> None:
    db = store.db(b"meta")
    seen: list[tuple[str, bytes | None]] = []

    def look() -> None:
        with store.read() as txn:
            seen.append(("look", txn.get(b"k", db=db)))

    def other() -> None:
        seen.append(("other", None))

    def good(txn: lmdb.Transaction) -> None:
        txn.put(b"k", b"v", db=db)
        after_commit(look)
        after_commit(look)

    def bad(txn: lmdb.Transaction) -> None:
        after_commit(other)
        raise ValidationError("nope")

    ok = store.writer.submit_nowait(good, lazy=True)
    failed = store.writer.submit_nowait(bad)
    also = store.writer.submit_nowait(good)
    await ok.wait()
    await also.wait()
    with pytest.raises(ValidationError):
        await failed.wait()
    assert store.writer.statistics().batches == 1
    # once for the batch, after its commit, and nothing for the op that failed
    assert seen == [("look", b"v")]
    with store.env.begin(write=True) as txn:  # outside the writer: nothing is asked
        good(txn)
    assert seen == [("look", b"v")]


async def test_settings_idempotency_record_in_same_commit(store: LmdbStore) -> None:
    pid = "00000000-0000-4000-8000-000000000001"
    s = DeferredSettings(ios_landing_page=True)
    fp = fingerprint("PATCH", "/v1/deferred/settings", b"{}")
    idem = IdemWrite(scope=f"{pid}:test", key="k1", fingerprint=fp, now_ms=5,
                     render=lambda v: (200, "application/json", b"{}"))
    await store.put_settings(pid, s, idem)
    assert store.get_settings(pid) == s
    rec = store.get_response(f"{pid}:test", "k1")
    assert rec is not None and rec.fingerprint == fp and rec.status == 200
    assert await store.purge_responses(before_ms=5, limit=10) == 0
    assert await store.purge_responses(before_ms=6, limit=10) == 1
    assert store.get_response(f"{pid}:test", "k1") is None


def _idem(key: str, now_ms: int, body: bytes = b'{"ok":true}') -> IdemWrite:
    return IdemWrite(scope="00000000-0000-4000-8000-000000000001:test", key=key,
                     fingerprint=fingerprint("POST", "/v1/x", key.encode()), now_ms=now_ms,
                     render=lambda v: (201, "application/json", body))


async def test_an_idempotency_record_is_a_small_index_entry_and_a_timed_answer(
        store: LmdbStore) -> None:
    """Schema 10: the random-keyed tree holds 8 bytes under a 16-byte hash;
    the answer is appended in time order (so a write adds one small record
    to a random leaf)."""
    scope = "00000000-0000-4000-8000-000000000001:test"
    keys = [f"key-{i}" for i in range(50)]
    await store.write(lambda txn: [store.record_response(txn, _idem(k, 1_000 + i), None)
                                   for i, k in enumerate(keys)])
    with store.read() as txn:
        index = list(txn.cursor(db=store.db(b"responses")).iternext())
        timed = list(txn.cursor(db=store.db(b"responses_by_time")).iternext())
        legacy = (txn.stat(store.db(b"idem"))["entries"]
                  + txn.stat(store.db(b"idem_by_time"))["entries"])
    assert legacy == 0
    assert len(index) == len(timed) == 50
    assert {len(k) for k, _ in index} == {16} and {len(v) for _, v in index} == {8}
    assert [int.from_bytes(k[:8], "big") for k, _ in timed] == list(range(1_000, 1_050))
    assert {k[8:] for k, _ in timed} == {k for k, _ in index}
    for i, key in enumerate(keys):
        rec = store.get_response(scope, key)
        assert rec is not None and rec.created_at_ms == 1_000 + i and rec.status == 201
        assert rec.body == b'{"ok":true}' and rec.content_type == "application/json"
        assert rec.fingerprint == fingerprint("POST", "/v1/x", key.encode())
    assert store.get_response(scope, "key-50") is None
    assert store.get_response(scope.replace(":test", ":live"), "key-1") is None
    assert await store.purge_responses(before_ms=1_010, limit=4) == 4
    assert await store.purge_responses(before_ms=1_010, limit=100) == 6
    assert [store.get_response(scope, k) is None for k in keys[8:12]] == [True, True, False,
                                                                            False]
    with store.read() as txn:
        assert txn.stat(store.db(b"responses"))["entries"] == 40
        assert txn.stat(store.db(b"responses_by_time"))["entries"] == 40


async def test_purging_an_old_answer_keeps_a_later_record_of_its_key(store: LmdbStore) -> None:
    scope = "00000000-0000-4000-8000-000000000001:test"
    await store.write(lambda txn: store.record_response(txn, _idem("k", 5, b"old"), None))
    await store.write(lambda txn: store.record_response(txn, _idem("k", 9, b"new"), None))
    assert await store.purge_responses(before_ms=6, limit=10) == 1
    rec = store.get_response(scope, "k")
    assert rec is not None and rec.body == b"new"


async def test_migration_to_schema_10_splits_every_idempotency_record(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir of schema 9 (records under scope NUL key in ``idem``, their
    times in ``idem_by_time``) is moved slice by slice; a crash between
    slices loses nothing, and each record replays as before."""
    from svc_engine.idempotency import StoredResponse

    path = str(tmp_path / "v9")
    scope = "00000000-0000-4000-8000-000000000001:live"
    s = LmdbStore(path, map_size=64 << 20)
    records = {f"k{i}": StoredResponse(fingerprint("POST", "/v1/sdk/init", b"%d" % i), 200,
                                       "application/json", b'{"link":%d}' % i, 100 + i)
               for i in range(7)}
    with s.env.begin(write=True) as txn:  # the data dir as schema 9 left it
        for key, rec in records.items():
            old = f"{scope}\x00{key}".encode()
            txn.put(old, cbor2.dumps(rec.to_map()), db=s.db(b"idem"))
            txn.put(rec.created_at_ms.to_bytes(8, "big") + old, b"", db=s.db(b"idem_by_time"))
        txn.put((1).to_bytes(8, "big") + b"gone", b"", db=s.db(b"idem_by_time"))  # no record
        txn.put(b"schema_version", b"9", db=s.db(b"meta"))
    s.close()
    calls, stopped = cut_migration(monkeypatch, path, version=10, slice_size=3, slice_no=2)
    assert stopped.meta("schema_version") == b"9"
    assert stopped.meta("schema_resume") == b"10:" + calls[1] == b"10:"  # from the start again
    with stopped.read() as txn:
        assert txn.stat(stopped.db(b"idem"))["entries"] == 4  # the first slice moved
        assert txn.stat(stopped.db(b"responses"))["entries"] == 3
    assert {k: stopped.get_response(scope, k) for k in ("k0", "k1", "k2")} == {
        k: records[k] for k in ("k0", "k1", "k2")}
    stopped.close()
    s = reopened(path, map_size=64 << 20)
    try:
        assert {k: s.get_response(scope, k) for k in records} == records
        with s.read() as txn:
            for name, entries in ((b"idem", 0), (b"idem_by_time", 0), (b"responses", 7),
                                  (b"responses_by_time", 7)):
                assert txn.stat(s.db(name))["entries"] == entries, name
        async with trio.open_nursery() as n:
            await n.start(s.writer.run)
            assert await s.purge_responses(before_ms=103, limit=100) == 3
            s.writer.close()
        assert [s.get_response(scope, f"k{i}") is None for i in range(7)] == [
            True, True, True, False, False, False, False]
    finally:
        s.close()


async def test_migration_to_schema_11_keeps_each_install_in_its_time_row(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A data dir of schema 10 (the install under its ID, the decision alone
    in its time row) is rewritten slice by slice; after it ``installs`` holds
    creation times only, every read finds what it found before, and an
    upgrade changes the time row and leaves the index entry as it was."""
    from storage import install_rows, layout
    from storage.attribution_store import AttributionStore
    from storage.codec import decode, encode
    from storage.install_rows import InstallRow
    from svc_engine.installs import Confidence, Install, InstallAttribution, Method
    from svc_engine.keys import Mode

    path = str(tmp_path / "v10")
    pid = "00000000-0000-4000-8000-000000000003"
    scope = layout.scope(pid, "live")
    decision = {"v": 1, "at_ms": 5, "matched": True, "link_id": "l", "method": "network",
                "trials": [{"flow": "network", "result": "matched"}]}
    installs = [Install(install_id=f"00000000-0000-4000-8000-0000000000a{n}", project_id=pid,
                        mode=Mode.LIVE, platform="ios" if n % 2 else "android",
                        created_at_ms=9000 + n % 3, first_idem_key=f"k{n}")
                for n in range(7)]
    s = LmdbStore(path, map_size=16 << 20)
    with s.env.begin(write=True) as txn:  # the data dir as schema 10 left it
        for n, install in enumerate(installs):
            txn.put(scope + layout.uid(install.install_id), encode(install),
                    db=s.db(b"installs"))
            txn.put(scope + layout.ms(install.created_at_ms) + layout.uid(install.install_id),
                    cbor2.dumps(decision) if n != 4 else b"", db=s.db(b"installs_by_time"))
        txn.put(b"schema_version", b"10", db=s.db(b"meta"))
    s.close()
    calls, stopped = cut_migration(monkeypatch, path, version=11, slice_size=3, slice_no=2)
    assert stopped.meta("schema_version") == b"10"
    assert [len(v) == 8 for _, v in stopped.scan(b"installs", b"")] == [True] * 3 + [False] * 4
    assert stopped.meta("schema_resume") == b"11:" + calls[1]  # where it goes on
    stopped.close()
    s = reopened(path, map_size=16 << 20)
    try:
        assert {v for _, v in s.scan(b"installs", b"")} == {
            layout.ms(9000), layout.ms(9001), layout.ms(9002)}
        rows = [decode(InstallRow, v) for _, v in s.scan(b"installs_by_time", b"")]
        assert sorted((r.install for r in rows), key=lambda i: i.install_id) == installs
        attribution = AttributionStore(s, "http://x")
        for n, install in enumerate(installs):
            assert attribution.get_install(pid, "live", install.install_id) == install
            judged = attribution.decision(pid, "live", install.install_id)
            assert (judged is None) == (n == 4)
            assert judged is None or judged.trials == decision["trials"]
        async with trio.open_nursery() as nursery:
            await nursery.start(s.writer.run)
            offered = InstallAttribution("l2", Confidence.DETERMINISTIC, Method.LANDING_PAGE)
            key = scope + layout.uid(installs[1].install_id)
            with s.read() as txn:
                before = txn.get(key, db=s.db(b"installs"))

            def upgrade(txn: Any) -> None:
                row = install_rows.get(txn, s.db(b"installs"), s.db(b"installs_by_time"), key)
                assert row is not None
                install_rows.upgrade(txn, s.db(b"installs_by_time"), row, offered, 77)

            await s.write(upgrade)
            s.writer.close()
        upgraded = attribution.get_install(pid, "live", installs[1].install_id)
        assert upgraded is not None and upgraded.attribution == offered
        assert upgraded.upgraded_at_ms == 77
        assert attribution.decision(pid, "live", installs[1].install_id) is not None
        with s.read() as txn:
            assert txn.get(key, db=s.db(b"installs")) == before
    finally:
        s.close()


async def test_unknown_project_settings_are_defaults(store: LmdbStore) -> None:
    assert store.get_settings("00000000-0000-4000-8000-000000000009") == DeferredSettings()


async def test_deadlines_persist_in_due_order(store: LmdbStore) -> None:
    ds = [Deadline(300, "a", "x"), Deadline(100, "b", "y"), Deadline(200, "a", "z")]
    await store.add_deadlines(ds)
    assert store.load_deadlines() == sorted(ds)
    await store.remove_deadline(ds[1])
    assert store.load_deadlines() == [ds[2], ds[0]]


async def test_deadlines_read_after_one_in_deadline_order(store: LmdbStore) -> None:
    # The timer's refill reads "the next ones after the horizon": the store's key
    # order must be Deadline's order (due ms, kind, ref), ties included.
    ds = [Deadline(100, "webhook_attempt", "b"), Deadline(100, "webhook", "z"),
          Deadline(100, "webhook_attempt", "a"), Deadline(99, "z", "z"),
          Deadline(101, "a", ""), Deadline(100, "webhook_attempt", "a1")]
    await store.add_deadlines(ds)
    ordered = sorted(ds)
    assert store.load_deadlines() == ordered
    for i, d in enumerate(ordered):
        assert store.load_deadlines(after=d) == ordered[i + 1:]
        assert store.load_deadlines(after=d, limit=2) == ordered[i + 1:i + 3]
    assert store.load_deadlines(after=Deadline(100, "webhook_attempt", "a0")) == ordered[3:]
    assert store.deadline_kinds() == {"webhook_attempt", "webhook", "z", "a"}
    assert store.deadline_kinds({"a", "webhook", "nope"}) == {"a", "webhook"}
    assert store.deadline_kinds({"nope"}) == set()
    # each kind's earliest, read from the keys alone (the housekeeper's start)
    assert store.first_deadlines({"webhook_attempt", "a"}) == {
        "webhook_attempt": Deadline(100, "webhook_attempt", "a"), "a": Deadline(101, "a", "")}
    assert store.first_deadlines() == {
        "z": Deadline(99, "z", "z"), "webhook": Deadline(100, "webhook", "z"),
        "webhook_attempt": Deadline(100, "webhook_attempt", "a"), "a": Deadline(101, "a", "")}
    assert store.persisted_deadlines([ds[0], Deadline(100, "webhook", "gone")]) == {ds[0]}


async def test_asking_for_some_kinds_stops_once_they_are_found(store: LmdbStore) -> None:
    # A recurring job's deadline is due soon; a backlog of webhook attempts due
    # later is not read to learn that it is there. A key past the one wanted
    # that the walk could not read proves the walk never got to it.
    await store.add_deadlines([Deadline(50, "housekeeping:idem", "")])
    await store.write(lambda txn: txn.put(
        (10**6).to_bytes(8, "big") + b"no terminator", b"", db=store.db(b"deadlines")))
    assert store.deadline_kinds({"housekeeping:idem"}) == {"housekeeping:idem"}
    with pytest.raises(ValueError):
        store.deadline_kinds()  # the whole walk does read it
    await store.write(lambda txn: txn.delete(
        (10**6).to_bytes(8, "big") + b"no terminator", db=store.db(b"deadlines")))


async def test_duplicate_creation_is_a_conflict(store: LmdbStore) -> None:
    from svc_engine.plans import Plan
    from svc_engine.records import Organization
    org = Organization(id="00000000-0000-4000-8000-00000000000a", name="o", plan=Plan.GROWTH,
                       created_at_ms=1)
    await store.create_org(org)
    with pytest.raises(Conflict):
        await store.create_org(org)
    assert store.get_org(org.id) == org


@pytest.mark.parametrize("keep", [5_000, 8_192, 40_000])
def test_a_data_file_cut_short_is_refused_before_it_is_mapped(
        tmp_path: os.PathLike[str], keep: int) -> None:
    """Reading a page past the end of a mapped file is SIGBUS (the process
    dies without a word): a copy cut short is refused, by the store and by
    `svc doctor`, with what to do. The whole file still opens."""
    from web.doctor import diagnose

    whole = os.path.join(str(tmp_path), "whole")
    s = LmdbStore(whole, map_size=64 << 20)
    with s.env.begin(write=True) as txn:
        for i in range(2_000):
            txn.put(b"k%06d" % i, b"v" * 100, db=s.db(b"meta"))
    s.close()
    cut = os.path.join(str(tmp_path), "cut")
    os.makedirs(cut)
    with open(os.path.join(whole, "data.mdb"), "rb") as src, \
            open(os.path.join(cut, "data.mdb"), "wb") as dst:
        dst.write(src.read(keep))
    with pytest.raises(StoreDamaged, match=f"data.mdb is {keep:,} bytes, but the store it "
                                           "holds needs .*restore the data directory"):
        LmdbStore(cut, map_size=64 << 20)
    [finding] = diagnose(cut, 0, 64 << 20)
    assert (finding.check, finding.verdict) == ("data dir", "fail")
    assert "cut short" in finding.detail and "svc backup" in finding.remedy
    LmdbStore(whole, map_size=64 << 20).close()
    assert all(f.verdict != "fail" or f.check == "disk space"
               for f in diagnose(whole, 0, 64 << 20))


def test_a_data_file_one_page_or_one_byte_short_is_refused_and_a_whole_one_opens(
        tmp_path: os.PathLike[str]) -> None:
    """At the edge: the store needs its last page in use whole (SIGBUS on
    reading it otherwise); a file of exactly that length opens."""
    from storage.data_file import cut_short

    whole = os.path.join(str(tmp_path), "whole")
    s = LmdbStore(whole, map_size=64 << 20)
    with s.env.begin(write=True) as txn:
        for i in range(2_000):
            txn.put(b"k%06d" % i, b"v" * 100, db=s.db(b"meta"))
    need = (s.env.info()["last_pgno"] + 1) * s.env.stat()["psize"]  # LMDB's own word
    s.close()
    with open(os.path.join(whole, "data.mdb"), "rb") as f:
        data = f.read()

    def copy_of(size: int) -> str:
        path = os.path.join(str(tmp_path), f"cut-{size}")
        os.makedirs(path)
        with open(os.path.join(path, "data.mdb"), "wb") as dst:
            dst.write(data[:size])
        return path

    assert need <= len(data)
    for size in (need - 4096, need - 1):
        with pytest.raises(StoreDamaged, match=f"data.mdb is {size:,} bytes"):
            LmdbStore(copy_of(size), map_size=64 << 20)
    exact = copy_of(need)
    assert cut_short(exact) is None
    opened = LmdbStore(exact, map_size=64 << 20)
    try:
        assert opened.meta("k001999") == b"v" * 100
    finally:
        opened.close()


def test_a_map_the_process_cannot_reserve_is_a_clear_error(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(MapUnavailable, match="SVC_MAP_SIZE asks for 1,048,576 TiB"):
        LmdbStore(os.path.join(str(tmp_path), "huge"), map_size=1 << 60)


@pytest.mark.parametrize(("size", "said"), [
    (1 << 30, "1 GiB"), ((1 << 30) - (1 << 20), "1,023 MiB"), (3 << 29, "1.5 GiB"),
    (1 << 40, "1 TiB"), (256 << 30, "256 GiB"), (1 << 20, "1 MiB"), (1000, "1,000 B"),
])
def test_a_map_size_is_said_in_its_largest_whole_unit(size: int, said: str) -> None:
    from storage.lmdb_store import _size_text

    assert _size_text(size) == said


def test_the_default_map_is_address_space_not_disk(tmp_path: os.PathLike[str]) -> None:
    """256 GiB by default (the scale run's 10 million clicks took 9.9 GiB):
    reserved, not written; the file is as small as the store."""
    s = LmdbStore(os.path.join(str(tmp_path), "default"))
    try:
        assert s.env.info()["map_size"] == DEFAULT_MAP_SIZE == 256 << 30
        assert os.path.getsize(os.path.join(s.path, "data.mdb")) < 64 << 20
    finally:
        s.close()


async def test_map_full_is_a_clear_error_and_keeps_data(
        tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture) -> None:
    """An op that finds the map full gets StoreFull (503 storage_unavailable);
    a burst of them is one traceback in the log, as failed commits are."""
    path = os.path.join(str(tmp_path), "small")
    s = LmdbStore(path, map_size=1 << 20)
    db = s.db(b"meta")
    caplog.set_level(logging.INFO, logger="svc.storage")
    async with trio.open_nursery() as n:
        await n.start(s.writer.run)
        await s.write(lambda txn: txn.put(b"before", b"kept", db=db))

        def huge(txn: lmdb.Transaction) -> None:
            for i in range(10_000):
                txn.put(f"big{i}".encode(), b"x" * 512, db=db)

        for _ in range(3):
            with pytest.raises(StoreFull) as e:
                await s.write(huge)
            assert "SVC_MAP_SIZE" in str(e.value)
            assert (e.value.status, e.value.code) == (503, "storage_unavailable")
        lines = [r for r in caplog.records if r.name == "svc.storage"]
        assert len(lines) == 1 and lines[0].exc_info is not None
        assert "raise SVC_MAP_SIZE" in lines[0].getMessage()
        assert s.writer.statistics().failed_commits == 3
        # The store still works for small writes and lost nothing.
        await s.write(lambda txn: txn.put(b"after", b"ok", db=db))
        assert caplog.records[-1].getMessage() == "commits succeed again, after 3 failed"
        s.writer.close()
    assert s.meta("before") == b"kept" and s.meta("after") == b"ok"
    assert s.meta("big0") is None
    s.close()


async def test_failed_commits_are_503_and_logged_once_a_burst(
        data_dir: str, caplog: pytest.LogCaptureFixture) -> None:
    """A commit (here its flush) that fails answers every op of the batch with
    StorageUnavailable (503 storage_unavailable); the writer goes on; a burst
    of failures is one traceback, then one line every FAILURE_LOG_S of the
    injected clock, then one line when commits succeed again.
    (tests/test_disk_full_e2e.py fills a real disk.)"""
    store = LmdbStore(data_dir, map_size=64 << 20)
    db = store.db(b"meta")
    now = [100.0]
    failing = [True]

    def sync() -> None:
        if failing[0]:
            raise lmdb.Error("mdb_env_sync: Input/output error")
        store.env.sync(True)

    writer = Writer(store.env, sync=sync, clock=lambda: now[0], inline=True)
    caplog.set_level(logging.INFO, logger="svc.storage")
    try:
        async with trio.open_nursery() as n:
            await n.start(writer.run)
            errors = []
            for i in range(12):  # one a second of the clock
                with pytest.raises(StorageUnavailable) as e:
                    await writer.write(lambda txn, i=i: txn.put(b"k%d" % i, b"v", db=db))
                errors.append(e.value)
                now[0] += 1.0
            assert {(x.status, x.code, x.retry_after) for x in errors} == {
                (503, "storage_unavailable", 5)}
            assert "Input/output error" in errors[0].message
            lines = [r for r in caplog.records if r.name == "svc.storage"]
            assert [r.exc_info is not None for r in lines] == [True, False]
            assert "a commit failed, so the store takes no writes" in lines[0].getMessage()
            assert lines[1].getMessage().startswith("10 more commits failed in the last 10 s")
            assert writer.statistics().failed_commits == 12
            failing[0] = False
            await writer.write(lambda txn: txn.put(b"after", b"ok", db=db))
            assert caplog.records[-1].getMessage() == "commits succeed again, after 12 failed"
            writer.close()
    finally:
        store.close()


async def test_backup_is_a_consistent_copy(store: LmdbStore, tmp_path: os.PathLike[str]) -> None:
    await store.write(lambda txn: txn.put(b"x", b"1", db=store.db(b"meta")))
    dest = os.path.join(str(tmp_path), "backup")
    await store.backup(dest)
    copy = LmdbStore(dest, map_size=64 << 20)
    assert copy.meta("x") == b"1"
    copy.close()
    with pytest.raises(Conflict):
        await store.backup(dest)


async def test_a_backup_leaves_out_the_pages_the_store_freed(
        store: LmdbStore, tmp_path: os.PathLike[str]) -> None:
    """A compacted copy: a store that held a megabyte and deleted it backs
    up without that megabyte's pages."""
    db = store.db(b"meta")
    await store.write(lambda txn: [txn.put(b"big%04d" % i, b"v" * 2000, db=db)
                                   for i in range(500)])
    await store.write(lambda txn: [txn.delete(b"big%04d" % i, db=db) for i in range(500)])
    used = store.stats()["used_bytes"]
    assert used > 1 << 20
    dest = os.path.join(str(tmp_path), "compact")
    await store.backup(dest)
    assert os.path.getsize(os.path.join(dest, "data.mdb")) < used // 4


def test_schema_version_recorded_and_newer_refused(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "schema")
    s = LmdbStore(path, map_size=8 << 20)
    assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
    with s.env.begin(write=True) as txn:
        txn.put(b"schema_version", str(SCHEMA_VERSION + 1).encode(), db=s.db(b"meta"))
    s.close()
    with pytest.raises(SchemaTooNew):
        LmdbStore(path, map_size=8 << 20)


async def test_counter_increments_coalesce_and_abort_with_their_op(store: LmdbStore) -> None:
    from storage import counters

    db = store.db(b"counters")
    pid = "00000000-0000-4000-8000-000000000001"
    key = ("clicks", "*", "2026-11-22", "total", "")

    def good(txn: lmdb.Transaction) -> None:
        counters.increment(txn, db, pid, "live", [key])

    def bad(txn: lmdb.Transaction) -> None:
        counters.increment(txn, db, pid, "live", [key], by=100)
        raise ValidationError("refused after counting")

    # two kept ops in a row each count once (an op's counts are cleared when kept)
    pendings = [store.writer.submit_nowait(good), store.writer.submit_nowait(good),
                store.writer.submit_nowait(bad), store.writer.submit_nowait(good)]
    await pendings[0].wait()
    await pendings[1].wait()
    with pytest.raises(ValidationError):
        await pendings[2].wait()
    await pendings[3].wait()
    assert store.writer.statistics().batches == 1
    with store.read() as txn:
        raw = txn.get(counters.counter_key(pid, "live", key), db=db)
    assert raw is not None and counters.read_value(bytes(raw)) == 3
    await store.write(good)  # and outside a shared batch too
    with store.read() as txn:
        raw = txn.get(counters.counter_key(pid, "live", key), db=db)
        assert raw is not None and counters.read_value(bytes(raw)) == 4


async def test_decode_cache_follows_the_stored_bytes(store: LmdbStore) -> None:
    pid = "00000000-0000-4000-8000-000000000002"
    await store.put_settings(pid, DeferredSettings(ios_landing_page=True), None)
    first = store.get_settings(pid)
    assert store.get_settings(pid) is first  # decoded once
    await store.put_settings(pid, DeferredSettings(ios_landing_page=False), None)
    assert store.get_settings(pid).ios_landing_page is False


def test_migration_to_schema_2_indexes_existing_installs(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from storage import layout, schema
    from storage.codec import encode
    from svc_engine.installs import Install
    from svc_engine.keys import Mode

    path = os.path.join(str(tmp_path), "v1")
    s = LmdbStore(path, map_size=16 << 20)
    pid = "00000000-0000-4000-8000-000000000003"
    iids = [f"00000000-0000-4000-8000-0000000000a{n}" for n in range(3)]
    with s.env.begin(write=True) as txn:  # a data dir as schema 1 left it
        for n, iid in enumerate(iids):
            install = Install(install_id=iid, project_id=pid, mode=Mode.LIVE, platform="ios",
                              created_at_ms=1234 - n)
            txn.put(layout.scope(pid, "live") + layout.uid(iid), encode(install),
                    db=s.db(b"installs"))
        txn.drop(s.db(b"installs_by_time"), delete=False)
        txn.put(b"schema_version", b"1", db=s.db(b"meta"))
    s.close()
    monkeypatch.setattr(schema, "SLICE", 2)  # the index is built two installs at a time
    with power_cut_on_slice(monkeypatch, 2, slice_no=0) as resumed:  # no cut: each slice's start
        s = LmdbStore(path, map_size=16 << 20)
    assert resumed == [b"", layout.scope(pid, "live") + layout.uid(iids[1]) + b"\x00"]
    assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()  # 1 -> 2 -> current
    keys = [k for k, _ in s.scan(b"installs_by_time", b"")]
    assert keys == [layout.scope(pid, "live") + layout.ms(1234 - n) + layout.uid(iids[n])
                    for n in (2, 1, 0)]
    s.close()


@pytest.mark.parametrize("slice_size", [1, 10_000])
def test_migration_to_schema_5_moves_decisions_into_the_time_index(
        tmp_path: os.PathLike[str], monkeypatch: pytest.MonkeyPatch, slice_size: int) -> None:
    from storage import layout, schema
    from storage.attribution_store import AttributionStore
    from storage.codec import decode, encode
    from storage.install_rows import InstallRow
    from svc_engine.installs import Install
    from svc_engine.keys import Mode

    path = os.path.join(str(tmp_path), "v4")
    s = LmdbStore(path, map_size=16 << 20)
    pid = "00000000-0000-4000-8000-000000000003"
    iids = [f"00000000-0000-4000-8000-0000000000a{i}" for i in range(4)]
    scope = layout.scope(pid, "live")
    decision = {"v": 1, "at_ms": 5, "matched": False, "link_id": None, "method": None,
                "trials": [{"flow": "token", "result": "skipped"}]}
    with s.env.begin(write=True) as txn:  # a data dir as schema 4 left it
        for n, iid in enumerate(iids[:3]):  # the third has no decision (not a first launch)
            install = Install(install_id=iid, project_id=pid, mode=Mode.LIVE, platform="ios",
                              created_at_ms=9000 - n)
            txn.put(scope + layout.uid(iid), encode(install), db=s.db(b"installs"))
            txn.put(scope + layout.ms(9000 - n) + layout.uid(iid), b"",
                    db=s.db(b"installs_by_time"))
        for iid in (iids[0], iids[1], iids[3]):  # the fourth install is gone
            txn.put(scope + layout.uid(iid), cbor2.dumps(decision),
                    db=s.db(b"install_decisions"))
        txn.put(b"schema_version", b"4", db=s.db(b"meta"))
    s.close()
    monkeypatch.setattr(schema, "SLICE", slice_size)
    s = LmdbStore(path, map_size=16 << 20)
    try:
        assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
        assert s.scan(b"install_decisions", b"") == []
        judged = [(k, decode(InstallRow, v).decision is not None)
                  for k, v in s.scan(b"installs_by_time", b"")]
        assert judged == [
            (scope + layout.ms(8998) + layout.uid(iids[2]), False),
            (scope + layout.ms(8999) + layout.uid(iids[1]), True),
            (scope + layout.ms(9000) + layout.uid(iids[0]), True)]
        attribution = AttributionStore(s, "http://x")
        found = attribution.decision(pid, "live", iids[0])
        assert found is not None and found.trials == decision["trials"]
        assert attribution.decision(pid, "live", iids[2]) is None
        assert attribution.decision(pid, "live", iids[3]) is None
    finally:
        s.close()


async def test_a_key_and_its_owners_are_read_together(store: LmdbStore) -> None:
    import secrets

    from storage import layout
    from svc_engine.keys import key_hash
    from web.tenancy import bootstrap

    info = await bootstrap(store, "http://localhost:8000", secrets.token_bytes, 1)
    keys = info["keys"]
    assert isinstance(keys, dict)
    h = key_hash(str(keys["pk_live"]))
    key, project, org = store.key_with_owners(h)
    assert key == store.find_key(h) and key is not None
    assert project == store.get_project(key.project_id) and project is not None
    assert org == store.get_org(project.org_id) and org is not None
    assert store.key_with_owners(b"\x00" * 32) == (None, None, None)

    def drop(txn: lmdb.Transaction) -> None:  # an organization gone, then its project
        txn.delete(layout.uid(org.id), db=store.db(b"orgs"))

    await store.write(drop)
    assert store.key_with_owners(h) == (key, project, None)
    await store.write(lambda txn: txn.delete(layout.uid(project.id), db=store.db(b"projects")))
    assert store.key_with_owners(h) == (key, None, None)


@given(st.integers(min_value=-(1 << 70), max_value=1 << 70))
@example(0)
@example(23)
@example(24)
@example(255)
@example(256)
@example((1 << 16) - 1)
@example(1 << 16)
@example((1 << 32) - 1)
@example(1 << 32)
@example((1 << 64) - 1)
@example(1 << 64)
@example(-1)
def test_counters_are_written_and_read_as_cbor2_does(n: int) -> None:
    from storage import counters

    assert counters.encode_count(n) == cbor2.dumps(n)
    assert counters.read_value(cbor2.dumps(n)) == n


@given(st.text(alphabet="0123456789.-", max_size=12))
def test_revenue_totals_still_read_through_cbor2(text: str) -> None:
    from storage import counters

    assert counters.read_value(cbor2.dumps(text)) == text


async def test_custom_domains_are_listed_per_project_from_their_index(
        store: LmdbStore) -> None:
    from storage.links_store import LinksStore
    links = LinksStore(store)
    mine, other = "00000000-0000-4000-8000-0000000000d1", "00000000-0000-4000-8000-0000000000d2"
    for domain in ("go.example.com", "a.example.com", "links.example.org"):
        await links.add_domain(mine, domain, set())
    await links.add_domain(other, "b.example.com", set())
    assert links.domains_of(mine) == ["a.example.com", "go.example.com", "links.example.org"]
    assert links.domains_of(other) == ["b.example.com"]
    from svc_engine.errors import InvalidDomain
    with pytest.raises(InvalidDomain):  # taken by another project: neither table changes
        await links.add_domain(mine, "b.example.com", set())
    assert links.domains_of(mine) == ["a.example.com", "go.example.com", "links.example.org"]
    assert links.domain_owner("b.example.com") == other
    await links.remove_domain(mine, "go.example.com")
    assert links.domains_of(mine) == ["a.example.com", "links.example.org"]
    assert links.domain_owner("go.example.com") is None
    # the index holds exactly the domains table, turned around
    domains = {(bytes(v), k) for k, v in store.scan(b"domains", b"")}
    assert {(k[:16], k[16:]) for k, _ in store.scan(b"domains_by_project", b"")} == domains


def test_migration_9_indexes_custom_domains_by_project(tmp_path: os.PathLike[str]) -> None:
    from storage import layout
    from storage.links_store import LinksStore
    path = os.path.join(str(tmp_path), "v8")
    s = LmdbStore(path, map_size=16 << 20)
    projects = [f"00000000-0000-4000-8000-00000000{n:04x}" for n in range(40)]
    owned = {p: sorted(f"d{n}.p{i}.example.com" for n in range(i % 4)) for i, p in
             enumerate(projects)}
    with s.env.begin(write=True) as txn:  # the data dir as schema 8 left it: no index
        for p, domains in owned.items():
            for d in domains:
                txn.put(d.encode(), layout.uid(p), db=s.db(b"domains"))
        txn.put(b"schema_version", b"8", db=s.db(b"meta"))
    s.close()
    s = LmdbStore(path, map_size=16 << 20)
    try:
        assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
        links = LinksStore(s)
        assert {p: links.domains_of(p) for p in projects} == owned
        assert sum(len(d) for d in owned.values()) == 60
    finally:
        s.close()


def test_a_store_opened_without_upgrading_leaves_an_older_data_dir_as_it_was(
        tmp_path: os.PathLike[str]) -> None:
    """README: no command but `svc serve` changes an older store. The
    refusal came, but after every missing database was made in it."""
    import lmdb

    from storage.schema import SchemaTooOld
    path = os.path.join(str(tmp_path), "v8")
    s = LmdbStore(path, map_size=16 << 20)
    with s.env.begin(write=True) as txn:  # schema 8: no domains_by_project yet
        txn.put(b"schema_version", b"8", db=s.db(b"meta"))
        txn.drop(s.db(b"domains_by_project"), delete=True)
    s.close()

    def named() -> list[bytes]:
        env = lmdb.open(path, max_dbs=128, readonly=True, lock=False)
        try:
            with env.begin() as txn:
                return sorted(bytes(k) for k in txn.cursor().iternext(values=False))
        finally:
            env.close()

    before = named()
    assert b"domains_by_project" not in before
    with pytest.raises(SchemaTooOld):
        LmdbStore(path, map_size=16 << 20, upgrade=False)
    assert named() == before


async def test_a_counter_key_of_lmdbs_longest_is_counted_and_one_byte_more_is_refused(
        store: LmdbStore) -> None:
    from storage import counters, layout

    db = store.db(b"counters")
    pid = "00000000-0000-4000-8000-000000000001"
    base = len(counters.counter_key(pid, "live", ("opens", "*", "2026-11-22", "v", "")))

    def key(size: int) -> tuple[str, ...]:
        return ("opens", "*", "2026-11-22", "v", "x" * (size - base))

    longest = key(layout.MAX_KEY)
    assert len(counters.counter_key(pid, "live", longest)) == store.env.max_key_size()
    await store.write(lambda txn: counters.increment(txn, db, pid, "live", [longest]))
    with store.read() as txn:
        raw = txn.get(counters.counter_key(pid, "live", longest), db=db)
    assert raw is not None and counters.read_value(bytes(raw)) == 1
    with pytest.raises(counters.CounterKeyTooLong):
        await store.write(lambda txn: counters.increment(
            txn, db, pid, "live", [key(layout.MAX_KEY + 1)]))


async def test_a_counter_key_lmdb_cannot_take_fails_its_op_only(store: LmdbStore) -> None:
    """Counter deltas are written once for the whole batch: a key over LMDB's
    511 bytes failed that flush, and with it every write of the batch (503 for
    all of them). Now the op that counts it fails alone, and says no more of
    the key than its size."""
    from storage import counters

    db = store.db(b"counters")
    pid = "00000000-0000-4000-8000-000000000001"
    fine = ("opens", "*", "2026-11-22", "platform", "ios")
    huge = ("opens", "*", "2026-11-22", "platform", "Mozilla/5.0 " + "x" * 600)

    def good(txn: lmdb.Transaction) -> None:
        counters.increment(txn, db, pid, "live", [fine])

    def bad(txn: lmdb.Transaction) -> None:
        counters.increment(txn, db, pid, "live", [fine, huge])

    pendings = [store.writer.submit_nowait(good), store.writer.submit_nowait(bad),
                store.writer.submit_nowait(good)]
    await pendings[0].wait()
    with pytest.raises(counters.CounterKeyTooLong) as refused:
        await pendings[1].wait()
    await pendings[2].wait()
    assert "Mozilla" not in str(refused.value) and "bytes" in str(refused.value)
    with store.read() as txn:
        raw = txn.get(counters.counter_key(pid, "live", fine), db=db)
    assert raw is not None and counters.read_value(bytes(raw)) == 2
    with pytest.raises(counters.CounterKeyTooLong):
        await store.write(bad)  # outside a shared batch: the op's own error too


async def test_the_store_and_its_backups_are_the_owner_s_alone(
        tmp_path: os.PathLike[str]) -> None:
    """The store holds webhook signing secrets and the server secret in clear;
    under a umask of 022 data.mdb and every backup were world-readable."""
    import stat

    old = os.umask(0o022)
    try:
        where = os.path.join(str(tmp_path), "d")
        store = LmdbStore(where)
        try:
            dest = os.path.join(str(tmp_path), "copy")
            await store.backup(dest)
        finally:
            store.close()
    finally:
        os.umask(old)
    for path in (where, dest):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o700, path
        for name in os.listdir(path):
            mode = stat.S_IMODE(os.stat(os.path.join(path, name)).st_mode)
            assert mode == 0o600, (path, name, oct(mode))


def test_commits_failing_and_succeeding_by_turns_are_one_burst_in_the_log(
        caplog: pytest.LogCaptureFixture) -> None:
    """A nearly full map takes small commits and refuses larger ones, by
    turns: that is one burst (one traceback), with one line for the
    recovery once FAILURE_LOG_S has passed, not a traceback and a recovery
    line a commit (21 and 20 in 1.2 s)."""
    now = [100.0]
    failures = FailureLog(lambda: now[0], every_s=10)
    caplog.set_level(logging.INFO, logger="svc.storage")
    for _ in range(20):  # 0.05 s apart: failed, succeeded, failed...
        failures.failed(StoreFull("the map is full"), "raise SVC_MAP_SIZE")
        now[0] += 0.025
        failures.succeeded()
        now[0] += 0.025
    lines = [r for r in caplog.records if r.name == "svc.storage"]
    assert [r.exc_info is not None for r in lines] == [True, False]
    assert lines[1].getMessage() == "commits succeed again, after 1 failed"
    now[0] += 10
    failures.succeeded()  # the next commit, once FAILURE_LOG_S has passed: said
    failures.succeeded()
    lines = [r for r in caplog.records if r.name == "svc.storage"]
    assert len(lines) == 3 and lines[2].getMessage() == (
        "commits succeed again, after 19 failed (they failed again 19 times after succeeding)")
    assert failures.count == 20
    # a failure after FAILURE_LOG_S of commits succeeding: a new burst, with its traceback
    now[0] += 60
    failures.failed(StoreFull("the map is full"), "raise SVC_MAP_SIZE")
    assert caplog.records[-1].exc_info is not None


def test_a_burst_of_failed_commits_is_counted_exactly_in_its_lines(
        caplog: pytest.LogCaptureFixture) -> None:
    """One line a FAILURE_LOG_S with the failures since the last line, one
    recovery line with the burst's total, never a second one; failures within
    FAILURE_LOG_S of the recovery continue the burst, from then on a new one."""
    now = [0.0]
    failures = FailureLog(lambda: now[0], every_s=10)
    caplog.set_level(logging.INFO, logger="svc.storage")

    def said() -> list[str]:
        return [("TRACEBACK " if r.exc_info else "") + r.getMessage()
                for r in caplog.records if r.name == "svc.storage"]

    def fail(at: float) -> None:
        now[0] = at
        failures.failed(StoreFull("full"), "room")

    def succeed(at: float) -> None:
        now[0] = at
        failures.succeeded()

    for t in range(0, 25):  # a failure a second: the first line, then one a 10 s
        fail(t)
    succeed(25)
    assert said() == [
        "TRACEBACK a commit failed, so the store takes no writes (StoreFull); room",
        "10 more commits failed in the last 10 s (StoreFull: full); room",
        "10 more commits failed in the last 10 s (StoreFull: full); room",
        "commits succeed again, after 25 failed"]
    succeed(40)  # long after: nothing more to say
    assert len(said()) == 4
    fail(49.5)  # 24.5 s after the burst ended: a new one
    assert said()[-1].startswith("TRACEBACK ")
    succeed(50)
    assert said()[-1] == "commits succeed again, after 1 failed"
    fail(55)  # 5 s after it: the same burst goes on
    succeed(56)  # within 10 s of the last line: said later
    succeed(58)
    assert len(said()) == 6
    succeed(60)  # exactly 10 s after the last line: said now
    assert said()[-1] == ("commits succeed again, after 1 failed "
                          "(they failed again 1 times after succeeding)")
    fail(66)  # exactly 10 s after the success that ended the burst (56): a new one
    assert said()[-1].startswith("TRACEBACK ") and len(said()) == 8
    succeed(67)
    fail(70)  # the same burst again
    succeed(77)  # exactly 10 s after the last line: said at once
    assert said()[-2:] == ["commits succeed again, after 1 failed",
                           "commits succeed again, after 1 failed "
                           "(they failed again 1 times after succeeding)"]
    fail(80)  # the same burst once more, failing on: its line counts from the recovery
    fail(87)
    assert said()[-1] == "2 more commits failed in the last 10 s (StoreFull: full); room"
    assert failures.count == 31
