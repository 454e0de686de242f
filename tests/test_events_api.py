"""Custom events through the ASGI front: batch limits, validation that keeps
the good events of a batch and names each bad one (a bad envelope, or a batch
of only bad events, stores nothing), deduplication inside and across batches,
Idempotency-Key replays, unknown installs, and the analytics counts and
exports after each step."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

import attrs
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from actors.clock import SystemClock
from svc_engine.events import utc_day
from svc_engine.links import iso_utc
from tests.conftest import App, running_app
from tests.deferred_helpers import ANDROID_UA, IOS_UA, PLATFORMS, SDK, init_body, new_install
from tests.webhook_receiver_fixture import (
    Receiver,
    add_endpoint,
    make_ca,
    running_receiver,
    webhook_config,
)

DAY_MS = 86_400_000


def event(name: str = "purchase", *, link: str | None = None, at: str | None = None,
          **properties: Any) -> dict[str, Any]:
    e: dict[str, Any] = {"id": str(uuid.uuid4()), "name": name,
                         "occurredAt": at or "2026-09-01T10:00:00Z"}
    if properties:
        e["properties"] = properties
    if link is not None:
        e["linkId"] = link
    return e


class Events:
    """One project's SDK and server sides, with a registered install."""

    def __init__(self, app: App) -> None:
        self.app = app
        self.install = new_install()
        self.now = app.services.clock.now_ms()
        self.today = utc_day(self.now)

    async def start(self) -> Events:
        async with self.app.client("pk_test", **SDK) as c:
            r = await c.post("/v1/sdk/init", json=init_body(self.install, "android"))
        assert r.status_code == 200
        return self

    def at(self, days_ago: int = 0) -> str:
        return iso_utc(self.now - days_ago * DAY_MS)

    async def send(self, events: list[dict[str, Any]], *, install: str | None = None,
                   key: str | None = None, raw: object = None) -> tuple[int, Any, Any]:
        body = raw if raw is not None else {"installId": install or self.install,
                                            "events": events}
        headers = {"idempotency-key": key} if key else {}
        async with self.app.client("pk_test", **SDK, **headers) as c:
            r = await c.post("/v1/sdk/events", content=orjson.dumps(body))
        return r.status_code, r.json(), r

    async def summary(self, **params: str) -> dict[str, Any]:
        async with self.app.client("sk_test") as c:
            r = await c.get("/v1/analytics/summary", params={"from": self.at(3)[:10],
                                                              "to": self.today, **params})
        assert r.status_code == 200, r.text
        return r.json()  # type: ignore[no-any-return]

    async def conversions(self) -> int:
        return int((await self.summary())["conversions"]["total"])

    async def export(self, kind: str, fmt: str = "ndjson", **params: str) -> str:
        async with self.app.client("sk_test") as c:
            r = await c.get(f"/v1/export/{kind}", params={"format": fmt, "from": "2026-01-01",
                                                          **params})
        assert r.status_code == 200, r.text
        return r.text

    async def exported_ids(self) -> list[str]:
        lines = (await self.export("conversions")).splitlines()
        return [orjson.loads(line)["id"] for line in lines]


@pytest.fixture
async def ev(app: App) -> Events:
    return await Events(app).start()


def error(body: Any) -> tuple[str, str | None]:
    return body["error"]["code"], body["error"].get("field")


def ok(accepted: int, duplicates: int, *rejected: tuple[int, str, str]) -> dict[str, Any]:
    """The 200 answer; ``rejected`` as (index, field, message after the field)."""
    return {"accepted": accepted, "duplicates": duplicates, "rejected": [
        {"index": i, "field": f, "code": "validation_error", "message": f"{f}: {m}"}
        for i, f, m in rejected]}


def rejected_total(app: App) -> float:
    families = text_string_to_metric_families(app.front.metrics.render().decode())
    (sample,) = next(f for f in families if f.name == "svc_events_rejected").samples
    return float(sample.value)


# --- batch limits ----------------------------------------------------------------------


@pytest.mark.parametrize(("count", "status"), [(0, 400), (1, 200), (100, 200), (101, 400)])
async def test_batch_limits(ev: Events, count: int, status: int) -> None:
    sent = [event(at=ev.at()) for _ in range(count)]
    code, body, _ = await ev.send(sent)
    assert code == status
    if status == 200:
        assert body == ok(count, 0)
        assert await ev.conversions() == count
        assert sorted(await ev.exported_ids()) == sorted(e["id"] for e in sent)
    else:
        assert error(body) == ("validation_error", "events")
        assert await ev.conversions() == 0
        assert await ev.exported_ids() == []


@pytest.mark.parametrize(("length", "good"), [(0, False), (1, True), (100, True),
                                              (101, False)])
async def test_name_lengths(ev: Events, length: int, good: bool) -> None:
    ok_events = [event("ok", at=ev.at()), event("ok", at=ev.at())]
    code, body, _ = await ev.send([*ok_events, event("n" * length, at=ev.at())])
    assert code == 200
    if good:
        assert body == ok(3, 0)
        assert (await ev.summary())["conversions"]["byName"] == {"ok": 2, "n" * length: 1}
    else:
        # the bad event is named and left out; the good ones are stored
        assert body == ok(2, 0, (2, "events[2].name", "must be 1 to 100 characters"))
        assert (await ev.summary())["conversions"]["byName"] == {"ok": 2}
        assert sorted(await ev.exported_ids()) == sorted(e["id"] for e in ok_events)
        # alone, the bad event refuses its batch
        code, body, _ = await ev.send([event("n" * length, at=ev.at())])
        assert (code, error(body)) == (400, ("validation_error", "events[0].name"))
        assert body["error"]["message"] == "events[0].name: must be 1 to 100 characters"
        assert await ev.conversions() == 2


