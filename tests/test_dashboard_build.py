"""Build > Debugger, Platforms and Domains in the dashboard, in-process: link,
click and install lookups, the tap simulation (which writes nothing), the
platforms form and its association files, custom domains."""

from __future__ import annotations

import html
import json
import re
import uuid
from typing import Any

import attrs
import pytest

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.keys import Mode
from svc_engine.links import Link, new_link, parse_link_create
from svc_engine.platforms import Platforms
from svc_engine.records import Role
from svc_engine.settings import DeferredSettings
from tests.conftest import App, running_app
from tests.dashboard_support import add_user, owner, signed_in
from tests.deferred_helpers import (
    ANDROID_UA,
    IOS_17_UA,
    PLATFORMS,
    SDK,
    init_body,
    new_install,
    referrer_from_location,
)
from web.dashboard.simulation import DEVICES, Simulation, client_for, simulate

FINGERPRINT = ":".join(["AB"] * 32)


async def setup(app: App, **settings: object) -> None:
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        if settings:
            assert (await c.patch("/v1/deferred/settings", json=settings)).status_code == 200


async def api_link(app: App, key: str = "sk_test", **fields: Any) -> dict[str, Any]:
    async with app.client(key) as c:
        r = await c.post("/v1/links", json={"path": "/p", **fields})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def tap(app: App, slug: str, ua: str, **headers: str) -> str:
    async with app.client(**{"user-agent": ua, **headers}) as c:
        r = await c.get(f"/{slug}")
    return str(r.headers.get("location", ""))


def rows_written(app: App) -> dict[bytes, int]:
    with app.services.store.read() as txn:
        return {name: txn.stat(app.services.store.db(name))["entries"]
                for name in (b"clicks", b"tokens", b"click_window", b"counters", b"outbox")}


def text(page: str) -> str:
    """The page's text, tags dropped and entities decoded, spaces folded."""
    words = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())
    return re.sub(r" ([.,;:])", r"\1", words)


# -- debugger: links --------------------------------------------------------------------


async def test_find_a_link_by_slug_url_or_id(app: App) -> None:
    await setup(app, iosLandingPage=True)
    ln = await api_link(app, title="Shoes", slug="shoes", androidFallbackUrl="https://x.test/a")
    m = await signed_in(app, owner(app))
    for query in ("shoes", "http://svc.test/shoes", "svc.test/shoes", ln["id"],
                  ln["id"].upper()):
        r = await m.get(f"/dashboard/build/debugger?link={query}")
        assert r.status_code == 200 and 'id="link-result"' in r.text, query
    page = text(r.text)
    assert "iPhone iOS 18 The 'Continue in app' page" in page
    assert "Android phone 302 redirect to the link's Android fallback URL https://x.test/a None" \
        in page
    assert "Bot or link preview A preview page with the link's Open Graph tags None No" in page
    assert "This link has no clicks yet." in page
    for query, message in (("nope", "No link of this project matches “nope”."),
                           ("http://svc.test/a/b", "No link of this project matches"),
                           ("https://%5B", "No link of this project matches")):  # no URL
        r = await m.get(f"/dashboard/build/debugger?link={query}")
        assert message in text(r.text) and 'id="link-result" class="anchor"' in r.text
    live = await api_link(app, "sk_live")
    r = await m.get(f"/dashboard/build/debugger?link={live['id']}")
    assert "That link belongs to live mode; switch to Live to debug it." in text(r.text)
    await m.aclose()


# -- debugger: clicks -------------------------------------------------------------------


