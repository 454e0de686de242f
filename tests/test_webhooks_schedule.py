"""Webhook timing under trio's autojump clock, over real HTTPS to a local
receiver: the retry schedule at exact virtual times (Retry-After or not), the automatic
turn-off rule at its edges, turning off and on, the plan gap, manual retry and
resend, the 30-day purge, and retries surviving a restart."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme

from actors.clock import TrioWallClock
from actors.event_bodies import ENTRY_BYTES
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import ATTEMPT_DEADLINE, WebhookStore
from svc_engine.config import Config
from svc_engine.keys import Mode
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.plans import Plan
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_records import Endpoint
from tests.conftest import App, running_app
from tests.webhook_receiver_fixture import (
    World,
    add_endpoint,
    autojump_world,
    deliveries_of,
    emit,
    failing_endpoint,
    make_ca,
    ok,
    running_receiver,
    status,
    until,
    webhook_config,
)
from web.webhook_receiver import Received, Reply

MIN = 60_000
HOUR = 60 * MIN
DAY = 24 * HOUR
SCHEDULE = [0, MIN, 6 * MIN, 36 * MIN, 2 * HOUR + 36 * MIN, 8 * HOUR + 36 * MIN,
            20 * HOUR + 36 * MIN]
EP = "/v1/webhooks/endpoints"
DL = "/v1/webhooks/deliveries"


@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    return make_ca(tmp_path)


@pytest.fixture
def wconfig(data_dir: str, ca: tuple[trustme.CA, str]) -> Config:
    return webhook_config(data_dir, ca[1])


@pytest.fixture
async def world(store: LmdbStore, wconfig: Config, ca: tuple[trustme.CA, str]
                ) -> AsyncIterator[World]:
    async with autojump_world(store, wconfig, ca[0]) as w:
        yield w


async def _settle() -> None:
    await trio.testing.wait_all_tasks_blocked()


def _endpoint(app: App, endpoint_id: str) -> Endpoint:
    assert app.services.webhooks is not None
    e = app.services.webhooks.endpoint(endpoint_id)
    assert e is not None
    return e


async def _lose_off_checks(store: LmdbStore) -> None:
    """The streaks' turn-off deadlines gone (lost, or held up behind a busy
    mailbox): the rule is then applied when the endpoint is next looked at."""
    for d in store.load_deadlines():
        if d.kind == "webhook_off_check":
            await store.remove_deadline(d)


def _one(app: App, event_id: str) -> Delivery:
    [d] = deliveries_of(app, event_id)
    return d


async def test_retry_schedule_runs_at_exact_times_then_fails(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world)
    event = await emit(app, "click")
    await until(clock, t0 + SCHEDULE[-1] - 1)
    assert _one(app, event.id).status is DeliveryStatus.RETRYING
    await until(clock, t0 + 2 * DAY)
    assert [t - t0 for t in receiver.times()] == SCHEDULE
    assert len(set(receiver.ids())) == 1  # webhook-id constant across retries
    d = _one(app, event.id)
    assert receiver.ids()[0] == d.id
    assert d.status is DeliveryStatus.FAILED and len(d.attempts) == 7
    assert [a.started_at_ms - t0 for a in d.attempts] == SCHEDULE
    health = _endpoint(app, ep["id"]).health
    assert health.state.value == "Failing" and health.consecutive_failures == 7
    assert health.streak_started_at_ms == t0
    # Each attempt was signed when it was made.
    stamps = [int(h.headers["webhook-timestamp"]) for h in receiver.hits]
    assert stamps == [(t0 + s) // 1000 for s in SCHEDULE]


async def test_retry_after_does_not_move_the_schedule(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    """SPEC's schedule whatever the receiver asks: a longer Retry-After was
    honoured (up to a day each time, stretching the 21 hours to days)."""
    app, receiver, clock = world

    async def respond(req: Received, n: int) -> Reply:
        after = {1: "600", 2: "86400", 3: "5"}.get(n)
        return (503, [("retry-after", after)], b"") if after else (204, [], b"")

    receiver.respond = respond
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    event = await emit(app, "open")
    await until(clock, t0 + HOUR)
    assert [t - t0 for t in receiver.times()] == SCHEDULE[:4]
    assert _one(app, event.id).status is DeliveryStatus.DELIVERED
    assert app.services.webhooks is not None
    stats = app.services.webhooks.statistics()  # what /metrics counts
    assert (stats.events_dispatched, stats.deliveries_created) == (1, 1)
    assert (stats.attempts, stats.failed_attempts, stats.delivered) == (4, 3, 1)
    assert stats.report_calls == 4  # the attempts were minutes apart: a call each
    # the body sent was kept in memory from the dispatch (no store read an attempt)
    assert stats.body_cache_bytes == len(receiver.hits[0].request.body) + ENTRY_BYTES


async def test_automatic_off_needs_at_least_20_failures(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world)
    await emit(app, "click")
    await emit(app, "click")  # 14 failures by 20h36m, the first at t0
    late = t0 + DAY + MIN
    await until(clock, late)
    await emit(app, "click")  # failures 15..19 at late+0, 1m, 6m, 36m, 2h36m
    await until(clock, late + 8 * HOUR + 36 * MIN - 1)
    health = _endpoint(app, ep["id"]).health
    assert health.consecutive_failures == 19 and health.state.value == "Failing"
    await until(clock, late + 8 * HOUR + 36 * MIN)  # the 20th failure
    health = _endpoint(app, ep["id"]).health
    assert health.state.value == "Off" and health.off_reason == "automatic"
    assert health.off_at_ms == late + 8 * HOUR + 36 * MIN
    assert "20 failed attempts" in health.off_detail
    await until(clock, late + 2 * DAY)
    assert len(receiver.hits) == 20  # nothing more is sent while Off
    async with app.client("sk_test") as c:
        shown = (await c.get(f"{EP}/{ep['id']}")).json()
    assert shown["status"] == "Off" and shown["health"]["offBy"] == "automatic"
    assert "24 hours" in shown["health"]["offReason"]


async def test_automatic_off_needs_the_first_failure_more_than_24_hours_old(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, _, clock = world
    ep, t0 = await failing_endpoint(world)
    for _ in range(3):
        await emit(app, "click")  # 21 failures, all within 20h36m
    await until(clock, t0 + DAY)
    assert _endpoint(app, ep["id"]).health.consecutive_failures == 21
    await emit(app, "click")  # a failure exactly 24 h after the first: not more than 24 h
    await _settle()
    health = _endpoint(app, ep["id"]).health
    assert health.consecutive_failures == 22 and health.state.value == "Failing"
    await until(clock, t0 + DAY + 1)
    await emit(app, "click")  # 24 h and 1 ms: Off
    await _settle()
    health = _endpoint(app, ep["id"]).health
    assert health.state.value == "Off" and health.off_at_ms == t0 + DAY + 1


async def test_any_success_ends_the_streak(world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world, clicks=4)
    await until(clock, t0 + 23 * HOUR)
    assert _endpoint(app, ep["id"]).health.consecutive_failures == 28  # 4 x 7, under 24 h
    assert _endpoint(app, ep["id"]).health.state.value == "Failing"
    receiver.respond = ok
    await emit(app, "click")
    await _settle()
    health = _endpoint(app, ep["id"]).health
    assert health.state.value == "Active" and health.consecutive_failures == 0
    assert health.last_success_at_ms == t0 + 23 * HOUR


async def test_a_streak_whose_first_failure_passes_24_hours_is_off_without_another_attempt(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    """21 failures end by 20h36m; nothing is attempted after. Once the first
    is more than 24 h old the rule holds: the endpoint is Off as of that
    moment, 24 h and 1 ms after the first failure, and the next event is not
    queued (it occurred while the endpoint was Off)."""
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world, clicks=3)
    await until(clock, t0 + 30 * HOUR)
    assert len(receiver.hits) == 21
    assert _endpoint(app, ep["id"]).health.state.value == "Off"  # by the streak's deadline
    late = await emit(app, "click")
    await until(clock, t0 + 40 * HOUR)
    assert len(receiver.hits) == 21 and deliveries_of(app, late.id) == []
    health = _endpoint(app, ep["id"]).health
    assert (health.state.value, health.off_reason) == ("Off", "automatic")
    assert health.off_at_ms == t0 + DAY + 1 and "21 failed attempts" in health.off_detail
    async with app.client("sk_test") as c:
        shown = (await c.get(f"{EP}/{ep['id']}")).json()
    assert shown["status"] == "Off" and shown["health"]["offBy"] == "automatic"


async def test_the_rule_turns_the_endpoint_off_when_it_holds_not_at_the_next_event(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    """20 failures within 24 hours, then a retry due after the 24 hours: the
    rule held at 24 h and 1 ms, but the endpoint was judged again only at the
    next failure or event, so it showed Failing, and the retry went out
    (healing it, had the receiver recovered). Now the streak's own deadline
    turns it Off at that moment, and nothing more is sent."""
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world, clicks=3)  # 21 failures by 20h36m
    await until(clock, t0 + 10 * HOUR)
    waiting = await emit(app, "click")  # its attempts go on to 30h36m
    await until(clock, t0 + DAY)
    assert _endpoint(app, ep["id"]).health.state.value == "Failing"
    await until(clock, t0 + DAY + 1)
    health = _endpoint(app, ep["id"]).health
    assert (health.state.value, health.off_reason, health.off_at_ms) == (
        "Off", "automatic", t0 + DAY + 1)
    async with app.client("sk_test") as c:
        shown = (await c.get(f"{EP}/{ep['id']}")).json()
    assert shown["status"] == "Off" and shown["health"]["offBy"] == "automatic"
    hits = len(receiver.hits)
    receiver.respond = ok
    await until(clock, t0 + 2 * DAY)
    assert len(receiver.hits) == hits  # the retry due at 30h36m was not sent
    assert _one(app, waiting.id).status is DeliveryStatus.RETRYING
    assert _endpoint(app, ep["id"]).health.state.value == "Off"
    assert not app.services.store.deadline_kinds({"webhook_off_check"})


async def test_the_streak_s_check_gives_up_the_ready_queue_at_its_moment(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    """Events just before the turn-off moment: eight attempts in flight (the
    receiver takes five seconds to answer 500), four waiting in the ready
    queue. When the rule holds, mid-attempt, the endpoint is Off and its
    ready queue is forgotten then, not when the attempts in flight report;
    the four are never sent."""
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world, clicks=3)  # 21 failures by 20h36m

    async def slow_500(req: Received, n: int) -> Reply:
        await trio.sleep(5)
        return 500, [], b""

    await until(clock, t0 + DAY - 2_000)
    receiver.respond = slow_500
    late = [await emit(app, "click") for _ in range(12)]
    await until(clock, t0 + DAY - 1_000)
    assert app.services.webhooks is not None
    stats = app.services.webhooks.statistics()
    assert (stats.in_flight, stats.ready) == (8, 4)
    await until(clock, t0 + DAY + 1_000)
    assert _endpoint(app, ep["id"]).health.off_at_ms == t0 + DAY + 1
    stats = app.services.webhooks.statistics()
    assert (stats.in_flight, stats.ready) == (8, 0)
    await until(clock, t0 + 2 * DAY)
    assert len(receiver.hits) == 21 + 8
    waiting = [e for e in late if _one(app, e.id).status is DeliveryStatus.QUEUED]
    assert len(waiting) == 4 and all(not _one(app, e.id).attempts for e in waiting)


async def test_a_deleted_endpoint_s_retry_deadline_fires_harmlessly(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    """Deleting an endpoint removes its deliveries and their deadlines from
    the store; the timer may still hold one. When it fires, it finds no
    delivery and does nothing: the actor does not fail on it."""
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world, clicks=1)  # fails at t0, next try at 1 min
    await until(clock, t0 + 10_000)
    assert app.services.store.deadline_kinds({ATTEMPT_DEADLINE})
    async with app.client("sk_test") as c:
        assert (await c.delete(f"{EP}/{ep['id']}")).status_code == 200
    assert not app.services.store.deadline_kinds({ATTEMPT_DEADLINE})
    await until(clock, t0 + 10 * MIN)
    assert app.services.webhooks is not None
    mailbox = app.services.webhooks.mailbox.statistics()
    assert mailbox.failed == 0 and mailbox.handled > 0
    assert len(receiver.hits) == 1


async def test_a_success_before_the_streak_s_moment_keeps_the_endpoint_on(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world, clicks=3)
    await until(clock, t0 + 22 * HOUR)
    assert app.services.store.deadline_kinds({"webhook_off_check"})
    receiver.respond = ok
    await emit(app, "click")
    await until(clock, t0 + 2 * DAY)
    health = _endpoint(app, ep["id"]).health
    assert health.state.value == "Active" and health.consecutive_failures == 0
    assert not app.services.store.deadline_kinds({"webhook_off_check"})


async def test_turn_off_and_on(world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world)
    waiting = await emit(app, "click")  # fails at t0, Retrying (next at 1 min)
    await until(clock, t0 + 10_000)
    async with app.client("sk_test") as c:
        assert (await c.post(f"{EP}/{ep['id']}/disable")).json()["status"] == "Off"
    await until(clock, t0 + 20_000)
    while_off = await emit(app, "click")
    await until(clock, t0 + 5 * MIN)
    assert len(receiver.hits) == 1  # the retry due at 1 min waited
    assert deliveries_of(app, while_off.id) == []  # never queued
    receiver.respond = ok
    async with app.client("sk_test") as c:
        on = (await c.post(f"{EP}/{ep['id']}/enable")).json()
    assert on["status"] == "Active" and on["health"]["consecutiveFailures"] == 0
    await _settle()
    assert [t - t0 for t in receiver.times()] == [0, 5 * MIN]  # resumed at once
    assert _one(app, waiting.id).status is DeliveryStatus.DELIVERED
    after = await emit(app, "click")
    await _settle()
    assert _one(app, after.id).status is DeliveryStatus.DELIVERED
    await until(clock, t0 + DAY)
    assert deliveries_of(app, while_off.id) == [] and len(receiver.hits) == 3


async def test_plan_gap_is_never_sent_and_waiting_deliveries_hold(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world

    async def respond(req: Received, n: int) -> Reply:
        return (500 if n == 2 else 204), [], b""

    receiver.respond = respond
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    first = await emit(app, "click")  # hit 1: delivered
    await _settle()
    held = await emit(app, "click")  # hit 2: fails, retry due at t0 + 1 min
    await _settle()
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    gap = await emit(app, "click")
    await until(clock, t0 + 3 * MIN)
    assert len(receiver.hits) == 2 and deliveries_of(app, gap.id) == []
    assert _one(app, held.id).status is DeliveryStatus.RETRYING
    await app.services.store.set_plan(app.org_id, Plan.GROWTH)
    back = clock.now_ms()
    await until(clock, back + 2_000)
    assert len(receiver.hits) == 3 and back <= receiver.times()[2] <= back + 1_000
    assert _one(app, held.id).status is DeliveryStatus.DELIVERED
    after = await emit(app, "click")
    await until(clock, back + DAY)
    ids = [d.id for e in (first, held, after) for d in deliveries_of(app, e.id)]
    assert sorted(set(receiver.ids())) == sorted(ids)
    assert deliveries_of(app, gap.id) == []  # the gap is never sent later


async def test_manual_retry_and_resend_are_sent_immediately(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    receiver.respond = status(500)
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    event = await emit(app, "conversion")
    await until(clock, t0 + DAY)
    d = _one(app, event.id)
    assert d.status is DeliveryStatus.FAILED
    async with app.client("sk_test") as c:
        assert (await c.post(f"{DL}/{d.id}/retry")).json()["status"] == "Sending"
        await _settle()
        assert receiver.times()[-1] == t0 + DAY and len(receiver.hits) == 8
        assert _one(app, event.id).status is DeliveryStatus.FAILED  # no automatic retries
        await until(clock, t0 + 3 * DAY)
        assert len(receiver.hits) == 8
        receiver.respond = ok
        await c.post(f"{DL}/{d.id}/retry")
        await _settle()
        assert _one(app, event.id).status is DeliveryStatus.DELIVERED
        assert receiver.times()[-1] == t0 + 3 * DAY
        r = await c.post(f"{DL}/{d.id}/resend")
        assert r.status_code == 200
        await _settle()
    assert len(receiver.hits) == 10 and set(receiver.ids()) == {d.id}
    final = _one(app, event.id)
    assert final.status is DeliveryStatus.DELIVERED
    assert [a.trigger for a in final.attempts] == ["scheduled"] * 7 + ["manual"] * 3


async def test_history_is_purged_after_30_days(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    old = await emit(app, "click")
    await until(clock, t0 + 15 * DAY)
    newer = await emit(app, "click")
    await until(clock, t0 + 30 * DAY - 1)
    assert len(deliveries_of(app, old.id)) == 1
    await until(clock, t0 + 30 * DAY + HOUR)  # swept within the hour after its 30 days
    assert deliveries_of(app, old.id) == [] and len(deliveries_of(app, newer.id)) == 1
    assert app.services.webhooks is not None
    tables = app.services.webhooks.tables
    kept = deliveries_of(app, newer.id)[0]
    assert tables.event(app.project_id, kept.mode, old.id) is None
    assert tables.event(app.project_id, kept.mode, newer.id) is not None
    assert app.services.webhooks.statistics().purged == 1


async def test_one_sweep_purges_every_expired_delivery_batch_by_batch(
        world: World, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """More expired deliveries than a batch (5,000 a write; 3 here): the sweep
    goes on to the next batch, so a busy service never falls behind its
    30 days of history."""
    monkeypatch.setattr("actors.webhook_history.PURGE_BATCH", 3)
    app, receiver, clock = world
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    old = [await emit(app, "click") for _ in range(7)]
    await until(clock, t0 + 30 * DAY - 1)
    assert all(len(deliveries_of(app, e.id)) == 1 for e in old)
    await until(clock, t0 + 30 * DAY + HOUR)  # one sweep after their 30 days
    assert [e.id for e in old if deliveries_of(app, e.id)] == []
    assert app.services.webhooks is not None
    assert app.services.webhooks.statistics().purged == 7


async def test_retries_survive_a_restart(store: LmdbStore, wconfig: Config,
                                         ca: tuple[trustme.CA, str],
                                         autojump_clock: trio.testing.MockClock,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Five deliveries; the restart reads them two per page (RECOVER_PAGE).
    monkeypatch.setattr("actors.webhooks.RECOVER_PAGE", 2)
    clock = TrioWallClock()
    async with running_receiver(ca[0], clock) as receiver:
        receiver.respond = status(500)
        async with running_app(store, wconfig, clock) as app:
            await add_endpoint(app, receiver.url)
            t0 = clock.now_ms()
            events = []
            for i in range(5):
                await until(clock, t0 + i * 1_000)
                events.append(await emit(app, "click"))
            await until(clock, t0 + 2 * MIN)  # attempts at 0 and 1 min; next at 6 min
            keys: dict[str, Any] = app.keys
        assert len(receiver.hits) == 10
        await until(clock, t0 + 10 * MIN)  # down over the 6-minute retries
        assert len(receiver.hits) == 10
        # Without their deadlines (as deliveries parked for a lapsed plan, or
        # written by an older version): the restart gives each one back.
        for d in store.load_deadlines():
            if d.kind == ATTEMPT_DEADLINE:
                await store.remove_deadline(d)
        async with running_app(store, wconfig, clock) as again:
            again.keys = keys
            await _settle()
            assert len(receiver.hits) == 15  # overdue: each at once
            await until(clock, t0 + 2 * DAY)
        found = [_one(again, e.id) for e in events]
    for i, d in enumerate(found):
        offsets = [a.started_at_ms - t0 for a in d.attempts]
        assert offsets == [i * 1_000, MIN + i * 1_000, 10 * MIN, 40 * MIN, 2 * HOUR + 40 * MIN,
                           8 * HOUR + 40 * MIN, 20 * HOUR + 40 * MIN]
        assert d.status is DeliveryStatus.FAILED
    assert len(set(receiver.ids())) == 5 and len(receiver.hits) == 5 * 7


async def test_an_event_after_the_rule_held_is_not_queued_before_its_check_runs(
        store: LmdbStore, wconfig: Config, ca: tuple[trustme.CA, str],
        autojump_clock: trio.testing.MockClock) -> None:
    """The streak met the rule while the service was down, and its check has
    not run yet (its deadline lost, or held up behind a busy mailbox): the
    first event after the restart finds the endpoint Off as of that moment and
    is not queued for it (SPEC: events while Off are never queued)."""
    clock = TrioWallClock()
    async with running_receiver(ca[0], clock) as receiver:
        receiver.respond = status(500)
        async with running_app(store, wconfig, clock) as app:
            ep, t0 = await failing_endpoint((app, receiver, clock), clicks=3)
            await until(clock, t0 + 21 * HOUR)  # 21 failures, the first 21 h old
            assert _endpoint(app, ep["id"]).health.state.value == "Failing"
            keys: dict[str, Any] = app.keys
        await _lose_off_checks(store)
        await until(clock, t0 + 30 * HOUR)
        async with running_app(store, wconfig, clock) as again:
            again.keys = keys
            late = await emit(again, "click")
            await until(clock, clock.now_ms() + HOUR)
            health = _endpoint(again, ep["id"]).health
            assert deliveries_of(again, late.id) == []
    assert (health.state.value, health.off_reason, health.off_at_ms) == (
        "Off", "automatic", t0 + DAY + 1)
    assert len(receiver.hits) == 21
    # written, not only held in memory: a third start finds it Off
    [stored] = WebhookStore(store).all_endpoints()
    assert (stored.health.state.value, stored.health.off_at_ms) == ("Off", t0 + DAY + 1)


async def test_nothing_starts_once_the_rule_held_though_its_check_has_not_run(
        store: LmdbStore, wconfig: Config, ca: tuple[trustme.CA, str],
        autojump_clock: trio.testing.MockClock) -> None:
    """The streak met the rule while the service was down, its check not run
    yet: at the restart neither a retry come due nor a Retry answered before
    the stop is sent. The endpoint is Off as of the rule's moment, the retry
    waits (Retrying), and the Retry is settled Failed, not left Sending."""
    from svc_engine import webhook_delivery as wd

    clock = TrioWallClock()
    async with running_receiver(ca[0], clock) as receiver:
        async with running_app(store, wconfig, clock) as app:
            ep, t0 = await failing_endpoint((app, receiver, clock), clicks=3)
            await until(clock, t0 + 10 * HOUR)
            waiting = await emit(app, "click")  # its retries go on to 30h36m
            await until(clock, t0 + 21 * HOUR)  # 21 + 6 failures, the first 21 h old
            assert _endpoint(app, ep["id"]).health.state.value == "Failing"
            tables = app.services.webhooks.tables  # type: ignore[union-attr]
            [manual, *_] = tables.recent(app.project_id, Mode.TEST,
                                         status=DeliveryStatus.FAILED)
            # what the API writes and answers before the attempt starts; then a stop
            await store.write(lambda txn: tables.save_delivery(txn, manual, wd.retry(manual)))
            keys: dict[str, Any] = app.keys
        hits = len(receiver.hits)
        assert hits == 27
        await _lose_off_checks(store)
        await until(clock, t0 + 31 * HOUR)  # the retry due at 30h36m
        async with running_app(store, wconfig, clock) as again:
            again.keys = keys
            await until(clock, clock.now_ms() + HOUR)
            health = _endpoint(again, ep["id"]).health
            retried = again.services.webhooks.tables.delivery(  # type: ignore[union-attr]
                manual.id)
            left = _one(again, waiting.id)
    assert len(receiver.hits) == hits
    assert (health.state.value, health.off_at_ms) == ("Off", t0 + DAY + 1)
    assert retried is not None and retried.status is DeliveryStatus.FAILED
    assert retried.attempts == manual.attempts
    assert left.status is DeliveryStatus.RETRYING and len(left.attempts) == 6


async def test_a_manual_attempt_answered_before_a_restart_is_sent_after_it(
        store: LmdbStore, wconfig: Config, ca: tuple[trustme.CA, str],
        autojump_clock: trio.testing.MockClock) -> None:
    """Retry and Resend answer Sending once the attempt is written, before it
    starts: a restart then (a deploy, SIGTERM) dropped it, and the receiver
    never got what the team member was told was on its way. Of an endpoint
    turned Off meanwhile it is still dropped (nothing may be sent there)."""
    from svc_engine import webhook_delivery as wd

    clock = TrioWallClock()
    async with running_receiver(ca[0], clock) as receiver:
        async with running_app(store, wconfig, clock) as app:
            on = await add_endpoint(app, receiver.url)
            off = await add_endpoint(app, receiver.url + "?off")
            event = await emit(app, "click")
            await until(clock, clock.now_ms() + MIN)
            assert len(receiver.hits) == 2
            tables = app.services.webhooks.tables  # type: ignore[union-attr]
            done = {d.endpoint_id: d for d in deliveries_of(app, event.id)}
            # what the API writes and answers before the attempt starts; then a stop
            await store.write(lambda txn: [tables.save_delivery(txn, d, wd.resend(d))
                                           for d in done.values()])
            async with app.client("sk_test") as c:
                assert (await c.post(f"/v1/webhooks/endpoints/{off['id']}/disable")
                        ).status_code == 200
        async with running_app(store, wconfig, clock) as again:
            await until(clock, clock.now_ms() + MIN)
            after = {d.endpoint_id: d for d in deliveries_of(again, event.id)}
    assert len(receiver.hits) == 3  # the resend to the endpoint that is on
    sent = after[on["id"]]
    assert sent.status is DeliveryStatus.DELIVERED
    assert [a.trigger for a in sent.attempts] == ["scheduled", "manual"]
    dropped = after[off["id"]]
    assert dropped.status is DeliveryStatus.DELIVERED and len(dropped.attempts) == 1


async def test_a_missed_wake_up_costs_at_most_a_minute(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    await add_endpoint(app, receiver.url)
    await until(clock, clock.now_ms() + HOUR)  # idle: the safety-net poll has backed off
    quiet = OutboxEvent(id="5d1a6c3e-2b4f-4a8e-9c7d-6e5f4a3b2c1d", type=EventType.OPEN,
                        project_id=app.project_id, mode="test",
                        created_at_ms=clock.now_ms(), data={})
    store = app.services.store
    store.on_outbox = None  # the wake-up after its commit is lost
    await store.write(lambda txn: store.append_outbox(txn, quiet))
    t = clock.now_ms()
    await until(clock, t + MIN)
    assert len(receiver.hits) == 1 and 0 < receiver.times()[0] - t <= MIN


async def test_a_retry_keeps_its_wait_when_the_wall_clock_goes_back(
        store: LmdbStore, wconfig: Config, ca: tuple[trustme.CA, str],
        autojump_clock: trio.testing.MockClock) -> None:
    """The machine's clock ran 8 hours ahead and NTP set it back after the
    first attempt failed: the retry planned a minute later waited 8 hours and
    a minute (its deadline a wall time, now 8 hours ahead)."""
    clock = TrioWallClock()
    clock.offset_ms = 8 * HOUR
    sent: list[float] = []

    async def respond(req: Received, n: int) -> Reply:
        sent.append(trio.current_time())
        return (500, [], b"") if n == 1 else (204, [], b"")

    async with running_receiver(ca[0], clock) as receiver, \
            running_app(store, wconfig, clock) as app:
        receiver.respond = respond
        await add_endpoint(app, receiver.url)
        event = await emit(app, "click")
        await trio.sleep(1)
        assert len(sent) == 1
        clock.offset_ms = 0
        await trio.sleep(5 * 60)
        assert [round(t - sent[0]) for t in sent] == [0, 60]
        d = _one(app, event.id)
        assert d.status is DeliveryStatus.DELIVERED and len(d.attempts) == 2


async def test_an_event_recorded_twice_is_delivered_once(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, _ = world
    await add_endpoint(app, receiver.url)
    event = await emit(app, "install")
    await _settle()
    store = app.services.store
    await store.write(lambda txn: store.append_outbox(txn, event))  # a replayed append
    await _settle()
    assert len(receiver.hits) == 1 and len(deliveries_of(app, event.id)) == 1
    assert store.read_outbox() == []


async def test_at_most_8_attempts_in_flight_per_endpoint(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    in_flight = [0]
    most = [0]

    async def slow(req: Received, n: int) -> Reply:
        in_flight[0] += 1
        most[0] = max(most[0], in_flight[0])
        await trio.sleep(5)
        in_flight[0] -= 1
        return 204, [], b""

    receiver.respond = slow
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    events = [await emit(app, "click") for _ in range(20)]
    await until(clock, t0 + MIN)
    assert most[0] == 8 and len(receiver.hits) == 20
    assert sorted({t - t0 for t in receiver.times()}) == [0, 5_000, 10_000]
    assert all(_one(app, e.id).status is DeliveryStatus.DELIVERED for e in events)


async def test_hung_endpoints_leave_senders_to_the_others(
        world: World, autojump_clock: trio.testing.MockClock) -> None:
    """Four endpoints whose receiver never answers took all 32 senders (8
    each) for as long as they had deliveries: a fifth, healthy one got an
    attempt when one of theirs timed out (40 events took 50 s). A timed-out
    endpoint now keeps one attempt in flight: after the first timeouts the
    healthy endpoint's deliveries all go at once."""
    app, receiver, clock = world

    async def respond(req: Received, n: int) -> Reply:
        if "/hung" in req.target:
            await trio.sleep(3600)  # past the 10 s deadline: a timeout
        return 204, [], b""

    receiver.respond = respond
    for n in range(4):
        await add_endpoint(app, f"{receiver.url}/hung{n}")
    await add_endpoint(app, f"{receiver.url}/ok")
    t0 = clock.now_ms()
    for _ in range(40):
        await emit(app, "click")
    await until(clock, t0 + 12_000)  # the hung endpoints' first attempts timed out at 10 s
    healthy = [t - t0 for h, t in zip(receiver.hits, receiver.times(), strict=True)
               if h.request.target.endswith("/ok")]
    assert len(healthy) == 40 and max(healthy) <= 10_000 + 100, healthy
    # one project: 24 of the 32 senders at most (five endpoints of 8 would take all 32)
    hung_at_once = sum(1 for h, t in zip(receiver.hits, receiver.times(), strict=True)
                       if t == t0 and "/hung" in h.request.target)
    assert hung_at_once <= 24, hung_at_once
    assert app.services.webhooks is not None
    assert app.services.webhooks.statistics().in_flight == 4  # one each of the hung


