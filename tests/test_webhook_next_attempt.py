"""A waiting delivery's next attempt time, as the API (``nextAttemptAt``) and
the dashboard show it, while its endpoint is Off and after it is turned on.

An Off endpoint's Queued and Retrying deliveries are held (actors/webhooks.py
parks them when their time comes), so their stored time is not when they go:
the API says null and the dashboard says paused. Once the endpoint is on
again the time shown is when the attempt is made: the stored time, or the
turn-on time for a delivery whose time passed while the endpoint was Off.

The pure rule (svc_engine/webhook_views.py ``next_attempt_at_ms``) and the
dashboard's wording first; then the service under trio's autojump clock over
real HTTPS, checking each shown time against the receiver's clock."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
import trustme

from storage.lmdb_store import LmdbStore
from svc_engine import webhook_records as records
from svc_engine.endpoint_health import EndpointHealth, HealthState, evaluate, record_failure
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import validate_endpoint
from svc_engine.webhook_envelope import iso_utc_ms
from svc_engine.webhook_records import Endpoint
from svc_engine.webhook_views import delivery_json, delivery_summary_json, next_attempt_at_ms
from tests.conftest import App
from tests.dashboard_support import Member, owner, signed_in
from tests.webhook_receiver_fixture import (
    World,
    autojump_world,
    deliveries_of,
    emit,
    failing_endpoint,
    make_ca,
    until,
    webhook_config,
)
from web.dashboard.formats import stamp
from web.dashboard.webhook_display import next_try, paused
from web.webhook_receiver import Received, Reply

T0 = 1_767_225_600_000  # 1 Jan 2026 00:00 UTC
SEC = 1_000
MIN = 60 * SEC
HOUR = 60 * MIN
DAY = 24 * HOUR
EP = "/v1/webhooks/endpoints"
DL = "/v1/webhooks/deliveries"
WH = "/dashboard/settings/webhooks"


# -- the rule ---------------------------------------------------------------------------

def _endpoint(at_ms: int = T0) -> Endpoint:
    return records.new_endpoint("e", "p", Mode.TEST, validate_endpoint("https://a.example.com/"),
                                "whsec_x", at_ms)


def _retrying(next_ms: int) -> Delivery:
    return Delivery(id="d", endpoint_id="e", event_id="v", event_type="click", mode=Mode.TEST,
                    status=DeliveryStatus.RETRYING, created_at_ms=T0,
                    next_attempt_at_ms=next_ms)


def test_an_on_endpoint_shows_the_stored_time() -> None:
    d = _retrying(T0 + MIN)
    assert next_attempt_at_ms(d, _endpoint()) == T0 + MIN
    failing = attrs.evolve(_endpoint(), health=record_failure(EndpointHealth(), T0))
    assert failing.health.state is HealthState.FAILING
    assert next_attempt_at_ms(d, failing) == T0 + MIN
    queued = attrs.evolve(d, status=DeliveryStatus.QUEUED, next_attempt_at_ms=T0)
    assert next_attempt_at_ms(queued, _endpoint()) == T0


@pytest.mark.parametrize("state", list(DeliveryStatus))
def test_off_shows_no_time_for_any_state(state: DeliveryStatus) -> None:
    d = attrs.evolve(_retrying(T0 + MIN), status=state)
    off = records.turn_off(_endpoint(), T0 + 10 * SEC)
    assert next_attempt_at_ms(d, off) is None
    assert next_attempt_at_ms(d, None) is None  # the endpoint is gone


def test_automatically_off_shows_no_time() -> None:
    health = EndpointHealth()
    for n in range(20):
        health = record_failure(health, T0 + n * 1000)
    health = evaluate(health, T0 + DAY + 1)
    assert health.state is HealthState.OFF
    off = attrs.evolve(_endpoint(), health=health)
    assert next_attempt_at_ms(_retrying(T0 + 12 * HOUR), off) is None


def test_no_attempt_waits_no_time() -> None:
    for state in (DeliveryStatus.SENDING, DeliveryStatus.DELIVERED, DeliveryStatus.FAILED):
        d = attrs.evolve(_retrying(T0 + MIN), status=state)
        assert next_attempt_at_ms(d, _endpoint()) is None


def test_after_turn_on_a_time_that_passed_while_off_is_the_turn_on() -> None:
    off = records.turn_off(_endpoint(), T0 + 10 * SEC)
    on = records.turn_on(off, T0 + 5 * MIN)
    assert next_attempt_at_ms(_retrying(T0 + MIN), on) == T0 + 5 * MIN  # goes at once
    assert next_attempt_at_ms(_retrying(T0 + HOUR), on) == T0 + HOUR  # still ahead: kept


def test_the_api_shapes_use_the_rule() -> None:
    d = _retrying(T0 + MIN)
    off = records.turn_off(_endpoint(), T0 + 10 * SEC)
    assert delivery_summary_json(d, _endpoint())["nextAttemptAt"] == iso_utc_ms(T0 + MIN)
    assert delivery_summary_json(d, off)["nextAttemptAt"] is None
    full = delivery_json(d, off, None)
    assert full["nextAttemptAt"] is None and full["status"] == "Retrying"


def test_the_dashboard_says_paused_while_off() -> None:
    d = _retrying(T0 + MIN)
    off = records.turn_off(_endpoint(), T0 + 10 * SEC)
    assert next_try(d, _endpoint()) == "1 Jan 2026, 00:01:00 UTC (attempt 1 of 7)"
    assert next_try(d, off) == "Paused while the endpoint is off (attempt 1 of 7)"
    assert paused(d, off) and not paused(d, _endpoint())
    assert paused(attrs.evolve(d, status=DeliveryStatus.QUEUED), off)
    assert not paused(attrs.evolve(d, status=DeliveryStatus.FAILED), off)
    on = records.turn_on(off, T0 + 5 * MIN)
    assert next_try(d, on) == "1 Jan 2026, 00:05:00 UTC (attempt 1 of 7)"


# -- the service, under the autojump clock -----------------------------------------------

@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    return make_ca(tmp_path)


@pytest.fixture
async def world(store: LmdbStore, data_dir: str, ca: tuple[trustme.CA, str]
                ) -> AsyncIterator[World]:
    async with autojump_world(store, webhook_config(data_dir, ca[1]), ca[0]) as w:
        yield w



def _one(app: App, event_id: str) -> Delivery:
    [d] = deliveries_of(app, event_id)
    return d


async def _shown(app: App, delivery_id: str, endpoint_id: str) -> tuple[Any, Any]:
    """``nextAttemptAt`` of the delivery's full view and of its list row."""
    async with app.client("sk_test") as c:
        full = (await c.get(f"{DL}/{delivery_id}")).json()
        rows = (await c.get(DL, params={"endpointId": endpoint_id})).json()["data"]
    [row] = [r for r in rows if r["id"] == delivery_id]
    assert full["status"] == row["status"]
    return full["nextAttemptAt"], row["nextAttemptAt"]