async def test_replay_a_recorded_click(app: App) -> None:
    await setup(app, probabilisticMatching=True)
    ln = await api_link(app, title="Tapped")
    await tap(app, ln["slug"], IOS_17_UA, **{"cf-ipcountry": "DE",
                                             "referer": "https://news.example.com/x?q=hid42"})
    await app.flush()
    m = await signed_in(app, owner(app))
    listing = await m.get("/dashboard/build/debugger")
    found = re.search(r'href="(/dashboard/build/debugger\?click=[^"]+)"', listing.text)
    assert found is not None and "iOS 17" in listing.text and "news.example.com" in listing.text
    assert "hid42" not in listing.text
    r = await m.get(html.unescape(found.group(1)))
    page = text(r.text)
    assert "Device iOS 17 Country DE Referrer news.example.com" in page
    assert "In the probabilistic window" in page
    assert ("Answer 302 redirect to the App Store 302 Target "
            "https://apps.apple.com/app/id1234567890") in page
    assert "Enters the probabilistic window as iOS 17" in page
    # no IP address or user agent is shown, because none is kept
    assert "127.0.0.1" not in r.text and "Mozilla" not in r.text
    # the link's own latest clicks list it too
    r = await m.get(f"/dashboard/build/debugger?link={ln['slug']}")
    assert "from news.example.com" in text(r.text)
    for query in ("click=not-an-id&at=1", f"click={uuid.uuid4()}&at=²"):
        bad = await m.get(f"/dashboard/build/debugger?{query}")
        assert bad.status_code == 200 and "No such click in this project" in bad.text, query
    await m.aclose()


# -- debugger: installs -----------------------------------------------------------------


async def test_install_attributed_by_the_install_referrer(app: App) -> None:
    await setup(app)
    ln = await api_link(app, title="From the store")
    referrer = referrer_from_location(await tap(app, ln["slug"], ANDROID_UA))
    iid = new_install()
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(iid, "android", referrer=referrer))
    m = await signed_in(app, owner(app))
    page = text((await m.get(f"/dashboard/build/debugger?install={iid}")).text)
    assert f"Install {iid} Platform Android" in page
    assert "Attribution Deterministic install_referrer → From the store" in page
    assert "1 Install referrer (Android) Matched token valid" in page
    assert "Result: matched by install_referrer to From the store." in page
    assert "Taps in the probabilistic window" not in page   # probabilistic matching is off
    await m.aclose()


async def test_unattributed_install_shows_every_flow_and_the_window(app: App) -> None:
    await setup(app, probabilisticMatching=True)
    ln = await api_link(app, title="Window link")
    await tap(app, ln["slug"], IOS_17_UA, **{"cf-ipcountry": "FR"})
    await app.flush()
    iid = new_install()
    async with app.client("pk_test", **SDK) as c:   # no country: the cohort step is skipped
        await c.post("/v1/sdk/init", json=init_body(iid, "ios", os_version="17.7"))
    m = await signed_in(app, owner(app))
    page = text((await m.get(f"/dashboard/build/debugger?install={iid.upper()}")).text)
    assert "Attribution Unattributed No flow tied the first launch to a tap." in page
    assert "1 Install referrer (Android) Skipped Android only" in page
    assert "2 Probabilistic, same network (iOS) Skipped probabilisticIpMatching is off" in page
    assert "3 Probabilistic, iOS version and country Skipped the launch's country is unknown" \
        in page
    assert "Result: unattributed" in page
    assert re.search(r"Taps in the probabilistic window now Taps an iOS first launch would "
                     r"consider now Tapped iOS Country Network hash Link [^|]*? UTC 17 FR — "
                     r"Window link", page)
    for query, message in (
            ("123", "An install ID is a UUID"),
            (new_install(), "An install is recorded by the app's first launch report")):
        assert message in text((await m.get(f"/dashboard/build/debugger?install={query}")).text)
    live_install = new_install()
    async with app.client("pk_live", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(live_install, "android"))
    r = await m.get(f"/dashboard/build/debugger?install={live_install}")
    assert "That install is in live mode; switch to Live to see it." in text(r.text)
    await m.aclose()


@pytest.mark.parametrize(("country_header", "on", "flagged"), [
    ("CF-IPCountry", True, False), (None, False, False), (None, True, True)])
async def test_probabilistic_matching_without_a_country_source_is_flagged(
        store: LmdbStore, config: Config, country_header: str | None, on: bool,
        flagged: bool) -> None:
    """Cohort matching needs each tap's country: with probabilistic matching on
    and neither SVC_COUNTRY_HEADER nor SVC_GEOIP_DB, the debugger says only
    network matching can attribute iOS installs (and not otherwise)."""
    cfg = attrs.evolve(config, country_header=country_header)
    async with running_app(store, cfg, TrioWallClock()) as app:
        await setup(app, probabilisticMatching=on)
        m = await signed_in(app, owner(app))
        page = (await m.get("/dashboard/build/debugger")).text
        await m.aclose()
    assert ('id="no-country-source"' in page) is flagged
    if flagged:
        assert "No country source. Cohort matching needs each tap's country" in text(page)
        assert "only network matching (off) can attribute iOS installs" in text(page)


