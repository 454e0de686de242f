"""Deferred deep linking through the ASGI front: every flow, the lifecycle
rules, single use under concurrency, and exact expiry under autojump_clock."""

from __future__ import annotations

import base64
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.keys import Mode
from svc_engine.links import iso_utc
from svc_engine.plans import Plan
from svc_engine.tokens import TOKEN_TTL_MS, Token
from tests.conftest import App, running_app
from tests.dashboard_webhook_support import make_endpoint
from tests.deferred_helpers import (
    ANDROID_UA,
    IOS_17_UA,
    IOS_UA,
    PLATFORMS,
    SDK,
    init_body,
    new_install,
    referrer_from_location,
)

MIN = 60


async def setup(app: App, **settings: object) -> None:
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        if settings:
            r = await c.patch("/v1/deferred/settings", json=settings)
            assert r.status_code == 200, r.text


async def link(app: App, path: str = "/product/1", **fields: object) -> dict[str, object]:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={"path": path, **fields})
    assert r.status_code == 201
    return r.json()  # type: ignore[no-any-return]


async def tap(app: App, slug: object, ua: str, **headers: str) -> str:
    async with app.client(**{"user-agent": ua, **headers}) as c:
        r = await c.get(f"/{slug}")
    return r.headers.get("location", "") if r.status_code == 302 else r.text


async def init(app: App, body: dict[str, object], **headers: str) -> tuple[int, object]:
    async with app.client("pk_test", **SDK, **headers) as c:
        r = await c.post("/v1/sdk/init", json=body)
    return r.status_code, r.json()


async def test_android_install_referrer_flow(app: App) -> None:
    await setup(app)
    ln = await link(app, params={"ref": "a"}, campaign="spring")
    location = await tap(app, ln["slug"], ANDROID_UA)
    assert location.startswith("https://play.google.com/store/apps/details?id=com.example.shop")
    referrer = referrer_from_location(location)
    status, body = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert status == 200
    assert body == {"link": {"linkId": ln["id"], "url": ln["url"], "path": "/product/1",
                             "params": {"ref": "a"}, "campaign": "spring", "channel": None,
                             "isDeferred": True, "confidence": "deterministic",
                             "method": "install_referrer"}}
    # the token works once
    status, again = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert status == 200 and again == {"link": None}

    # tokens lead with their issue time (hex ms), so they sort as they are issued
    token = referrer.removeprefix("svc_token=")
    stored = app.services.attribution.get_token(token)
    assert stored is not None and stored.used
    assert token[:12] == f"{stored.issued_at_ms:012x}" and len(token) == 44


async def test_a_token_issued_before_the_time_prefix_still_works(app: App) -> None:
    """Tokens issued by earlier versions are the random part alone; they are
    keyed by their text as new ones are, so they keep working."""
    await setup(app)
    ln = await link(app)
    now = app.services.clock.now_ms()
    old = Token(token=base64.urlsafe_b64encode(bytes(range(24))).decode(), link_id=str(ln["id"]),
                mode=Mode.TEST, issued_at_ms=now, expires_at_ms=now + TOKEN_TTL_MS)
    attribution = app.services.attribution
    puts = attribution._token_puts(old)
    await attribution.store.write(lambda txn: [txn.put(k, v, db=db) for k, v, db in puts])
    referrer = f"svc_token={old.token}&utm_source=x"
    status, body = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert status == 200 and body["link"]["method"] == "install_referrer"  # type: ignore[index]
    assert (stored := attribution.get_token(old.token)) is not None and stored.used
    status, again = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert (status, again) == (200, {"link": None})


async def test_unattributed_install_is_not_an_error(app: App) -> None:
    await setup(app)
    iid = new_install()
    assert await init(app, init_body(iid, "android")) == (200, {"link": None})
    install = app.services.attribution.get_install(app.project_id, "test", iid)
    assert install is not None and install.attribution is None
    # a later launch of the same install is fine and delivers nothing
    assert await init(app, init_body(iid, "android", first=False)) == (200, {"link": None})


async def test_a_launch_wakes_the_webhook_dispatcher_only_when_it_queued_an_event(
        app: App) -> None:
    """The dispatcher is woken once the install's event is committed, and not
    at all by a launch that queued none (no endpoint in the mode)."""
    await setup(app)
    seen: list[int] = []
    app.services.store.on_outbox = lambda: seen.append(len(app.services.store.read_outbox()))
    assert await init(app, init_body(new_install(), "android")) == (200, {"link": None})
    assert seen == []
    await make_endpoint(app)  # a test-mode endpoint, as these installs are
    assert await init(app, init_body(new_install(), "android")) == (200, {"link": None})
    assert seen == [1]  # woken before the answer, with the event readable


async def test_first_launch_replay_and_conflict(app: App) -> None:
    await setup(app)
    ln = await link(app)
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    iid = new_install()
    body = init_body(iid, "android", referrer=referrer)
    first = await init(app, body, **{"idempotency-key": "launch-1"})
    replay = await init(app, body, **{"idempotency-key": "launch-1"})
    assert first == replay and first[1]["link"]["linkId"] == ln["id"]  # type: ignore[index]
    conflict = await init(app, body, **{"idempotency-key": "launch-2"})
    assert conflict[0] == 409
    assert conflict[1]["error"]["code"] == "install_id_conflict"  # type: ignore[index]
    # Without a key, neither the first report nor a repeat can be the other's
    # retry: the repeat is the conflict, never the deferred link a second time.
    bare = init_body(new_install(), "android", referrer=referrer_from_location(
        await tap(app, ln["slug"], ANDROID_UA)))
    assert (await init(app, bare))[1]["link"]["linkId"] == ln["id"]  # type: ignore[index]
    again = await init(app, bare)
    assert again[0] == 409
    assert again[1]["error"]["code"] == "install_id_conflict"  # type: ignore[index]


async def test_a_first_launch_retried_with_another_body_gets_the_same_link(app: App) -> None:
    """The retry on the next launch carries the same key, but an app or OS
    update in between changes ``sdkVersion`` or ``osVersion``: the answer was
    409 ``idempotency_key_reused`` for 24 hours (the SDK drops a 4xx: the
    link lost), then the link once the stored answer was swept. Now the link
    from the start, counted once; a non-first launch the same."""
    await setup(app)
    ln = await link(app)
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    iid = new_install()
    first = await init(app, init_body(iid, "android", referrer=referrer, os_version="26.1"),
                       **{"idempotency-key": "launch-1"})
    updated = init_body(iid, "android", referrer=referrer, os_version="26.2")
    updated["sdkVersion"] = "0.2.1"
    again = await init(app, updated, **{"idempotency-key": "launch-1"})
    assert first[0] == 200 and first[1]["link"]["linkId"] == ln["id"]  # type: ignore[index]
    assert again == first
    replay = await init(app, updated, **{"idempotency-key": "launch-1"})
    assert replay == first
    later = init_body(iid, "android", first=False)
    assert await init(app, later, **{"idempotency-key": "launch-9"}) == (200, {"link": None})
    later["osVersion"] = "27.0"
    assert await init(app, later, **{"idempotency-key": "launch-9"}) == (200, {"link": None})
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
        r = await c.post("/v1/links", json={"path": "/p/2"},
                         headers={"idempotency-key": "link-1"})
        other = await c.post("/v1/links", json={"path": "/p/3"},
                             headers={"idempotency-key": "link-1"})
    assert counted["installs"]["total"] == 1, counted
    assert r.status_code == 201  # other writes keep the rule: another body is a 409
    assert other.status_code == 409
    assert other.json()["error"]["code"] == "idempotency_key_reused"