@pytest.mark.parametrize("failure", ["500", "connection closed"])
async def test_an_endpoint_that_fails_without_a_timeout_keeps_its_eight_attempts(
        world: World, autojump_clock: trio.testing.MockClock, failure: str) -> None:
    """Only a timeout cuts an endpoint to one attempt in flight (README: "one
    for an endpoint whose last attempt timed out"); one that answers 500, or
    closes the connection without an answer, a second later keeps 8 at once
    for its backlog."""
    app, receiver, clock = world
    active, at_once = 0, []

    async def respond(req: Received, n: int) -> Reply:
        nonlocal active
        active += 1
        at_once.append(active)
        await trio.sleep(1)
        active -= 1
        if failure == "500":
            return 500, [], b""
        raise trio.BrokenResourceError  # the receiver's server closes without a word

    receiver.respond = respond
    await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    for _ in range(40):
        await emit(app, "click")
    await until(clock, t0 + 30_000)  # five seconds' worth of first attempts, then retries wait
    assert len(at_once) == 40 and max(at_once) == 8
    waves = Counter(receiver.times())  # attempts started at one moment
    assert sorted(waves.values()) == [8] * 5, waves  # the later waves too, not 1 at a time


async def test_retries_keep_their_schedule_when_the_timer_holds_two_deadlines(
        store: LmdbStore, wconfig: Config, ca: tuple[trustme.CA, str],
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every retry's deadline but the earliest two waits in the store only
    # (actors/timer.py): refills read them back in time, so none is late or
    # lost. (A refill's settling of the actor's held writes is tested on the
    # timer itself, tests/test_timer.py: here writes commit long before.)
    monkeypatch.setattr("actors.timer.CAPACITY", 2)
    clock = TrioWallClock()
    async with running_receiver(ca[0], clock) as receiver, \
            running_app(store, wconfig, clock) as app:
        receiver.respond = status(500)
        await add_endpoint(app, receiver.url)
        starts: dict[str, int] = {}
        for i in range(12):  # two bursts: attempts, reports and refills interleave
            await until(clock, clock.now_ms() + (7_000 if i == 6 else 1))
            event = await emit(app, "click")
            starts[event.id] = clock.now_ms()
        await until(clock, max(starts.values()) + 2 * DAY)
        stats = app.services.timer.statistics()
        assert stats.refills > 6 and stats.pending <= 3
        for event_id, t0 in starts.items():
            d = _one(app, event_id)
            assert d.status is DeliveryStatus.FAILED
            assert [a.started_at_ms - t0 for a in d.attempts] == SCHEDULE
    assert len(receiver.hits) == 12 * len(SCHEDULE)
