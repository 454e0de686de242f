"""Reads that may take long run in a worker thread (``Services.off_loop``),
never on the event loop every redirect waits on, and skip from the raw bytes
what cannot match: a deliveries listing filtered by status, a links search,
a link's clicks in the debugger, an export's pages. Their answers are the
ones the reads gave on the loop."""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable
from typing import Any

import attrs
import lmdb
import pytest
import trio
import trio.testing

from storage import dashboard_reads, links_store, webhooks_store
from storage.attribution_store import AttributionStore
from storage.codec import encode
from storage.dashboard_reads import clicks_of_link
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import STATUS_MARKS, WebhookStore
from svc_engine.clicks import Click
from svc_engine.errors import RateLimited
from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.webhook_delivery import Attempt, Delivery, DeliveryStatus
from svc_engine.webhook_records import Endpoint
from tests.conftest import App
from tests.dashboard_support import owner, signed_in
from tests.dashboard_webhook_support import make_delivery, make_endpoint
from web import export
from web.dashboard import views_debugger
from web.http import StreamResponse

PROJECT = "0b9c6f0e-5a4e-4d1c-9a7e-3f1e2d4c5b6a"
ORG = "7d2f4a1b-8c3e-4f5a-9b6c-1d2e3f4a5b6c"
DAY = 86_400_000
DAY_0 = 20_500 * DAY  # 2026-02-16 00:00 UTC
FAILED, DELIVERED = DeliveryStatus.FAILED, DeliveryStatus.DELIVERED


def spy(monkeypatch: pytest.MonkeyPatch, owner_: object, name: str) -> list[int]:
    """The threads ``owner_.name`` is called in, one entry a call."""
    seen: list[int] = []
    real = getattr(owner_, name)

    def spied(*args: Any, **kwargs: Any) -> Any:
        seen.append(threading.get_ident())
        return real(*args, **kwargs)

    monkeypatch.setattr(owner_, name, spied)
    return seen


def spy_decodes(monkeypatch: pytest.MonkeyPatch, cls: type) -> list[int]:
    """The threads deliveries are decoded in by storage/webhooks_store.py."""
    seen: list[int] = []
    real = webhooks_store.decode

    def spied(of: Any, raw: bytes) -> Any:
        if of is cls:
            seen.append(threading.get_ident())
        return real(of, raw)

    monkeypatch.setattr(webhooks_store, "decode", spied)
    return seen


def off_the_loop(threads: list[int]) -> bool:
    return bool(threads) and threading.get_ident() not in threads


# -- webhook deliveries filtered by status ---------------------------------------------

ENDPOINT = Endpoint(id=str(uuid.uuid4()), project_id=PROJECT, mode=Mode.LIVE,
                    url="https://hooks.example/x", description=None, events=("click",),
                    secret="whsec_x", created_at_ms=DAY_0, updated_at_ms=DAY_0,
                    accepting_since_ms=DAY_0)


def delivery(i: int, status: DeliveryStatus, response_body: str = "ok") -> Delivery:
    at = DAY_0 + i * 1000
    attempt = Attempt(number=1, trigger="scheduled", started_at_ms=at, duration_ms=40,
                      status_code=200 if status is DELIVERED else 500,
                      kind="delivered" if status is DELIVERED else "http_status",
                      error=None if status is DELIVERED else "HTTP 500",
                      response_body=response_body)
    return Delivery(id=str(uuid.uuid4()), endpoint_id=ENDPOINT.id, event_id=str(uuid.uuid4()),
                    event_type="click", mode=Mode.LIVE, status=status, created_at_ms=at,
                    attempts=(attempt,))


async def stored(store: LmdbStore, deliveries: list[Delivery]) -> WebhookStore:
    tables = WebhookStore(store)

    def op(txn: lmdb.Transaction) -> None:
        tables.put_endpoint(txn, ENDPOINT)
        for d in deliveries:
            tables.add_delivery(txn, PROJECT, d)

    await store.write(op)
    return tables


def test_a_status_mark_is_in_every_stored_delivery_of_its_status() -> None:
    for status in DeliveryStatus:
        raw = encode(delivery(1, status, response_body=""))
        assert [s for s in DeliveryStatus if STATUS_MARKS[s] in raw] == [status]