async def test_a_first_launch_retried_after_a_later_launch_s_report_is_judged(
        app: App) -> None:
    """The first launch's report failed; the next launch's own report (not a
    first launch) reached the service before the retried one, registering the
    install with no first launch judged. The retry was then 409
    install_id_conflict ("already reported its first launch", which it had
    not): the SDK made a fresh install ID and the deferred link was lost. Now
    the retry is judged as the first launch, in the same install row."""
    await setup(app)
    ln = await link(app)
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    iid = new_install()
    later = await init(app, init_body(iid, "android", first=False),
                       **{"idempotency-key": "launch-2"})
    assert later == (200, {"link": None})
    first = await init(app, init_body(iid, "android", referrer=referrer),
                       **{"idempotency-key": "launch-1"})
    assert first[0] == 200 and first[1]["link"]["method"] == "install_referrer"  # type: ignore[index]
    again = await init(app, init_body(iid, "android", referrer=referrer),
                       **{"idempotency-key": "launch-1"})
    assert again == first
    other = await init(app, init_body(iid, "android", referrer=referrer),
                       **{"idempotency-key": "launch-3"})
    assert other[0] == 409  # a first launch was judged now: another is a conflict
    await app.flush()
    assert len(app.services.store.scan(b"installs_by_time", b"")) == 1
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["installs"]["total"] == 1, counted