async def test_non_uuid_link_id(ev: Events) -> None:
    code, body, _ = await ev.send([event(at=ev.at()), event(link="not-a-uuid", at=ev.at())])
    assert (code, body) == (200, ok(1, 0, (1, "events[1].linkId", "must be a UUID")))
    assert "not-a-uuid" not in str(body)  # what the app sent is not echoed
    assert await ev.conversions() == 1


@pytest.mark.parametrize("properties", [[1, 2], "text", 3, True])
async def test_properties_that_are_not_an_object(ev: Events, properties: object) -> None:
    bad = event(at=ev.at())
    bad["properties"] = properties
    code, body, _ = await ev.send([bad])
    assert code == 400 and error(body) == ("validation_error", "events[0].properties")
    assert await ev.conversions() == 0


async def test_other_field_errors_name_each_bad_event(ev: Events) -> None:
    cases: list[tuple[dict[str, Any], str]] = [
        ({"id": "x"}, "id"),
        ({"occurredAt": "yesterday"}, "occurredAt"),
        ({"occurredAt": "2026-02-30T10:00:00Z"}, "occurredAt"),
    ]
    for change, field in cases:
        bad = {**event(at=ev.at()), **change}
        code, body, _ = await ev.send([event(at=ev.at()), bad, {"id": 1}])
        assert code == 200 and body["accepted"] == 1
        assert [(r["index"], r["field"]) for r in body["rejected"]] == [
            (1, f"events[1].{field}"), (2, "events[2].id")]
        # a batch of only bad events names the first, and stores nothing
        code, body, _ = await ev.send([bad, {"id": 1}])
        assert (code, error(body)) == (400, ("validation_error", f"events[0].{field}"))
    assert await ev.conversions() == 3
    # a bad envelope refuses the batch, whatever its events
    for raw, field in [({"installId": "nope", "events": [event()]}, "installId"),
                       ({"installId": ev.install, "events": [event(at=ev.at())] * 101},
                        "events")]:
        code, body, _ = await ev.send([], raw=raw)
        assert (code, error(body)) == (400, ("validation_error", field))
    assert await ev.conversions() == 3


async def test_an_event_with_a_lone_surrogate_is_refused_alone(ev: Events) -> None:
    """Dart's encoder writes a string holding a lone UTF-16 surrogate (an emoji
    cut in half by ``substring``) as a ``\\ud83d`` escape, so the SDK queues
    such an event; orjson refused the whole body (400), and the SDK dropped
    every event of the batch. Now the event that holds one is refused alone,
    in its name or its properties, and the others are stored."""
    good = [event(at=ev.at()) for _ in range(3)]
    in_name, in_property = event("NAME", at=ev.at()), event(at=ev.at(), title="PROP")
    body = orjson.dumps({"installId": ev.install,
                         "events": [good[0], in_name, good[1], in_property, good[2]]})
    body = body.replace(b"NAME", b"cut \\ud83d").replace(b"PROP", b"cut \\ud83d")
    async with ev.app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/events", content=body)
        alone = await c.post("/v1/sdk/events", content=orjson.dumps(
            {"installId": ev.install, "events": [in_name]}).replace(b"NAME", b"\\udc00"))
        constant = await c.post("/v1/sdk/events", content=orjson.dumps(
            {"installId": ev.install, "events": [event(at=ev.at(), revenue="R")]}
        ).replace(b'"R"', b"NaN"))
        # past a double's range: the standard library reads inf (stored as null before)
        huge = await c.post("/v1/sdk/events", content=orjson.dumps(
            {"installId": ev.install, "events": [event(at=ev.at(), revenue="R")]}
        ).replace(b'"R"', b"1e400"))
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["accepted"] == 3
    assert [(x["index"], x["field"]) for x in answer["rejected"]] == [
        (1, "events[1].name"), (3, "events[3].properties")]
    assert (alone.status_code, error(alone.json())) == (400, ("validation_error",
                                                               "events[0].name"))
    assert constant.status_code == 400  # NaN is not JSON, whoever decodes it
    assert (huge.status_code, huge.json()["error"]["code"]) == (400, "validation_error")
    assert sorted(await ev.exported_ids()) == sorted(e["id"] for e in good)


async def test_an_oversize_event_is_refused_and_the_rest_of_its_batch_kept(
        ev: Events) -> None:
    """The SDK cannot measure the 8 KiB of properties; it drops a refused
    batch. So the one event over the limit is named and the others stored."""
    batch = [event("a", at=ev.at()), event("big", at=ev.at(), blob="x" * 8200),
             event("b", at=ev.at(), revenue=2, currency="EUR")]
    assert rejected_total(ev.app) == 0
    code, body, first = await ev.send(batch, key="flush-big")
    assert code == 200
    assert body == ok(2, 0, (1, "events[1].properties", "larger than 8192 bytes as JSON"))
    assert list(body) == ["accepted", "duplicates", "rejected"]
    assert "xxxx" not in first.text  # what the app sent is not echoed
    assert sorted(await ev.exported_ids()) == sorted([batch[0]["id"], batch[2]["id"]])
    summary = (await ev.summary())["conversions"]
    assert summary["byName"] == {"a": 1, "b": 1} and summary["revenue"] == {"EUR": "2"}
    assert rejected_total(ev.app) == 1
    # the retry under the same key: the recorded answer, byte for byte, counted once
    code, _, again = await ev.send(batch, key="flush-big")
    assert code == 200 and again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    assert rejected_total(ev.app) == 1
    # the same batch under a new key: the good ones are duplicates now
    code, body, _ = await ev.send(batch, key="flush-big-2")
    assert body == ok(0, 2, (1, "events[1].properties", "larger than 8192 bytes as JSON"))
    assert rejected_total(ev.app) == 2
    assert await ev.conversions() == 2
    # an unknown install stores nothing, its bad events notwithstanding
    code, body, _ = await ev.send(batch, install=new_install())
    assert (code, error(body)) == (404, ("install_not_found", None))
    assert await ev.conversions() == 2 and rejected_total(ev.app) == 2
    # README: the metric counts events refused, not batches holding some
    two_bad = [event("c", at=ev.at()), event("big", at=ev.at(), blob="x" * 8200),
               event("big", at=ev.at(), blob="y" * 8200)]
    code, body, _ = await ev.send(two_bad, key="two-bad")
    assert code == 200 and len(body["rejected"]) == 2
    assert rejected_total(ev.app) == 4