async def test_a_status_filter_decodes_only_the_deliveries_that_may_have_it(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A listing of a rare status read every delivery's record (up to
    SCAN_CAP, 320-430 ms at scale); now only those whose bytes hold the
    status are decoded (a body holding the same bytes too: then rejected)."""
    made = [delivery(i, FAILED if i % 100 == 7 else DELIVERED,
                     response_body="Failed" if i % 2 else "ok") for i in range(300)]
    lookalike = delivery(300, DELIVERED, response_body="fstatusfFailed")  # the mark's bytes
    tables = await stored(store, [*made, lookalike])
    decodes = spy(monkeypatch, webhooks_store, "decode")
    found = tables.recent(PROJECT, Mode.LIVE, status=FAILED)
    assert [d.id for d in found] == [d.id for d in reversed(made) if d.status is FAILED]
    assert len(decodes) == 4  # the three Failed and the lookalike, not 301
    decodes.clear()
    assert len(tables.recent(PROJECT, Mode.LIVE, status=DELIVERED, limit=10)) == 10
    assert len(tables.recent(PROJECT, Mode.LIVE, limit=10)) == 10


async def test_a_state_not_committed_yet_counts_for_the_status_filter(
        store: LmdbStore) -> None:
    """The owner's newer state wins over the stored bytes, in the thread too."""
    a, b = delivery(1, DELIVERED), delivery(2, FAILED)
    tables = await stored(store, [a, b])
    pending = {bytes.fromhex(a.id.replace("-", "")): attrs.evolve(a, status=FAILED),
               bytes.fromhex(b.id.replace("-", "")): attrs.evolve(b, status=DELIVERED)}
    tables.prefer(pending.get, lambda _: None, lambda: dict(pending))
    for found in (tables.recent(PROJECT, Mode.LIVE, status=FAILED),
                  await tables.recent_off_loop(trio.CapacityLimiter(1), PROJECT, Mode.LIVE,
                                               status=FAILED)):
        assert [(d.id, d.status) for d in found] == [(a.id, FAILED)]


async def test_the_listing_in_a_thread_answers_as_at_the_call(store: LmdbStore) -> None:
    """Its read transaction and the copy of uncommitted states are taken at
    the call, on the loop: a state committed while the read waits for its
    thread is not mixed in."""
    a = delivery(1, DELIVERED)
    tables = await stored(store, [a])
    threads: list[int] = []

    async def late(read: Callable[[], list[Delivery]]) -> list[Delivery]:
        await store.write(lambda txn: tables.save_delivery(txn, a, attrs.evolve(a,
                                                                                status=FAILED)))

        def in_thread() -> list[Delivery]:
            threads.append(threading.get_ident())
            return read()

        return await trio.to_thread.run_sync(in_thread)

    found = await tables.recent_off_loop(trio.CapacityLimiter(1), PROJECT, Mode.LIVE,
                                         status=DELIVERED, run=late)
    assert [d.id for d in found] == [a.id] and off_the_loop(threads)
    assert tables.recent(PROJECT, Mode.LIVE, status=DELIVERED) == []


async def test_a_listing_waiting_for_a_read_thread_holds_no_read_transaction(
        store: LmdbStore) -> None:
    """Its transaction begins once a read thread is its own: queued listings
    hold no LMDB reader slot (there are as many as requests in flight)."""
    a = delivery(1, DELIVERED)
    tables = await stored(store, [a])
    reads = trio.CapacityLimiter(1)
    began: list[int] = []
    real_begin = store.env.begin

    class Env:
        def __getattr__(self, name: str) -> Any:
            return getattr(store.env_real, name)

        def begin(self, **kw: Any) -> Any:
            began.append(1)
            return real_begin(**kw)

    store.env_real = store.env  # type: ignore[attr-defined]
    store.env = Env()  # type: ignore[assignment]
    try:
        async with trio.open_nursery() as nursery:
            await reads.acquire()  # every read thread busy
            nursery.start_soon(lambda: tables.recent_off_loop(reads, PROJECT, Mode.LIVE,
                                                              status=DELIVERED))
            await trio.testing.wait_all_tasks_blocked()
            assert began == []  # waiting, no transaction
            reads.release()
        assert began == [1]
    finally:
        store.env = store.env_real  # type: ignore[attr-defined]


