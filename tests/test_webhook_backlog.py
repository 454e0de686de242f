"""A hung endpoint with events coming costs the store, not memory: the
WebhookActor holds at most READY_PER_ENDPOINT due deliveries per endpoint in
its ready queue; the rest stay Queued in the store (without their deadline)
and are read back, oldest first, as the queue runs down. Once the receiver
answers, every delivery is delivered exactly once, with no attempt of one
delivery running twice at once; across a restart and an Off/On the backlog
is not lost (and neither a restart nor a turn on costs a deadline written
or fired for what it leaves in the store); a manual send still goes first.

The real LMDB in a temp dir, the real actor and timer under trio's autojump
clock, and a fake sender (the ``Attempter``) that hangs like an endpoint that
accepts connections and never answers: each attempt ends at its 10 s limit.
"""

from __future__ import annotations

import functools
import random
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager

import attrs
import lmdb
import pytest
import trio
import trio.testing

from actors import webhook_admin, webhooks
from actors.clock import Clock, TrioWallClock
from actors.timer import TimerActor
from actors.webhook_queue import MANUAL_WAITING, READY_PER_ENDPOINT, SendQueue
from actors.webhook_sender import AttemptReport, SendJob
from actors.webhooks import WebhookActor
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import ATTEMPT_DEADLINE, attempt_deadline
from storage.writer import Op
from svc_engine import webhook_delivery as wd
from svc_engine.deadlines import Deadline
from svc_engine.errors import Conflict, StorageUnavailable
from svc_engine.keys import Mode
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.plans import Plan
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import validate_endpoint
from svc_engine.webhook_envelope import iso_utc_ms
from svc_engine.webhook_records import Endpoint
from svc_engine.webhook_retry import TIMEOUT
from svc_engine.webhook_views import delivery_summary_json, next_attempt_at_ms
from web import tenancy

BASE = 1_790_000_000_000
LIMIT_S = 10  # the sender's limit per attempt
PER_ENDPOINT = 8


