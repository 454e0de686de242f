"""The WebhookActor's writes (actors/webhook_writes.py) on a real LMDB store:
held changes are shown at once and committed together; an attempt in flight
is shown Sending while the store keeps the waiting state and its deadline;
every other write comes after what is held; the flusher's timing; a failed
write falls back to the store's state, and failures are logged further and
further apart; a state queued but not committed is shown, and a newer state
outlives the commit of an older one (the writer held shut by a ``Gate``)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any, cast

import lmdb
import pytest
import trio
import trio.testing

from actors.webhook_writes import FLUSH_WINDOW_S, ActorWrites, Changes
from storage import layout
from storage.codec import decode
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import WebhookStore, attempt_deadline
from svc_engine import webhook_delivery as wd
from svc_engine import webhook_records as records
from svc_engine.errors import Conflict
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import validate_endpoint
from svc_engine.webhook_retry import classify_response

PROJECT = "6f1c3a52-8f7e-4c1b-9a55-0c2d3e4f5a6b"
ENDPOINT = "0b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e6f"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
T0 = 1_800_000_000_000


class Owner:
    """An ActorWrites over ``store``, with the WebhookStore it makes prefer it."""

    def __init__(self, store: LmdbStore) -> None:
        self.store = store
        self.tables = WebhookStore(store)
        self.reloads = 0
        self.writes = ActorWrites(store, self.tables, self._reload)

    async def _reload(self) -> None:
        self.reloads += 1

    def stored(self, delivery_id: str) -> Delivery:
        """The committed record, read past the preference."""
        with self.store.read() as txn:
            raw = txn.get(layout.uid(delivery_id), db=self.store.db(b"deliveries"))
        assert raw is not None
        return decode(Delivery, bytes(raw))

    def deadlines(self) -> set[Any]:
        return set(self.store.load_deadlines())

    def open_keys(self) -> list[bytes]:
        with self.store.read() as txn:
            return [bytes(k) for k in txn.cursor(db=self.store.db(b"deliveries_open"))
                    .iternext(values=False)]


def _delivery(n: int = 1) -> Delivery:
    return wd.new_delivery(wd.new_delivery_id(T0 + n, bytes(10)), ENDPOINT,
                           f"{n:08d}-0000-4000-8000-000000000000", "click", Mode.LIVE, T0 + n)


def _delivered(sending: Delivery) -> Delivery:
    return wd.record_attempt(sending, classify_response(204, None, 3),
                             started_at_ms=T0 + 10, finished_at_ms=T0 + 13)


async def _seed(owner: Owner, *ds: Delivery) -> None:
    def op(txn: lmdb.Transaction) -> None:
        for d in ds:
            owner.tables.add_delivery(txn, PROJECT, d)

    await owner.store.write(op)


async def test_an_attempt_in_flight_is_shown_sending_and_stored_waiting(
        store: LmdbStore) -> None:
    owner = Owner(store)
    d = _delivery()
    await _seed(owner, d)
    sending = wd.begin_attempt(d)
    owner.writes.in_flight(sending)
    assert owner.tables.delivery(d.id) == sending
    assert [x.status for x in owner.tables.recent(PROJECT, Mode.LIVE)] == [
        DeliveryStatus.SENDING]
    assert owner.tables.recent(PROJECT, Mode.LIVE, status=DeliveryStatus.SENDING) == [sending]
    # What a crash now would leave: the waiting delivery and its deadline.
    assert owner.stored(d.id) == d
    assert attempt_deadline(d) in owner.deadlines()
    assert owner.tables.open_deliveries() == [d]


async def test_held_results_are_shown_at_once_and_committed_together(
        store: LmdbStore) -> None:
    owner = Owner(store)
    ds = [_delivery(n) for n in range(3)]
    await _seed(owner, *ds)
    changes = Changes()
    results = []
    for d in ds:
        sending = wd.begin_attempt(d)
        owner.writes.in_flight(sending)
        results.append(_delivered(sending))
        changes.save(d, results[-1])
    owner.writes.apply(changes)
    assert [owner.tables.delivery(d.id) for d in ds] == results
    assert all(owner.stored(d.id).status is DeliveryStatus.QUEUED for d in ds)
    await owner.writes.settle()
    assert [owner.stored(d.id) for d in ds] == results
    assert owner.deadlines() == set() and owner.open_keys() == []
    assert owner.writes.flushes == 1
    assert all(owner.writes.newer(layout.uid(d.id)) is None for d in ds)  # nothing kept


async def test_every_other_write_comes_after_what_is_held(store: LmdbStore) -> None:
    owner = Owner(store)
    d = _delivery()
    await _seed(owner, d)
    changes = Changes()
    changes.save(d, _delivered(wd.begin_attempt(d)))
    owner.writes.apply(changes)

    def seen(txn: lmdb.Transaction) -> DeliveryStatus:
        raw = txn.get(layout.uid(d.id), db=store.db(b"deliveries"))
        assert raw is not None
        return decode(Delivery, bytes(raw)).status

    assert await owner.writes.write(seen) is DeliveryStatus.DELIVERED


async def test_endpoint_health_is_shown_then_written_once_in_its_latest_state(
        store: LmdbStore) -> None:
    owner = Owner(store)
    endpoint = records.new_endpoint(ENDPOINT, PROJECT, Mode.LIVE,
                                    validate_endpoint("https://hooks.example/in"), SECRET, T0)
    await store.write(lambda txn: owner.tables.put_endpoint(txn, endpoint))
    first = records.record_outcome(endpoint, False, T0 + 1)
    latest = records.record_outcome(first, True, T0 + 2)
    for health in (first, latest):
        changes = Changes()
        changes.endpoint(health)
        owner.writes.apply(changes)
    assert owner.tables.endpoint(PROJECT, Mode.LIVE, ENDPOINT) == latest
    assert owner.tables.endpoints(PROJECT, Mode.LIVE) == [latest]
    assert owner.tables.all_endpoints() == [endpoint]  # committed state only
    await owner.writes.settle()
    assert owner.tables.all_endpoints() == [latest]
    assert owner.writes.newer_endpoint(ENDPOINT) is None


async def test_held_changes_wait_for_the_window_and_are_written_when_stopped(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    owner = Owner(store)
    ds = [_delivery(n) for n in range(2)]
    await _seed(owner, *ds)
    async with trio.open_nursery() as n:
        await n.start(owner.writes.run)
        changes = Changes()
        changes.save(ds[0], _delivered(wd.begin_attempt(ds[0])))
        owner.writes.apply(changes)
        await trio.sleep(FLUSH_WINDOW_S / 2)
        assert owner.stored(ds[0].id).status is DeliveryStatus.QUEUED
        await trio.sleep(FLUSH_WINDOW_S)
        await trio.testing.wait_all_tasks_blocked()
        assert owner.stored(ds[0].id).status is DeliveryStatus.DELIVERED
        changes = Changes()
        changes.save(ds[1], _delivered(wd.begin_attempt(ds[1])))
        owner.writes.apply(changes)
        n.cancel_scope.cancel()
    await store.write(lambda txn: None)  # the writer is FIFO
    assert owner.stored(ds[1].id).status is DeliveryStatus.DELIVERED


async def test_a_failed_write_falls_back_to_the_stored_state(store: LmdbStore) -> None:
    owner = Owner(store)
    d = _delivery()
    await _seed(owner, d)
    changes = Changes()
    changes.save(d, _delivered(wd.begin_attempt(d)))

    def refuse(txn: lmdb.Transaction) -> None:
        raise Conflict("refused")

    changes.op(refuse)  # the whole op fails: its child transaction is aborted
    owner.writes.apply(changes)
    await owner.writes.settle()
    assert owner.tables.delivery(d.id) == d == owner.stored(d.id)
    await owner.writes.write(lambda txn: None)
    assert owner.writes.failures == 1 and owner.reloads == 1


async def test_forgetting_an_attempt_in_flight_shows_the_store_again(
        store: LmdbStore) -> None:
    owner = Owner(store)
    d = _delivery()
    await _seed(owner, d)
    sending = wd.begin_attempt(d)
    owner.writes.in_flight(sending)
    owner.writes.forget(wd.begin_attempt(d))  # another attempt's state: kept
    assert owner.tables.delivery(d.id) == sending
    owner.writes.forget(sending)
    assert owner.tables.delivery(d.id) == d


async def test_open_deliveries_read_a_page_at_a_time(store: LmdbStore) -> None:
    owner = Owner(store)
    other = "7a6b5c4d-3e2f-4a1b-8c9d-0e1f2a3b4c5d"
    mine = [_delivery(n) for n in range(1, 8)]
    theirs = [wd.new_delivery(wd.new_delivery_id(T0 + n, bytes(10)), other,
                              f"{n:08d}-0000-4000-8000-000000000001", "click", Mode.LIVE, T0 + n)
              for n in range(1, 3)]
    await _seed(owner, *mine, *theirs)
    for endpoint_id in (None, ENDPOINT, other):
        pages: list[list[Delivery]] = []
        after: bytes | None = None
        while True:
            page, after = owner.tables.open_deliveries_page(after, 3, endpoint_id)
            pages.append(page)
            if after is None:
                break
        assert [d for p in pages for d in p] == owner.tables.open_deliveries(endpoint_id)
        assert all(len(p) <= 3 for p in pages)
    assert len(owner.tables.open_deliveries(ENDPOINT)) == 7
    page, after = owner.tables.open_deliveries_page(None, 7, ENDPOINT)
    assert len(page) == 7 and after is None  # exactly a page: no empty page after it


# -- what is shown while a write is queued but not committed ------------------------------


def _retrying(d: Delivery) -> Delivery:
    """``d`` after a failed first attempt: a retry scheduled."""
    return wd.record_attempt(wd.begin_attempt(d), classify_response(500, None, 3),
                             started_at_ms=T0 + 10, finished_at_ms=T0 + 13)


class Gate:
    """An op that holds the store's writer (and every op queued after it)
    until ``open``; the writer runs ops in its own thread."""

    def __init__(self) -> None:
        self._event = threading.Event()

    async def close(self, store: LmdbStore) -> None:
        await store.submit(lambda txn: self._event.wait(10))

    def open(self) -> None:
        self._event.set()


async def test_a_queued_state_is_shown_until_its_write_commits(store: LmdbStore) -> None:
    owner = Owner(store)
    d = _delivery()
    await _seed(owner, d)
    gate = Gate()
    await gate.close(store)
    changes = Changes()
    done = _delivered(wd.begin_attempt(d))
    changes.save(d, done)
    owner.writes.apply(changes)
    queued = await owner.writes.submit(lambda txn: None)  # queues what is held first
    assert not queued.done and owner.writes.flushes == 1
    assert owner.tables.delivery(d.id) == done and owner.stored(d.id) == d
    assert owner.writes.pending() == {layout.uid(d.id): done}
    gate.open()
    await owner.writes.settle()
    assert owner.stored(d.id) == done and owner.writes.pending() == {}


async def test_a_newer_state_outlives_the_commit_of_an_older_one(store: LmdbStore) -> None:
    """The queue of written ops is trimmed when the next is queued: what an
    op that committed wrote is forgotten, not a newer state of the same
    delivery or endpoint that is still held or queued."""
    owner = Owner(store)
    d = _delivery()
    await _seed(owner, d)
    endpoint = records.new_endpoint(ENDPOINT, PROJECT, Mode.LIVE,
                                    validate_endpoint("https://hooks.example/in"), SECRET, T0)
    await store.write(lambda txn: owner.tables.put_endpoint(txn, endpoint))
    failing, healthy = (records.record_outcome(endpoint, False, T0 + 1),
                        records.record_outcome(endpoint, True, T0 + 2))
    first = Changes()
    retrying = _retrying(d)
    first.save(d, retrying)
    first.endpoint(failing)
    owner.writes.apply(first)
    await owner.writes.settle()
    assert owner.stored(d.id) == retrying
    gate = Gate()
    await gate.close(store)
    second = Changes()
    done = _delivered(wd.begin_attempt(retrying))
    second.save(retrying, done)
    second.endpoint(healthy)
    owner.writes.apply(second)
    await owner.writes.submit(lambda txn: None)  # trims the first op, queues the second
    assert owner.stored(d.id) == retrying and owner.tables.all_endpoints() == [failing]
    assert owner.tables.delivery(d.id) == done
    assert owner.tables.endpoint(PROJECT, Mode.LIVE, ENDPOINT) == healthy
    gate.open()
    await owner.writes.settle()
    assert owner.stored(d.id) == done and owner.tables.all_endpoints() == [healthy]


class Interleaved:
    """The store, as ActorWrites sees it, with ``during`` run once while an op
    is being queued: what the actor's other task may do at that checkpoint."""

    def __init__(self, store: LmdbStore, during: Callable[[], None]) -> None:
        self._store = store
        self._during: Callable[[], None] | None = during

    async def submit(self, op: Any) -> Any:
        p = await self._store.submit(op)
        if self._during is not None:
            during, self._during = self._during, None
            during()
        return p