async def test_the_deliveries_listing_by_status_reads_in_a_worker_thread(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    endpoint = await make_endpoint(app)
    failed = await make_delivery(app, endpoint, FAILED)
    await make_delivery(app, endpoint, DELIVERED)
    decodes = spy_decodes(monkeypatch, Delivery)
    async with app.client("sk_test") as c:
        r = await c.get("/v1/webhooks/deliveries", params={"status": "failed"})
    assert r.status_code == 200 and [x["id"] for x in r.json()["data"]] == [failed.id]
    assert off_the_loop(decodes)
    decodes.clear()
    m = await signed_in(app, owner(app))
    r = await m.get("/dashboard/settings/webhooks/deliveries?status=failed")
    assert r.status_code == 200 and failed.id in r.text
    assert off_the_loop(decodes)
    await m.aclose()


# -- links searches -------------------------------------------------------------------------


def link(i: int, **fields: Any) -> Link:
    return Link(id=str(uuid.uuid4()), project_id=PROJECT, mode=Mode.TEST, domain="svc.test",
                slug=f"slug{i:05d}", path=f"/item/{i}", created_at_ms=DAY_0 + i,
                updated_at_ms=DAY_0 + i, **fields)


async def test_a_search_with_a_space_or_non_ascii_decodes_only_what_may_match(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A search with a space or a non-ASCII letter decoded every link it read
    (115 ms for 5,000); now each part's ASCII and caseless runs are looked for
    in the bytes first, and the answers are the same."""
    links = LinksStore(store)
    titles = {7: "Summer Sale 2026", 8: "ZÜRICH Wöchentlich", 9: "日本 Summer", 10: "summer"}
    made = [await links.create(link(i, title=titles.get(i, "Winter coat")), org_id=ORG,
                               quota=None, idem=None) for i in range(200)]
    decodes = spy(monkeypatch, links_store, "decode")
    for query, want, decoded in (("summer sale", [7], 1), ("Zürich", [8], 1),
                                 ("日本 summer", [9], 1), ("sale 2026", [7], 1),
                                 ("ummer", [10, 9, 7], 3), ("wöchentlich", [8], 1),
                                 ("\u00e9\u00e8", [], 200)):  # no run to look for
        decodes.clear()
        page = links.list(PROJECT, "test", limit=50, query=query)
        assert [x.id for x in page.links] == [made[i].id for i in want], query
        assert len(decodes) == decoded, query


async def test_the_links_listing_reads_in_a_worker_thread(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={"path": "/p", "title": "Summer sale"})
        assert r.status_code == 201
        threads = spy(monkeypatch, LinksStore, "list")
        r = await c.get("/v1/links", params={"q": "summer sale"})
    assert r.status_code == 200 and len(r.json()["data"]) == 1
    assert off_the_loop(threads)
    threads.clear()
    m = await signed_in(app, owner(app))
    r = await m.get("/dashboard/links?q=summer+sale")
    assert r.status_code == 200 and "Summer sale" in r.text
    assert off_the_loop(threads)
    await m.aclose()


# -- a link's clicks in the debugger ----------------------------------------------------------


async def link_with_clicks(app: App, count: int) -> Link:
    """A link of the app's project with ``count`` clicks a second apart from DAY_0."""
    async with app.client("sk_test") as c:
        made = (await c.post("/v1/links", json={"path": "/a"})).json()
    link_ = app.services.links.get(made["id"])
    assert link_ is not None
    await write_clicks(app.services.store, link_, [DAY_0 + i * 1000 for i in range(count)])
    return link_


async def write_clicks(store: LmdbStore, link_: Link, times: list[int]) -> list[Click]:
    """Clicks recorded as the redirector records them (with their counters)."""
    attribution = AttributionStore(store, "http://svc.test")
    clicks = [Click(id=str(uuid.uuid4()), link_id=link_.id, project_id=link_.project_id,
                    mode=link_.mode, platform="ios", os_major=18, country="SE",
                    referrer_host=None, at_ms=t) for t in times]
    ops = [attribution.click_op(c, link_, window=None, token=None) for c in clicks]

    def op(txn: lmdb.Transaction) -> None:
        for o in ops:
            o(txn)

    await store.write(op)
    return clicks


async def test_a_links_clicks_are_found_behind_thousands_of_newer_clicks(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """The debugger looked at the project's newest 5,000 clicks only (and found
    none of a link with a million older ones); now the link's day totals say
    which days to read, a click is decoded only when its bytes hold the
    link's id, and a day stops once its clicks are all found."""
    a, b, c = link(1), link(2), link(3)
    mine = await write_clicks(store, a, [DAY_0 + i * 60_000 for i in range(0, 40, 2)])
    await write_clicks(store, b, [DAY_0 + i * 60_000 for i in range(1, 40, 2)]  # interleaved
                       + [DAY_0 + DAY + i * 10_000 for i in range(6000)])      # newer
    decodes = spy(monkeypatch, dashboard_reads, "decode")
    found = clicks_of_link(store, PROJECT, Mode.TEST, a.id, limit=8)
    assert found.clicks == mine[:-9:-1] and found.stopped_at_ms is None
    assert len(decodes) == 8 and found.read == 16  # B's 6,000 on the next day: not read
    everything = clicks_of_link(store, PROJECT, Mode.TEST, a.id, limit=100)
    assert everything.clicks == mine[::-1] and everything.stopped_at_ms is None
    assert everything.read == 40  # A's oldest is the day's first click: nothing else read
    none = clicks_of_link(store, PROJECT, Mode.TEST, c.id)
    assert none.clicks == [] and none.read == 0 and none.stopped_at_ms is None


async def test_a_links_clicks_at_the_edges_of_its_days_are_found(store: LmdbStore) -> None:
    """A day's clicks are read from its last millisecond (23:59:59.999) back
    to its first (00:00:00.000), with other days' clicks either side."""
    a, b = link(1), link(2)
    edges = [DAY_0, DAY_0 + DAY - 1, DAY_0 + DAY, DAY_0 + 2 * DAY - 1]
    mine = await write_clicks(store, a, edges)
    await write_clicks(store, b, [DAY_0 - 1, DAY_0 + DAY - 2, DAY_0 + DAY + 1, DAY_0 + 2 * DAY])
    found = clicks_of_link(store, PROJECT, Mode.TEST, a.id)
    assert found.clicks == mine[::-1] and found.stopped_at_ms is None
    # Each day from its last millisecond to its first: B's click between A's
    # two of the day is read, B's just past either end of the day is not.
    assert found.read == 6


async def test_a_links_clicks_search_stops_and_says_how_far_it_looked(
        store: LmdbStore) -> None:
    a, b = link(1), link(2)
    old = await write_clicks(store, a, [DAY_0 + 5, DAY_0 + 7])
    others = await write_clicks(store, b, [DAY_0 + 1000 + i for i in range(100)])
    found = clicks_of_link(store, PROJECT, Mode.TEST, a.id, scan=50)
    assert found.clicks == [] and found.read == 50
    assert found.stopped_at_ms == others[50].at_ms  # the oldest of the 50 read
    assert clicks_of_link(store, PROJECT, Mode.TEST, a.id, scan=101).clicks == [old[1]]
    assert clicks_of_link(store, PROJECT, Mode.TEST, a.id, scan=102).clicks == old[::-1]


async def test_the_debugger_reads_a_links_clicks_in_a_worker_thread(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    async with app.client("sk_test") as c:
        a = (await c.post("/v1/links", json={"path": "/a"})).json()
        b = (await c.post("/v1/links", json={"path": "/b"})).json()
    link_a, link_b = app.services.links.get(a["id"]), app.services.links.get(b["id"])
    assert link_a is not None and link_b is not None
    await write_clicks(app.services.store, link_a, [DAY_0 + 1000])
    await write_clicks(app.services.store, link_b, [DAY_0 + 5000 + i for i in range(5)])
    threads = spy(monkeypatch, views_debugger, "clicks_of_link")
    m = await signed_in(app, owner(app))
    r = await m.get(f"/dashboard/build/debugger?link={a['id']}")
    assert r.status_code == 200 and "Latest clicks of this link" in r.text
    assert "the search stopped" not in r.text and off_the_loop(threads)
    monkeypatch.setattr(dashboard_reads, "LINK_CLICK_SCAN", 3)
    r = await m.get(f"/dashboard/build/debugger?link={a['id']}")
    assert "No clicks of this link since 16 Feb 2026, 00:00:05 UTC: the search stopped there, " \
        "after reading 3 of the project's clicks, and did not look for older ones." in r.text
    r = await m.get(f"/dashboard/build/debugger?link={b['id']}")
    assert "No other clicks of this link since" in r.text
    await m.aclose()


# -- exports ------------------------------------------------------------------------------


async def body_of(response: StreamResponse, *, head: bool = False) -> bytes:
    sent: list[bytes] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))

    await response.send(send, head=head)
    return b"".join(sent)


async def test_an_export_is_made_in_worker_threads_byte_for_byte_the_same(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A 500-row page took 9 ms typically and up to 46 ms on the loop; now each
    is made in a worker thread, and the body is the same bytes."""
    store, pid = app.services.store, app.project_id
    await link_with_clicks(app, 1234)
    for fmt in ("csv", "ndjson"):
        def chunks(fmt: str = fmt) -> Any:
            return export.chunks("clicks", fmt, export.pages(
                store, "clicks", pid, Mode.TEST, DAY_0, DAY_0 + DAY))

        expected = b"".join(chunks())
        rows = spy(monkeypatch, export, "click_row")
        body = await body_of(StreamResponse(200, export.off_loop_body(app.services, pid,
                                                                      chunks())))
        assert body == expected and len(rows) == 1234 and off_the_loop(rows)
        assert app.services.exports == set()
        monkeypatch.undo()


async def test_one_export_at_a_time_per_project(app: App) -> None:
    """A second export of a project while one streams is 429 with Retry-After;
    the slot is freed however the first ends (done, HEAD, cut)."""
    services, pid = app.services, app.project_id

    def body() -> export.OffLoopBody:
        return export.off_loop_body(services, pid, iter([b"a", b"b"]))

    first = body()
    with pytest.raises(RateLimited) as refused:
        body()
    assert refused.value.retry_after == export.RETRY_AFTER_S
    other = export.off_loop_body(services, str(uuid.uuid4()), iter([b"x"]))  # another project
    assert await body_of(StreamResponse(200, first)) == b"ab"
    assert await body_of(StreamResponse(200, other)) == b"x"
    assert await body_of(StreamResponse(200, body()), head=True) == b""

    async def cut(message: dict[str, Any]) -> None:
        if message.get("body"):
            raise OSError("the client went away")

    with pytest.raises(OSError):
        await StreamResponse(200, body()).send(cut)
    assert services.exports == set()
    assert await body_of(StreamResponse(200, body())) == b"ab"


async def test_the_export_route_streams_off_the_loop_one_at_a_time(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """GET /v1/export/{kind}: pages made in worker threads, the same bytes as
    the pages made in one go, and a second export of the project while one
    streams is 429 rate_limited with Retry-After."""
    store, pid = app.services.store, app.project_id
    async with app.client("sk_test") as c:
        await link_with_clicks(app, 1234)
        expected = b"".join(export.chunks("clicks", "csv", export.pages(
            store, "clicks", pid, Mode.TEST, DAY_0, DAY_0 + DAY)))
        rows = spy(monkeypatch, export, "click_row")
        query = {"format": "csv", "from": "2026-02-16", "to": "2026-02-16"}
        r = await c.get("/v1/export/clicks", params=query)
        assert r.status_code == 200 and r.content == expected and off_the_loop(rows)
        app.services.exports.add(pid)  # as while another export of the project streams
        r = await c.get("/v1/export/clicks", params=query)
        assert r.status_code == 429 and r.json()["error"]["code"] == "rate_limited"
        assert r.headers["retry-after"] == str(export.RETRY_AFTER_S)


async def test_a_client_that_goes_away_mid_export_is_logged_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """A cut connection is the client's choice: one info line, no traceback
    (an error of ours still logs one); the body is closed either way."""
    caplog.set_level(logging.INFO)
    closed: list[str] = []

    class Body:
        def __init__(self, name: str) -> None:
            self.name = name

        def __iter__(self) -> Any:
            return iter([b"a", b"b"])

        def close(self) -> None:
            closed.append(self.name)

    for name, failure in (("gone", trio.BrokenResourceError()), ("ours", RuntimeError("x"))):
        sent = 0

        async def send(message: Any, failure: BaseException = failure) -> None:
            nonlocal sent
            sent += 1
            if message.get("more_body") and sent > 2:
                raise failure

        caplog.clear()
        with pytest.raises(type(failure)):
            await StreamResponse(200, Body(name)).send(send)
        records = [r for r in caplog.records if "streamed response" in r.getMessage()]
        assert len(records) == 1
        assert (records[0].exc_info is None) is (name == "gone"), name
    assert closed == ["gone", "ours"]