class HungEndpoint:
    """An Attempter: while ``hung``, a scheduled attempt ends at its 10 s
    limit without an answer; otherwise (and for a test event) it answers 204
    at once. Records every attempt and any delivery attempted twice at once."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self.hung = True
        self.attempts: list[SendJob] = []
        self.delivered: Counter[str] = Counter()
        self.in_flight: set[str] = set()
        self.twice_at_once: list[str] = []

    async def attempt(self, job: SendJob) -> AttemptReport:
        if job.delivery_id in self.in_flight:
            self.twice_at_once.append(job.delivery_id)
        self.in_flight.add(job.delivery_id)
        self.attempts.append(job)
        started = self._clock.now_ms()
        try:
            if self.hung and job.event_type != EventType.TEST.value:
                await trio.sleep(LIMIT_S)
                return AttemptReport(job, started, self._clock.now_ms(), None, TIMEOUT,
                                     "no answer within 10 s")
            self.delivered[job.delivery_id] += 1
            return AttemptReport(job, started, self._clock.now_ms(), 204, None, "")
        finally:
            self.in_flight.discard(job.delivery_id)

    def first_attempts(self) -> list[str]:
        seen: set[str] = set()
        out = []
        for job in self.attempts:
            if job.delivery_id not in seen:
                seen.add(job.delivery_id)
                out.append(job.delivery_id)
        return out


@pytest.fixture
def peak(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, int]]:
    """The largest ready queue of each endpoint, after every delivery queued."""
    seen: dict[str, int] = {}

    def watch(method: Callable[..., bool | None]) -> Callable[..., bool | None]:
        def queued(self: SendQueue, d: Delivery, *args: object, **kw: object) -> bool | None:
            result = method(self, d, *args, **kw)
            seen[d.endpoint_id] = max(seen.get(d.endpoint_id, 0), self.ready_of(d.endpoint_id))
            return result

        return queued

    monkeypatch.setattr(SendQueue, "add", watch(SendQueue.add))
    monkeypatch.setattr(SendQueue, "take_back", watch(SendQueue.take_back))
    yield seen


@asynccontextmanager
async def running(store: LmdbStore, clock: Clock, receiver: HungEndpoint
                  ) -> AsyncIterator[WebhookActor]:
    """The actor and the timer, started as web/assembly.py does; stopped (as by
    a crash of the process, with the held writes flushed) at the end."""
    timer = TimerActor(store, clock)
    rng = random.Random(7)
    actor = WebhookActor(store, clock, timer, rng.randbytes, per_endpoint=PER_ENDPOINT)
    async with trio.open_nursery() as n:
        await n.start(actor.run, receiver)
        await n.start(timer.run)
        yield actor
        n.cancel_scope.cancel()


async def _world(store: LmdbStore, actor: WebhookActor, clock: Clock) -> tuple[str, str]:
    """The bootstrapped project (Growth) and one endpoint in test mode."""
    info = await tenancy.bootstrap(store, "http://svc.test", random.Random(1).randbytes,
                                   clock.now_ms())
    project_id = str(info["projectId"])
    endpoint = await webhook_admin.create_endpoint(
        actor, project_id, Mode.TEST, validate_endpoint("https://hooks.example/in"), None)
    return project_id, endpoint.id


async def _events(store: LmdbStore, actor: WebhookActor, clock: Clock, project_id: str,
                  *, per_second: int, seconds: int) -> None:
    """``per_second`` click events each second (recorded, then dispatched)."""
    rng = random.Random(seconds)
    for _ in range(seconds):
        now = clock.now_ms()
        batch = [OutboxEvent(id=str(uuid.UUID(bytes=rng.randbytes(16), version=4)),
                             type=EventType.CLICK,
                             project_id=project_id, mode="test", created_at_ms=now,
                             data={"n": n}) for n in range(per_second)]

        def record(txn: lmdb.Transaction, batch: list[OutboxEvent] = batch) -> None:
            for event in batch:
                store.append_outbox(txn, event)

        await store.write(record)
        while (await actor.tick()).dispatched:
            pass
        await trio.sleep(1)


async def _stored(actor: WebhookActor, project_id: str) -> list[Delivery]:
    """Every delivery of the project as committed, oldest first."""
    await actor.settle()
    found = actor.tables.recent(project_id, Mode.TEST, limit=1_000_000)
    return sorted(found, key=lambda d: d.id)


async def _open_and_busy(actor: WebhookActor) -> tuple[list[Delivery], set[str]]:
    """The open deliveries as committed (an attempt in flight reads waiting) and
    those the actor holds (ready or in flight), at one moment: read inside the
    actor, after its writes have committed."""

    async def look() -> tuple[list[Delivery], set[str]]:
        await actor.settle()
        found = actor.tables.open_deliveries()
        return found, {d.id for d in found if actor.is_busy(d.id)}

    result: tuple[list[Delivery], set[str]] = await actor.call(look)
    return result


def _deadlines(store: LmdbStore) -> set[str]:
    return {d.ref for d in store.load_deadlines() if d.kind == ATTEMPT_DEADLINE}


async def _hung_backlog(store: LmdbStore, actor: WebhookActor, clock: Clock,
                        project_id: str, *, per_second: int = 100, seconds: int = 30) -> int:
    """3,000 events in 30 s (by default) to the hung endpoint, left between
    two rounds of attempts; returns how many."""
    await _events(store, actor, clock, project_id, per_second=per_second, seconds=seconds)
    await trio.sleep(LIMIT_S / 2)  # between two rounds of attempts
    return per_second * seconds


@attrs.frozen
class Backlog:
    actor: WebhookActor
    receiver: HungEndpoint
    clock: TrioWallClock
    project_id: str
    endpoint_id: str
    count: int


@asynccontextmanager
async def hung_backlog(store: LmdbStore) -> AsyncIterator[Backlog]:
    """A running actor whose one endpoint hangs, after ``_hung_backlog``."""
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, endpoint_id = await _world(store, actor, clock)
        count = await _hung_backlog(store, actor, clock, project_id)
        yield Backlog(actor, receiver, clock, project_id, endpoint_id, count)


async def _all_delivered(actor: WebhookActor, receiver: HungEndpoint, project_id: str,
                         count: int) -> list[Delivery]:
    """Wait (virtually) until ``count`` deliveries are Delivered; check each was
    delivered once, and every attempt the store records was made once."""
    for _ in range(48):
        await trio.sleep(3600)
        if actor.statistics().delivered >= count:
            break
    stored = await _stored(actor, project_id)
    assert len(stored) == count
    assert Counter(d.status for d in stored) == {DeliveryStatus.DELIVERED: count}
    assert actor.tables.open_deliveries() == []
    assert set(receiver.delivered) == {d.id for d in stored}
    assert set(receiver.delivered.values()) == {1}
    assert receiver.twice_at_once == []
    return stored


def _in_order_but_for(times: list[int], window: int) -> bool:
    """Whether every time is at most each time ``window`` or more places later."""
    suffix_min = times[:]
    for i in range(len(times) - 2, -1, -1):
        suffix_min[i] = min(times[i], suffix_min[i + 1])
    most = times[0]
    for i in range(len(times) - window):
        most = max(most, times[i])
        if most > suffix_min[i + window]:
            return False
    return True


def _assert_no_deadline_work(store: LmdbStore, work: DeadlineWork, actor: WebhookActor,
                             left_behind: set[str], in_flight: int = 1) -> None:
    """No deadline armed for the backlog; only those ``left_behind`` fired or
    went; the endpoint overflowed, its attempts running, its queue capped."""
    assert work.armed == 0
    assert work.fired <= len(left_behind)
    assert work.removed <= len(left_behind)
    assert _deadlines(store) <= left_behind
    stats = actor.statistics()
    # hung: its attempts time out, so one at a time (actors/webhook_queue.py), once one has
    assert stats.endpoints_overflowed == 1 and stats.in_flight == in_flight
    assert stats.ready <= READY_PER_ENDPOINT


def _assert_oldest_first(stored: list[Delivery], receiver: HungEndpoint, attempted: int,
                         count: int) -> None:
    """The deliveries first attempted after a restart or turn on (the
    receiver's attempts past ``attempted``) went in the store's order, but for
    the order in which the senders took them."""
    rank = {d.id: n for n, d in enumerate(stored)}
    firsts = [rank[i] for i in _first_attempts_since(receiver, attempted)]
    assert len(firsts) == count - len({job.delivery_id for job in receiver.attempts[:attempted]})
    assert _in_order_but_for(firsts, PER_ENDPOINT)


@pytest.fixture
async def backlog(store: LmdbStore, peak: dict[str, int]) -> AsyncIterator[Backlog]:
    """``hung_backlog`` for a test that keeps its actor running throughout
    (the test also requests autojump_clock)."""
    async with hung_backlog(store) as b:
        yield b


async def test_a_hung_endpoint_holds_at_most_the_cap_in_memory(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    b = backlog
    actor, receiver, endpoint_id, count = b.actor, b.receiver, b.endpoint_id, b.count
    stats = actor.statistics()
    assert stats.deliveries_created == count
    assert peak[endpoint_id] <= READY_PER_ENDPOINT
    assert stats.ready <= READY_PER_ENDPOINT and stats.in_flight == 1  # hung: one at a time
    assert stats.endpoints_overflowed == 1
    # Every delivery is in the store, waiting; those the actor does not
    # hold wait there only (no deadline for the timer to fire).
    stored, busy = await _open_and_busy(actor)
    assert len(stored) == count
    assert {d.status for d in stored} <= {DeliveryStatus.QUEUED, DeliveryStatus.RETRYING}
    armed = _deadlines(store)
    waiting = [d for d in stored if d.id not in busy]
    assert len(waiting) >= count - READY_PER_ENDPOINT - PER_ENDPOINT
    assert all(d.status is DeliveryStatus.QUEUED and d.id not in armed
               for d in waiting if not d.attempts)
    # Hours hung, no more events: the queue runs down (an attempt a 10 s
    # timeout, with the retries come due) and is read back from the store
    # (beyond the first thousand), never above the cap.
    await trio.sleep(6 * 3600)
    assert peak[endpoint_id] <= READY_PER_ENDPOINT
    assert len(receiver.first_attempts()) > READY_PER_ENDPOINT + PER_ENDPOINT
    assert receiver.delivered == Counter() and receiver.twice_at_once == []


async def test_a_read_back_run_late_fills_only_the_room_the_queue_has_then(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    """A read-back is asked for when the endpoint's queue runs low, and runs
    later, as a call at the back of the actor's mailbox: the calls ahead of
    it (retries come due, older than the backlog) may have filled the queue
    again by then. It takes what room is left at its run (three quarters of
    the cap, less what is queued), not the room there was at the ask: here
    the queue is full when the call runs, so it takes nothing, and nothing is
    lost (every delivery still goes, once)."""
    b = backlog
    actor, receiver, endpoint_id = b.actor, b.receiver, b.endpoint_id
    assert actor.statistics().endpoints_overflowed == 1

    async def refill_now() -> tuple[int, int]:
        before = actor._queue.ready_of(endpoint_id)
        await actor._refill(endpoint_id)  # as the mailbox runs a queued refill
        return before, actor._queue.ready_of(endpoint_id)

    before, after = await actor.call(refill_now)
    assert before >= READY_PER_ENDPOINT - PER_ENDPOINT  # full again (but for what started)
    assert after <= READY_PER_ENDPOINT and after <= before
    assert peak[endpoint_id] <= READY_PER_ENDPOINT
    assert actor.statistics().endpoints_overflowed == 1  # the rest still waits in the store
    receiver.hung = False
    await _all_delivered(actor, receiver, b.project_id, b.count)
    assert peak[endpoint_id] <= READY_PER_ENDPOINT


async def test_once_it_answers_every_delivery_goes_once_oldest_first(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    b = backlog
    actor, receiver, clock = b.actor, b.receiver, b.clock
    project_id, endpoint_id, count = b.project_id, b.endpoint_id, b.count
    assert actor.statistics().endpoints_overflowed == 1
    receiver.hung = False
    # Events keep coming while the backlog drains.
    await _events(store, actor, clock, project_id, per_second=50, seconds=20)
    stored = await _all_delivered(actor, receiver, project_id, count + 1_000)
    assert peak[endpoint_id] <= READY_PER_ENDPOINT
    stats = actor.statistics()
    assert stats.endpoints_overflowed == 0 and stats.ready == 0
    # Each attempt the store records was made, and no other.
    assert sum(len(d.attempts) for d in stored) == len(receiver.attempts)
    # Oldest first: first attempts go in order of the deliveries' creation,
    # but for the order in which the 8 of the endpoint's senders pick them up.
    created = {d.id: d.created_at_ms for d in stored}
    firsts = [created[i] for i in receiver.first_attempts()]
    assert len(firsts) == count + 1_000
    assert _in_order_but_for(firsts, PER_ENDPOINT)


async def test_a_second_backlog_after_the_first_drained_is_read_back_too(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    """The read-back that reached the end of the endpoint's store ended its
    turn: when the endpoint hangs again and overflows again, its new
    backlog is read back as the queue runs down, not left in the store."""
    b = backlog
    actor, receiver, clock, project_id = b.actor, b.receiver, b.clock, b.project_id
    receiver.hung = False
    await _all_delivered(actor, receiver, project_id, b.count)
    assert actor.statistics().endpoints_overflowed == 0
    receiver.hung = True
    again = await _hung_backlog(store, actor, clock, project_id, seconds=15)
    assert again > READY_PER_ENDPOINT and actor.statistics().endpoints_overflowed == 1
    receiver.hung = False
    await _all_delivered(actor, receiver, project_id, b.count + again)
    assert peak[b.endpoint_id] <= READY_PER_ENDPOINT
    assert actor.statistics().endpoints_overflowed == 0


async def test_a_read_back_whose_held_writes_fail_is_asked_for_again(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-back first commits the actor's held writes; when the store
    refuses them, that read-back ends there, and the next one is asked for
    as the queue runs down: the backlog is not left in the store."""
    b = backlog
    actor = b.actor
    settle = actor._writes.settle
    refused: list[str] = []

    async def refused_for_the_first_read_back() -> None:
        caller = sys._getframe(1).f_code.co_name
        if caller == "_refill" and not refused:
            refused.append(caller)
            raise StorageUnavailable("storage error: no space left on device (test)")
        await settle()

    monkeypatch.setattr(actor._writes, "settle", refused_for_the_first_read_back)
    b.receiver.hung = False
    await _all_delivered(actor, b.receiver, b.project_id, b.count)
    assert refused == ["_refill"] and actor.statistics().endpoints_overflowed == 0


async def test_a_read_back_that_finds_its_endpoint_off_ends_its_turn(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The endpoint is turned off while its read-back waits in the mailbox
    (the turn off was asked first): the read-back finds nothing to read and
    ends its turn, so once the endpoint is on again, and has overflowed
    again, its backlog is read back as its queue runs down."""
    b = backlog
    actor, endpoint_id = b.actor, b.endpoint_id
    refill = actor._refill
    raced: list[str] = []

    async def after_a_turn_off(asked_for: str) -> None:
        if raced:
            await refill(asked_for)
            return
        raced.append(asked_for)
        nursery.start_soon(functools.partial(  # asks the mailbox
            _switch, actor, b.project_id, endpoint_id, on=False))
        await trio.testing.wait_all_tasks_blocked()  # ... and waits there
        actor.mailbox.call_nowait(functools.partial(refill, asked_for))  # behind it

    monkeypatch.setattr(actor, "_refill", after_a_turn_off)
    async with trio.open_nursery() as nursery:
        b.receiver.hung = False  # the queue runs down: a read-back is asked for
        await trio.sleep(60)
    assert raced == [endpoint_id] and actor.endpoint(endpoint_id).is_off  # type: ignore[union-attr]
    await _switch(actor, b.project_id, endpoint_id, on=True)
    assert actor.statistics().endpoints_overflowed == 1
    await _all_delivered(actor, b.receiver, b.project_id, b.count)


async def test_a_restart_with_a_backlog_in_the_store_delivers_it_all(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    async with hung_backlog(store) as b:
        actor, receiver, clock = b.actor, b.receiver, b.clock
        project_id, endpoint_id, count = b.project_id, b.endpoint_id, b.count
        assert actor.statistics().endpoints_overflowed == 1
    # Stopped with 8 attempts cut off and the rest waiting, most without deadlines.
    receiver.hung = False
    async with running(store, clock, receiver) as again:
        await _all_delivered(again, receiver, project_id, count)
        assert peak[endpoint_id] <= READY_PER_ENDPOINT


async def _resend_waiting(b: Backlog) -> str:
    """A test event sent to the hung endpoint (it answers those at once),
    then its Resend, answered Sending and waiting behind the hung attempt
    in flight; the delivery's id."""
    view = await webhook_admin.send_test(b.actor, b.project_id, Mode.TEST, b.endpoint_id, None)
    await trio.sleep(LIMIT_S)  # the attempt in flight times out: the test goes
    assert b.receiver.delivered == Counter({view.delivery.id: 1})
    again = await webhook_admin.send_again(b.actor, b.project_id, Mode.TEST, view.delivery.id,
                                           "resend", None)
    assert again.delivery.status is DeliveryStatus.SENDING
    return view.delivery.id


async def test_a_resend_answered_before_a_restart_goes_first_after_it(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """A Resend answered Sending, waiting behind the hung endpoint's attempt
    when the service stopped, goes first after the restart: ahead of the
    backlog the restart queues, as it was before the stop."""
    async with hung_backlog(store) as b:
        receiver, clock = b.receiver, b.clock
        resent = await _resend_waiting(b)
    before = len(receiver.attempts)
    receiver.hung = False
    async with running(store, clock, receiver) as restarted:
        await trio.testing.wait_all_tasks_blocked()
        # the first round of attempts starts it (in the order the senders take them)
        first_round = [job.delivery_id for job in receiver.attempts[before:]][:PER_ENDPOINT]
        assert resent in first_round
        assert receiver.delivered[resent] == 2
        [d] = [d for d in await _stored(restarted, b.project_id) if d.id == resent]
    assert d.status is DeliveryStatus.DELIVERED
    assert [a.trigger for a in d.attempts] == ["scheduled", "manual"]  # a test, then the Resend


@attrs.define
class DeadlineWork:
    """Attempt deadlines written, removed and fired (``deadline_work``)."""

    armed: int = 0
    removed: int = 0
    fired: int = 0
    idle: int = 0  # fired for a delivery already queued or in flight: nothing to do

    def reset(self) -> None:
        self.armed = self.removed = self.fired = self.idle = 0


@pytest.fixture
def deadline_work(monkeypatch: pytest.MonkeyPatch) -> DeadlineWork:
    """Counts every attempt deadline written to or removed from the store (in
    any transaction), and every one the timer fires (``reset`` starts over)."""
    work = DeadlineWork()
    put, delete = LmdbStore.put_deadline, LmdbStore.delete_deadline
    fire = WebhookActor._on_attempt_deadline

    def counted_put(self: LmdbStore, txn: lmdb.Transaction, d: Deadline) -> None:
        work.armed += d.kind == ATTEMPT_DEADLINE
        put(self, txn, d)

    def counted_delete(self: LmdbStore, txn: lmdb.Transaction, d: Deadline) -> None:
        work.removed += d.kind == ATTEMPT_DEADLINE
        delete(self, txn, d)

    def counted_fire(self: WebhookActor, d: Deadline) -> None:
        work.fired += 1
        work.idle += self._queue.is_busy(d.ref)
        fire(self, d)

    monkeypatch.setattr(LmdbStore, "put_deadline", counted_put)
    monkeypatch.setattr(LmdbStore, "delete_deadline", counted_delete)
    monkeypatch.setattr(WebhookActor, "_on_attempt_deadline", counted_fire)
    return work


def _first_attempts_since(receiver: HungEndpoint, since: int) -> list[str]:
    """Deliveries first attempted from attempt number ``since`` on, in that order."""
    seen = {job.delivery_id for job in receiver.attempts[:since]}
    out = []
    for job in receiver.attempts[since:]:
        if job.delivery_id not in seen:
            seen.add(job.delivery_id)
            out.append(job.delivery_id)
    return out


async def test_a_restart_costs_no_deadline_work_for_the_backlog_left_in_the_store(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int], deadline_work: DeadlineWork) -> None:
    """A backlog ten times the cap: the restart queues the oldest due
    deliveries up to the cap and leaves the rest in the store, overflowed,
    writing no deadline for them and firing none (not one deadline per
    waiting delivery, written, fired, and removed again by the cap). Then
    every delivery goes once, oldest first."""
    count = 10 * READY_PER_ENDPOINT
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, endpoint_id = await _world(store, actor, clock)
        await _hung_backlog(store, actor, clock, project_id, per_second=count // 20, seconds=20)
        assert actor.statistics().deliveries_created == count
    # Stopped: 8 attempts cut off, the cap's worth ready; the rest in the store.
    armed_at_stop = _deadlines(store)
    assert len(armed_at_stop) <= READY_PER_ENDPOINT + 4 * PER_ENDPOINT
    await trio.sleep(2 * 60)  # down for two minutes: the first retries come due
    work = deadline_work
    work.reset()
    attempted = len(receiver.attempts)
    async with running(store, clock, receiver) as again:
        await trio.sleep(LIMIT_S / 2)  # no attempt has ended yet
        # Nothing armed; only deadlines the stop left behind fired or went,
        # and none for a delivery the restart queued (its deadline went then).
        # (a restarted actor has seen no attempt time out yet: all 8 of the endpoint's)
        _assert_no_deadline_work(store, work, again, armed_at_stop, in_flight=PER_ENDPOINT)
        assert work.idle == 0 and work.removed > 0
        receiver.hung = False
        stored = await _all_delivered(again, receiver, project_id, count)
    assert peak[endpoint_id] <= READY_PER_ENDPOINT
    _assert_oldest_first(stored, receiver, attempted, count)


async def test_a_restart_below_growth_keeps_the_backlog_in_the_store(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    """The plan lapsed while the service was down: the restart parks at most
    what had a deadline (not the whole backlog, in memory), sends nothing;
    when the plan returns, the backlog is read back and delivered."""
    async with hung_backlog(store) as b:
        actor, receiver, clock = b.actor, b.receiver, b.clock
        project_id, endpoint_id, count = b.project_id, b.endpoint_id, b.count
        assert actor.statistics().endpoints_overflowed == 1
    armed_at_stop = _deadlines(store)
    project = store.get_project(project_id)
    assert project is not None
    await store.set_plan(project.org_id, Plan.STARTER)
    attempted = len(receiver.attempts)
    receiver.hung = False
    async with running(store, clock, receiver) as again:
        await trio.sleep(3 * 3600)
        assert len(receiver.attempts) == attempted  # nothing sent below Growth
        stats = again.statistics()
        assert stats.parked_by_plan <= len(armed_at_stop) < READY_PER_ENDPOINT + 4 * PER_ENDPOINT
        assert stats.ready == 0 and stats.endpoints_overflowed == 1
        await store.set_plan(project.org_id, Plan.GROWTH)
        await again.tick()
        await _all_delivered(again, receiver, project_id, count)
        assert peak[endpoint_id] <= READY_PER_ENDPOINT


async def test_off_then_on_delivers_the_backlog(
        backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    b = backlog
    actor, receiver, project_id, endpoint_id = b.actor, b.receiver, b.project_id, b.endpoint_id
    count = b.count
    await webhook_admin.set_enabled(actor, project_id, Mode.TEST, endpoint_id, False, None)
    stats = actor.statistics()
    assert stats.endpoints_overflowed == 0 and stats.ready == 0
    await trio.sleep(3600)  # the cut-off attempts time out; their retries park
    assert actor.statistics().in_flight == 0 and receiver.delivered == Counter()
    receiver.hung = False
    await webhook_admin.set_enabled(actor, project_id, Mode.TEST, endpoint_id, True, None)
    await _all_delivered(actor, receiver, project_id, count)
    assert peak[endpoint_id] <= READY_PER_ENDPOINT


async def _switch(actor: WebhookActor, project_id: str, endpoint_id: str, *,
                  on: bool) -> Endpoint:
    return await webhook_admin.set_enabled(actor, project_id, Mode.TEST, endpoint_id, on, None)


async def test_turning_on_costs_no_deadline_work_for_the_backlog_left_in_the_store(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int], deadline_work: DeadlineWork) -> None:
    """A backlog ten times the cap waits while its endpoint is Off. Turning
    it on queues the oldest due deliveries up to the cap and leaves the rest
    in the store, overflowed, writing no deadline for them and firing none
    (not one deadline per waiting delivery, written, fired, and removed again
    by the cap). Those left show the turn-on time as their next attempt; then
    every delivery goes once, oldest first."""
    count = 10 * READY_PER_ENDPOINT
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, endpoint_id = await _world(store, actor, clock)
        await _hung_backlog(store, actor, clock, project_id, per_second=count // 20, seconds=20)
        assert actor.statistics().deliveries_created == count
        await _switch(actor, project_id, endpoint_id, on=False)
        await trio.sleep(3600)  # the cut-off attempts time out; retries due meanwhile park
        assert actor.statistics().in_flight == 0
        # What the turn off left armed: the ready queue it dropped, retries not due yet.
        armed_while_off = _deadlines(store)
        assert len(armed_while_off) <= READY_PER_ENDPOINT + 4 * PER_ENDPOINT
        work = deadline_work
        work.reset()
        attempted = len(receiver.attempts)
        endpoint = await _switch(actor, project_id, endpoint_id, on=True)
        turned_on = endpoint.accepting_since_ms
        await trio.sleep(LIMIT_S / 2)  # no attempt has ended yet
        # Nothing armed; only deadlines the turn off left behind fired or went.
        _assert_no_deadline_work(store, work, actor, armed_while_off)
        # Left in the store (not held by the actor, no deadline): due from
        # the turn on, as the API and the dashboard show it.
        stored, busy = await _open_and_busy(actor)
        armed = _deadlines(store)
        left = [d for d in stored if d.id not in busy and d.id not in armed]
        assert len(left) >= count - READY_PER_ENDPOINT - len(armed_while_off) - PER_ENDPOINT
        for d in left:
            assert d.next_attempt_at_ms is not None and d.next_attempt_at_ms < turned_on
            assert next_attempt_at_ms(d, endpoint) == turned_on
            assert delivery_summary_json(d, endpoint)["nextAttemptAt"] == iso_utc_ms(turned_on)
        receiver.hung = False
        stored = await _all_delivered(actor, receiver, project_id, count)
    assert peak[endpoint_id] <= READY_PER_ENDPOINT
    _assert_oldest_first(stored, receiver, attempted, count)


async def test_a_turn_on_whose_write_fails_part_way_brings_the_rest_back_later(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The store cannot write while a turn-on brings the backlog back (the
    write of its second page of ten, after that page's queue changes were
    made; nothing is left overflowed for a read-back to find the rest from):
    the endpoint is on all the same, and a later tick, once the store writes
    again, brings back the rest (not the next restart), even when that tick's
    own dispatch fails; every delivery then goes once."""
    b = backlog
    actor, receiver = b.actor, b.receiver
    await _switch(actor, b.project_id, b.endpoint_id, on=False)
    await trio.sleep(3600)
    monkeypatch.setattr(webhooks, "RECOVER_PAGE", 10)
    pages, down = 0, True
    bring_back_page = actor._bring_back_page

    def failing_writes(found: list[Delivery], now_ms: int, plans: dict[str, bool]
                       ) -> tuple[Op[None] | None, list[Deadline]]:
        nonlocal pages
        pages += 1
        op, armed = bring_back_page(found, now_ms, plans)
        if not (down and pages >= 2):
            return op, armed

        def refused(txn: lmdb.Transaction) -> None:
            raise StorageUnavailable("storage error: no space left on device (test)")

        return refused, armed

    monkeypatch.setattr(actor, "_bring_back_page", failing_writes)
    endpoint = await _switch(actor, b.project_id, b.endpoint_id, on=True)
    assert not endpoint.is_off and pages == 2
    assert actor._rearm_pending == {b.endpoint_id}
    await actor.tick()  # the store still cannot write: still pending
    assert actor._rearm_pending == {b.endpoint_id}
    down = False
    dispatch = actor._dispatch

    async def dispatch_refused(batch: list[tuple[bytes, OutboxEvent]]) -> int:
        raise StorageUnavailable("storage error: map full (test)")

    monkeypatch.setattr(actor, "_dispatch", dispatch_refused)
    with pytest.raises(StorageUnavailable):
        await actor.tick()
    assert actor._rearm_pending == set()  # brought back though the tick's dispatch failed
    monkeypatch.setattr(actor, "_dispatch", dispatch)
    receiver.hung = False
    await _all_delivered(actor, receiver, b.project_id, b.count)


async def test_turning_on_below_growth_keeps_the_backlog_in_the_store(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int], deadline_work: DeadlineWork) -> None:
    """The plan lapsed while the endpoint was Off: turning it on parks at
    most what had a deadline (not the whole backlog, in memory), arms
    nothing, sends nothing; when the plan returns, the backlog is read back
    and delivered."""
    b = backlog
    actor, receiver = b.actor, b.receiver
    await _switch(actor, b.project_id, b.endpoint_id, on=False)
    await trio.sleep(3600)
    project = store.get_project(b.project_id)
    assert project is not None
    await store.set_plan(project.org_id, Plan.STARTER)
    armed_while_off = _deadlines(store)
    deadline_work.reset()
    attempted = len(receiver.attempts)
    receiver.hung = False
    await _switch(actor, b.project_id, b.endpoint_id, on=True)
    await trio.sleep(3 * 3600)
    assert len(receiver.attempts) == attempted  # nothing sent below Growth
    assert deadline_work.armed == 0
    stats = actor.statistics()
    assert stats.parked_by_plan <= len(armed_while_off) < READY_PER_ENDPOINT + 4 * PER_ENDPOINT
    assert stats.ready == 0 and stats.endpoints_overflowed == 1
    await store.set_plan(project.org_id, Plan.GROWTH)
    await actor.tick()
    await _all_delivered(actor, receiver, b.project_id, b.count)
    assert peak[b.endpoint_id] <= READY_PER_ENDPOINT


async def test_a_manual_send_to_a_full_endpoint_goes_first(
        backlog: Backlog, autojump_clock: trio.testing.MockClock) -> None:
    b = backlog
    actor, receiver, project_id, endpoint_id = b.actor, b.receiver, b.project_id, b.endpoint_id
    stats = actor.statistics()
    assert stats.endpoints_overflowed == 1 and stats.in_flight == 1  # hung: one at a time
    before = len(receiver.attempts)
    view = await webhook_admin.send_test(actor, project_id, Mode.TEST, endpoint_id, None)
    assert actor.statistics().ready == stats.ready + 1  # not refused
    await trio.sleep(LIMIT_S)  # a sender of the endpoint comes free
    # In the first round of attempts the endpoint starts after it.
    next_round = [job.delivery_id for job in receiver.attempts[before:]][:PER_ENDPOINT]
    assert view.delivery.id in next_round
    assert receiver.delivered == Counter({view.delivery.id: 1})
    [d] = [d for d in await _stored(actor, project_id) if d.id == view.delivery.id]
    assert d.status is DeliveryStatus.DELIVERED and len(d.attempts) == 1
    assert attempt_deadline(d) is None


async def test_a_resend_waiting_when_its_endpoint_is_turned_off_is_dropped(
        backlog: Backlog, autojump_clock: trio.testing.MockClock) -> None:
    """A Resend answers Sending and waits behind the hung endpoint's attempt
    in flight; turning the endpoint off then drops it as a restart would
    (nothing may be sent there): it is settled back to Delivered, as its
    last attempt says, not left Sending."""
    b = backlog
    resent = await _resend_waiting(b)
    await _switch(b.actor, b.project_id, b.endpoint_id, on=False)
    [d] = [d for d in await _stored(b.actor, b.project_id) if d.id == resent]
    assert d.status is DeliveryStatus.DELIVERED and len(d.attempts) == 1
    await trio.sleep(3600)
    assert b.receiver.delivered == Counter({resent: 1})


async def test_manual_attempts_waiting_for_a_hung_endpoint_are_bounded(
        backlog: Backlog, autojump_clock: trio.testing.MockClock) -> None:
    """Send test goes first and past the queue's cap, but only so many may
    wait: a test a second to a hung endpoint grew its queue without end."""
    b = backlog
    actor, project_id, endpoint_id = b.actor, b.project_id, b.endpoint_id
    ready = actor.statistics().ready
    for _ in range(MANUAL_WAITING):
        await webhook_admin.send_test(actor, project_id, Mode.TEST, endpoint_id, None)
    with pytest.raises(Conflict, match="waiting to be sent"):
        await webhook_admin.send_test(actor, project_id, Mode.TEST, endpoint_id, None)
    assert actor.statistics().ready == ready + MANUAL_WAITING
    await trio.sleep(LIMIT_S)  # the attempt in flight times out: a test starts
    await webhook_admin.send_test(actor, project_id, Mode.TEST, endpoint_id, None)


# -- the queue's rules alone (actors/webhook_queue.py), no event loop ------------------

def _d(n: int, endpoint: str = "a") -> Delivery:
    return wd.new_delivery(f"d{n:04}", endpoint, f"e{n}", "click", Mode.LIVE, 1000 + n)


def test_past_its_cap_the_queue_refuses_and_remembers_the_oldest_refused() -> None:
    q = SendQueue(senders=1, per_endpoint=1, ready_cap=4)
    assert [q.add(_d(n)) for n in (10, 20, 30, 40, 50, 60)] == [True] * 4 + [False] * 2
    assert q.ready_of("a") == 4 and q.overflowed == 1 and q.overflow_from("a") == "d0050"
    assert not q.is_busy("d0050")  # left to the store
    assert not q.add(_d(45))  # older than the refused, but no room: read from there
    assert q.overflow_from("a") == "d0045"
    assert q.add(_d(99, "b"))  # other endpoints are not held back


def test_while_overflowed_newer_waits_behind_older_goes_ahead_manual_never_refused() -> None:
    q = SendQueue(senders=1, per_endpoint=1, ready_cap=4)
    for n in (10, 20, 30, 40, 50):
        q.add(_d(n))
    d10 = next(q.startable())
    q.started(d10, wd.begin_attempt(d10))
    assert q.ready_of("a") == 3
    assert not q.add(_d(60))  # newer than the backlog in the store: behind it
    assert q.add(_d(5))  # a retry come due, older than the backlog: there is room
    assert not q.add(_d(7))  # full again
    assert q.add(_d(70), front=True) and q.ready_of("a") == 5  # a manual attempt
    assert q.overflow_from("a") == "d0007"


def test_a_read_back_is_asked_once_when_the_queue_runs_low_until_it_ends() -> None:
    q = SendQueue(senders=8, per_endpoint=8, ready_cap=8)  # read back at 2, up to 6
    for n in range(10):
        q.add(_d(n))
    assert q.refills_due() == []
    started = [d for d in q.startable()]
    for d in started:
        q.started(d, wd.begin_attempt(d))
    assert q.ready_of("a") == 0 and q.room("a") == 6
    assert q.refills_due() == ["a"] and q.refills_due() == []  # asked once
    for n in (8, 9):
        q.take_back(_d(n))
    q.refilled("a", None)  # read to the end of the store
    q.refill_ended("a")
    assert q.overflowed == 0 and q.refills_due() == []
    assert q.add(_d(11))  # queued directly again


def test_a_read_back_that_stopped_partway_goes_on_from_where_it_stopped() -> None:
    q = SendQueue(senders=1, per_endpoint=1, ready_cap=2)
    for n in range(6):
        q.add(_d(n))
    assert q.overflow_from("a") == "d0002"
    q.refilled("a", "d0004")  # read d0002-d0003 back, stopped before d0004
    assert q.overflow_from("a") == "d0004" and q.overflowed == 1
    q.drop_ready("a")  # the endpoint went away during a read-back
    q.refilled("a", "d0005")  # that read-back's end does not bring it back
    assert q.overflow_from("a") is None and q.overflowed == 0


def test_dropping_an_endpoint_forgets_its_overflow() -> None:
    q = SendQueue(senders=1, per_endpoint=1, ready_cap=2)
    for n in range(3):
        q.add(_d(n))
    assert q.overflowed == 1
    q.drop_ready("a")
    assert q.overflowed == 0 and q.overflow_from("a") is None
    assert q.add(_d(5))


def test_a_delivery_left_in_the_store_overflows_its_endpoint_without_being_queued() -> None:
    q = SendQueue(senders=1, per_endpoint=1, ready_cap=4)
    q.leave(attrs.evolve(_d(30), next_attempt_at_ms=5_000))
    q.leave(_d(20))
    assert q.ready_of("a") == 0 and not q.is_busy("d0020") and q.overflow_from("a") == "d0020"
    assert q.due_by("a", 1_000) == 5_000  # due when left: read back as due
    assert not q.add(_d(40))  # newer waits behind it
    assert q.add(_d(10)) and q.refills_due() == ["a"]


async def test_a_plan_lapse_keeps_the_backlog_in_the_store(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock,
        peak: dict[str, int]) -> None:
    """Below Growth nothing is read back (it would only be parked, in memory,
    a page after another until the whole backlog was there); when the plan
    returns, the backlog is read back and delivered."""
    b = backlog
    project = store.get_project(b.project_id)
    assert project is not None
    await store.set_plan(project.org_id, Plan.STARTER)
    attempted = len(b.receiver.attempts)
    await trio.sleep(3 * 3600)
    assert len(b.receiver.attempts) == attempted  # nothing sent below Growth
    # Parked: what was ready or in flight when the plan went; the rest waits in the store.
    assert b.actor.statistics().parked_by_plan <= READY_PER_ENDPOINT + 2 * PER_ENDPOINT
    b.receiver.hung = False
    await store.set_plan(project.org_id, Plan.GROWTH)
    await b.actor.tick()
    await _all_delivered(b.actor, b.receiver, b.project_id, b.count)
    assert peak[b.endpoint_id] <= READY_PER_ENDPOINT


async def test_an_endpoint_deleted_while_its_deliveries_are_parked_is_forgotten(
        store: LmdbStore, backlog: Backlog, autojump_clock: trio.testing.MockClock) -> None:
    """Deliveries parked for the plan whose endpoint is then deleted (with
    its history): when the plan returns there is nothing left to resume,
    and the tick that finds so does not fail."""
    b = backlog
    project = store.get_project(b.project_id)
    assert project is not None
    await store.set_plan(project.org_id, Plan.STARTER)
    await trio.sleep(3600)
    assert b.actor.statistics().parked_by_plan > 0
    await webhook_admin.delete_endpoint(b.actor, b.project_id, Mode.TEST, b.endpoint_id, None)
    await store.set_plan(project.org_id, Plan.GROWTH)
    await b.actor.tick()
    assert b.actor.statistics().parked_by_plan == 0
    assert b.actor.mailbox.statistics().failed == 0
    assert await _stored(b.actor, b.project_id) == []


async def test_a_wall_clock_stepped_back_strands_no_delivery(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """A refused delivery has no deadline left: after the clock steps back,
    the read-back still takes it as due (it was), not as waiting for a
    deadline it no longer has."""
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, _ = await _world(store, actor, clock)
        count = await _hung_backlog(store, actor, clock, project_id)
        clock.offset_ms = -120_000  # two minutes back
        receiver.hung = False
        await _all_delivered(actor, receiver, project_id, count)


async def test_a_restart_after_the_wall_clock_stepped_back_strands_no_delivery(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """Deliveries left in the store (no deadline) were due; after a restart
    with the clock two minutes back some are not due any more: they get a
    deadline again, and every delivery still goes once."""
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, _ = await _world(store, actor, clock)
        count = await _hung_backlog(store, actor, clock, project_id)
    clock.offset_ms = -120_000
    receiver.hung = False
    async with running(store, clock, receiver) as again:
        await _all_delivered(again, receiver, project_id, count)


async def test_a_turn_on_after_the_wall_clock_stepped_back_strands_no_delivery(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """Deliveries left in the store (no deadline) were due; turned on after
    the clock stepped back 20 s, the newer half of the backlog is not due
    any more: those get a deadline again, written and handed to the timer,
    the rest go through the cap; every delivery still goes once."""
    clock = TrioWallClock(BASE)
    receiver = HungEndpoint(clock)
    async with running(store, clock, receiver) as actor:
        project_id, endpoint_id = await _world(store, actor, clock)
        count = await _hung_backlog(store, actor, clock, project_id)
        await _switch(actor, project_id, endpoint_id, on=False)
        clock.offset_ms = -20_000
        receiver.hung = False
        await _switch(actor, project_id, endpoint_id, on=True)
        stored, _ = await _open_and_busy(actor)
        now = clock.now_ms()
        assert sum(1 for d in stored if not wd.is_due(d, now)) > READY_PER_ENDPOINT
        await _all_delivered(actor, receiver, project_id, count)


def _take_all(q: SendQueue, project_of: Callable[[str], str | None] = lambda _: None,
              ) -> list[Delivery]:
    """Start every delivery the caps allow now (as the actor does)."""
    taken = []
    for d in q.startable(project_of):
        q.started(d, d, project_of(d.endpoint_id))
        taken.append(d)
    return taken


def test_a_hung_endpoint_keeps_one_attempt_in_flight_until_it_answers() -> None:
    q = SendQueue(senders=32, per_endpoint=8)
    for n in range(40):
        q.add(_d(n, "a"))
    first = _take_all(q)
    assert len(first) == 8 and q.allowance("a") == 8
    q.finished(first[0].id, "a")
    q.answered("a", hung=True)  # a timeout
    assert q.allowance("a") == 1 and _take_all(q) == []  # 7 still in flight
    for d in first[1:]:
        q.finished(d.id, "a")
        q.answered("a", hung=True)
    assert len(_take_all(q)) == 1
    # it answers again: the allowance doubles back (2, 4, 8)
    for want in (2, 4, 8):
        q.answered("a", hung=False)
        assert q.allowance("a") == want
    q.forget("a")
    assert q.allowance("a") == 8


def test_one_project_leaves_a_quarter_of_the_senders_to_the_others() -> None:
    q = SendQueue(senders=32, per_endpoint=8)
    project = {f"a{i}": "A" for i in range(5)} | {"b0": "B"}
    for e, endpoint in enumerate(project):
        for n in range(10):
            q.add(_d(e * 100 + n, endpoint))
    taken = _take_all(q, project.get)
    per_project = Counter(project[d.endpoint_id] for d in taken)
    assert per_project == Counter({"A": 24, "B": 8})
    # A's attempts ending free its share, not more
    for d in [d for d in taken if project[d.endpoint_id] == "A"][:3]:
        q.finished(d.id, d.endpoint_id)
    assert Counter(project[d.endpoint_id] for d in _take_all(q, project.get)) == Counter({"A": 3})


def test_one_sender_serves_a_project_one_attempt_at_a_time() -> None:
    q = SendQueue(senders=1, per_endpoint=1)  # three quarters of 1: still 1
    for n in range(2):
        q.add(_d(n, "a"))
    assert [d.id for d in _take_all(q, lambda _: "A")] == ["d0000"]
    q.finished("d0000", "a")
    assert [d.id for d in _take_all(q, lambda _: "A")] == ["d0001"]