async def test_an_install_registered_by_a_later_launch_is_exported_on_its_counted_day(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    """Registered one day by a later launch's report, judged the next by the
    first launch's: the summary counts it the second day, and the export
    listed it (firstLaunch true) on the first, a day the summary counted no
    install."""
    await setup(app)
    now = app.services.clock.now_ms()
    to_late_evening = (86_400_000 - now % 86_400_000) - 3_600_000
    await trio.sleep(to_late_evening / 1000)  # 23:00 UTC
    iid = new_install()
    assert await init(app, init_body(iid, "android", first=False)) == (200, {"link": None})
    day_a = iso_utc(app.services.clock.now_ms())[:10]
    await trio.sleep(2 * 3600)  # 01:00 UTC the next day
    assert (await init(app, init_body(iid, "android")))[0] == 200
    day_b = iso_utc(app.services.clock.now_ms())[:10]
    await app.flush()
    async with app.client("sk_test") as c:
        summary = (await c.get("/v1/analytics/summary",
                               params={"from": day_a, "to": day_b})).json()
        listed = {}
        for day in (day_a, day_b):
            r = await c.get("/v1/export/installs", params={"format": "ndjson", "from": day,
                                                           "to": day})
            assert r.status_code == 200, r.text
            listed[day] = [line for line in r.text.splitlines() if iid in line]
    assert summary["installs"]["byDay"] == {day_a: 0, day_b: 1}
    assert listed[day_a] == [] and len(listed[day_b]) == 1
    assert len(app.services.store.scan(b"installs_by_time", b"")) == 1


async def test_a_first_launch_retried_after_its_answer_was_swept_gets_the_same_link(
        app: App) -> None:
    """The SDK retries a failed first launch report on the next launch with
    the same Idempotency-Key, which may be days later: once the 24-hour
    record is swept, the install's own record of its first launch answers
    (the same link, nothing counted twice); another key is still a conflict."""
    await setup(app, probabilisticMatching=True)
    ln = await link(app)
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    android, ios, plain = new_install(), new_install(), new_install()
    first = await init(app, init_body(android, "android", referrer=referrer),
                       **{"idempotency-key": "launch-a"})
    await tap(app, ln["slug"], IOS_UA, **{"cf-ipcountry": "DE"})
    await app.flush()
    matched = await init(app, init_body(ios, "ios"), **{"idempotency-key": "launch-i",
                                                         "cf-ipcountry": "DE"})
    unmatched = await init(app, init_body(plain, "android"), **{"idempotency-key": "launch-p"})
    assert matched[1]["link"]["method"] == "probabilistic_match"  # type: ignore[index]
    swept = await app.services.store.purge_responses(app.services.clock.now_ms() + 86_400_001)
    assert swept == 3
    again = await init(app, init_body(android, "android", referrer=referrer),
                       **{"idempotency-key": "launch-a"})
    assert again == first and first[1]["link"]["linkId"] == ln["id"]  # type: ignore[index]
    assert await init(app, init_body(ios, "ios"), **{"idempotency-key": "launch-i"}) == matched
    assert await init(app, init_body(plain, "android"),
                      **{"idempotency-key": "launch-p"}) == unmatched == (200, {"link": None})
    other = await init(app, init_body(android, "android", referrer=referrer),
                       **{"idempotency-key": "launch-b"})
    assert other[0] == 409
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["installs"]["total"] == 2, counted


async def test_a_swept_first_launch_retried_after_an_upgrade_answers_as_it_was_judged(
        app: App) -> None:
    """A probabilistic first launch, later upgraded by a handoff claim: its
    retry after the 24-hour record is swept answers as the first launch was
    (the link, probabilistic, probabilistic_match), never the upgrade's
    deterministic words on the first launch's link; the install keeps the
    upgrade."""
    await setup(app, probabilisticMatching=True)
    first_link, claimed = await link(app, "/a"), await link(app, "/b")
    await tap(app, first_link["slug"], IOS_UA, **{"cf-ipcountry": "DE"})
    await app.flush()
    iid = new_install()
    first = await init(app, init_body(iid, "ios"), **{"idempotency-key": "k1",
                                                      "cf-ipcountry": "DE"})
    assert first[1]["link"]["method"] == "probabilistic_match"  # type: ignore[index]
    user = "5f0c6f8e-6d8a-4a55-9c43-0e6c3b1f9a01"
    async with app.client("sk_test") as c:
        assert (await c.post("/v1/handoffs", json={"linkId": claimed["id"], "userId": user})
                ).status_code == 201
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": iid})
        assert r.json()["link"]["method"] == "authenticated_handoff"
    await app.services.store.purge_responses(app.services.clock.now_ms() + 86_400_001)
    again = await init(app, init_body(iid, "ios"), **{"idempotency-key": "k1",
                                                      "cf-ipcountry": "DE"})
    assert again == first
    install = app.services.attribution.get_install(app.project_id, "test", iid)
    assert install is not None and install.attribution is not None
    assert install.attribution.method.value == "authenticated_handoff"
    assert install.attribution.link_id == claimed["id"]


async def test_landing_page_open_button_then_resolve_upgrades(app: App) -> None:
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    page = await tap(app, ln["slug"], IOS_UA)
    open_url = "exampleshop://product/1?svc_link=" + str(ln["url"]).replace(
        ":", "%3A").replace("/", "%2F")
    assert f'href="{open_url}"' in page
    iid = new_install()
    assert await init(app, init_body(iid, "ios")) == (200, {"link": None})
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/resolve", json={"url": open_url, "installId": iid})
    assert r.status_code == 200
    assert_landing_open(app, r.json()["link"], ln, iid)


def landing_url(ln: dict[str, object]) -> str:
    """The 'Continue in app' page's open button: the scheme carrying the link."""
    return "exampleshop://open?svc_link=" + str(ln["url"]).replace(":", "%3A").replace(
        "/", "%2F")


async def test_a_continue_in_app_open_before_the_launch_report_attributes_the_install(
        app: App) -> None:
    """The button's tap is often the app's first launch, and the SDK's resolve
    and launch report race: resolve first found no install to upgrade, and the
    launch report then judged the install unattributed for good. Now the open
    waits for the launch report, which takes it as deterministic evidence."""
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    await tap(app, ln["slug"], IOS_UA)
    iid = new_install()
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/resolve", json={"url": landing_url(ln), "installId": iid})
    assert r.json()["link"]["method"] == "landing_page"
    assert len(app.services.store.scan(b"landing_opens", b"")) == 1
    status, body = await init(app, init_body(iid, "ios"))
    assert status == 200
    assert_landing_open(app, body["link"], ln, iid)  # type: ignore[index]
    assert app.services.store.scan(b"landing_opens", b"") == []  # judged once
    other = new_install()
    assert await init(app, init_body(other, "ios")) == (200, {"link": None})
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["installs"]["total"] == 1, counted


async def test_an_open_stored_while_the_launch_report_waits_its_turn_attributes_it(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch report reads its clock, then waits (its project's actor,
    its turn at the writer); the button's resolve stored its open 5 ms later,
    before the launch's write ran: the open was refused as "later" than the
    launch, after the write had taken it from the store, and the install
    stayed unattributed with its evidence gone."""
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    await tap(app, ln["slug"], IOS_UA)
    iid = new_install()
    registry, waiting, go = app.services.registry, trio.Event(), trio.Event()
    real_get = registry.get

    async def slow_get(project_id: str) -> Any:
        monkeypatch.setattr(registry, "get", real_get)  # only the launch waits
        waiting.set()
        await go.wait()
        return await real_get(project_id)

    monkeypatch.setattr(registry, "get", slow_get)
    launched: list[tuple[int, Any]] = []

    async def launch() -> None:
        launched.append(await init(app, init_body(iid, "ios")))

    async with trio.open_nursery() as n:
        n.start_soon(launch)
        await waiting.wait()
        await trio.sleep(0.005)
        async with app.client("pk_test", **SDK) as c:
            r = await c.post("/v1/sdk/resolve", json={"url": landing_url(ln), "installId": iid})
        assert r.json()["link"]["method"] == "landing_page"
        assert len(app.services.store.scan(b"landing_opens", b"")) == 1
        go.set()
    [(status, body)] = launched
    assert status == 200
    assert_landing_open(app, body["link"], ln, iid)
    assert app.services.store.scan(b"landing_opens", b"") == []


def assert_landing_open(app: App, got: dict[str, object], ln: dict[str, object],
                        iid: str) -> None:
    """A 'Continue in app' open: the link, deferred, deterministic, and the
    install upgraded to it."""
    assert got["linkId"] == ln["id"] and got["isDeferred"] is True
    assert got["method"] == "landing_page" and got["confidence"] == "deterministic"
    install = app.services.attribution.get_install(app.project_id, "test", iid)
    assert install is not None and install.attribution is not None
    assert install.attribution.method.value == "landing_page"


async def test_without_a_scheme_the_page_s_open_button_is_a_marked_universal_link(
        app: App) -> None:
    """No custom scheme: the button (and the app banner) is the short link
    marked ``svc_open=landing``; when it opens the app, resolve answers
    ``landing_page``, deferred, and upgrades the install, as the scheme URL
    does (SPEC iOS flow 2). The plain short link stays a universal link."""
    await setup(app, iosLandingPage=True)
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json={"ios": {"scheme": None}})).status_code == 200
    ln = await link(app)
    marked = f"{ln['url']}?svc_open=landing"
    page = await tap(app, ln["slug"], IOS_UA)
    assert f'href="{marked}"' in page and f"app-argument={marked}" in page
    iid = new_install()
    assert await init(app, init_body(iid, "ios")) == (200, {"link": None})
    async with app.client("pk_test", **SDK) as c:
        plain = (await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": iid})
                 ).json()["link"]
        assert (plain["method"], plain["isDeferred"]) == ("universal_link", False)
        r = await c.post("/v1/sdk/resolve", json={"url": marked, "installId": iid})
    assert_landing_open(app, r.json()["link"], ln, iid)
    # a tap on the marked link (the button reloading the page) gets the page again
    assert f'href="{marked}"' in await tap(app, f"{ln['slug']}?svc_open=landing", IOS_UA)


async def test_a_marked_link_tapped_on_android_still_hands_out_a_stored_token(
        app: App) -> None:
    """The 'Continue in app' button's URL (``?svc_open=landing``) shared and
    tapped on Android: not that page's reload, so the tap is counted and its
    token stored before the redirect, and the install gets its link."""
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    location = await tap(app, f"{ln['slug']}?svc_open=landing", ANDROID_UA)
    assert location.startswith("https://play.google.com/store/apps/details?id=com.example.shop")
    referrer = referrer_from_location(location)
    assert app.services.attribution.get_token(referrer.removeprefix("svc_token=")) is not None
    status, body = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert status == 200 and body["link"]["method"] == "install_referrer"  # type: ignore[index]
    await app.flush()
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["clicks"]["total"] == 1


async def test_settings_the_store_refused_do_not_take_effect(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A PATCH answered 503 ``storage_unavailable`` changed nothing stored,
    but its settings held in the project's actor, which every launch reads."""
    from svc_engine.errors import StorageUnavailable

    async def refusing(*args: object, **kwargs: object) -> object:
        raise StorageUnavailable("the disk is full")

    async with app.client("sk_test") as c:
        before = (await c.get("/v1/deferred/settings")).json()
        monkeypatch.setattr(app.services.store, "put_settings", refusing)
        r = await c.patch("/v1/deferred/settings", json={"probabilisticMatching": True})
        monkeypatch.undo()
        assert r.status_code == 503
        assert (await c.get("/v1/deferred/settings")).json() == before
    actor = await app.services.registry.get(app.project_id)
    assert actor.settings.probabilistic_matching is before["probabilisticMatching"]


async def test_a_later_launch_keeps_an_upgrade_of_an_install_it_registered(app: App) -> None:
    """Registered by a later launch (its first report lost), then upgraded by
    the 'Continue in app' open: the next later launch judged it again from
    scratch, dropping the link and moving its install time."""
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    await tap(app, ln["slug"], IOS_UA)
    iid = new_install()
    assert await init(app, init_body(iid, "ios", first=False)) == (200, {"link": None})
    attribution = app.services.attribution
    registered = attribution.get_install(app.project_id, "test", iid)
    assert registered is not None
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/resolve", json={"url": f"{ln['url']}?svc_open=landing",
                                                   "installId": iid})
    assert r.json()["link"]["method"] == "landing_page"
    await trio.sleep(0.01)
    assert (await init(app, init_body(iid, "ios", first=False)))[0] == 200
    after = attribution.get_install(app.project_id, "test", iid)
    assert after is not None and after.attribution is not None
    assert after.attribution.link_id == ln["id"]
    assert after.created_at_ms == registered.created_at_ms


