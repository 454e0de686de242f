"""Edges of the actors and the writer that the main tests do not reach: a
mailbox stopped under a caller waiting for room, or under a fire-and-forget
post; a project actor whose task itself crashes (the registry forgets it and
the next request starts a fresh one); the timer's guards (a kind nobody
handles, a handler that raises, a deadline cancelled while a refill settles,
too small a capacity); the writer after it closed, a function asked for after
a commit that raises, one op's write or a whole commit finding the map full;
the webhook history's sweep whose next deadline cannot be recorded; and the
WebhookActor's corners: a turn-on left for a later tick whose endpoint is
then deleted or whose bring-back hits a bug, a Resend dropped when its
endpoint is turned off before it starts, and deleting an endpoint with a
retry due and an attempt in flight.

Real LMDB in a temp dir, the real actors, trio's autojump clock where time
matters.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

import lmdb
import pytest
import trio
import trio.testing

from actors import webhook_admin, webhook_history
from actors.clock import TrioWallClock
from actors.mailbox import Mailbox
from actors.project import ProjectActor
from actors.registry import Registry
from actors.timer import TimerActor
from actors.webhook_history import PURGE_DEADLINE
from actors.webhooks import WebhookActor
from storage.lmdb_store import LmdbStore
from storage.writer import Writer, after_commit
from svc_engine.deadlines import Deadline
from svc_engine.errors import ActorFailed, InternalError, StorageUnavailable, StoreFull
from svc_engine.keys import Mode
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.plans import Plan
from svc_engine.webhook_delivery import DeliveryStatus
from svc_engine.webhook_endpoint import validate_endpoint
from svc_engine.webhook_records import Endpoint
from tests.test_webhook_backlog import (
    LIMIT_S,
    HungEndpoint,
    _deadlines,
    _stored,
    _switch,
    _world,
    running,
)
from web import tenancy
from web.services import system_random

BASE = 1_790_000_000_000
MINUTE = 60_000
HOUR = 60 * MINUTE


# -- mailbox ---------------------------------------------------------------------------

async def test_a_caller_waiting_for_room_fails_when_the_actor_stops(
        autojump_clock: trio.testing.MockClock) -> None:
    """A full mailbox makes a caller wait for room; if the actor stops
    meanwhile, that caller gets ActorFailed (500), not a wait forever."""
    box = Mailbox("t", 1)
    ran: list[str] = []
    box.call_nowait(lambda: ran.append("queued"))  # the mailbox is full
    outcome: list[BaseException] = []
    with trio.fail_after(60):
        async with trio.open_nursery() as n:
            async def caller() -> None:
                try:
                    await box.call(lambda: ran.append("waiting"))
                except ActorFailed as e:
                    outcome.append(e)

            n.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            assert outcome == []  # waiting for room
            box.close()
    assert len(outcome) == 1 and outcome[0].status == 500
    assert "is stopped" in str(outcome[0])
    assert ran == []


async def test_a_post_to_a_stopped_actor_is_dropped_without_an_error() -> None:
    """The timer and the senders post without waiting; a post to an actor
    that stopped (shutdown) is dropped quietly rather than raising into them."""
    box = Mailbox("t", 1)
    box.close()
    ran: list[str] = []
    box.call_nowait(lambda: ran.append("x"))  # no Overloaded, no error
    box.call_nowait(lambda: ran.append("y"))
    assert ran == [] and box.statistics().queued == 0


# -- registry --------------------------------------------------------------------------

async def test_a_project_actor_whose_task_crashes_is_forgotten_and_restarted(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """An actor's task that ends with an error (here: its reload after a bug
    fails too) is logged and forgotten; the next request starts a fresh
    actor from durable state, and the other projects never notice."""
    clock = TrioWallClock()
    info = await tenancy.bootstrap(store, "http://x", system_random, clock.now_ms())
    pid = str(info["projectId"])
    await store.set_plan(str(info["organizationId"]), Plan.SCALE)
    other, _ = await tenancy.create_project(store, str(info["organizationId"]), "other",
                                            system_random, clock.now_ms())

    async def broken_reload(self: ProjectActor) -> None:
        raise RuntimeError("reload bug")

    monkeypatch.setattr(ProjectActor, "_reload", broken_reload)
    caplog.set_level(logging.ERROR, logger="svc.registry")
    async with trio.open_nursery() as n:
        reg = Registry(store, clock, n)
        a = await reg.get(pid)
        b = await reg.get(other.id)
        assert reg.running(pid) is a
        await a.patch_settings({"iosLandingPage": True}, None)

        def bug() -> None:
            raise KeyError("bug")

        with pytest.raises(ActorFailed):
            await a.mailbox.call(bug)  # its reload raises: the actor's task ends
        await trio.testing.wait_all_tasks_blocked()
        assert reg.running(pid) is None
        stats = reg.statistics()
        assert (stats.crashed, stats.running) == (1, 1)
        assert [r.getMessage() for r in caplog.records if r.name == "svc.registry"] == [
            f"actor of project {pid} crashed; it restarts on next use"]
        with pytest.raises(ActorFailed):
            await a.get_settings()  # the dead actor takes no calls
        fresh = await reg.get(pid)
        assert fresh is not a and reg.running(pid) is fresh
        assert (await fresh.get_settings()).ios_landing_page is True  # durable state
        assert await reg.get(other.id) is b  # the other project never noticed
        assert (await b.get_settings()).ios_landing_page is False
        assert reg.statistics().started == 3
        n.cancel_scope.cancel()


# -- timer -----------------------------------------------------------------------------

async def test_a_timer_holds_at_least_two_deadlines(store: LmdbStore) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        TimerActor(store, TrioWallClock(BASE), capacity=1)
    TimerActor(store, TrioWallClock(BASE), capacity=2)


async def test_a_deadline_nobody_handles_or_whose_handler_fails_is_dropped_and_logged(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    """A deadline of a kind no handler is registered for, or whose handler
    raises (a bug), is logged and dropped: not retried, not counted as fired,
    and the timer goes on firing the others on time."""
    clock = TrioWallClock(BASE)
    fired: list[tuple[str, int]] = []
    calls: list[str] = []

    def broken(d: Deadline) -> None:
        calls.append(d.ref)
        raise RuntimeError("handler bug")

    timer = TimerActor(store, clock)
    timer.register("k", lambda d: fired.append((d.ref, clock.now_ms())))
    timer.register("broken", broken)
    ds = [Deadline(BASE + 1_000, "nobody", "orphan"), Deadline(BASE + 2_000, "broken", "b1"),
          Deadline(BASE + 3_000, "k", "after")]
    await store.add_deadlines(ds)
    caplog.set_level(logging.ERROR, logger="svc.timer")
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await trio.sleep(60)
        n.cancel_scope.cancel()
    assert fired == [("after", BASE + 3_000)]
    assert calls == ["b1"]  # once: a failing handler is not retried
    stats = timer.statistics()
    assert (stats.fired, stats.retried, stats.pending) == (1, 0, 0)
    errors = [(r.getMessage(), r.exc_info is not None) for r in caplog.records]
    assert errors == [("no handler for deadline kind 'nobody'; dropping orphan", False),
                      ("deadline handler for 'broken' failed", True)]


async def test_a_deadline_cancelled_while_a_refill_settles_never_fires(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """A deadline scheduled past the horizon while a refill waits for a
    settle is kept aside; cancelled before the refill ends (its cause went
    away), it is not held, and so never fires."""
    during: list[Deadline] = []

    async def settle() -> None:
        if not during:
            during.append(Deadline(BASE + 2_500, "k", "during"))
            timer.schedule_nowait(during[0])
            timer.cancel_nowait(during[0])
        await trio.sleep(0)

    await store.add_deadlines([Deadline(BASE + 1_000 * (i + 1), "k", f"d{i:03d}")
                               for i in range(6)])
    timer = TimerActor(store, TrioWallClock(BASE), capacity=2)
    fired: list[str] = []
    timer.register("k", lambda d: fired.append(d.ref), settle=settle)
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await trio.sleep(10)
        n.cancel_scope.cancel()
    assert during, "a refill ran"
    assert fired == [f"d{i:03d}" for i in range(6)]


# -- writer ----------------------------------------------------------------------------

async def test_a_closed_writer_refuses_new_ops_with_a_clear_error(data_dir: str) -> None:
    """Once the store is closing, a write is refused as an InternalError (500
    "the store is closing"), queued or not, instead of a trio error escaping."""
    store = LmdbStore(data_dir, map_size=64 << 20)
    db = store.db(b"meta")
    writer = Writer(store.env)
    try:
        async with trio.open_nursery() as n:
            await n.start(writer.run)
            queued = writer.submit_nowait(lambda txn: txn.put(b"k", b"before", db=db))
            writer.close()
            for submit in (writer.submit, writer.write):
                with pytest.raises(InternalError, match="the store is closing") as e:
                    await submit(lambda txn: txn.put(b"k", b"after", db=db))
                assert (e.value.status, e.value.code) == (500, "internal_error")
            with pytest.raises(InternalError, match="the store is closing"):
                writer.submit_nowait(lambda txn: txn.put(b"k", b"after", db=db))
            assert await queued.wait() is True  # what was queued still commits
    finally:
        store.close()
    assert store.writer.statistics().ops == 0 and writer.statistics().ops == 1


async def test_a_function_after_a_commit_that_raises_is_logged_and_the_rest_run(
        store: LmdbStore, caplog: pytest.LogCaptureFixture) -> None:
    db = store.db(b"meta")
    seen: list[str] = []

    def boom() -> None:
        raise RuntimeError("after-commit bug")

    def first(txn: lmdb.Transaction) -> str:
        txn.put(b"a", b"1", db=db)
        after_commit(boom)
        return "first"

    def second(txn: lmdb.Transaction) -> str:
        txn.put(b"b", b"2", db=db)
        after_commit(lambda: seen.append("woken"))
        return "second"

    caplog.set_level(logging.ERROR, logger="svc.storage")
    p1 = store.writer.submit_nowait(first)
    p2 = store.writer.submit_nowait(second)
    assert (await p1.wait(), await p2.wait()) == ("first", "second")
    assert seen == ["woken"]
    [record] = [r for r in caplog.records if r.name == "svc.storage"]
    assert record.getMessage() == "a function to call after a commit failed"
    assert record.exc_info is not None
    assert await store.write(lambda txn: txn.put(b"c", b"3", db=db)) is True  # goes on
    assert store.writer.statistics().batches == 2


async def test_one_op_finding_the_map_full_fails_alone_and_the_burst_goes_on(
        tmp_path: os.PathLike[str], caplog: pytest.LogCaptureFixture) -> None:
    """In a batch where one op's write finds the map full, the others commit
    and that op gets StoreFull (503); the failure starts a burst in the log,
    which the same batch's commit does not end: "commits succeed again" is
    said by the next commit that takes every write."""
    s = LmdbStore(os.path.join(str(tmp_path), "small"), map_size=1 << 20)
    db = s.db(b"meta")
    caplog.set_level(logging.INFO, logger="svc.storage")

    def huge(txn: lmdb.Transaction) -> None:
        for i in range(10_000):
            txn.put(f"big{i}".encode(), b"x" * 512, db=db)

    try:
        async with trio.open_nursery() as n:
            await n.start(s.writer.run)
            small = s.writer.submit_nowait(lambda txn: txn.put(b"small", b"ok", db=db))
            big = s.writer.submit_nowait(huge)
            assert await small.wait() is True
            with pytest.raises(StoreFull) as e:
                await big.wait()
            assert (e.value.status, e.value.code) == (503, "storage_unavailable")
            stats = s.writer.statistics()
            assert (stats.batches, stats.failed_ops, stats.failed_commits) == (1, 1, 1)
            lines = [r.getMessage() for r in caplog.records if r.name == "svc.storage"]
            assert len(lines) == 1 and "raise SVC_MAP_SIZE" in lines[0]
            await s.write(lambda txn: txn.put(b"later", b"ok", db=db))
            assert caplog.records[-1].getMessage() == "commits succeed again, after 1 failed"
            s.writer.close()
        assert s.meta("small") == b"ok" and s.meta("big0") is None
    finally:
        s.close()


async def test_a_commit_finding_the_map_full_fails_its_whole_batch(
        tmp_path: os.PathLike[str]) -> None:
    """Near the end of the map, every op's writes fit but the commit does not:
    every op of the batch then fails with StoreFull (503, "raise
    SVC_MAP_SIZE"), and nothing of the batch is stored."""
    s = LmdbStore(os.path.join(str(tmp_path), "small"), map_size=1 << 20)
    db = s.db(b"meta")

    def put(key: bytes, size: int) -> Any:
        return lambda txn: txn.put(key, b"x" * size, db=db)

    try:
        async with trio.open_nursery() as n:
            await n.start(s.writer.run)
            for i in range(1_000):  # batches of a 1 B and a 3 KB value until refused
                small = s.writer.submit_nowait(put(b"small%04d" % i, 1))
                big = s.writer.submit_nowait(put(b"big%04d" % i, 3_000))
                errors: list[BaseException | None] = []
                for p in (small, big):
                    try:
                        await p.wait()
                        errors.append(None)
                    except StoreFull as e:
                        errors.append(e)
                if errors != [None, None]:
                    break
            assert 0 < i < 1_000
            for e in errors:  # the small one's write fit: the commit did not
                assert isinstance(e, StoreFull) and "raise SVC_MAP_SIZE" in str(e)
                assert (e.status, e.code) == (503, "storage_unavailable")
            stats = s.writer.statistics()
            assert (stats.failed_commits, stats.failed_ops) == (1, 2)
            s.writer.close()
        assert s.meta(f"small{i:04d}") is None and s.meta(f"big{i:04d}") is None
        assert s.meta(f"small{i - 1:04d}") == b"x"  # the batches before are kept
    finally:
        s.close()


# -- webhook history -------------------------------------------------------------------

def _counted_sweeps(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The times of the history sweeps from now on (each still runs)."""
    sweeps: list[int] = []
    real_sweep = webhook_history._sweep

    async def counted_sweep(actor: WebhookActor, now: int) -> None:
        sweeps.append(now)
        await real_sweep(actor, now)

    monkeypatch.setattr(webhook_history, "_sweep", counted_sweep)
    return sweeps


def _purges(store: LmdbStore) -> list[int]:
    """The due times of the stored history sweeps."""
    return [d.due_ms for d in store.load_deadlines() if d.kind == PURGE_DEADLINE]


async def test_a_sweep_whose_next_deadline_cannot_be_recorded_is_tried_a_minute_later(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The hourly sweep records the next one before it works; when the store
    refuses that write (a full disk), it sweeps nothing, keeps its deadline
    in the store (a restart runs it) and is tried again a minute later."""
    clock = TrioWallClock(BASE)
    t0 = clock.now_ms()
    refused = Deadline(t0 + 2 * HOUR, PURGE_DEADLINE, "all")  # the first sweep's successor
    real_put = LmdbStore.put_deadline

    def refusing_put(self: LmdbStore, txn: lmdb.Transaction, d: Deadline) -> None:
        if d == refused:
            raise StorageUnavailable("simulated: the disk is full")
        real_put(self, txn, d)

    sweeps = _counted_sweeps(monkeypatch)
    monkeypatch.setattr(LmdbStore, "put_deadline", refusing_put)
    caplog.set_level(logging.WARNING, logger="svc.webhooks")

    async with running(store, clock, HungEndpoint(clock)):
        assert _purges(store) == [t0 + HOUR]
        await trio.sleep(HOUR / 1000 + 30)  # the first sweep's moment has passed
        assert sweeps == []
        assert _purges(store) == [t0 + HOUR]  # the old deadline stays: a restart runs it
        assert [r.getMessage() for r in caplog.records] == [
            "webhook history: the next sweep could not be recorded (simulated: the disk "
            "is full); trying again in 60 s"]
        await trio.sleep(31)  # a minute after the refusal
        assert sweeps == [t0 + HOUR + MINUTE]
        # The retry's write replaced the stored deadline it retried (it left it
        # behind, and a restart then ran two hourly chains).
        assert _purges(store) == [t0 + 2 * HOUR + MINUTE]
        await trio.sleep(HOUR / 1000)
        assert sweeps == [t0 + HOUR + MINUTE, t0 + 2 * HOUR + MINUTE]
        assert _purges(store) == [t0 + 3 * HOUR + MINUTE]
    sweeps.clear()
    async with running(store, clock, HungEndpoint(clock)):  # a restart: one chain
        await trio.sleep(3 * HOUR / 1000)
    assert sweeps == [t0 + 3 * HOUR + MINUTE, t0 + 4 * HOUR + MINUTE, t0 + 5 * HOUR + MINUTE]
    assert _purges(store) == [t0 + 6 * HOUR + MINUTE]


async def test_a_second_hourly_sweep_left_in_an_older_store_is_removed_when_it_fires(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A store written before the retry's fix can hold two hourly chains. The
    first to fire sweeps and records the next; the other, firing while that
    one is in the store, is deleted and starts nothing: one chain is left,
    across restarts too."""
    clock = TrioWallClock(BASE)
    t0 = clock.now_ms()
    await store.add_deadlines([Deadline(t0 + 10 * MINUTE, PURGE_DEADLINE, "all"),
                               Deadline(t0 + 50 * MINUTE, PURGE_DEADLINE, "all")])
    sweeps = _counted_sweeps(monkeypatch)
    caplog.set_level(logging.INFO, logger="svc.webhooks")

    async with running(store, clock, HungEndpoint(clock)):
        await trio.sleep(15 * MINUTE / 1000)
        assert sweeps == [t0 + 10 * MINUTE]
        assert _purges(store) == [t0 + 50 * MINUTE, t0 + 70 * MINUTE]
        await trio.sleep(40 * MINUTE / 1000)  # the second chain's moment has passed
        assert sweeps == [t0 + 10 * MINUTE]
        assert _purges(store) == [t0 + 70 * MINUTE]
        assert [r.getMessage() for r in caplog.records] == [
            f"webhook history: removed a second hourly sweep (due at {t0 + 50 * MINUTE} "
            f"ms; the one due at {t0 + 70 * MINUTE} ms stays)"]
        await trio.sleep(HOUR / 1000)
        assert sweeps == [t0 + 10 * MINUTE, t0 + 70 * MINUTE]
        assert _purges(store) == [t0 + 130 * MINUTE]
    sweeps.clear()
    async with running(store, clock, HungEndpoint(clock)):  # a restart: still one chain
        await trio.sleep(2 * HOUR / 1000)
    assert sweeps == [t0 + 130 * MINUTE, t0 + 190 * MINUTE]
    assert _purges(store) == [t0 + 250 * MINUTE]


async def test_a_second_hourly_sweep_the_store_will_not_remove_stays_for_the_next_start(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    clock = TrioWallClock(BASE)
    t0 = clock.now_ms()
    second = Deadline(t0 + 50 * MINUTE, PURGE_DEADLINE, "all")
    await store.add_deadlines([Deadline(t0 + 10 * MINUTE, PURGE_DEADLINE, "all"), second])
    real_delete = LmdbStore.delete_deadline

    def refusing_delete(self: LmdbStore, txn: lmdb.Transaction, d: Deadline) -> None:
        if d == second:
            raise StorageUnavailable("simulated: the disk is full")
        real_delete(self, txn, d)

    monkeypatch.setattr(LmdbStore, "delete_deadline", refusing_delete)
    caplog.set_level(logging.WARNING, logger="svc.webhooks")
    async with running(store, clock, HungEndpoint(clock)):
        await trio.sleep(55 * MINUTE / 1000)
    assert _purges(store) == [t0 + 50 * MINUTE, t0 + 70 * MINUTE]
    assert [r.getMessage() for r in caplog.records] == [
        "webhook history: a second hourly sweep could not be removed (simulated: the "
        "disk is full)"]


# -- the WebhookActor ------------------------------------------------------------------

async def _hooked(store: LmdbStore, clock: TrioWallClock, actor: WebhookActor
                  ) -> tuple[str, str]:
    """The bootstrapped project and its one endpoint, turned off."""
    project_id, endpoint_id = await _world(store, actor, clock)
    await _switch(actor, project_id, endpoint_id, on=False)
    return project_id, endpoint_id


async def _emit(store: LmdbStore, actor: WebhookActor, clock: TrioWallClock,
                project_id: str, n: int) -> None:
    """Click event number ``n``, recorded, then dispatched; a second later."""
    event = OutboxEvent(id=str(uuid.UUID(int=n, version=4)), type=EventType.CLICK,
                        project_id=project_id, mode="test", created_at_ms=clock.now_ms(),
                        data={"n": n})
    await store.write(lambda txn: store.append_outbox(txn, event))
    while (await actor.tick()).dispatched:
        pass
    await trio.sleep(1)


async def _refused(endpoint: Endpoint) -> None:
    raise StorageUnavailable("storage error: no space left on device (test)")


async def test_a_turn_on_left_for_later_is_dropped_once_its_endpoint_is_deleted(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A turn-on whose bring-back the store refused is tried again each
    tick (the dispatcher ticks every second while it waits); once the
    endpoint is deleted there is nothing to bring back: the next tick drops
    it quietly and the dispatcher goes back to sleep."""
    clock = TrioWallClock(BASE)
    caplog.set_level(logging.ERROR, logger="svc.webhooks")
    async with running(store, clock, HungEndpoint(clock)) as actor:
        project_id, endpoint_id = await _hooked(store, clock, actor)
        monkeypatch.setattr(actor, "rearm", _refused)
        assert not (await _switch(actor, project_id, endpoint_id, on=True)).is_off
        assert (await actor.tick()).parked is True  # still refused: tick again in a second
        monkeypatch.delattr(actor, "rearm")  # the store writes again
        await webhook_admin.delete_endpoint(actor, project_id, Mode.TEST, endpoint_id, None)
        assert (await actor.tick()).parked is False
        assert (await actor.tick()).parked is False
    assert [r.getMessage() for r in caplog.records] == []


async def test_a_fault_bringing_back_a_turned_on_endpoint_is_logged_not_retried(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A bring-back left for a later tick that then fails with anything but
    a storage error (a bug of ours) is logged once, with its traceback, and
    not tried every second; the tick itself answers."""
    clock = TrioWallClock(BASE)
    caplog.set_level(logging.ERROR, logger="svc.webhooks")
    calls: list[str] = []

    async def buggy(endpoint: Endpoint) -> None:
        calls.append(endpoint.id)
        raise RuntimeError("a bug in bringing back")

    async with running(store, clock, HungEndpoint(clock)) as actor:
        project_id, endpoint_id = await _hooked(store, clock, actor)
        monkeypatch.setattr(actor, "rearm", _refused)
        await _switch(actor, project_id, endpoint_id, on=True)
        monkeypatch.setattr(actor, "rearm", buggy)
        assert (await actor.tick()).parked is False
        assert (await actor.tick()).parked is False
    assert calls == [endpoint_id]  # once, not every tick
    [record] = caplog.records
    assert record.getMessage() == (
        f"webhooks: bringing back the deliveries of endpoint {endpoint_id} failed")
    assert record.exc_info is not None


async def test_a_resend_waiting_when_its_endpoint_is_turned_off_is_dropped(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """A Resend is written Sending and waits in its endpoint's queue (a hung
    endpoint takes one attempt at a time). Turned off before it starts, it
    is dropped: the delivery is Delivered again, as its last attempt says,
    and turning the endpoint on does not send it (press Resend again)."""
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, endpoint_id = await _world(store, actor, clock)
        receiver.hung = False
        await _emit(store, actor, clock, project_id, 1)
        [done] = await _stored(actor, project_id)
        assert done.status is DeliveryStatus.DELIVERED
        receiver.hung = True
        await _emit(store, actor, clock, project_id, 2)
        await trio.sleep(LIMIT_S)  # its attempt timed out: hung, one attempt at a time
        await _emit(store, actor, clock, project_id, 3)
        assert actor.statistics().in_flight == 1
        view = await webhook_admin.send_again(actor, project_id, Mode.TEST, done.id,
                                              "resend", None)
        assert view.delivery.status is DeliveryStatus.SENDING
        assert actor.manual_waiting(endpoint_id) == 1  # behind the attempt in flight
        await _switch(actor, project_id, endpoint_id, on=False)
        [again] = [d for d in await _stored(actor, project_id) if d.id == done.id]
        assert again.status is DeliveryStatus.DELIVERED and len(again.attempts) == 1
        receiver.hung = False
        await _switch(actor, project_id, endpoint_id, on=True)
        await trio.sleep(3600)
        assert receiver.delivered[done.id] == 1  # not sent again
        [again] = [d for d in await _stored(actor, project_id) if d.id == done.id]
        assert again.status is DeliveryStatus.DELIVERED and len(again.attempts) == 1


async def test_deleting_an_endpoint_with_a_retry_due_and_an_attempt_in_flight(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    """Deleting an endpoint removes its deliveries with their deadlines; the
    timer still holds a retry's deadline and an attempt is still in flight:
    when the deadline fires and the attempt ends, nothing is sent, written
    back or logged as a failure, and the actor goes on serving."""
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    caplog.set_level(logging.ERROR)
    async with running(store, clock, receiver) as actor:
        project_id, endpoint_id = await _world(store, actor, clock)
        await _emit(store, actor, clock, project_id, 1)
        await trio.sleep(LIMIT_S)  # timed out: a retry is due in a minute
        await _emit(store, actor, clock, project_id, 2)  # its attempt is in flight
        assert actor.statistics().in_flight == 1
        stored = await _stored(actor, project_id)
        assert [d.status for d in stored] == [DeliveryStatus.RETRYING, DeliveryStatus.SENDING]
        assert _deadlines(store) == {d.id for d in stored}  # in flight: as stored, waiting
        attempts = len(receiver.attempts)
        await webhook_admin.delete_endpoint(actor, project_id, Mode.TEST, endpoint_id, None)
        await trio.sleep(3600)  # past the retry's moment and the attempt's end
        assert len(receiver.attempts) == attempts
        assert await _stored(actor, project_id) == [] and _deadlines(store) == set()
        assert actor.statistics().in_flight == 0
        other = await webhook_admin.create_endpoint(
            actor, project_id, Mode.TEST, validate_endpoint("https://hooks.example/2"), None)
        receiver.hung = False
        await _emit(store, actor, clock, project_id, 3)
        [d] = await _stored(actor, project_id)
        assert d.endpoint_id == other.id and d.status is DeliveryStatus.DELIVERED
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
