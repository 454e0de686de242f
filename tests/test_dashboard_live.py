"""Live events in the dashboard, in-process: the page, the 5-second poll's
JSON, the install walk it skips, and the reads behind it."""

from __future__ import annotations

import re
import uuid
from typing import Any

from storage import dashboard_reads
from svc_engine.events import utc_day
from svc_engine.keys import Mode
from svc_engine.links import iso_utc
from svc_engine.records import Role
from tests.conftest import App
from tests.dashboard_support import Member, add_user, browser, owner, signed_in
from tests.deferred_helpers import (
    ANDROID_UA,
    IOS_UA,
    PLATFORMS,
    SDK,
    init_body,
    new_install,
    referrer_from_location,
)

ROW_KEY = re.compile(r'<tr data-key="(\w+):([0-9a-f-]{36})">')


async def setup(app: App) -> dict[str, Any]:
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        r = await c.post("/v1/links", json={"path": "/live", "title": "Live link"})
    return r.json()  # type: ignore[no-any-return]


async def tap(app: App, slug: str, ua: str = IOS_UA, **headers: str) -> str:
    async with app.client(**{"user-agent": ua, **headers}) as c:
        return str((await c.get(f"/{slug}")).headers.get("location", ""))


async def every_kind(app: App, ln: dict[str, Any]) -> str:
    """A click, an install from it, an open and a conversion; the install id."""
    location = await tap(app, ln["slug"], ANDROID_UA, **{"cf-ipcountry": "DE"})
    install = new_install()
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(
            install, "android", referrer=referrer_from_location(location)))
        await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": install})
        r = await c.post("/v1/sdk/events", json={"installId": install, "events": [{
            "id": str(uuid.uuid4()), "name": "purchase", "linkId": ln["id"],
            "occurredAt": iso_utc(app.services.clock.now_ms()),
            "properties": {"revenue": 12.5, "currency": "EUR"}}]})
        assert r.status_code == 200, r.text
    await app.flush()
    return install


async def poll(m: Member, **params: object) -> dict[str, Any]:
    query = "&".join(f"{k}={v}" for k, v in params.items())
    r = await m.get(f"/dashboard/live/events?{query}")
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    return r.json()  # type: ignore[no-any-return]


async def test_the_page_lists_every_kind_of_event_newest_first(app: App) -> None:
    ln = await setup(app)
    install = await every_kind(app, ln)
    m = await signed_in(app, owner(app))
    r = await m.get("/dashboard/live")
    assert r.status_code == 200
    kinds = [k for k, _ in ROW_KEY.findall(r.text)]
    assert sorted(kinds) == ["click", "conversion", "install", "open"]
    assert kinds[0] in ("conversion", "open") and kinds[-1] == "click"
    page = r.text
    assert "Android 10 · DE" in page and "Android · deterministic · install referrer" in page
    assert "Android · app link" in page and "purchase · 12.5 EUR" in page
    assert f"/dashboard/build/debugger?install={install}#install-result" in page
    assert re.search(r"/dashboard/build/debugger\?click=[0-9a-f-]{36}&amp;at=\d+#click-result",
                     page)
    # the poll's script, its settings, and a way forward without JavaScript
    assert re.search(r'<script src="/dashboard/static/live.js\?v=\w+" defer></script>', page)
    assert 'data-poll="/dashboard/live/events"' in page and 'data-every="5"' in page
    assert "<noscript>" in page and 'href="/dashboard/live"' in page
    assert "Mozilla" not in page and "127.0.0.1" not in page
    # each row names its link, the project's own, with a way to it
    assert page.count(f'<a href="/dashboard/links/{ln["id"]}">Live link</a>') >= 3
    assert "Deleted or unknown link" not in page
    await m.aclose()