async def test_the_page_s_own_button_reloading_it_is_not_another_click(app: App) -> None:
    """Without a custom scheme the 'Continue in app' button is the short link
    marked ``svc_open=landing``, which may just load the page again (SPEC.md):
    each press was counted as another click (and another window entry)."""
    no_scheme = {"ios": {k: v for k, v in PLATFORMS["ios"].items() if k != "scheme"},
                 "android": PLATFORMS["android"]}
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=no_scheme)).status_code == 200
    await setup(app, iosLandingPage=True, probabilisticMatching=True)
    ln = await link(app)
    page = await tap(app, ln["slug"], IOS_UA)
    assert f"{ln['slug']}?svc_open=landing" in page
    again = await tap(app, f"{ln['slug']}?svc_open=landing", IOS_UA)
    assert "svc_open=landing" in again  # the same page
    await app.flush()
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["clicks"]["total"] == 1, counted
    assert len(app.services.store.scan(b"click_window", b"")) == 1


async def test_resolve_universal_and_app_links_and_unknown(app: App) -> None:
    await setup(app)
    ln = await link(app)
    ios, android = new_install(), new_install()
    await init(app, init_body(ios, "ios"))
    await init(app, init_body(android, "android"))
    async with app.client("pk_test", **SDK) as c:
        a = (await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": ios})).json()
        b = (await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": android})
             ).json()
        unknown = await c.post("/v1/sdk/resolve", json={"url": "http://svc.test/nope",
                                                        "installId": ios})
        scheme = await c.post("/v1/sdk/resolve", json={"url": "exampleshop://product/1",
                                                       "installId": ios})
    assert a["link"]["method"] == "universal_link" and a["link"]["isDeferred"] is False
    assert b["link"]["method"] == "app_link"
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    assert scheme.status_code == 404
    await app.flush()
    rows = app.services.store.scan(b"opens", b"")
    assert len(rows) == 2  # every resolve records an open


async def test_resolve_finds_a_slug_only_on_a_link_domain(app: App) -> None:
    """The app's own website links reach resolve too: a URL on another host
    with a short link's slug is not that link (404, no open recorded); the
    default domain's own URLs resolve whatever their port or scheme."""
    await setup(app)
    ln = await link(app)
    slug, iid = ln["slug"], new_install()
    await init(app, init_body(iid, "ios"))
    async with app.client("pk_test", **SDK) as c:
        async def status(url: str) -> int:
            r = await c.post("/v1/sdk/resolve", json={"url": url, "installId": iid})
            return r.status_code

        for other in (f"https://shop.example/{slug}", f"http://user@svc.test/{slug}",
                      f"http://svc.test:99999/{slug}", f"https://svc.test.evil.example/{slug}"):
            assert await status(other) == 404, other
        await app.flush()
        assert app.services.store.scan(b"opens", b"") == []
        escaped = "".join(f"%{ord(ch):02X}" for ch in str(slug))  # as the redirector serves it
        for same in (f"https://svc.test/{slug}", f"http://SVC.test:8080/{slug}",
                     f"https://svc.test/{escaped}"):
            assert await status(same) == 200, same
        for bad in (f"https://svc.test/{slug}%2Fx", f"https://svc.test/{slug}%ff"):
            assert await status(bad) == 404, bad
        r = await c.post("/v1/handoffs", json={"url": f"https://shop.example/{slug}",
                                               "userId": "u"},
                         headers={"authorization": f"Bearer {app.keys['sk_test']}"})
    assert r.status_code == 404


async def test_links_under_a_public_url_with_a_path_resolve(store: LmdbStore,
                                                            config: Config) -> None:
    """With ``SVC_PUBLIC_URL=http://svc.test/go`` (a proxy serving the service
    under /go) a link's URL is ``http://svc.test/go/SLUG``, which resolve
    looked up as the slug ``go/SLUG``: 404, every open of the app unresolved.
    Now the public URL's path is taken off first; ``/SLUG`` there is no link."""
    under = attrs.evolve(config, public_url="http://svc.test/go")
    async with running_app(store, under, TrioWallClock()) as app:
        await setup(app)
        ln = await link(app)
        assert ln["url"] == f"http://svc.test/go/{ln['slug']}"
        iid = new_install()
        await init(app, init_body(iid, "ios"))
        async with app.client("pk_test", **SDK) as c:
            async def resolve(url: str) -> int:
                r = await c.post("/v1/sdk/resolve", json={"url": url, "installId": iid})
                return r.status_code

            assert await resolve(str(ln["url"])) == 200
            assert await resolve(f"https://svc.test/go/{ln['slug']}") == 200
            for other in (f"http://svc.test/{ln['slug']}", f"http://svc.test/go/x/{ln['slug']}",
                          f"http://svc.test/gone/{ln['slug']}", "http://svc.test/go/"):
                assert await resolve(other) == 404, other
        # the association file claims /go's links only (it claimed the whole
        # site), and the dashboard links it at the domain's root, where Apple
        # and Google fetch it (it showed /go/.well-known/...)
            # a custom domain's links stay at its root: only the default
            # domain's URLs lose the public URL's path
            await app.services.store.set_plan(app.org_id, Plan.SCALE)
            async with app.client("sk_test") as owner_c:
                assert (await owner_c.post("/v1/domains", json={"domain": "links.example"})
                        ).status_code == 201
                custom = (await owner_c.post("/v1/links", json={
                    "path": "/p", "domain": "links.example"})).json()
            assert custom["url"] == f"https://links.example/{custom['slug']}"
            assert await resolve(str(custom["url"])) == 200
            assert await resolve(f"https://links.example/go/{custom['slug']}") == 404
        async with app.client() as c:
            aasa = (await c.get("/.well-known/apple-app-site-association")).json()
        [detail] = aasa["applinks"]["details"]
        assert detail["components"][0]["/"] == "/go"
        assert detail["components"][-1]["/"] == "/go/*"
        from tests.dashboard_support import owner, signed_in
        m = await signed_in(app, owner(app))
        page = (await m.get("/dashboard/build/platforms")).text
        await m.aclose()
        assert "http://svc.test/.well-known/apple-app-site-association" in page
        assert 'href="http://svc.test/go/.well-known' not in page


async def test_handoff_created_by_server_claimed_by_app(app: App) -> None:
    await setup(app)
    old, new = await link(app, "/old"), await link(app, "/new")
    user = "5f0c6f8e-6d8a-4a55-9c43-0e6c3b1f9a01"
    async with app.client("sk_test") as c:
        r1 = await c.post("/v1/handoffs", json={"linkId": old["id"], "userId": user})
        await app.flush()
        r2 = await c.post("/v1/handoffs", json={"url": new["url"], "userId": f"  {user} "})
    assert r1.status_code == r2.status_code == 201
    iid = new_install()
    async with app.client("pk_test", **SDK) as c:
        early = await c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": iid})
        assert early.status_code == 409
        assert early.json()["error"]["code"] == "install_not_registered"
        await c.post("/v1/sdk/init", json=init_body(iid, "ios"))
        got = await c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": iid})
        again = await c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": iid})
    body = got.json()["link"]
    assert body["linkId"] == new["id"] and body["method"] == "authenticated_handoff"
    assert body["isDeferred"] is True and body["confidence"] == "deterministic"
    assert again.json() == {"link": None}  # both were cleared
    install = app.services.attribution.get_install(app.project_id, "test", iid)
    assert install is not None and install.attribution is not None  # upgraded by the claim
    assert (install.attribution.link_id, install.attribution.method.value) == (
        new["id"], "authenticated_handoff")
    # the user id is stored only as a salted hash
    for _, v in app.services.store.scan(b"handoffs", b""):
        assert user.encode() not in v


async def test_handoff_validation(app: App) -> None:
    await setup(app)
    ln = await link(app)
    async with app.client("sk_test") as c:
        for body in ({"linkId": ln["id"]}, {"userId": "u"},
                     {"linkId": ln["id"], "url": ln["url"], "userId": "u"},
                     {"linkId": ln["id"], "userId": "u", "expiresInSeconds": 0},
                     {"linkId": ln["id"], "userId": "u", "expiresInSeconds": 8 * 86400},
                     {"linkId": ln["id"], "userId": "x" * 257},
                     # 400 UTF-16 code units: the SDK could never claim it
                     {"linkId": ln["id"], "userId": "😀" * 200},
                     {"linkId": ln["id"], "userId": "u", "expiresIn": 5}):
            r = await c.post("/v1/handoffs", json=body)
            assert r.status_code == 400, body
        missing = await c.post("/v1/handoffs", json={
            "linkId": "5f0c6f8e-6d8a-4a55-9c43-0e6c3b1f9a01", "userId": "u"})
        assert missing.status_code == 404
    async with app.client("pk_test") as c:
        assert (await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "u"})
                ).status_code == 403
    async with app.client("pk_test", **SDK) as c:
        for user in ("", "   ", "x" * 257, "😀" * 129, "\ufeff"):
            r = await c.post("/v1/sdk/handoffs/claim",
                             json={"userId": user, "installId": new_install()})
            assert r.status_code == 400


