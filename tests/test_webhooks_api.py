"""The webhooks API through the ASGI front: endpoint management, validation,
project and mode scoping, the plan rule, idempotency, and the deliveries views."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trustme

from actors.clock import TrioWallClock
from storage.webhooks_store import WebhookStore
from svc_engine import signing
from svc_engine.config import Config
from svc_engine.keys import Mode
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.plans import Plan
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from tests.conftest import App
from tests.dashboard_webhook_support import actor, make_delivery, make_endpoint
from tests.webhook_receiver_fixture import (
    Receiver,
    add_endpoint,
    deliveries_of,
    emit,
    make_ca,
    running_receiver,
    status,
    webhook_config,
)
from web import tenancy
from web.services import system_random
from web.webhook_receiver import Received, Reply

EP = "/v1/webhooks/endpoints"
DL = "/v1/webhooks/deliveries"


@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    return make_ca(tmp_path)


@pytest.fixture
def config(data_dir: str, ca: tuple[trustme.CA, str]) -> Config:
    return webhook_config(data_dir, ca[1])  # overrides conftest's: trust the test CA


@pytest.fixture
async def receiver(ca: tuple[trustme.CA, str], app: App) -> AsyncIterator[Receiver]:
    async with running_receiver(ca[0], app.services.clock) as r:
        yield r


def _tables(app: App) -> WebhookStore:
    assert app.services.webhooks is not None
    return app.services.webhooks.tables


def _delivery(app: App, delivery_id: str) -> Delivery:
    d = _tables(app).delivery(delivery_id)
    assert d is not None
    return d


def _error(r: Any) -> tuple[int, str]:
    return r.status_code, r.json()["error"]["code"]


async def _wait(check: Callable[[], bool], timeout: float = 5.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.005)


# -- endpoints ----------------------------------------------------------------------

async def test_create_returns_the_endpoint_its_secret_and_status(app: App) -> None:
    async with app.client("sk_live") as c:
        r = await c.post(EP, json={"url": "https://hooks.example.com/svc",
                                   "description": "orders", "events": ["install", "click"]})
    assert r.status_code == 201
    body = r.json()
    assert body["url"] == "https://hooks.example.com/svc" and body["description"] == "orders"
    assert body["events"] == ["click", "install"]
    assert body["status"] == "Active" and body["health"]["lastSuccessAt"] is None
    assert body["env"] == "live" and body["projectId"] == app.project_id
    assert body["secret"].startswith("whsec_")
    assert len(signing.parse_secret(body["secret"])) == 32  # a new secret: 256 bits
    default = await add_endpoint(app, "https://b.example.com/")
    assert default["events"] == ["click", "open", "install", "conversion"]


@pytest.mark.parametrize("body,field", [
    ({"url": "http://hooks.example.com/x"}, "url"),
    ({"url": "not a url"}, "url"),
    ({"description": "no url"}, "url"),
    ({"url": "https://a.example.com", "description": "d" * 201}, "description"),
    ({"url": "https://a.example.com", "events": []}, "events"),
    ({"url": "https://a.example.com", "events": ["purchase"]}, "events"),
    ({"url": "https://a.example.com", "mode": "live"}, "mode"),
])
async def test_create_validation(app: App, body: dict[str, Any], field: str) -> None:
    async with app.client("sk_test") as c:
        r = await c.post(EP, json=body)
        assert _error(r) == (400, "validation_error") and r.json()["error"]["field"] == field
        assert (await c.get(EP)).json() == {"data": []}


@pytest.mark.parametrize("url", ["http://localhost:9000/h", "http://127.0.0.1/h",
                                 "http://[::1]:8080/h"])
async def test_plain_http_only_for_local_hosts(app: App, url: str) -> None:
    assert (await add_endpoint(app, url))["url"] == url


async def test_list_get_edit(app: App) -> None:
    a = await add_endpoint(app, "https://a.example.com/")
    clock = app.services.clock
    assert isinstance(clock, TrioWallClock)
    clock.offset_ms += 1  # endpoints made in one millisecond list in the order of their ids
    b = await add_endpoint(app, "https://b.example.com/")
    async with app.client("sk_test") as c:
        listed = (await c.get(EP)).json()["data"]
        assert [e["id"] for e in listed] == [a["id"], b["id"]]
        assert all("secret" not in e for e in listed)
        one = (await c.get(f"{EP}/{a['id']}")).json()
        assert one["secret"] == a["secret"]
        r = await c.patch(f"{EP}/{a['id']}", json={"url": "https://c.example.com/x",
                                                    "events": ["conversion"]})
        assert r.status_code == 200
        assert r.json()["url"] == "https://c.example.com/x"
        assert r.json()["events"] == ["conversion"] and r.json()["secret"] == a["secret"]
        r = await c.patch(f"{EP}/{a['id']}", json={"url": "http://c.example.com/"})
        assert _error(r) == (400, "validation_error")
        r = await c.patch(f"{EP}/{a['id']}", json={"secret": "whsec_x"})
        assert _error(r) == (400, "validation_error")
        assert (await c.get(f"{EP}/{a['id']}")).json()["url"] == "https://c.example.com/x"


async def test_endpoints_belong_to_the_key_project_and_mode(app: App) -> None:
    mine = await add_endpoint(app, "https://a.example.com/")
    _project, keys = await tenancy.create_project(app.services.store, app.org_id, "other",
                                                 system_random, app.services.clock.now_ms())
    for key in ("sk_live", keys["sk_test"]):
        async with app.client(key) as c:
            assert (await c.get(EP)).json() == {"data": []}
            for r in (await c.get(f"{EP}/{mine['id']}"),
                      await c.patch(f"{EP}/{mine['id']}", json={"description": "x"}),
                      await c.delete(f"{EP}/{mine['id']}"),
                      await c.post(f"{EP}/{mine['id']}/disable")):
                assert _error(r) == (404, "not_found")
    async with app.client("sk_test") as c:
        assert (await c.get(f"{EP}/{mine['id']}")).json()["description"] is None
        assert _error(await c.get(f"{EP}/not-a-uuid")) == (404, "not_found")


async def test_another_project_s_delivery_is_answered_as_no_delivery(app: App) -> None:
    """Retry and resend of another project's (or mode's) delivery named its
    endpoint in the 404 (it exists, and whose endpoint); an unknown ID did not."""
    from svc_engine.webhook_delivery import DeliveryStatus
    from tests.dashboard_webhook_support import make_delivery, make_endpoint

    other, keys = await tenancy.create_project(app.services.store, app.org_id, "other",
                                               system_random, app.services.clock.now_ms())
    theirs = await make_endpoint(app, "https://a.example.com/", project_id=other.id)
    failed = await make_delivery(app, theirs, DeliveryStatus.FAILED)
    unknown = "0190e1a2-0000-7000-8000-000000000000"
    for key in ("sk_test", "sk_live", keys["sk_live"]):
        async with app.client(key) as c:
            for action in ("retry", "resend"):
                seen = await c.post(f"{DL}/{failed.id}/{action}")
                none = await c.post(f"{DL}/{unknown}/{action}")
                assert _error(seen) == _error(none) == (404, "not_found")
                assert seen.json()["error"]["message"] == none.json()["error"]["message"].replace(
                    unknown, failed.id)
    async with app.client(keys["sk_test"]) as c:  # its own project and mode: it is there
        assert (await c.post(f"{DL}/{failed.id}/retry")).status_code == 200


async def test_publishable_key_is_refused(app: App) -> None:
    async with app.client("pk_test") as c:
        assert _error(await c.get(EP)) == (403, "wrong_key_kind")


async def test_create_is_idempotent(app: App) -> None:
    async with app.client("sk_test", **{"idempotency-key": "create-1"}) as c:
        first = await c.post(EP, json={"url": "https://a.example.com/"})
        again = await c.post(EP, json={"url": "https://a.example.com/"})
        other = await c.post(EP, json={"url": "https://b.example.com/"})
    assert first.status_code == again.status_code == 201
    assert first.content == again.content and again.headers["idempotent-replayed"] == "true"
    assert _error(other) == (409, "idempotency_key_reused")
    async with app.client("sk_test") as c:
        assert len((await c.get(EP)).json()["data"]) == 1


async def test_a_write_that_succeeded_replays_after_a_downgrade(app: App,
                                                                receiver: Receiver) -> None:
    """A retry gets its stored answer before the plan is checked again; a new
    request is refused."""
    async with app.client("sk_test", **{"idempotency-key": "plan-create"}) as c:
        made = await c.post(EP, json={"url": receiver.url})
    ep = made.json()
    async with app.client("sk_test", **{"idempotency-key": "plan-test"}) as c:
        tested = await c.post(f"{EP}/{ep['id']}/test")
    assert made.status_code == tested.status_code == 201
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    for key, path, first in (("plan-create", EP, made), ("plan-test", f"{EP}/{ep['id']}/test",
                                                          tested)):
        async with app.client("sk_test", **{"idempotency-key": key}) as c:
            again = await (c.post(path, json={"url": receiver.url}) if path == EP
                           else c.post(path))
        assert again.status_code == 201 and again.content == first.content, path
        assert again.headers["idempotent-replayed"] == "true"
    async with app.client("sk_test", **{"idempotency-key": "plan-new"}) as c:
        assert _error(await c.post(f"{EP}/{ep['id']}/test")) == (403, "forbidden")


async def test_an_edit_refused_on_its_own_is_400_under_a_used_key(app: App,
                                                                 receiver: Receiver) -> None:
    """The body is checked before the key is looked up: its own 400, not 409."""
    ep = await add_endpoint(app, receiver.url)
    async with app.client("sk_test", **{"idempotency-key": "edit-used"}) as c:
        assert (await c.patch(f"{EP}/{ep['id']}", json={"description": "a"})).status_code == 200
        for bad in ({"bogus": 1}, {"url": "ftp://example.com/"}, {"events": ["nope"]}, []):
            assert _error(await c.patch(f"{EP}/{ep['id']}", json=bad)) == (
                400, "validation_error"), bad
        assert _error(await c.patch(f"{EP}/{ep['id']}", json={"description": "b"})) == (
            409, "idempotency_key_reused")
        again = await c.patch(f"{EP}/{ep['id']}", json={"description": "a"})
    assert again.headers["idempotent-replayed"] == "true"


async def test_below_growth_cannot_list_or_receive(app: App, receiver: Receiver) -> None:
    ep = await add_endpoint(app, receiver.url)
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    async with app.client("sk_test") as c:
        for r in (await c.get(EP), await c.post(EP, json={"url": "https://a.example.com"}),
                  await c.get(DL), await c.post(f"{EP}/{ep['id']}/test")):
            assert _error(r) == (403, "forbidden")
            assert "Growth" in r.json()["error"]["message"]
        # Editing, turning off and on, rotating and deleting stay possible.
        assert (await c.get(f"{EP}/{ep['id']}")).status_code == 200
        assert (await c.patch(f"{EP}/{ep['id']}", json={"description": "x"})).status_code == 200
        assert (await c.post(f"{EP}/{ep['id']}/disable")).json()["status"] == "Off"
        assert (await c.post(f"{EP}/{ep['id']}/enable")).json()["status"] == "Active"
        assert (await c.post(f"{EP}/{ep['id']}/rotate-secret")).status_code == 200
        event = await emit(app, "click")
        await trio.sleep(0.2)
        assert deliveries_of(app, event.id) == [] and receiver.hits == []
        assert (await c.delete(f"{EP}/{ep['id']}")).json()["deleted"] is True


async def test_below_growth_a_delivery_is_neither_read_nor_sent_again(app: App) -> None:
    """Deliveries made before a downgrade: reading one, Retry and Resend are
    403 ``forbidden`` below Growth (SPEC: webhooks need the Growth plan), and
    the refusal leaves each delivery as it was."""
    ep = await make_endpoint(app)
    failed = await make_delivery(app, ep, DeliveryStatus.FAILED)
    delivered = await make_delivery(app, ep, DeliveryStatus.DELIVERED)
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    async with app.client("sk_test") as c:
        for r in (await c.get(f"{DL}/{failed.id}"), await c.post(f"{DL}/{failed.id}/retry"),
                  await c.post(f"{DL}/{delivered.id}/resend")):
            assert _error(r) == (403, "forbidden")
            assert "Growth" in r.json()["error"]["message"]
    tables = actor(app).tables
    assert tables.delivery(failed.id) == failed
    assert tables.delivery(delivered.id) == delivered


async def test_disable_enable_and_test_while_off(app: App, receiver: Receiver) -> None:
    ep = await add_endpoint(app, receiver.url)
    async with app.client("sk_test") as c:
        off = (await c.post(f"{EP}/{ep['id']}/disable")).json()
        assert off["status"] == "Off" and off["health"]["offBy"] == "manual"
        assert off["health"]["offReason"] and off["health"]["offAt"]
        assert _error(await c.post(f"{EP}/{ep['id']}/test")) == (409, "conflict")
        on = (await c.post(f"{EP}/{ep['id']}/enable")).json()
        assert on["status"] == "Active" and on["health"]["offBy"] is None
        r = await c.post(f"{EP}/{ep['id']}/test")
    assert r.status_code == 201
    await receiver.wait_for(1)
    assert receiver.hits[0].headers["svc-event"] == "test"


async def test_send_test_event(app: App, receiver: Receiver) -> None:
    ep = await add_endpoint(app, receiver.url, events=["install"])
    async with app.client("sk_test") as c:
        r = await c.post(f"{EP}/{ep['id']}/test")
    assert r.status_code == 201
    view = r.json()
    assert view["event"]["type"] == "test" and view["endpoint"]["id"] == ep["id"]
    hit = (await receiver.wait_for(1))[0]
    assert hit.webhook_id == view["id"]
    envelope = json.loads(hit.request.body)
    assert envelope["type"] == "test" and envelope["env"] == "test"
    assert envelope["projectId"] == app.project_id
    assert envelope["data"]["endpointId"] == ep["id"]
    # the data svc_engine/event_payloads.py documents (sentAt was missing)
    assert set(envelope["data"]) == {"message", "endpointId", "sentAt"}
    assert envelope["data"]["sentAt"][:19] == envelope["createdAt"][:19]
    assert hit.request.body.decode() == view["request"]["body"]


async def test_rotation_signs_the_next_attempt_with_the_new_secret(
        app: App, receiver: Receiver) -> None:
    ep = await add_endpoint(app, receiver.url)
    async with app.client("sk_test") as c:
        rotated = (await c.post(f"{EP}/{ep['id']}/rotate-secret")).json()
        assert rotated["secret"] != ep["secret"]
        assert (await c.get(f"{EP}/{ep['id']}")).json()["secret"] == rotated["secret"]
        await c.post(f"{EP}/{ep['id']}/test")
    hit = (await receiver.wait_for(1))[0]
    now_s = int(hit.headers["webhook-timestamp"])
    assert signing.verify(rotated["secret"], hit.headers, hit.request.body, now_s).ok
    old = signing.verify(ep["secret"], hit.headers, hit.request.body, now_s)
    assert not old.ok and old.reason == signing.NO_MATCHING_SIGNATURE


# -- deliveries -----------------------------------------------------------------------

async def test_recent_deliveries_last_50_with_filters(app: App, receiver: Receiver) -> None:
    a = await add_endpoint(app, receiver.url, events=["click"])
    b = await add_endpoint(app, receiver.url + "?b", events=["install"])

    async def respond(req: Received, n: int) -> Reply:
        return (500 if "?b" in req.target else 204), [], b""

    receiver.respond = respond
    for _ in range(45):
        await emit(app, "click")
    for _ in range(10):
        await emit(app, "install")
    await receiver.wait_for(55)
    await _wait(lambda: len(_tables(app).recent(app.project_id, Mode.TEST, limit=100)) == 55)
    async with app.client("sk_test") as c:
        recent = (await c.get(DL)).json()["data"]
        assert len(recent) == 50
        times = [d["createdAt"] for d in recent]
        assert times == sorted(times, reverse=True)
        only_b = (await c.get(DL, params={"endpointId": b["id"]})).json()["data"]
        assert len(only_b) == 10 and {d["endpointId"] for d in only_b} == {b["id"]}
        await _wait_status(c, b["id"], "Retrying", 10)
        retrying = (await c.get(DL, params={"status": "retrying"})).json()["data"]
        assert len(retrying) == 10 and all(d["endpointId"] == b["id"] for d in retrying)
        assert all(d["nextAttemptAt"] and d["responseStatus"] == 500 for d in retrying)
        delivered = (await c.get(DL, params={"status": "Delivered",
                                             "endpointId": a["id"]})).json()["data"]
        assert len(delivered) == 45
        assert _error(await c.get(DL, params={"status": "Lost"})) == (400, "validation_error")
        assert _error(await c.get(DL, params={"since": "x"})) == (400, "validation_error")
        r = await c.get(DL, params={"endpointId": "9b9c8d7e-0000-4000-8000-000000000000"})
        assert _error(r) == (404, "not_found")
    async with app.client("sk_live") as c:
        assert (await c.get(DL)).json() == {"data": []}


async def _wait_status(c: Any, endpoint_id: str, status_: str, count: int) -> None:
    with trio.fail_after(5):
        while True:
            rows = (await c.get(DL, params={"endpointId": endpoint_id,
                                            "status": status_})).json()["data"]
            if len(rows) >= count:
                return
            await trio.sleep(0.005)


async def test_delivery_detail_shows_request_and_capped_response(
        app: App, receiver: Receiver) -> None:
    ep = await add_endpoint(app, receiver.url)
    receiver.respond = status(503, b"x" * 10_000, [("retry-after", "120")])
    event = await emit(app, "conversion", data={"name": "purchase", "value": 3})
    hit = (await receiver.wait_for(1))[0]
    await _wait(lambda: bool(deliveries_of(app, event.id))
                and deliveries_of(app, event.id)[0].status.value == "Retrying")
    delivery_id = deliveries_of(app, event.id)[0].id
    async with app.client("sk_test") as c:
        view = (await c.get(f"{DL}/{delivery_id}")).json()
        assert _error(await c.get(f"{DL}/{ep['id']}")) == (404, "not_found")
    async with app.client("sk_live") as c:
        assert _error(await c.get(f"{DL}/{delivery_id}")) == (404, "not_found")
    assert view["id"] == delivery_id == hit.webhook_id
    assert view["status"] == "Retrying" and view["attempts"] == 1
    assert view["event"] == {"id": event.id, "type": "conversion",
                             "createdAt": view["event"]["createdAt"]}
    assert view["endpoint"] == {"id": ep["id"], "url": receiver.url}
    assert view["request"]["body"].encode() == hit.request.body
    assert view["response"] == {"status": 503, "body": "x" * 4096, "truncated": True}
    assert view["error"] == "HTTP 503" and view["durationMs"] >= 0
    last = view["attemptLog"][0]
    assert last["number"] == 1 and last["trigger"] == "scheduled"
    # The schedule's first step (1 min), whatever Retry-After asks (120 s).
    assert view["nextAttemptAt"] > view["lastAttemptAt"]
    d = deliveries_of(app, event.id)[0]
    assert d.next_attempt_at_ms == d.attempts[0].started_at_ms + d.attempts[0].duration_ms \
        + 60_000


async def test_retry_and_resend_only_from_the_right_states(
        app: App, receiver: Receiver) -> None:
    ep = await add_endpoint(app, receiver.url)
    async with app.client("sk_test") as c:
        view = (await c.post(f"{EP}/{ep['id']}/test")).json()
        await receiver.wait_for(1)
        await _wait(lambda: _delivery(app, view["id"]).status.value == "Delivered")
        assert _error(await c.post(f"{DL}/{view['id']}/retry")) == (409, "conflict")
        r = await c.post(f"{DL}/{view['id']}/resend")
        assert r.status_code == 200 and r.json()["status"] == "Sending"
        hits = await receiver.wait_for(2)
        assert hits[1].webhook_id == hits[0].webhook_id == view["id"]
        await _wait(lambda: len(_delivery(app, view["id"]).attempts) == 2)
        final = (await c.get(f"{DL}/{view['id']}")).json()
        assert final["status"] == "Delivered"
        assert [a["trigger"] for a in final["attemptLog"]] == ["scheduled", "manual"]
        missing = "9b9c8d7e-0000-4000-8000-000000000000"
        assert _error(await c.post(f"{DL}/{missing}/resend")) == (404, "not_found")


async def test_delete_stops_events_and_removes_history(app: App, receiver: Receiver) -> None:
    a = await add_endpoint(app, receiver.url)
    b = await add_endpoint(app, receiver.url + "?b")
    event = await emit(app, "open")
    await receiver.wait_for(2)
    await _wait(lambda: all(d.status.value == "Delivered"
                            for d in deliveries_of(app, event.id))
                and len(deliveries_of(app, event.id)) == 2)
    tables = _tables(app)
    async with app.client("sk_test") as c:
        r = await c.delete(f"{EP}/{a['id']}")
        assert r.json() == {"id": a["id"], "deleted": True, "deliveriesRemoved": 1}
        assert _error(await c.get(f"{EP}/{a['id']}")) == (404, "not_found")
        assert [d["endpointId"] for d in (await c.get(DL)).json()["data"]] == [b["id"]]
    kept = deliveries_of(app, event.id)
    assert len(kept) == 1 and tables.event(app.project_id, kept[0].mode, event.id) is not None
    await emit(app, "open")
    await receiver.wait_for(3)
    await trio.sleep(0.1)
    assert len(receiver.hits) == 3 and "?b" in receiver.hits[2].request.target
    async with app.client("sk_test") as c:
        await c.delete(f"{EP}/{b['id']}")
    assert deliveries_of(app, event.id) == []
    assert tables.event(app.project_id, kept[0].mode, event.id) is None  # body gone too


async def test_one_event_id_in_two_modes_sends_each_its_own_body(
        app: App, receiver: Receiver) -> None:
    """A conversion's event id is the one the app sent, so test and live (or two
    projects) may share one: each endpoint gets its own event's body, not the
    first one dispatched under that id (the body cache's key)."""
    await add_endpoint(app, receiver.url, events=["conversion"])
    await add_endpoint(app, receiver.url, key="sk_live", events=["conversion"])
    event_id = "2f0e7c0e-5d1a-4a51-9a55-3c1f4c1d0b2e"
    for mode in ("test", "live"):
        event = OutboxEvent(id=event_id, type=EventType.CONVERSION, project_id=app.project_id,
                            mode=mode, created_at_ms=app.services.clock.now_ms(),
                            data={"name": f"{mode}_purchase"})

        def record(txn: Any, event: OutboxEvent = event) -> None:
            assert app.services.store.wants_webhooks(txn, event.project_id, event.mode)
            app.services.store.append_outbox(txn, event)

        await app.services.store.write(record)
    hits = await receiver.wait_for(2)
    bodies = [json.loads(h.request.body) for h in hits]
    assert sorted((b["env"], b["data"]["name"]) for b in bodies) == [
        ("live", "live_purchase"), ("test", "test_purchase")]


async def test_one_event_id_in_two_projects_sends_each_its_own_body(
        app: App, receiver: Receiver) -> None:
    """The same for two projects in one mode: another project's app may send the
    same conversion id, and its receiver must never get this project's event."""
    await app.services.store.set_plan(app.org_id, Plan.SCALE)
    other, theirs = await tenancy.create_project(app.services.store, app.org_id, "Other",
                                                 system_random, app.services.clock.now_ms())
    await add_endpoint(app, receiver.url + "?mine", events=["conversion"])
    await add_endpoint(app, receiver.url + "?theirs", key=theirs["sk_test"],
                       events=["conversion"])
    event_id = "2f0e7c0e-5d1a-4a51-9a55-3c1f4c1d0b2e"
    for project_id, name in ((app.project_id, "mine"), (other.id, "theirs")):
        event = OutboxEvent(id=event_id, type=EventType.CONVERSION, project_id=project_id,
                            mode="test", created_at_ms=app.services.clock.now_ms(),
                            data={"name": name})

        def record(txn: Any, event: OutboxEvent = event) -> None:
            assert app.services.store.wants_webhooks(txn, event.project_id, event.mode)
            app.services.store.append_outbox(txn, event)

        await app.services.store.write(record)
    hits = await receiver.wait_for(2)
    got = sorted((h.request.target.rsplit("?", 1)[-1], json.loads(h.request.body)["data"]["name"])
                 for h in hits)
    assert got == [("mine", "mine"), ("theirs", "theirs")]


async def test_the_outbox_keeps_one_event_id_of_two_modes_in_one_millisecond(
        store: Any) -> None:
    """The outbox key holds the project and mode: two events with the app's
    same id, same millisecond, test and live, are two entries (keyed by time
    and id alone, the second overwrote the first and its webhooks were never
    sent)."""
    events = [OutboxEvent(id="2f0e7c0e-5d1a-4a51-9a55-3c1f4c1d0b2e",
                          type=EventType.CONVERSION,
                          project_id="0b5c2d52-7c35-4a7e-9d1e-3f8f7c1a2b3c", mode=mode,
                          created_at_ms=1_800_000_000_000, data={"name": mode})
              for mode in ("test", "live")]

    def record(txn: Any) -> None:
        for event in events:
            store.append_outbox(txn, event)

    await store.write(record)
    assert sorted(e.mode for _, e in store.read_outbox()) == ["live", "test"]