# -- debugger: simulate a tap ---------------------------------------------------------------


@pytest.mark.parametrize(("settings", "link_fields", "device", "ios", "expect"), [
    ({}, {}, "iphone", "17", ["Answer 302 redirect to the App Store",
                              "Token None", "Counted Click recorded", "Not in the window",
                              "!No web fallback on the link"]),  # the store: no web chain
    ({"iosLandingPage": True}, {}, "iphone", "", ["The 'Continue in app' page",
                                                  "iosLandingPage is on"]),
    ({"probabilisticMatching": True}, {}, "iphone", "16",
     ["Enters the probabilistic window as iOS 16"]),
    ({}, {}, "android", "", ["302 redirect to the Play Store listing", "Token Minted",
                             "in the store's install referrer", "!No web fallback on the link"]),
    ({}, {"androidFallbackUrl": "https://x.test/a"}, "android", "",
     ["302 redirect to the link's Android fallback URL", "Token None",
      "it wins over the Play Store"]),
    ({"webFallbackTokens": True}, {"webFallbackUrl": "https://x.test/w"}, "desktop", "",
     ["302 redirect to the link's web fallback URL", "Target https://x.test/w",
      "added to the URL's query (svc_token=…)", "with svc_token (webFallbackTokens)"]),
    ({}, {"webFallbackUrl": "https://x.test/w"}, "desktop", "",
     ["302 redirect to the link's web fallback URL", "Token None",
      "without svc_token (webFallbackTokens)"]),
    ({"probabilisticMatching": True}, {}, "android", "",
     ["302 redirect to the Play Store listing", "Not in the window",
      "!the probabilistic window"]),  # iOS only (SECURITY.md): not a word of it on Android
    ({}, {}, "desktop", "", ["A plain page with the link's title and store buttons",
                             "No web fallback on the link or the project"]),
    ({}, {}, "bot", "", ["A preview page with the link's Open Graph tags", "Not counted",
                         "never counted"]),
])
async def test_simulate_a_tap_writes_nothing(app: App, settings: dict[str, object],
                                             link_fields: dict[str, str], device: str, ios: str,
                                             expect: list[str]) -> None:
    await setup(app, **settings)
    ln = await api_link(app, **link_fields)
    await app.flush()
    before = rows_written(app)
    m = await signed_in(app, owner(app))
    r = await m.get(f"/dashboard/build/debugger/simulate?link={ln['slug']}&device={device}"
                    f"&ios={ios}")
    assert r.status_code == 200
    page = text(r.text)
    for phrase in expect:  # "!": a phrase the page must not say
        assert (phrase[1:] not in page) if phrase.startswith("!") else (phrase in page), phrase
    await app.flush()
    assert rows_written(app) == before
    await m.aclose()


async def test_simulate_validates_its_form(app: App) -> None:
    ln = await api_link(app)
    m = await signed_in(app, owner(app))
    r = await m.get("/dashboard/build/debugger/simulate?device=iphone")
    assert r.status_code == 400 and "Give the link to tap" in r.text
    for ios in ("x", "²", "9" * 5000, "١٨"):  # isdigit() says yes to the last three
        r = await m.get(f"/dashboard/build/debugger/simulate?link={ln['slug']}&device=iphone"
                        f"&ios={ios}")
        assert r.status_code == 400 and "The iOS version is a whole number" in r.text, ios
    r = await m.get("/dashboard/build/debugger/simulate?link=missing&device=android")
    assert r.status_code == 404 and 'id="sim-result"' in r.text
    r = await m.get(f"/dashboard/build/debugger/simulate?link={ln['slug']}&device=toaster")
    assert r.status_code == 200 and "iPhone taps" in text(r.text)
    await m.aclose()