# --- deduplication and idempotency -------------------------------------------------------


async def test_duplicate_inside_one_batch(ev: Events) -> None:
    a, b = event("a", at=ev.at()), event("b", at=ev.at())
    copy = {**a, "name": "changed"}  # same id: a duplicate whatever it carries
    code, body, _ = await ev.send([a, b, copy, a])
    assert (code, body) == (200, ok(2, 2))
    summary = await ev.summary()
    assert summary["conversions"]["total"] == 2
    assert summary["conversions"]["byName"] == {"a": 1, "b": 1}
    assert sorted(await ev.exported_ids()) == sorted([a["id"], b["id"]])


async def test_duplicate_across_two_batches(ev: Events) -> None:
    a, b, c = (event(at=ev.at()) for _ in range(3))
    assert (await ev.send([a, b]))[:2] == (200, ok(2, 0))
    assert (await ev.send([b, c]))[:2] == (200, ok(1, 1))
    assert (await ev.send([a, b, c]))[:2] == (200, ok(0, 3))
    assert await ev.conversions() == 3
    assert sorted(await ev.exported_ids()) == sorted(e["id"] for e in (a, b, c))


async def test_same_batch_with_same_and_new_idempotency_key(ev: Events) -> None:
    batch = [event(at=ev.at()) for _ in range(5)]
    code, first, r1 = await ev.send(batch, key="flush-1")
    assert (code, first) == (200, ok(5, 0))
    code, _, r2 = await ev.send(batch, key="flush-1")
    assert code == 200 and r2.content == r1.content
    assert r2.headers["idempotent-replayed"] == "true"
    assert await ev.conversions() == 5
    code, again, r3 = await ev.send(batch, key="flush-2")
    assert (code, again) == (200, ok(0, 5))
    assert "idempotent-replayed" not in r3.headers
    assert await ev.conversions() == 5
    # the same key with another batch: stored (events are deduplicated by id;
    # test_a_grown_batch_under_the_same_key_is_stored_not_409)
    code, body, _ = await ev.send([event(at=ev.at())], key="flush-1")
    assert (code, body) == (200, ok(1, 0))
    assert await ev.conversions() == 6


async def test_events_from_an_unknown_install(ev: Events) -> None:
    code, body, _ = await ev.send([event(at=ev.at())], install=new_install())
    assert (code, error(body)) == (404, ("install_not_found", None))
    assert await ev.conversions() == 0
    # another mode's install is unknown in this mode too
    iid = new_install()
    async with ev.app.client("pk_live", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(iid, "ios"))).status_code == 200
    code, body, _ = await ev.send([event(at=ev.at())], install=iid)
    assert (code, error(body)[0]) == (404, "install_not_found")


async def test_keys_of_the_wrong_kind(ev: Events) -> None:
    async with ev.app.client("sk_test") as c:
        r = await c.post("/v1/sdk/events", json={"installId": ev.install, "events": [event()]})
    assert (r.status_code, r.json()["error"]["code"]) == (403, "wrong_key_kind")
    async with ev.app.client("pk_test") as c:
        r = await c.get("/v1/analytics/summary")
    assert (r.status_code, r.json()["error"]["code"]) == (403, "wrong_key_kind")


async def test_a_to_day_before_the_epoch_is_refused_on_every_ranged_read(ev: Events) -> None:
    """Year 1 has no 30 days before it to count the default start back: that
    was a 500 on the analytics and export routes."""
    async with ev.app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/p"})).json()["id"]
        for path in ("/v1/analytics/summary", f"/v1/analytics/links/{link}",
                     f"/v1/analytics/links/{link}/funnel", "/v1/export/clicks"):
            for to in ("0001-01-01", "0001-01-29", "1969-12-31"):
                r = await c.get(path, params={"to": to})
                assert r.status_code == 400, (path, to, r.text)
                assert r.json()["error"]["code"] == "validation_error"
                assert r.json()["error"]["field"] == "to", (path, to)


async def test_every_analytics_read_covers_at_most_366_days(ev: Events) -> None:
    """The summary, a link's summary and its funnel (read on the event loop)
    take at most 366 days; exports have no cap."""
    async with ev.app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/p"})).json()["id"]
        for path in ("/v1/analytics/summary", f"/v1/analytics/links/{link}",
                     f"/v1/analytics/links/{link}/funnel"):
            r = await c.get(path, params={"from": "2020-01-01", "to": "2026-01-01"})
            assert r.status_code == 400 and r.json()["error"]["field"] == "from", path
            r = await c.get(path, params={"from": "2024-01-01", "to": "2024-12-31"})  # 366
            assert r.status_code == 200, (path, r.text)
        r = await c.get("/v1/export/clicks", params={"from": "2020-01-01", "to": "2026-01-01"})
        assert r.status_code == 200