async def test_the_poll_answers_what_came_since(app: App) -> None:
    ln = await setup(app)
    before = app.services.clock.now_ms()
    await tap(app, ln["slug"])
    await app.flush()
    m = await signed_in(app, owner(app))
    first = await poll(m, after=0)
    assert [k.split(":")[0] for k in first["keys"]] == ["click"]
    # an event committed after a newer one the page shows: a poll reads back
    # LAG_MS (10 s) before the newest time it has, and no further
    assert (await poll(m, after=before + 9_000))["keys"] == first["keys"]
    done = app.services.clock.now_ms()
    assert (await poll(m, after=done + 11_000))["keys"] == []
    assert first["workspace"] == f"{app.project_id}:test"
    assert first["html"].count("<tr data-key=") == 1 and "iOS 26" in first["html"]
    # later: the same click is within the lag window, a new one is added
    later = app.services.clock.now_ms()
    await tap(app, ln["slug"], ANDROID_UA)
    await app.flush()
    second = await poll(m, after=later, im=first["im"])
    kinds = [k.split(":")[0] for k in second["keys"]]
    assert kinds.count("click") >= 1 and "Android 10" in second["html"]
    assert second["after"] >= later
    # a poll from far in the future answers nothing new
    assert (await poll(m, after=later + 3_600_000, im=second["im"]))["keys"] == []
    assert (await poll(m, after="junk"))["keys"]                   # read as 0
    await m.aclose()


async def test_installs_are_read_only_when_the_counter_moved(app: App) -> None:
    await setup(app)
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(new_install(), "ios"))
    m = await signed_in(app, owner(app))
    first = await poll(m, after=0)
    assert [k.split(":")[0] for k in first["keys"]] == ["install"]
    assert first["im"].endswith(":1")
    # the same marker: the walk of installs is skipped, so none is answered
    assert (await poll(m, after=0, im=first["im"]))["keys"] == []
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(new_install(), "android"))
    again = await poll(m, after=0, im=first["im"])
    assert again["im"].endswith(":2") and len(again["keys"]) == 2
    assert "unattributed" in again["html"]
    await m.aclose()


async def test_the_first_install_of_the_day_moves_the_marker_of_none(app: App) -> None:
    """A page opened before the day's first install holds the marker of no
    install: the first one must change it, or the poll skips the walk."""
    await setup(app)
    m = await signed_in(app, owner(app))
    empty = await poll(m, after=0)
    day = utc_day(app.services.clock.now_ms())
    assert empty["keys"] == [] and empty["im"] == f"{day}:0"
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(new_install(), "ios"))
    first = await poll(m, after=0, im=empty["im"])
    assert [k.split(":")[0] for k in first["keys"]] == ["install"]
    assert first["im"] == f"{day}:1"
    await m.aclose()


async def test_the_feed_follows_the_mode_and_needs_a_session(app: App) -> None:
    ln = await setup(app)
    await tap(app, ln["slug"])
    await app.flush()
    m = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    assert len((await poll(m, after=0))["keys"]) == 1               # everyone may watch
    assert (await poll(m, after=10**26))["keys"] == []  # past any time: nothing, no error
    await m.post("/dashboard/mode", {"mode": "live"})
    live = await poll(m, after=0)
    assert live["keys"] == [] and live["workspace"] == f"{app.project_id}:live"
    page = await m.get("/dashboard/live")
    assert "Waiting for the first event" in page.text
    async with browser(app) as anonymous:
        r = await anonymous.get("/dashboard/live/events?after=0")
    assert r.status_code == 303 and r.headers["location"].startswith("/dashboard?next=")
    await m.aclose()


async def test_newest_first_reads_honour_since_and_limit(app: App) -> None:
    ln = await setup(app)
    for _ in range(5):
        await tap(app, ln["slug"])
    await app.flush()
    store = app.services.store
    clicks = dashboard_reads.recent_clicks(store, app.project_id, Mode.TEST, limit=3)
    assert len(clicks) == 3 and [c.at_ms for c in clicks] == sorted(
        (c.at_ms for c in clicks), reverse=True)
    newest = clicks[0]
    assert dashboard_reads.recent_clicks(store, app.project_id, Mode.TEST,
                                         since_ms=newest.at_ms + 1) == []
    assert dashboard_reads.find_click(store, app.project_id, Mode.TEST, newest.id,
                                      newest.at_ms) == newest
    assert dashboard_reads.find_click(store, app.project_id, Mode.LIVE, newest.id,
                                      newest.at_ms) is None
    assert dashboard_reads.recent_clicks(store, app.project_id, Mode.LIVE) == []
    assert len(dashboard_reads.clicks_of_link(store, app.project_id, Mode.TEST,
                                              ln["id"]).clicks) == 5
    assert dashboard_reads.clicks_of_link(store, app.project_id, Mode.TEST,
                                          str(uuid.uuid4())).clicks == []
    installs = [new_install() for _ in range(4)]
    async with app.client("pk_test", **SDK) as c:
        for iid in installs:
            await c.post("/v1/sdk/init", json=init_body(iid, "android"))
    got = dashboard_reads.recent_installs(store, app.project_id, Mode.TEST, limit=2)
    assert len(got) == 2 and got[0].created_at_ms >= got[1].created_at_ms
    assert {i.install_id for i in dashboard_reads.recent_installs(
        store, app.project_id, Mode.TEST)} == set(installs)