def test_simulation_of_fallbacks_and_expired_links() -> None:
    now = 1_800_000_000_000
    draft = parse_link_create({"path": "/x", "iosFallbackUrl": "https://x.test/i"},
                              allow_custom_slug=False, now_ms=now)
    link = new_link(draft, link_id="3b241101-e2bb-4255-8caf-4136c566a962",
                    project_id="3b241101-e2bb-4255-8caf-4136c566a963", mode=Mode.TEST,
                    domain="svc.test", slug="abc", now_ms=now)
    none, plain = DeferredSettings(), Platforms()

    def run(lk: Link | None, device: str) -> Simulation:
        return simulate(lk, device, 18, settings=none, platforms=plain, now_ms=now)

    ios = run(link, "iphone")
    assert (ios.status, ios.target_url, ios.token, ios.counted) == (
        302, "https://x.test/i", None, True)
    assert ios.reasons[0].startswith("The link has an iOS fallback URL")
    bare = attrs.evolve(link, ios_fallback_url=None)
    for device, first in (("android", "No Android package name"),
                          ("iphone", "No App Store ID")):  # no app: the web fallback chain
        reasons = run(bare, device).reasons
        assert reasons[0].startswith(first) and reasons[1].startswith(
            "No web fallback on the link or the project"), device
    expired = attrs.evolve(link, expires_at_ms=now)
    gone = run(expired, "android")
    assert (gone.status, gone.counted, gone.answer) == (410, False,
                                                        "410: this link no longer works")
    assert run(expired, "iphone").target_url == "https://x.test/i"
    assert run(expired, "iphone").reasons[0].startswith("The link has expired")
    missing = run(None, "desktop")
    assert (missing.status, missing.counted, missing.reasons) == (
        404, False, ("There is no live link at this address.",))
    assert client_for("bot", 17).is_bot and client_for("iphone", None).os_major is None
    assert [d for d, _ in DEVICES] == ["iphone", "android", "desktop", "bot"]


# -- platforms ----------------------------------------------------------------------------


async def test_platforms_form_saves_and_drives_the_association_files(app: App) -> None:
    m = await signed_in(app, owner(app))
    empty = text((await m.get("/dashboard/build/platforms")).text)
    assert "Universal links need a Team ID and a Bundle ID" in empty
    assert '"details": []' in empty and "assetlinks.json http://svc.test/.well-known" in empty
    r = await m.post("/dashboard/build/platforms", {
        "ios_app_store_id": "id1234567890", "ios_team_id": "ABCDE12345",
        "ios_bundle_id": "com.example.app", "ios_scheme": "ExampleApp://",
        "android_package": "com.example.app",
        "android_fingerprints": f"{FINGERPRINT.lower()}\n{FINGERPRINT.replace(':', '')}, ",
        "web_fallback": "https://example.com/"})
    assert r.status_code == 303 and r.headers["location"].endswith("done=platforms-saved")
    saved = app.services.links.platforms(app.project_id)
    assert (saved.ios.app_store_id, saved.ios.scheme, saved.android.sha256_cert_fingerprints,
            saved.web.fallback_url) == ("1234567890", "exampleapp", (FINGERPRINT,),
                                        "https://example.com/")
    page = (await m.get(r.headers["location"])).text
    assert "Universal links: ABCDE12345.com.example.app" in text(page)
    for name, stored in (("ios_app_store_id", "1234567890"), ("ios_team_id", "ABCDE12345"),
                         ("ios_bundle_id", "com.example.app"), ("ios_scheme", "exampleapp"),
                         ("android_package", "com.example.app"),
                         ("web_fallback", "https://example.com/")):  # the form shows what is kept
        assert f'id="pf-{name}" name="{name}" type="text" value="{stored}"' in page, name
    async with app.client() as c:
        aasa = (await c.get("/.well-known/apple-app-site-association")).json()
        links = (await c.get("/.well-known/assetlinks.json")).json()
    shown = re.findall(r'<code>(.*?)</code></pre>', page, re.S)
    assert json.loads(html.unescape(shown[0])) == aasa
    assert json.loads(html.unescape(shown[1])) == links
    # clearing a field clears it
    r = await m.post("/dashboard/build/platforms", {"ios_app_store_id": "1234567890"})
    assert r.status_code == 303
    assert app.services.links.platforms(app.project_id).android.package_name is None
    page = (await m.get("/dashboard/build/platforms")).text
    assert 'name="android_package" type="text" value=""' in page  # empty, not "None"
    await m.aclose()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("ios_team_id", "abc", "ios.teamId must be the 10-character Apple Developer Team ID"),
    ("ios_app_store_id", "shop", "ios.appStoreId must be the app&#39;s numeric App Store ID"),
    ("android_fingerprints", "12:34", "is not a SHA-256 fingerprint"),
    ("android_scheme", "https", "android.scheme cannot be &#39;https&#39;"),
    ("web_fallback", "javascript:alert(1)", "web.fallbackUrl must be an absolute http"),
])
async def test_platforms_errors_name_the_field_and_save_nothing(app: App, field: str, value: str,
                                                               message: str) -> None:
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/build/platforms", {field: value, "ios_bundle_id": "com.a.b"})
    assert r.status_code == 400 and message in r.text
    assert f'id="pf-{field}-error"' in r.text and "Not saved: check" in r.text
    assert 'value="com.a.b"' in r.text                      # the input is kept
    assert app.services.links.platforms(app.project_id) == Platforms()
    await m.aclose()