# --- what is stored -----------------------------------------------------------------------


async def test_occurred_at_kept_as_sent_with_receive_time_beside_it(ev: Events) -> None:
    sent_at = iso_utc(ev.now - 2 * DAY_MS).replace("Z", "456+02:00")  # 6 fraction digits
    future = "2999-01-01T00:00:00Z"  # counted on arrival day, stored as sent
    e1, e2 = event("x", at=sent_at, color="red"), event("y", at=future)
    assert (await ev.send([e1, e2]))[0] == 200
    rows = [orjson.loads(line) for line in (await ev.export("conversions")).splitlines()]
    by_id = {row["id"]: row for row in rows}
    assert by_id[e1["id"]]["occurredAt"] == sent_at
    assert by_id[e2["id"]]["occurredAt"] == future
    assert by_id[e1["id"]]["properties"] == {"color": "red"}
    assert by_id[e1["id"]]["installId"] == ev.install and by_id[e1["id"]]["linkId"] is None
    received = by_id[e1["id"]]["receivedAt"]
    assert received.endswith("Z") and received[:10] == ev.today
    days = {d: n for d, n in (await ev.summary())["conversions"]["byDay"].items() if n}
    local_day = utc_day(ev.now - 2 * DAY_MS - 2 * 3_600_000)  # +02:00 is 2 h ahead of UTC
    assert days == ({local_day: 1, ev.today: 1} if local_day != ev.today else {ev.today: 2})
    stored = ev.app.services.store
    from storage.events_store import EventsStore
    from svc_engine.keys import Mode
    got = EventsStore(stored).get(ev.app.project_id, Mode.TEST, ev.install, e1["id"])
    assert got is not None and got.install_id == ev.install
    assert orjson.loads(got.json)["occurredAt"] == sent_at


async def test_revenue_per_currency_and_link_scope(ev: Events) -> None:
    async with ev.app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/p"})).json()
    lid = link["id"]
    batch = [event("purchase", link=lid, at=ev.at(), revenue=0.1, currency="USD"),
             event("purchase", link=lid, at=ev.at(), revenue=0.2, currency="USD"),
             event("purchase", at=ev.at(1), revenue=5, currency="EUR"),
             event("refund", link=lid, at=ev.at(), revenue=-0.05, currency="USD"),
             event("signup", link=lid, at=ev.at(), revenue="12", currency="USD"),  # no revenue
             event("odd", at=ev.at(), revenue=3, currency="usd")]  # not ISO 4217 shaped
    assert (await ev.send(batch))[:2] == (200, ok(6, 0))
    project = (await ev.summary())["conversions"]
    assert project["revenue"] == {"EUR": "5", "USD": "0.25"}
    assert project["byName"] == {"purchase": 3, "odd": 1, "refund": 1, "signup": 1}
    assert project["total"] == 6 == sum(project["byDay"].values())
    assert project["byDay"][ev.today] == 5
    one = (await ev.summary(linkId=lid))["conversions"]
    assert one["total"] == 4 and one["revenue"] == {"USD": "0.25"}
    assert one["byName"] == {"purchase": 2, "refund": 1, "signup": 1}
    async with ev.app.client("sk_test") as c:
        r = await c.get(f"/v1/analytics/links/{lid}",
                        params={"from": ev.at(3)[:10], "to": ev.today})
        assert r.json()["conversions"] == one
        funnel = (await c.get(f"/v1/analytics/links/{lid}/funnel")).json()
    assert funnel["conversions"] == 4 and funnel["linkId"] == lid


async def test_revenue_totals_do_not_depend_on_how_events_were_batched(ev: Events) -> None:
    """Sums kept with 60 digits, in a batch as across batches: the same
    amounts give the same total (28 digits once dropped the small one)."""
    big, small = "123456789012.5", "1.5e-17"
    together = [event("buy", at=ev.at(2), revenue=float(big), currency="GBP"),
                event("buy", at=ev.at(2), revenue=float(small), currency="GBP")]
    assert (await ev.send(together))[0] == 200
    for amount in (big, small):
        assert (await ev.send([event("buy", at=ev.at(3), revenue=float(amount),
                                     currency="SEK")]))[0] == 200
    async with ev.app.client("sk_test") as c:
        day = {d: (await c.get("/v1/analytics/summary", params={"from": ev.at(d)[:10],
                                                                 "to": ev.at(d)[:10]})
                   ).json()["conversions"]["revenue"] for d in (2, 3)}
    assert day[2]["GBP"] == day[3]["SEK"], day
    assert day[2]["GBP"].rstrip("0").endswith("500000000000000015"), day


async def test_top_keeps_each_breakdowns_largest_values(ev: Events) -> None:
    async with ev.app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/p"})).json()["id"]
    names = ["a"] * 3 + ["b"] * 2 + ["c", "d"]
    assert (await ev.send([event(n, at=ev.at(), link=link) for n in names]))[0] == 200
    top = (await ev.summary(top="2"))["conversions"]
    assert top["byName"] == {"a": 3, "b": 2} and top["total"] == 7
    assert top["omitted"] == {"byName": {"values": 2, "count": 2}}
    assert "omitted" not in (await ev.summary())["conversions"]
    async with ev.app.client("sk_test") as c:
        one = (await c.get(f"/v1/analytics/links/{link}", params={"top": "1"})).json()
        assert one["conversions"]["byName"] == {"a": 3}
        assert one["clicks"]["omitted"] == {}
        for bad in ("0", "1001", "x"):
            for path in ("/v1/analytics/summary", f"/v1/analytics/links/{link}"):
                r = await c.get(path, params={"top": bad})
                assert (r.status_code, r.json()["error"]["code"], r.json()["error"]["field"]) \
                    == (400, "validation_error", "top")


