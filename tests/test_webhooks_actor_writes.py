"""The WebhookActor's cheaper paths keep their promises: event bodies served
from memory or read back from the store are the same bytes; an attempt in
flight reads Sending while the store keeps what a crash must find (the
waiting delivery and its deadline); held, coalesced state writes leave every
delivery in its final state."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio
import trustme

from actors import event_bodies
from actors.clock import SystemClock
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import attempt_deadline
from svc_engine.webhook_delivery import DeliveryStatus
from tests.conftest import App, running_app
from tests.webhook_receiver_fixture import (
    Receiver,
    add_endpoint,
    deliveries_of,
    emit,
    make_ca,
    running_receiver,
    webhook_config,
)
from web.webhook_receiver import Received, Reply


@pytest.fixture
async def live(store: LmdbStore, data_dir: str, tmp_path: Path
               ) -> AsyncIterator[tuple[App, Receiver]]:
    ca: tuple[trustme.CA, str] = make_ca(tmp_path)
    clock = SystemClock()
    async with running_receiver(ca[0], clock) as receiver, \
            running_app(store, webhook_config(data_dir, ca[1]), clock) as app:
        yield app, receiver


async def _all_final(app: App, event_ids: list[str]) -> None:
    with trio.fail_after(20):
        while True:
            found = [d for e in event_ids for d in deliveries_of(app, e)]
            if len(found) == len(event_ids) and all(
                    d.status is DeliveryStatus.DELIVERED for d in found):
                return
            await trio.sleep(0.01)


@pytest.fixture(params=[event_bodies.MAX_BYTES, 1], ids=["memory", "store"])
def body_cache(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> int:
    """The body cache's size, set before the service (and its actor) starts."""
    monkeypatch.setattr(event_bodies, "MAX_BYTES", request.param)
    return int(request.param)


async def test_bodies_from_memory_or_the_store_are_the_bytes_sent(
        body_cache: int, live: tuple[App, Receiver]) -> None:
    app, receiver = live
    await add_endpoint(app, receiver.url)
    events = [await emit(app, "click", data={"n": n}) for n in range(5)]
    await _all_final(app, [e.id for e in events])
    sent = {json.loads(h.request.body)["id"]: json.loads(h.request.body) for h in receiver.hits}
    assert set(sent) == {e.id for e in events}
    assert {e.id: sent[e.id]["data"] for e in events} == {e.id: {"n": n}
                                                           for n, e in enumerate(events)}
    tables = app.services.webhooks.tables  # type: ignore[union-attr]
    for e in events:
        [d] = deliveries_of(app, e.id)
        stored = tables.event(app.project_id, d.mode, e.id)
        assert stored is not None
        assert [h.request.body for h in receiver.hits if h.webhook_id == d.id] == [stored.body]


async def test_a_burst_ends_with_every_delivery_delivered_once(
        live: tuple[App, Receiver]) -> None:
    app, receiver = live
    await add_endpoint(app, receiver.url)
    await add_endpoint(app, receiver.url)  # two endpoints: interleaved reports and starts
    events = [await emit(app, "open", data={"n": n}) for n in range(60)]
    ids = [e.id for e in events]
    with trio.fail_after(20):
        while True:
            found = [d for e in ids for d in deliveries_of(app, e)]
            if len(found) == 120 and all(d.status is DeliveryStatus.DELIVERED for d in found):
                break
            await trio.sleep(0.01)
    assert app.services.webhooks is not None
    await app.services.webhooks.settle()  # the held results are committed
    assert all(len(d.attempts) == 1 for d in found)
    assert sorted(receiver.ids()) == sorted(d.id for d in found)
    assert app.services.webhooks.tables.open_deliveries() == []  # none left open


async def test_an_attempt_in_flight_reads_sending_and_is_stored_waiting(
        live: tuple[App, Receiver]) -> None:
    app, receiver = live
    actor = app.services.webhooks
    assert actor is not None
    release = trio.Event()

    async def held_back(req: Received, n: int) -> Reply:
        await release.wait()
        return 204, [], b""

    receiver.respond = held_back
    await add_endpoint(app, receiver.url)
    event = await emit(app, "click")
    await receiver.wait_for(1)
    [d] = deliveries_of(app, event.id)
    async with app.client("sk_test") as c:
        shown = (await c.get(f"/v1/webhooks/deliveries/{d.id}")).json()
        listed = (await c.get("/v1/webhooks/deliveries", params={"status": "Sending"})).json()
    assert shown["status"] == "Sending" and [r["id"] for r in listed["data"]] == [d.id]
    # The store holds what a crash now must find: waiting, due, with its deadline.
    await actor.settle()
    [stored] = actor.tables.open_deliveries()
    assert stored.id == d.id and stored.status is DeliveryStatus.QUEUED
    deadline = attempt_deadline(stored)
    assert deadline is not None and deadline in app.services.store.load_deadlines()
    release.set()
    await _all_final(app, [event.id])
    await actor.settle()
    assert actor.tables.open_deliveries() == []
    assert deadline not in app.services.store.load_deadlines()