async def test_web_fallback_token_becomes_a_handoff(app: App) -> None:
    await setup(app, webFallbackTokens=True)
    ln = await link(app, webFallbackUrl="https://shop.example/landing")
    location = await tap(app, ln["slug"], "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0")
    assert location.startswith("https://shop.example/landing?svc_token=")
    token = location.split("svc_token=")[1]
    async with app.client("sk_test") as c:
        r = await c.post("/v1/handoffs", json={"svcToken": token, "userId": "user-1"})
        again = await c.post("/v1/handoffs", json={"svcToken": token, "userId": "user-2"})
    assert r.status_code == 201 and r.json()["linkId"] == ln["id"]
    assert again.status_code == 400  # single use


async def test_a_token_serves_only_the_flow_it_was_issued_for(app: App) -> None:
    """A Play Store referrer's token made a handoff when a server sent it as
    ``svcToken`` (and the install then launched unattributed), and a web
    fallback's token attributed an Android install when put in a referrer.
    Each token now records where it was put; the other flow does not know
    it, and it is not used up. Tokens from before this (no record) serve
    either, as they did."""
    await setup(app, webFallbackTokens=True)
    ln = await link(app, webFallbackUrl="https://shop.example/landing")
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    store_token = referrer.removeprefix("svc_token=")
    web = await tap(app, ln["slug"], "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0")
    web_token = web.split("svc_token=")[1]
    attribution = app.services.attribution
    assert [attribution.get_token(t).via for t in (store_token, web_token)] == [  # type: ignore[union-attr]
        "store_referrer", "query"]
    async with app.client("sk_test") as c:
        wrong = await c.post("/v1/handoffs", json={"svcToken": store_token, "userId": "u-1"})
    assert wrong.status_code == 400 and wrong.json()["error"]["field"] == "svcToken"
    status, body = await init(app, init_body(new_install(), "android",
                                             referrer=f"svc_token={web_token}"))
    assert (status, body) == (200, {"link": None})
    status, body = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert body["link"]["method"] == "install_referrer"  # type: ignore[index]
    async with app.client("sk_test") as c:
        right = await c.post("/v1/handoffs", json={"svcToken": web_token, "userId": "u-1"})
    assert right.status_code == 201 and right.json()["linkId"] == ln["id"]
    old = Token.issue(bytes(24), link_id=str(ln["id"]), mode=Mode.TEST,
                      now_ms=app.services.clock.now_ms())
    assert old.via is None and old.taken_by("store_referrer") and old.taken_by("query")
    assert Token.from_map(old.to_map()) == old and "via" not in old.to_map()


async def test_a_tap_from_a_page_on_an_address_is_redirected_and_counted(app: App) -> None:
    """With a webhook endpoint, a click's event data is built in its write: a
    Referer on an IPv6 address once failed that check, losing the click and
    answering an Android tap 400. The address is not kept (no host name)."""
    await setup(app)
    await make_endpoint(app)
    ln = await link(app)
    for referer in ("https://[::1]:8080/page", "http://192.168.1.5/x", "https://news.example/"):
        location = await tap(app, ln["slug"], ANDROID_UA, referer=referer)
        assert "svc_token%3D" in location, (referer, location)
        await tap(app, ln["slug"], IOS_UA, referer=referer)
    await app.flush()
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["clicks"]["total"] == 6, counted
    clicks = app.services.attribution.recent_clicks(app.project_id, "test")
    hosts = sorted(str(click.referrer_host) for click in clicks)
    assert hosts == ["None", "None", "None", "None", "news.example", "news.example"]


async def test_a_tap_with_a_huge_referrer_host_is_counted_and_spoils_no_commit(
        app: App) -> None:
    """The host goes into counter keys (LMDB: 511 bytes at most), which the
    group commit writes for every op in it: a 427-letter "host" failed the
    whole commit (the click lost, other writes 503). Not a host name: none kept."""
    await setup(app)
    ln = await link(app)
    iid = new_install()
    await init(app, init_body(iid, "android"))
    huge = "https://" + "a" * 427 + ".com/"
    async with app.client(**{"user-agent": IOS_UA, "referer": huge}) as tapper, \
            app.client("pk_test", **SDK) as sdk:
        async def tap_once() -> int:
            return (await tapper.get(f"/{ln['slug']}")).status_code

        async def events() -> int:
            r = await sdk.post("/v1/sdk/events", json={"events": [{
                "id": new_install(), "name": "buy", "properties": {},
                "occurredAt": iso_utc(app.services.clock.now_ms())}], "installId": iid})
            return r.status_code

        results: list[int] = []
        async with trio.open_nursery() as n:
            for fn in (tap_once, events) * 4:
                n.start_soon(lambda fn=fn: _collect(results, fn))
    assert sorted(results) == [200] * 4 + [302] * 4, results
    await app.flush()
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["clicks"]["total"] == 4, counted