async def test_outbox_gets_a_conversion_per_new_event_when_an_endpoint_exists(
        store: Any) -> None:
    from storage import layout
    from storage.event_records import NewEvents, encode_all
    from storage.events_store import EventsStore
    from svc_engine.event_batch import parse_event_rows
    from svc_engine.installs import Install
    from svc_engine.keys import Mode

    project, iid = str(uuid.uuid4()), new_install()
    install = Install(install_id=iid, project_id=project, mode=Mode.LIVE, platform="ios",
                      created_at_ms=1)
    from storage.codec import encode

    await store.write(lambda txn: txn.put(layout.scope(project, "live") + layout.uid(iid),
                                          encode(install), db=store.db(b"installs")))
    events = EventsStore(store)

    async def send(items: list[dict[str, Any]]) -> Any:
        rows = parse_event_rows({"installId": iid, "events": items}, now_ms=10**13,
                                encode_all=encode_all)
        new = NewEvents.of(rows, received_at_ms=10**13)
        return await events.record_batch(project_id=project, mode=Mode.LIVE, install_id=iid,
                                         events=new, idem=None)

    first = await send([event("a")])
    assert first.accepted == 1 and not first.published and store.read_outbox() == []
    await store.write(lambda txn: txn.put(layout.scope(project, "live") + b"E" * 16, b"x",
                                          db=store.db(b"endpoints")))
    items = [event("b", currency="USD", revenue=2), event("c")]
    result = await send([*items, items[0]])
    assert (result.accepted, result.duplicates, result.published) == (2, 1, True)
    queued = [ev for _, ev in store.read_outbox()]
    assert sorted((q.type.value, q.id, q.mode, q.project_id) for q in queued) == sorted(
        ("conversion", i["id"], "live", project) for i in items)
    data = next(q.data for q in queued if q.id == items[0]["id"])
    assert data["name"] == "b" and data["properties"] == {"currency": "USD", "revenue": 2}
    assert data["installId"] == iid and data["occurredAt"] == "2026-09-01T10:00:00.000Z"
    assert (await send(items)).published is False  # nothing new, nothing queued


# --- analytics of clicks, installs and opens ---------------------------------------------------


async def test_analytics_of_clicks_installs_opens_and_handoffs(ev: Events) -> None:
    app = ev.app
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        link = (await c.post("/v1/links", json={"path": "/x"})).json()
    lid = link["id"]
    taps = [(IOS_UA, "SE", "https://news.example.com/a?b"), (ANDROID_UA, "NO", None),
            (ANDROID_UA, "", "https://m.social.example/x")]
    for ua, country, referrer in taps:
        headers = {"user-agent": ua, "cf-ipcountry": country}
        if referrer:
            headers["referer"] = referrer
        async with app.client(**headers) as c:
            assert (await c.get(f"/{link['slug']}")).status_code in (200, 302)
    ios = new_install()
    async with app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(ios, "ios"))).status_code == 200
        r = await c.post("/v1/sdk/resolve", json={"url": link["url"], "installId": ios})
        assert r.status_code == 200
    async with app.client("sk_test") as c:
        user = str(uuid.uuid4())
        r = await c.post("/v1/handoffs", json={"linkId": lid, "userId": user})
        assert r.status_code == 201
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": ios})
        assert r.json()["link"]["linkId"] == lid
    project = await ev.summary()
    clicks = project["clicks"]
    assert clicks["total"] == 3 == sum(clicks["byDay"].values())
    assert clicks["byPlatform"] == {"android": 2, "ios": 1}
    assert clicks["byCountry"] == {"NO": 1, "SE": 1, "unknown": 1}
    assert clicks["byReferrer"] == {"direct": 1, "m.social.example": 1, "news.example.com": 1}
    installs = project["installs"]
    assert installs["total"] == 2 and installs["unattributed"] == 2  # ev.install and ios
    assert installs["byConfidence"] == {"unattributed": 2}
    assert installs["byMethod"] == {"none": 2}
    assert sum(installs["byPlatform"].values()) == installs["total"]
    opens = project["opens"]
    assert opens["total"] == 2
    assert opens["byMethod"] == {"authenticated_handoff": 1, "universal_link": 1}
    assert project["handoffOpens"]["total"] == 1
    assert project["handoffOpens"]["byDay"][ev.today] == 1
    for metric in ("clicks", "opens", "installs", "conversions"):
        m = project[metric]
        assert sum(m["byDay"].values()) == m["total"]
        for name, breakdown in m.items():
            if name.startswith("by") and name != "byDay":
                assert sum(breakdown.values()) == m["total"], (metric, name)
    one = await ev.summary(linkId=lid)
    assert one["clicks"]["total"] == 3 and one["installs"]["total"] == 0  # none attributed
    assert one["opens"]["total"] == 2
    async with app.client("sk_test") as c:
        funnel = (await c.get(f"/v1/analytics/links/{lid}/funnel")).json()
    assert {k: funnel[k] for k in ("clicks", "installs", "opens", "conversions")} == {
        "clicks": 3, "installs": 0, "opens": 2, "conversions": 0}
    # exports of the same records
    assert len((await ev.export("clicks")).splitlines()) == 3
    assert "user-agent" not in (await ev.export("clicks")).lower()
    opens_csv = list(csv.reader(io.StringIO(await ev.export("opens", "csv"))))
    assert opens_csv[0] == ["id", "openedAt", "linkId", "installId", "platform", "method"]
    assert sorted(row[5] for row in opens_csv[1:]) == ["authenticated_handoff", "universal_link"]
    installs_csv = list(csv.reader(io.StringIO(await ev.export("installs", "csv"))))
    assert len(installs_csv) == 3
    assert {row[0] for row in installs_csv[1:]} == {ev.install, ios}
    ios_row = next(r for r in installs_csv[1:] if r[0] == ios)
    assert ios_row[4] == "deterministic" and ios_row[3] == lid  # upgraded by the handoff
    assert ios_row[5] == "authenticated_handoff" and ios_row[6] and ios_row[7] == "true"
    # a later launch of an unknown install registers it, listed but not counted
    later = new_install()
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/init", json=init_body(later, "ios", first=False))
        assert r.status_code == 200
    rows = {orjson.loads(x)["installId"]: orjson.loads(x)
            for x in (await ev.export("installs")).splitlines()}
    assert rows[later]["firstLaunch"] is False and rows[ios]["firstLaunch"] is True
    assert (await ev.summary())["installs"]["total"] == sum(
        r["firstLaunch"] for r in rows.values())