async def test_a_state_made_while_held_ones_are_queued_is_kept_until_written(
        store: LmdbStore) -> None:
    tables = WebhookStore(store)
    d = _delivery()
    endpoint = records.new_endpoint(ENDPOINT, PROJECT, Mode.LIVE,
                                    validate_endpoint("https://hooks.example/in"), SECRET, T0)

    def seed(txn: lmdb.Transaction) -> None:
        tables.add_delivery(txn, PROJECT, d)
        tables.put_endpoint(txn, endpoint)

    await store.write(seed)
    retrying = _retrying(d)
    done = _delivered(wd.begin_attempt(retrying))
    failing, healthy = (records.record_outcome(endpoint, False, T0 + 1),
                        records.record_outcome(endpoint, True, T0 + 2))
    later = Changes()
    later.save(retrying, done)
    later.endpoint(healthy)

    async def reload() -> None:
        pass

    writes = ActorWrites(cast(LmdbStore, Interleaved(store, lambda: writes.apply(later))),
                         tables, reload)
    first = Changes()
    first.save(d, retrying)
    first.endpoint(failing)
    writes.apply(first)
    gate = Gate()
    await gate.close(store)
    await writes.submit(lambda txn: None)  # queues ``first``; ``later`` is made meanwhile
    gate.open()
    await store.write(lambda txn: None)  # ``first`` committed; ``later`` still held
    assert tables.delivery(d.id) == done
    assert tables.endpoint(PROJECT, Mode.LIVE, ENDPOINT) == healthy
    await writes.settle()
    assert tables.delivery(d.id) == done and tables.all_endpoints() == [healthy]