async def test_live_and_the_debugger_show_only_links_of_their_project_and_mode(
        app: App) -> None:
    """A conversion's ``linkId`` is stored as the app sent it, so it may name
    a live link of the project, or another organization's: Live events showed
    that link's title (and a link to a page that answered 404). A deleted
    link's rows, in Live events and the debugger, linked to a 404 too."""
    import os

    from svc_engine.plans import Plan
    from web import tenancy

    async with app.client("sk_live") as c:
        live = (await c.post("/v1/links", json={"path": "/x", "title": "LIVE ONLY TITLE"})
                ).json()
    now = app.services.clock.now_ms()
    org = await tenancy.create_org(app.services.store, "Other Co", Plan.GROWTH, os.urandom, now)
    _, keys = await tenancy.create_project(app.services.store, org.id, "Other app",
                                           os.urandom, now)
    other_sk = next(v for v in keys.values() if v.startswith("sk_test_"))
    async with app.client(other_sk) as c:
        foreign = (await c.post("/v1/links", json={"path": "/y", "title": "OTHER ORG TITLE"})
                   ).json()
    gone = await setup(app)
    await tap(app, gone["slug"])
    install = new_install()
    async with app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(install, "android"))
                ).status_code == 200
        for link_id in (live["id"], foreign["id"], gone["id"]):
            r = await c.post("/v1/sdk/events", json={"installId": install, "events": [{
                "id": str(uuid.uuid4()), "name": "purchase", "linkId": link_id,
                "occurredAt": iso_utc(app.services.clock.now_ms())}]})
            assert r.status_code == 200, r.text
    async with app.client("sk_test") as c:
        assert (await c.delete(f"/v1/links/{gone['id']}")).status_code in (200, 204)
    await app.flush()
    m = await signed_in(app, owner(app))
    page = (await m.get("/dashboard/live")).text
    poll = (await m.get("/dashboard/live/events?after=0")).json()["html"]
    debugger = (await m.get("/dashboard/build/debugger")).text
    for shown in (page, poll, debugger):
        assert "LIVE ONLY TITLE" not in shown and "OTHER ORG TITLE" not in shown
        assert re.findall(r'href="/dashboard/links/[0-9a-f-]{36}"', shown) == []
    assert page.count("Deleted or unknown link") == 4  # three conversions and the tap
    replay = re.search(r'href="(/dashboard/build/debugger\?click=[^"]+)"', page)
    assert replay is not None
    detail = (await m.get(replay.group(1).replace("&amp;", "&"))).text
    assert "The link was deleted." in detail


async def test_a_conversion_sent_late_still_shows_and_its_revenue_as_written(app: App) -> None:
    """The SDK sends queued events late (offline, in the background): a poll
    shows an event received since it that occurred up to 10 minutes earlier
    (LATE_EVENT_MS), not one older; revenue is shown as its decimal, never in
    exponent form."""
    ln = await setup(app)
    install = new_install()
    async with app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(install, "android"))
                ).status_code == 200
    await app.flush()
    m = await signed_in(app, owner(app))
    now = app.services.clock.now_ms()
    first = await poll(m, after=now)
    late, too_late = str(uuid.uuid4()), str(uuid.uuid4())
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/events", json={"installId": install, "events": [
            {"id": late, "name": "purchase", "linkId": ln["id"],
             "occurredAt": iso_utc(now - 2 * 60_000),
             "properties": {"revenue": 0.0000001, "currency": "USD"}},
            {"id": too_late, "name": "purchase", "occurredAt": iso_utc(now - 11 * 60_000)}]})
        assert r.status_code == 200, r.text
    await app.flush()
    second = await poll(m, after=now, im=first["im"])
    shown = {ident for _, ident in ROW_KEY.findall(second["html"])}
    assert late in shown and too_late not in shown, second["keys"]
    assert "0.0000001" in second["html"] and "1E-7" not in second["html"]
    await m.aclose()