def test_a_click_stored_with_a_made_up_huge_version_exports() -> None:
    """Taps once kept any version a user agent claimed; past 64 bits the
    NDJSON encoder failed and the export broke for that whole range."""
    from svc_engine.clicks import Click
    from svc_engine.keys import Mode
    from web.export import click_row

    click = Click(id=str(uuid.uuid4()), link_id=str(uuid.uuid4()), project_id="p",
                  mode=Mode.TEST, platform="android", os_major=10**20, country=None,
                  referrer_host=None, at_ms=1)
    row = click_row(click)
    assert row["osMajor"] is None and orjson.dumps(row)
    assert click_row(attrs.evolve(click, os_major=17))["osMajor"] == 17


async def test_analytics_query_validation(ev: Events) -> None:
    async with ev.app.client("sk_test") as c:
        for params, field in [({"from": "2026-13-01"}, "from"), ({"to": "tomorrow"}, "to"),
                              ({"from": "2026-05-02", "to": "2026-05-01"}, "from"),
                              ({"from": "2020-01-01", "to": "2026-01-01"}, "from"),
                              ({"linkId": "x"}, "linkId")]:
            r = await c.get("/v1/analytics/summary", params=params)
            assert (r.status_code, r.json()["error"].get("field")) == (400, field), params
        r = await c.get(f"/v1/analytics/links/{uuid.uuid4()}/funnel")
        assert r.status_code == 404
        r = await c.get("/v1/analytics/summary", params={"from": "2026-01-01", "to": "2026-01-01"})
        body = r.json()
        assert list(body["clicks"]["byDay"]) == ["2026-01-01"]
        default = (await c.get("/v1/analytics/summary")).json()
        assert len(default["conversions"]["byDay"]) == 30 and default["to"] == ev.today
        r = await c.get("/v1/export/everything")
        assert (r.status_code, r.json()["error"]["field"]) == (400, "kind")
        r = await c.get("/v1/export/clicks", params={"format": "xml"})
        assert (r.status_code, r.json()["error"]["field"]) == (400, "format")


# --- exports ----------------------------------------------------------------------------------


async def test_conversion_export_in_both_formats_over_many_pages(ev: Events) -> None:
    sent: list[dict[str, Any]] = []
    for i in range(6):
        batch = [event(f"n{j % 3}", at=iso_utc(ev.now - DAY_MS + i * 1000 + j),
                       n=j, tags=["a", "b"]) for j in range(100)]
        assert (await ev.send(batch))[:2] == (200, ok(100, 0))
        sent += batch
    lines = (await ev.export("conversions")).splitlines()
    assert [orjson.loads(x)["id"] for x in lines] == [e["id"] for e in sent]  # time order
    first = orjson.loads(lines[0])
    assert set(first) == {"id", "occurredAt", "receivedAt", "name", "linkId", "installId",
                          "properties"}
    assert first["properties"] == {"n": 0, "tags": ["a", "b"]}
    rows = list(csv.DictReader(io.StringIO(await ev.export("conversions", "csv"))))
    assert [r["id"] for r in rows] == [e["id"] for e in sent]
    assert orjson.loads(rows[5]["properties"]) == {"n": 5, "tags": ["a", "b"]}
    assert rows[5]["linkId"] == "" and rows[5]["name"] == "n2"
    # the range filters by the day the event occurred
    yesterday = utc_day(ev.now - DAY_MS)
    expected = [e["id"] for e in sent if e["occurredAt"][:10] == yesterday]
    exported = (await ev.export("conversions", **{"from": yesterday, "to": yesterday}))
    assert [orjson.loads(x)["id"] for x in exported.splitlines()] == expected
    older = utc_day(ev.now - 5 * DAY_MS)
    assert await ev.export("conversions", **{"from": older, "to": older}) == ""
    async with ev.app.client("sk_test") as c:
        r = await c.get("/v1/export/conversions", params={"format": "csv"})
    assert r.headers["content-type"].startswith("text/csv")
    assert "attachment" in r.headers["content-disposition"]