async def test_resolve_keeps_only_a_platform_it_knows_and_spoils_no_commit(app: App) -> None:
    """Resolve's ``platform`` (for an install the service does not know yet)
    went into the open's record and counter keys as sent: 600 letters failed
    the group commit (this resolve and every write beside it 503), and any
    text, a user agent too, was stored and listed in ``byPlatform``. Now it is
    read as the launch report's: ios, android or anything else "other"."""
    await setup(app)
    ln = await link(app)
    known = new_install()
    await init(app, init_body(known, "android"))
    sent = {"x" * 600: "app_link", "Mozilla/5.0 (iPhone) full UA": "app_link",
            " iOS ": "universal_link", "ANDROID": "app_link"}
    async with app.client("pk_test", **SDK) as c:
        async def resolve(platform: object, iid: str) -> tuple[int, Any]:
            r = await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": iid,
                                                      "platform": platform})
            return r.status_code, r.json()

        answers: dict[str, tuple[int, Any]] = {}
        inits: list[int] = []

        async def one(platform: str) -> None:
            answers[platform] = await resolve(platform, new_install())

        async def launch() -> None:
            inits.append((await init(app, init_body(new_install(), "ios")))[0])

        async with trio.open_nursery() as n:
            for platform in sent:
                n.start_soon(one, platform)
                n.start_soon(launch)
        wrong = await resolve(5, new_install())
        known_one = await resolve("ios", known)  # a known install keeps its own
    assert inits == [200] * len(sent), inits
    for platform, method in sent.items():
        status, body = answers[platform]
        assert status == 200 and body["link"]["method"] == method, (platform, body)
    assert wrong[0] == 400 and wrong[1]["error"]["field"] == "platform"
    assert known_one[1]["link"]["method"] == "app_link"
    await app.flush()
    async with app.client("sk_test") as c:
        counted = (await c.get(f"/v1/analytics/links/{ln['id']}")).json()
    assert counted["opens"]["total"] == len(sent) + 1, counted
    assert set(counted["opens"]["byPlatform"]) == {"ios", "android", "other"}, counted


async def test_a_tap_whose_user_agent_has_a_huge_version_is_redirected(app: App) -> None:
    """int() converts at most 4,300 digits: a made-up iOS version of 5,000 made
    every such tap a 500 with a traceback in the log. A user agent that long
    is now a bot's (no browser's is over 2,048 characters: web/useragent.py),
    answered the preview page uncounted; a version of 1,900 digits, which
    fits, is no version, and the tap is redirected."""
    await setup(app)
    ln = await link(app)
    for digits, status in ((5000, 200), (1900, 302)):
        ua = "Mozilla/5.0 (iPhone; CPU iPhone OS " + "9" * digits + "_0 like Mac OS X) Version/1"
        async with app.client(**{"user-agent": ua}) as c:
            r = await c.get(f"/{ln['slug']}")
        assert r.status_code == status, digits
        if status == 302:
            assert "apps.apple.com" in r.headers["location"]


async def _collect(results: list[int], fn: Any) -> None:
    results.append(await fn())


async def other_project(app: App, **settings: object) -> dict[str, str]:
    """A second project of the same organization, set up like the first; its keys."""
    from web import tenancy

    _, keys = await tenancy.create_project(app.services.store, app.org_id, "Other",
                                           app.services.random, 1)
    async with app.client(keys["sk_test"]) as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        if settings:
            assert (await c.patch("/v1/deferred/settings", json=settings)).status_code == 200
    return keys


async def test_a_token_works_only_in_the_project_that_issued_it(app: App) -> None:
    """Another project's first launch with this project's install referrer
    gets no link and leaves the token unused for its own project's launch."""
    await setup(app)
    keys = await other_project(app)
    ln = await link(app, params={"ref": "private"})
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    async with app.client(keys["pk_test"], **SDK) as c:
        r = await c.post("/v1/sdk/init",
                         json=init_body(new_install(), "android", referrer=referrer))
    assert r.status_code == 200 and r.json() == {"link": None}
    status, body = await init(app, init_body(new_install(), "android", referrer=referrer))
    assert status == 200 and body["link"]["linkId"] == ln["id"]  # type: ignore[index]


async def test_a_web_fallback_token_makes_a_handoff_only_in_its_project(app: App) -> None:
    await setup(app, webFallbackTokens=True)
    keys = await other_project(app, webFallbackTokens=True)
    ln = await link(app, webFallbackUrl="https://shop.example/landing")
    location = await tap(app, ln["slug"], "Mozilla/5.0 (X11; Linux x86_64) Firefox/140.0")
    token = location.split("svc_token=")[1]
    async with app.client(keys["sk_test"]) as c:
        theirs = await c.post("/v1/handoffs", json={"svcToken": token, "userId": "user-1"})
    assert theirs.status_code == 400 and theirs.json()["error"]["field"] == "svcToken"
    async with app.client("sk_test") as c:
        mine = await c.post("/v1/handoffs", json={"svcToken": token, "userId": "user-1"})
    assert mine.status_code == 201 and mine.json()["linkId"] == ln["id"]


async def test_probabilistic_cohort_match_and_conflict(app: App) -> None:
    await setup(app, probabilisticMatching=True)
    a, b = await link(app, "/a"), await link(app, "/b")
    de, fr = {"cf-ipcountry": "DE"}, {"cf-ipcountry": "FR"}
    await tap(app, a["slug"], IOS_UA, **de)
    await app.flush()
    status, body = await init(app, init_body(new_install(), "ios", os_version="26.1"), **de)
    assert body["link"]["linkId"] == a["id"]  # type: ignore[index]
    assert body["link"]["confidence"] == "probabilistic"  # type: ignore[index]
    assert body["link"]["method"] == "probabilistic_match"  # type: ignore[index]
    assert body["link"]["isDeferred"] is True  # type: ignore[index]
    # two taps of one cohort on different links: nothing is returned
    await tap(app, a["slug"], IOS_UA, **fr)
    await tap(app, b["slug"], IOS_UA, **fr)
    await app.flush()
    status, body = await init(app, init_body(new_install(), "ios", os_version="26.0"), **fr)
    assert status == 200 and body == {"link": None}
    # another iOS version is another cohort; another country too
    await tap(app, b["slug"], IOS_17_UA, **de)
    await app.flush()
    _, body = await init(app, init_body(new_install(), "ios", os_version="17.7"), **fr)
    assert body == {"link": None}
    _, body = await init(app, init_body(new_install(), "ios", os_version="17.7"), **de)
    assert body["link"]["linkId"] == b["id"]  # type: ignore[index]


async def test_android_never_matches_probabilistically(app: App) -> None:
    await setup(app, probabilisticMatching=True)
    a = await link(app)
    await tap(app, a["slug"], IOS_UA)
    await app.flush()
    assert (await init(app, init_body(new_install(), "android", os_version="26")))[1] == {
        "link": None}


async def test_one_token_100_concurrent_inits_exactly_one_wins(app: App) -> None:
    await setup(app)
    ln = await link(app)
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    results: list[object] = []

    async def one() -> None:
        results.append((await init(app, init_body(new_install(), "android",
                                                 referrer=referrer)))[1])

    async with trio.open_nursery() as n:
        for _ in range(100):
            n.start_soon(one)
    wins = [r for r in results if r != {"link": None}]
    assert len(results) == 100 and len(wins) == 1


async def test_concurrent_claims_deliver_once(app: App) -> None:
    await setup(app)
    ln = await link(app)
    async with app.client("sk_test") as c:
        await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "u-1"})
    installs = [new_install() for _ in range(20)]
    for iid in installs:
        await init(app, init_body(iid, "ios"))
    got: list[object] = []

    async def claim(iid: str) -> None:
        async with app.client("pk_test", **SDK) as c:
            got.append((await c.post("/v1/sdk/handoffs/claim",
                                     json={"userId": "u-1", "installId": iid})).json())

    async with trio.open_nursery() as n:
        for iid in installs:
            n.start_soon(claim, iid)
    assert sum(1 for g in got if g != {"link": None}) == 1