async def test_the_flusher_queues_held_changes_after_the_last_ones_committed(
        store: LmdbStore) -> None:
    owner = Owner(store)
    ds = [_delivery(n) for n in range(2)]
    await _seed(owner, *ds)
    writes = ActorWrites(store, owner.tables, owner._reload, window_s=0)
    gate = Gate()
    async with trio.open_nursery() as n:
        await n.start(writes.run)
        await gate.close(store)
        for d in ds:
            changes = Changes()
            changes.save(d, _delivered(wd.begin_attempt(d)))
            writes.apply(changes)
            await trio.testing.wait_all_tasks_blocked()
        assert writes.flushes == 1  # the second waits for the first to commit
        gate.open()
        await store.write(lambda txn: None)
        await trio.testing.wait_all_tasks_blocked()
        assert writes.flushes == 2
        n.cancel_scope.cancel()
    await store.write(lambda txn: None)
    assert [owner.stored(d.id).status for d in ds] == [DeliveryStatus.DELIVERED] * 2


async def test_failed_writes_are_logged_first_then_further_apart(
        store: LmdbStore, caplog: pytest.LogCaptureFixture) -> None:
    owner = Owner(store)

    def refuse(txn: lmdb.Transaction) -> None:
        raise Conflict("refused")

    with caplog.at_level(logging.ERROR, logger="svc.webhooks"):
        for _ in range(8):  # each failure is counted when the next write is queued
            await owner.writes.submit(refuse)
            await store.write(lambda txn: None)
        await owner.writes.submit(lambda txn: None)
    lines = [r.getMessage() for r in caplog.records if r.name == "svc.webhooks"]
    assert owner.writes.failures == 8 and owner.reloads == 8
    assert [line.split("(")[1] for line in lines] == [
        "1 failed so far)", "3 failed so far)", "7 failed so far)"]