async def test_a_csv_cell_a_spreadsheet_would_run_as_a_formula_is_text(ev: Events) -> None:
    names = ['=HYPERLINK("http://evil.example","x")', "+cmd", "-2+3", "@SUM(A1)", "\tTAB",
             "\rCR", "plain", "a=b"]
    at = iso_utc(ev.now - DAY_MS)
    batch = [event(name, at=at) for name in names]
    assert (await ev.send(batch))[0] == 200
    rows = list(csv.DictReader(io.StringIO(await ev.export("conversions", "csv"))))
    assert sorted(r["name"] for r in rows) == sorted(
        ["'" + n for n in names[:6]] + ["plain", "a=b"])
    assert {orjson.loads(x)["name"] for x in (await ev.export("conversions")).splitlines()
            } == set(names)  # NDJSON as sent


# --- retention ---------------------------------------------------------------------------------


async def test_retention_purges_raw_events_and_keeps_aggregates(ev: Events) -> None:
    from storage.events_store import EventsStore
    from svc_engine.keys import Mode
    from web.housekeeping import EVENTS_RETENTION, Housekeeper

    old = [event(at=ev.at()) for _ in range(3)]
    assert (await ev.send(old))[0] == 200
    store = EventsStore(ev.app.services.store)
    # nothing is older than the cutoff yet
    assert await store.purge(ev.now - DAY_MS) == 0
    # events received before the cutoff go, with their dedup entries, in bounded ops
    assert await store.purge(ev.app.services.clock.now_ms() + 1, limit=2) == 3
    assert await ev.exported_ids() == []
    assert store.get(ev.app.project_id, Mode.TEST, ev.install, old[0]["id"]) is None
    assert await ev.conversions() == 3  # aggregates are kept
    assert EVENTS_RETENTION in Housekeeper(ev.app.services).jobs
    # dedup holds as long as the raw event: a purged id is new again, a kept one is not
    kept = event(at=ev.at())
    assert (await ev.send([kept]))[:2] == (200, ok(1, 0))
    code, body, _ = await ev.send([old[0], kept])
    assert (code, body) == (200, ok(1, 1))


async def test_a_retention_below_one_day_keeps_raw_events_forever(ev: Events) -> None:
    """README: ``SVC_EVENT_RETENTION_DAYS`` below 1 keeps raw events (and
    their deduplication) forever; 1 keeps a day's."""
    import attrs

    from web.housekeeping import EVENTS_RETENTION, Housekeeper

    sent = [event(at=ev.at()) for _ in range(3)]
    assert (await ev.send(sent))[0] == 200
    services = ev.app.services
    now = services.clock.now_ms()
    for days, later, left in ((0, 400 * DAY_MS, 3), (1, DAY_MS - 1_000, 3), (1, DAY_MS + 1, 0)):
        services.config = attrs.evolve(services.config, event_retention_days=days)
        _, job = Housekeeper(services).jobs[EVENTS_RETENTION]
        await job(now + later)
        assert len(await ev.exported_ids()) == left, (days, later)
        if left:
            assert (await ev.send([sent[0]]))[1] == ok(0, 1)  # still a duplicate


async def test_an_event_received_exactly_the_retention_ago_is_kept(ev: Events) -> None:
    """Purged once received *more than* the retention ago: at exactly N days
    it is still stored, and still a duplicate when sent again; a millisecond
    later it is gone."""
    import attrs

    from storage.events_store import EventsStore
    from svc_engine.keys import Mode
    from web.housekeeping import EVENTS_RETENTION, Housekeeper

    sent = [event(at=ev.at())]
    assert (await ev.send(sent))[0] == 200
    services = ev.app.services
    stored = EventsStore(services.store).get(ev.app.project_id, Mode.TEST, ev.install,
                                             sent[0]["id"])
    assert stored is not None
    services.config = attrs.evolve(services.config, event_retention_days=1)
    _, job = Housekeeper(services).jobs[EVENTS_RETENTION]
    await job(stored.received_at_ms + DAY_MS)
    assert len(await ev.exported_ids()) == 1
    assert (await ev.send(sent))[1] == ok(0, 1)
    await job(stored.received_at_ms + DAY_MS + 1)
    assert await ev.exported_ids() == []


async def test_purge_keeps_late_arrivals_for_their_whole_period(ev: Events) -> None:
    from storage.events_store import EventsStore
    from svc_engine.keys import Mode

    store = EventsStore(ev.app.services.store)
    late = event(at=iso_utc(ev.now - 200 * DAY_MS))  # occurred long ago, received now
    assert (await ev.send([late]))[0] == 200
    # the cutoff is past when it occurred, not when it was received: kept
    assert await store.purge(ev.now - 90 * DAY_MS) == 0
    assert store.get(ev.app.project_id, Mode.TEST, ev.install, late["id"]) is not None
    assert (await ev.send([late]))[1] == ok(0, 1)


async def test_dedup_is_per_install(ev: Events) -> None:
    other = new_install()
    async with ev.app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(other, "ios"))).status_code == 200
    e = event(at=ev.at())
    assert (await ev.send([e]))[1] == ok(1, 0)
    assert (await ev.send([e]))[1] == ok(0, 1)
    # a working SDK never reuses an id across installs; if one did, both are kept
    assert (await ev.send([e], install=other))[1] == ok(1, 0)


# --- the benchmark's parse-only endpoint ------------------------------------------------------


async def test_parse_only_endpoint_exists_only_when_asked(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    import httpx

    from web.front import Front

    body = {"installId": new_install(), "events": [event(), event()]}
    async with app.client() as c:
        assert (await c.post("/v1/bench/parse-only", json=body)).status_code == 404
    monkeypatch.setenv("SVC_BENCH_ENDPOINTS", "1")
    front = Front(app.services)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=front),
                                 base_url="http://svc.test") as c:
        r = await c.post("/v1/bench/parse-only", json=body)
    assert (r.status_code, r.json()) == (200, {"accepted": 2})