# -- time: exact expiry under autojump_clock --------------------------------------------

async def test_token_expires_after_exactly_7_days(app: App,
                                                  autojump_clock: trio.testing.MockClock) -> None:
    await setup(app)
    ln = await link(app)
    r1 = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    r2 = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    await trio.sleep(7 * 86400 - 0.001)
    ok = await init(app, init_body(new_install(), "android", referrer=r1))
    assert ok[1]["link"]["method"] == "install_referrer"  # type: ignore[index]
    await trio.sleep(0.001)
    late = await init(app, init_body(new_install(), "android", referrer=r2))
    assert late == (200, {"link": None})
    await trio.sleep(700)  # the sweep removes expired tokens
    assert app.services.attribution.get_token(r2.split("=")[1]) is None


async def test_a_continue_in_app_open_waits_7_days_for_its_launch_report(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    late, never = new_install(), new_install()
    async with app.client("pk_test", **SDK) as c:
        for iid in (late, never):
            r = await c.post("/v1/sdk/resolve", json={"url": landing_url(ln), "installId": iid})
            assert r.status_code == 200
    await trio.sleep(7 * 86400 + 0.001)
    assert await init(app, init_body(late, "ios")) == (200, {"link": None})
    install = app.services.attribution.get_install(app.project_id, "test", late)
    assert install is not None and install.attribution is None
    assert len(app.services.store.scan(b"landing_opens", b"")) == 1
    await trio.sleep(700)  # the sweep removes the one whose launch never came
    assert app.services.store.scan(b"landing_opens", b"") == []


async def test_no_handoff_is_made_for_an_expired_link(app: App,
                                                     autojump_clock: trio.testing.MockClock
                                                     ) -> None:
    """By its ID as by its URL (resolve answers 404 for it too); a handoff
    made while the link was live is still delivered."""
    await setup(app)
    soon = iso_utc(app.services.clock.now_ms() + 60_000)
    ln = await link(app, expiresAt=soon)
    iid = new_install()
    await init(app, init_body(iid, "ios"))
    async with app.client("sk_test") as c:
        made = await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "early"})
        assert made.status_code == 201
        await trio.sleep(60)
        by_id = await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "late"})
        by_url = await c.post("/v1/handoffs", json={"url": ln["url"], "userId": "late"})
    assert (by_id.status_code, by_url.status_code) == (404, 404), (by_id.text, by_url.text)
    async with app.client("pk_test", **SDK) as c:
        claimed = await c.post("/v1/sdk/handoffs/claim", json={"userId": "early",
                                                               "installId": iid})
    assert claimed.json()["link"]["linkId"] == ln["id"]


async def test_handoff_default_and_shorter_expiry(app: App,
                                                  autojump_clock: trio.testing.MockClock) -> None:
    await setup(app)
    ln = await link(app)
    iid = new_install()
    await init(app, init_body(iid, "ios"))
    async with app.client("sk_test") as c:
        await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "week"})
        await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "hour",
                                           "expiresInSeconds": 3600})
    async with app.client("pk_test", **SDK) as c:
        await trio.sleep(3600 - 0.001)
        assert (await c.post("/v1/sdk/handoffs/claim", json={"userId": "hour", "installId": iid})
                ).json()["link"] is not None
    async with app.client("sk_test") as c:
        await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "hour2",
                                           "expiresInSeconds": 3600})
    await trio.sleep(3600)
    async with app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/handoffs/claim",
                             json={"userId": "hour2", "installId": iid})).json() == {"link": None}
        await trio.sleep(7 * 86400 - 2 * 3600 - 0.002)
        assert (await c.post("/v1/sdk/handoffs/claim", json={"userId": "week", "installId": iid})
                ).json()["link"] is not None


async def test_handoff_7_day_edge(app: App, autojump_clock: trio.testing.MockClock) -> None:
    await setup(app)
    ln = await link(app)
    iid = new_install()
    await init(app, init_body(iid, "ios"))
    async with app.client("sk_test") as c:
        await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": "late"})
    await trio.sleep(7 * 86400)
    async with app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/handoffs/claim", json={"userId": "late", "installId": iid})
                ).json() == {"link": None}


async def _window_edge(app: App, minutes: int) -> None:
    await setup(app, probabilisticMatching=True, probabilisticWindowMinutes=minutes)
    inside, outside = await link(app, "/in"), await link(app, "/out")
    de = {"cf-ipcountry": "DE"}
    await tap(app, outside["slug"], IOS_UA, **de)
    await trio.sleep(0.001)
    await tap(app, inside["slug"], IOS_UA, **de)
    await trio.sleep(minutes * MIN)
    # now: the "outside" tap is window + 1 ms old, the "inside" tap exactly window old
    _, body = await init(app, init_body(new_install(), "ios"), **de)
    assert body["link"]["linkId"] == inside["id"]  # type: ignore[index]
    await tap(app, inside["slug"], IOS_UA, **de)
    await trio.sleep(minutes * MIN + 0.001)
    _, body = await init(app, init_body(new_install(), "ios"), **de)
    assert body == {"link": None}


async def test_window_edge_15(app: App, autojump_clock: trio.testing.MockClock) -> None:
    await _window_edge(app, 15)


async def test_window_edge_120(app: App, autojump_clock: trio.testing.MockClock) -> None:
    await _window_edge(app, 120)


async def test_window_edge_360(app: App, autojump_clock: trio.testing.MockClock) -> None:
    await _window_edge(app, 360)


async def test_network_hash_match_and_deletion(app: App,
                                               autojump_clock: trio.testing.MockClock) -> None:
    await setup(app, probabilisticMatching=True, probabilisticIpMatching=True,
                probabilisticWindowMinutes=360)
    a, b = await link(app, "/a"), await link(app, "/b")
    # two taps in one cohort on different links, but the launch's network saw only "a"
    await tap(app, a["slug"], IOS_UA)  # from the ASGI client's address
    await app.flush()
    entries = app.services.attribution.window(app.project_id, "test", 0)
    assert entries and entries[0].net_hash is not None
    _, body = await init(app, init_body(new_install(), "ios"))
    assert body["link"]["linkId"] == a["id"]  # type: ignore[index]
    await app.flush()
    # matched: the tap and its hash are gone
    assert all(e.net_hash is None for e in app.services.attribution.window(
        app.project_id, "test", 0))
    await tap(app, b["slug"], IOS_UA)
    await app.flush()
    assert app.services.attribution.window(app.project_id, "test", 0)[0].net_hash is not None
    await trio.sleep(6 * 3600 + 700)  # unmatched: gone by the sweep, within 7 h
    assert app.services.attribution.window(app.project_id, "test", 0) == []
    raw = b"".join(v for _, v in app.services.store.scan(b"click_window", b""))
    assert raw == b""