async def test_marketers_see_platforms_read_only_and_cannot_save(app: App) -> None:
    mkt = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    page = await mkt.get("/dashboard/build/platforms")
    assert page.status_code == 200 and "Save platforms" not in page.text
    assert "Owners, admins and developers change them." in page.text and " readonly" in page.text
    r = await mkt.post("/dashboard/build/platforms", {"android_package": "com.evil.app"})
    assert r.status_code == 403
    dev = await signed_in(app, await add_user(app, "dev@example.com", Role.DEVELOPER))
    assert (await dev.post("/dashboard/build/platforms", {"android_package": "com.a.b"},
                           csrf_token=None)).status_code == 403
    assert app.services.links.platforms(app.project_id) == Platforms()
    await mkt.aclose()
    await dev.aclose()


# -- domains -------------------------------------------------------------------------------


async def test_add_use_and_remove_a_custom_domain(app: App) -> None:
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/build/domains", {"domain": " Go.Example.COM. "})
    assert r.status_code == 303 and r.headers["location"].endswith("done=domain-added")
    assert app.services.links.domains_of(app.project_id) == ["go.example.com"]
    page = text((await m.get(r.headers["location"])).text)
    assert "go.example.com https://go.example.com/Ab3dE6gH9 0" in page
    form = await m.get("/dashboard/links/new")
    assert '<option value="go.example.com">' in form.text
    created = await m.post("/dashboard/links/new", {"path": "/x", "domain": "go.example.com",
                                                    "slug": "promo"})
    assert created.status_code == 303
    async with app.client(host="go.example.com") as c:
        assert (await c.get("/promo")).status_code == 200          # the OG page: no apps set
    page = text((await m.get("/dashboard/build/domains")).text)
    assert "Remove: 1 link stops working" in page
    r = await m.post("/dashboard/build/domains/go.example.com/remove")
    assert r.status_code == 303 and app.services.links.domains_of(app.project_id) == []
    assert (await m.post("/dashboard/build/domains/go.example.com/remove")).status_code == 404
    assert (await m.post("/dashboard/build/domains/not a domain/remove")).status_code == 404
    await m.aclose()


@pytest.mark.parametrize(("typed", "message"), [
    ("https://go.example.com/path", "is not a domain name; give only the host"),
    ("localhost", "is not a full domain name"),
    ("10.0.0.1", "An IP address cannot serve links"),
    ("svc.test", "svc.test is the service&#39;s own domain."),
    ("taken.example.com", "taken.example.com is already in use."),
])
async def test_domain_errors(app: App, typed: str, message: str) -> None:
    other_project = "3b241101-e2bb-4255-8caf-4136c566a962"
    await app.services.links.add_domain(other_project, "taken.example.com", set())
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/build/domains", {"domain": typed})
    assert r.status_code == 400 and message in r.text and f'value="{typed}"' in r.text
    assert app.services.links.domains_of(app.project_id) == []
    await m.aclose()


async def test_domains_need_csrf_and_a_builder_role(app: App) -> None:
    m = await signed_in(app, owner(app))
    assert (await m.post("/dashboard/build/domains", {"domain": "go.example.com"},
                         csrf_token="x")).status_code == 403
    mkt = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    page = await mkt.get("/dashboard/build/domains")
    assert page.status_code == 200 and "Add a custom domain" not in page.text
    assert (await mkt.post("/dashboard/build/domains", {"domain": "go.example.com"})
            ).status_code == 403
    assert app.services.links.domains_of(app.project_id) == []
    await m.aclose()
    await mkt.aclose()