# --- each stored event goes to the webhook pipeline as a conversion -------------------------


@contextlib.asynccontextmanager
async def _with_receiver(store: Any, data_dir: str, tmp_path: Any
                         ) -> AsyncIterator[tuple[App, Receiver, Events]]:
    """The service with webhooks on, a registered install, and a local HTTPS
    receiver (no endpoint added yet)."""
    ca, bundle = make_ca(tmp_path)
    clock = SystemClock()
    async with running_receiver(ca, clock) as receiver, \
            running_app(store, webhook_config(data_dir, bundle), clock) as app:
        yield app, receiver, await Events(app).start()


async def test_stored_events_reach_a_webhook_endpoint_as_conversions(
        store: Any, data_dir: str, tmp_path: Any) -> None:
    async with _with_receiver(store, data_dir, tmp_path) as (app, receiver, ev):
        await add_endpoint(app, receiver.url, events=["conversion"])
        a = event("purchase", at=ev.at(), revenue=3, currency="EUR")
        b = event("signup", at=ev.at())
        assert (await ev.send([a, b, a]))[1] == ok(2, 1)
        hits = list(await receiver.wait_for(2))
        assert (await ev.send([a]))[1] == ok(0, 1)
        # the duplicate is not published again: a later event is the third
        # delivery made (the outbox is read in order), and the third one seen
        c = event("later", at=ev.at())
        assert (await ev.send([c]))[1] == ok(1, 0)
        later = await receiver.wait_for(3)
        await app.flush()
        async with app.client("sk_test") as api:
            made = (await api.get("/v1/webhooks/deliveries")).json()["data"]
    assert len(made) == 3 and len(later) == 3
    assert json.loads(later[2].request.body)["id"] == c["id"]
    bodies = sorted((json.loads(h.request.body) for h in hits), key=lambda p: p["data"]["name"])
    assert [p["type"] for p in bodies] == ["conversion", "conversion"]
    assert [p["id"] for p in bodies] == [a["id"], b["id"]]
    data = bodies[0]["data"]
    assert data["eventId"] == a["id"] and data["installId"] == ev.install
    assert data["properties"] == {"revenue": 3, "currency": "EUR"} and data["linkId"] is None
    assert bodies[0]["env"] == "test" and bodies[0]["projectId"] == app.project_id


async def test_an_event_id_already_sent_is_not_sent_again(
        store: Any, data_dir: str, tmp_path: Any) -> None:
    """The envelope's ``id`` names one app event of a project and mode: the
    first event with an ID is sent; another install's event with that ID, or
    the same install's with another ``occurredAt``, is stored and counted
    (dedup is per install and time) but not sent again under that ID."""
    async with _with_receiver(store, data_dir, tmp_path) as (app, receiver, ev):
        other = new_install()
        async with app.client("pk_test", **SDK) as c:
            assert (await c.post("/v1/sdk/init", json=init_body(other, "ios"))).status_code == 200
        await add_endpoint(app, receiver.url, events=["conversion"])
        a = event("purchase", at=ev.at())
        assert (await ev.send([a]))[1] == ok(1, 0)
        await receiver.wait_for(1)
        assert (await ev.send([{**a, "name": "refund"}], install=other))[1] == ok(1, 0)
        assert (await ev.send([{**a, "occurredAt": ev.at(1)}]))[1] == ok(1, 0)
        later = event("later", at=ev.at())
        assert (await ev.send([later]))[1] == ok(1, 0)
        hits = await receiver.wait_for(2)
        await app.flush()
        async with app.client("sk_test") as api:
            made = (await api.get("/v1/webhooks/deliveries")).json()["data"]
        conversions = await ev.conversions()
    sent = [json.loads(h.request.body) for h in hits]
    assert [(p["id"], p["data"]["name"]) for p in sent] == [(a["id"], "purchase"),
                                                            (later["id"], "later")]
    assert len(made) == 2
    assert conversions == 4


async def test_export_is_streamed_a_page_at_a_time(ev: Events) -> None:
    for _ in range(6):
        assert (await ev.send([event(at=ev.at()) for _ in range(100)]))[0] == 200
    messages: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": "/v1/export/conversions",
             "query_string": b"from=2026-01-01", "headers": [
                 (b"authorization", f"Bearer {ev.app.keys['sk_test']}".encode())]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        messages.append(message)

    await ev.app.front(scope, receive, send)
    start, *bodies = messages
    assert start["status"] == 200
    assert not any(k == b"content-length" for k, _ in start["headers"])
    chunks = [m["body"] for m in bodies if m["body"]]
    assert [len(c.splitlines()) for c in chunks] == [500, 100]  # one chunk per page
    assert all(m["more_body"] for m in bodies[:-1]) and bodies[-1]["more_body"] is False


async def test_a_grown_batch_under_the_same_key_is_stored_not_409(ev: Events) -> None:
    """The same Idempotency-Key with another batch (an SDK that kept its key
    across a backoff while its queue grew) was 409, which the SDK drops with
    the new events. Events are deduplicated by their ids: the batch is stored."""
    first = [event(at=ev.at()) for _ in range(3)]
    code, body, _ = await ev.send(first, key="flush-1")
    assert (code, body) == (200, ok(3, 0))
    code, body, _ = await ev.send([*first, event(at=ev.at())], key="flush-1")
    assert (code, body) == (200, ok(1, 3))
    code, body, _ = await ev.send(first, key="flush-1")
    assert (code, body) == (200, ok(0, 3))
    assert await ev.conversions() == 4