def _text(r: Any) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", r.text)).split())


async def _switch(app: App, endpoint_id: str, on: bool) -> None:
    async with app.client("sk_test") as c:
        r = await c.post(f"{EP}/{endpoint_id}/{'enable' if on else 'disable'}")
    assert r.status_code == 200 and r.json()["status"] == ("Active" if on else "Off")


async def test_off_shows_no_next_attempt_and_turn_on_shows_the_true_one(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world)
    event = await emit(app, "click")  # attempt 1 fails at t0: Retrying
    await trio.testing.wait_all_tasks_blocked()
    d = _one(app, event.id)
    due = d.next_attempt_at_ms
    assert d.status is DeliveryStatus.RETRYING and due == t0 + MIN
    assert await _shown(app, d.id, ep["id"]) == (iso_utc_ms(due),) * 2

    await until(clock, t0 + 10 * SEC)
    await _switch(app, ep["id"], on=False)
    assert await _shown(app, d.id, ep["id"]) == (None, None)  # held: not at t0 + 1 min
    await until(clock, t0 + 5 * MIN)
    assert len(receiver.hits) == 1  # nothing was attempted at t0 + 1 min
    assert _one(app, d.event_id).status is DeliveryStatus.RETRYING
    assert await _shown(app, d.id, ep["id"]) == (None, None)

    boss: Member = await signed_in(app, owner(app))
    try:
        page = _text(await boss.get(f"{WH}/deliveries/{d.id}"))
        assert "Paused: the endpoint is off, so no retry is made until it is turned on" in page
        assert "Next try Paused while the endpoint is off (attempt 2 of 7)" in page
        assert stamp(due) not in page  # never the time that passed while it was held
        listed = _text(await boss.get(f"{WH}/deliveries"))
        assert "Retrying paused: endpoint off" in listed and "next " not in listed

        turned_on = clock.now_ms()
        await _switch(app, ep["id"], on=True)
        await trio.testing.wait_all_tasks_blocked()
        # resumed at once: attempt 2 at the turn on, failing again, next 5 min later
        assert [t - t0 for t in receiver.times()] == [0, turned_on - t0]
        d = _one(app, event.id)
        assert d.status is DeliveryStatus.RETRYING and len(d.attempts) == 2
        after = d.next_attempt_at_ms
        assert after == turned_on + 5 * MIN
        assert await _shown(app, d.id, ep["id"]) == (iso_utc_ms(after),) * 2
        page = _text(await boss.get(f"{WH}/deliveries/{d.id}"))
        assert f"Next try {stamp(after)} (attempt 3 of 7)" in page and "Paused" not in page
        assert "paused" not in _text(await boss.get(f"{WH}/deliveries"))
    finally:
        await boss.aclose()
    await until(clock, after)
    assert receiver.times()[-1] == after  # the time shown was the time it went


async def test_a_delivery_held_past_its_time_is_due_from_the_turn_on(
        world: World,
        autojump_clock: trio.testing.MockClock) -> None:
    """Nine deliveries held past their time; on turn on eight go at once (at
    most 8 in flight per endpoint) and the ninth waits for a free slot: it is
    due from the turn on, not from the time it was held through."""
    app, receiver, clock = world
    ep, t0 = await failing_endpoint(world)
    events = [await emit(app, "click") for _ in range(9)]
    await trio.testing.wait_all_tasks_blocked()
    assert len(receiver.hits) == 9
    await until(clock, t0 + 10 * SEC)
    await _switch(app, ep["id"], on=False)
    await until(clock, t0 + 5 * MIN)
    assert len(receiver.hits) == 9

    async def slow(req: Received, n: int) -> Reply:
        await trio.sleep(5)
        return 204, [], b""

    receiver.respond = slow
    turned_on = clock.now_ms()
    await _switch(app, ep["id"], on=True)
    await trio.testing.wait_all_tasks_blocked()
    waiting = [d for d in (_one(app, e.id) for e in events)
               if d.status is DeliveryStatus.RETRYING]
    assert len(waiting) == 1 and waiting[0].next_attempt_at_ms == t0 + MIN  # as stored
    assert await _shown(app, waiting[0].id, ep["id"]) == (iso_utc_ms(turned_on),) * 2
    await until(clock, turned_on + 30 * SEC)
    assert all(_one(app, e.id).status is DeliveryStatus.DELIVERED for e in events)
    assert min(receiver.times()[9:]) == turned_on