async def test_first_launch_answer_is_the_stored_replay(app: App) -> None:
    """The first answer and its replays are the same bytes: the one rendering
    stored with the launch (web/idem.py's IdemSlot.respond)."""
    await setup(app)
    ln = await link(app)
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    async with app.client("pk_test", **SDK, **{"idempotency-key": "launch-9"}) as c:
        body = init_body(new_install(), "android", referrer=referrer)
        first = await c.post("/v1/sdk/init", json=body)
        replay = await c.post("/v1/sdk/init", json=body)
    stored = app.services.store.get_response(f"{app.project_id}:test", "launch-9")
    assert stored is not None and first.status_code == 200
    assert first.content == stored.body == replay.content
    assert "idempotent-replayed" not in first.headers
    assert replay.headers["idempotent-replayed"] == "true"


async def test_a_retry_of_a_write_that_succeeded_is_its_answer_whatever_changed_since(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    """A retry under the same Idempotency-Key with the same body was checked
    again before its stored answer was looked up: a link deleted since made
    a handoff's or an open's retry 404, an ``expiresAt`` passed since made a
    link's 400. The caller whose answer was lost got a failure for a write
    that was made. Now the stored answer comes first."""
    await setup(app)
    ln = await link(app)
    iid = new_install()
    await init(app, init_body(iid, "ios"))
    soon = iso_utc(app.services.clock.now_ms() + 1500)
    async with app.client("pk_test", **SDK) as c:
        async def twice(path: str, body: dict[str, object], key: str,
                        meanwhile: Any) -> tuple[Any, Any]:
            """The request, a change of the world, and its retry."""
            first = await c.post(path, json=body, headers={"idempotency-key": key})
            await meanwhile()
            again = await c.post(path, json=body, headers={"idempotency-key": key})
            return first, again

        async def delete_link() -> None:
            async with app.client("sk_test") as s:
                assert (await s.delete(f"/v1/links/{ln['id']}")).status_code == 200

        made = await twice("/v1/sdk/links", {"path": "/p", "expiresAt": soon}, "link-1",
                           lambda: trio.sleep(2))
        opened = await twice("/v1/sdk/resolve", {"url": ln["url"], "installId": iid},
                             "open-1", delete_link)
    ln2 = await link(app)
    async with app.client("sk_test") as c:
        first = await c.post("/v1/handoffs", json={"linkId": ln2["id"], "userId": "u-1"},
                             headers={"idempotency-key": "handoff-1"})
        await c.delete(f"/v1/links/{ln2['id']}")
        again = await c.post("/v1/handoffs", json={"linkId": ln2["id"], "userId": "u-1"},
                             headers={"idempotency-key": "handoff-1"})
    for before, after in (made, opened, (first, again)):
        assert before.status_code in (200, 201), before.text
        assert (after.status_code, after.content) == (before.status_code, before.content)
        assert after.headers["idempotent-replayed"] == "true"


def _readme_payload_fields() -> dict[str, set[str]]:
    """README's "Webhook payloads": each type's ``data`` fields, as written."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = text.split("- **Webhook payloads.**", 1)[1].split("\n- `SVC_", 1)[0]
    fields: dict[str, set[str]] = {}
    for item in re.split(r"\n  - ", section)[1:]:
        kind, rest = item.split(":", 1)
        rest = re.sub(r"\([^)]*\)", "", rest.split(";")[0])  # the fields, not the notes
        fields[kind.strip("` ")] = set(re.findall(r"`(\w+)`", rest))
    return fields


async def test_install_open_and_conversion_payloads_are_the_readme_s(app: App) -> None:
    """SPEC leaves these payloads open; README says what they hold, and each
    event the service makes holds exactly that: an attributed install, the
    open of a handoff claim (deferred, as the SDK was told), a universal
    link's open, a conversion; and the test event's."""
    from svc_engine.event_payloads import test_data
    from svc_engine.outbox import OutboxEvent

    seen: dict[str, OutboxEvent] = {}
    store = app.services.store

    def keep() -> None:
        seen.update((e.id, e) for _, e in store.read_outbox())

    store.on_outbox = keep
    await setup(app)
    async with app.client("sk_test") as c:
        ln = (await c.post("/v1/links", json={"path": "/p"})).json()
    await make_endpoint(app)
    async with app.client(**{"user-agent": ANDROID_UA}) as c:
        location = (await c.get(f"/{ln['slug']}")).headers["location"]
    install = new_install()
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/init", json=init_body(
            install, "android", referrer=referrer_from_location(location)))
        assert r.status_code == 200
    async with app.client("sk_test") as c:
        assert (await c.post("/v1/handoffs", json={"userId": "u1", "linkId": ln["id"]})
                ).status_code == 201
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/handoffs/claim", json={"userId": "u1", "installId": install})
        assert r.status_code == 200 and r.json()["link"]["isDeferred"] is True
        assert (await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": install})
                ).status_code == 200
        assert (await c.post("/v1/sdk/events", json={"installId": install, "events": [
            {"id": "5d1a6c3e-2b4f-4a8e-9c7d-6e5f4a3b2c1d", "name": "purchase",
             "linkId": ln["id"], "occurredAt": iso_utc(app.services.clock.now_ms())}]})
                ).status_code == 200
    await app.flush()
    documented = _readme_payload_fields()
    by_type: dict[str, list[dict[str, Any]]] = {}
    for event in seen.values():
        by_type.setdefault(event.type.value, []).append(dict(event.data))
    [made] = by_type["install"]
    assert set(made) == documented["install"]
    assert (made["installId"], made["linkId"], made["platform"]) == (install, ln["id"], "android")
    opens = {o["method"]: o for o in by_type["open"]}
    assert set(opens) == {"authenticated_handoff", "app_link"}  # an Android resolve
    assert all(set(o) == documented["open"] for o in opens.values())
    assert opens["authenticated_handoff"]["isDeferred"] is True
    assert opens["app_link"]["isDeferred"] is False
    [conversion] = by_type["conversion"]
    assert set(conversion) == documented["conversion"]
    assert set(documented) == {"install", "open", "conversion", "test"}
    assert set(test_data(endpoint_id=ln["id"], at_ms=0)) == documented["test"]


@pytest.mark.parametrize("launched", [True, False], ids=["after the launch", "before it"])
async def test_a_continue_in_app_open_is_deferred_in_its_webhook_too(
        app: App, launched: bool) -> None:
    """SPEC: the 'Continue in app' open is ``landing_page`` and deferred; its
    ``open`` webhook says what the SDK was told, whether the launch report
    came first or not."""
    from svc_engine.outbox import OutboxEvent

    seen: dict[str, OutboxEvent] = {}
    store = app.services.store
    store.on_outbox = lambda: seen.update((e.id, e) for _, e in store.read_outbox())
    await setup(app, iosLandingPage=True)
    ln = await link(app)
    await make_endpoint(app)
    iid = new_install()
    async with app.client("pk_test", **SDK) as c:
        if launched:
            assert (await c.post("/v1/sdk/init", json=init_body(iid, "ios"))).status_code == 200
        r = await c.post("/v1/sdk/resolve", json={"url": landing_url(ln), "installId": iid})
    told = r.json()["link"]
    assert (told["method"], told["isDeferred"]) == ("landing_page", True)
    await app.flush()
    [event] = [e for e in seen.values()
               if e.type.value == "open" and e.data["installId"] == iid]
    assert (event.data["method"], event.data["isDeferred"]) == ("landing_page", True)
