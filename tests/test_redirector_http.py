"""The redirector over HTTP: SPEC.md's decision table again, now through the
real ASGI front with real user agents, tokens in LMDB and clicks recorded."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import attrs
import pytest
import trio

from svc_engine.attribution import Token
from svc_engine.keys import Mode
from svc_engine.platforms import AndroidPlatform, IosPlatform, Platforms, WebPlatform
from svc_engine.redirect import LandingPage, OgPage, Redirect, TokenPlacement
from tests.conftest import App
from tests.dashboard_webhook_support import make_endpoint
from tests.test_redirect import (
    ANDROID,
    BARE,
    DESKTOP,
    FULL,
    IPHONE,
    NO_APPS,
    PACKAGE,
    STORE_ID,
    TABLE,
)

UA = {
    "ios": "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
           "(KHTML, like Gecko) Version/26.0 Mobile/15E148 Safari/604.1",
    "android": "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
               "Chrome/142.0.0.0 Mobile Safari/537.36",
    "desktop": "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like "
               "Gecko) Chrome/142.0.0.0 Safari/537.36",
    "bot": "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
}
CLIENT_UA = {id(IPHONE): UA["ios"], id(ANDROID): UA["android"], id(DESKTOP): UA["desktop"]}


def platforms_body(p: Platforms) -> dict[str, object]:
    body = p.to_json()
    return {section: {k: v for k, v in fields.items() if v not in (None, [], ())}
            for section, fields in body.items()}


async def make_link(app: App, **fields: object) -> dict[str, object]:
    async with app.client("sk_live") as c:
        r = await c.post("/v1/links", json={"path": "/product/1", **fields})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def configure(app: App, *, landing: bool = False, tokens: bool = False,
                    prob: bool = False, ip: bool = False,
                    platforms: Platforms = FULL) -> None:
    async with app.client("sk_live") as c:
        r = await c.patch("/v1/deferred/settings", json={
            "iosLandingPage": landing, "webFallbackTokens": tokens,
            "probabilisticMatching": prob, "probabilisticIpMatching": ip})
        assert r.status_code == 200
        r = await c.patch("/v1/platforms", json=platforms_body(platforms))
        assert r.status_code == 200, r.text


FALLBACK_FIELDS = {"ios": ("iosFallbackUrl", "https://example.com/ios"),
                   "android": ("androidFallbackUrl", "https://example.com/android"),
                   "web": ("webFallbackUrl", "https://example.com/web?x=1")}


@pytest.mark.parametrize(("client", "landing", "tokens", "fallbacks", "platforms", "expected"),
                         [row[1:] for row in TABLE], ids=[row[0] for row in TABLE])
async def test_decision_table_over_http(app: App, client: object, landing: bool, tokens: bool,
                                        fallbacks: tuple[str, ...], platforms: Platforms,
                                        expected: object) -> None:
    await configure(app, landing=landing, tokens=tokens, platforms=platforms)
    link = await make_link(app, **dict(FALLBACK_FIELDS[f] for f in fallbacks))
    async with app.client(**{"user-agent": CLIENT_UA[id(client)]}) as c:
        r = await c.get(f"/{link['slug']}")
    attr = app.services.attribution
    if isinstance(expected, Redirect):
        assert r.status_code == 302
        location = r.headers["location"]
        assert r.headers["cache-control"] == "no-store"
        if expected.token is TokenPlacement.NONE:
            assert location == expected.url
        else:
            if expected.token is TokenPlacement.STORE_REFERRER:
                referrer = parse_qs(urlsplit(location).query)["referrer"][0]
                token = parse_qs(referrer)["svc_token"][0]
            else:
                token = parse_qs(urlsplit(location).query)["svc_token"][0]
            stored = attr.get_token(token)
            assert isinstance(stored, Token) and stored.link_id == link["id"]
            assert not stored.used
    elif expected is LandingPage:
        assert r.status_code == 200
        assert 'name="apple-itunes-app"' in r.text and "<script" not in r.text
        assert "I already have the app, open it" in r.text
    else:
        assert expected is OgPage
        assert r.status_code == 200 and 'property="og:title"' in r.text
    await app.flush()
    clicks = attr.recent_clicks(app.project_id, "live")
    assert len(clicks) == 1 and clicks[0].link_id == link["id"]


async def test_bots_and_head_are_never_counted(app: App) -> None:
    await configure(app)
    link = await make_link(app, ogTitle="Summer sale", ogDescription="Half off")
    for ua in ("Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
               "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
               "Twitterbot/1.0", "WhatsApp/2.23.20.0 A", ""):
        async with app.client(**{"user-agent": ua}) as c:
            r = await c.get(f"/{link['slug']}")
        assert r.status_code == 200
        assert '<meta property="og:title" content="Summer sale">' in r.text
        assert 'name="twitter:card"' in r.text
    async with app.client(**{"user-agent": UA["android"]}) as c:
        r = await c.head(f"/{link['slug']}")
    assert r.status_code == 302 and "svc_token" not in r.headers["location"]
    await app.flush()
    assert app.services.attribution.recent_clicks(app.project_id, "live") == []


NO_WEB = attrs.evolve(FULL, web=WebPlatform())


@pytest.mark.parametrize(("platforms", "has_apple", "has_google"), [
    (NO_WEB, True, True), (attrs.evolve(NO_WEB, ios=IosPlatform()), False, True),
    (attrs.evolve(NO_WEB, android=AndroidPlatform()), True, False), (BARE, False, False)])
async def test_og_page_links_each_configured_store(app: App, platforms: Platforms,
                                                   has_apple: bool, has_google: bool) -> None:
    """The OG page a desktop with nowhere to go gets offers a "Get the app"
    button for each store the project configured, and no other."""
    await configure(app, platforms=platforms)
    link = await make_link(app, ogTitle="Summer sale")
    async with app.client(**{"user-agent": UA["desktop"]}) as c:
        r = await c.get(f"/{link['slug']}")
    assert r.status_code == 200 and 'content="Summer sale"' in r.text
    apple = f'href="https://apps.apple.com/app/id{STORE_ID}"'
    google = f'href="https://play.google.com/store/apps/details?id={PACKAGE}"'
    assert (apple in r.text, google in r.text) == (has_apple, has_google)
    assert ('aria-label="Get the app"' in r.text) == (has_apple or has_google)


async def test_viber_in_app_browser_is_a_person_and_its_preview_fetcher_a_bot(app: App) -> None:
    """The maintained crawler list matches "Viber" anywhere, which took in the
    in-app browser of Android's Viber: its users got the preview page."""
    await configure(app)
    link = await make_link(app, ogTitle="Summer sale")
    in_app = ("Mozilla/5.0 (Linux; Android 14; wv) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Version/4.0 Chrome/129.0 Mobile Safari/537.36 Viber/22.0.0.0")
    async with app.client(**{"user-agent": in_app}) as c:
        r = await c.get(f"/{link['slug']}")
    assert r.status_code == 302
    assert "svc_token" in parse_qs(urlsplit(r.headers["location"]).query)["referrer"][0]
    fetcher = "Viber/18.0.1.286 CFNetwork/1335.0.3 Darwin/21.6.0"
    async with app.client(**{"user-agent": fetcher}) as c:
        r = await c.get(f"/{link['slug']}")
    assert r.status_code == 200 and 'property="og:title" content="Summer sale"' in r.text
    await app.flush()
    clicks = app.services.attribution.recent_clicks(app.project_id, "live")
    assert [c.platform for c in clicks] == ["android"]


async def test_unknown_and_expired_and_deleted(app: App) -> None:
    await configure(app)
    async with app.client(**{"user-agent": UA["ios"]}) as c:
        r = await c.get("/doesnotexist")
        assert r.status_code == 404 and "<script" not in r.text
        r = await c.get("/a/b")
        assert r.status_code == 404
        r = await c.post("/whatever")
        assert r.status_code == 405
    link = await make_link(app, expiresAt="2099-01-01T00:00:00Z")
    gone = await make_link(app, expiresAt="2099-01-01T00:00:00Z",
                           iosFallbackUrl="https://example.com/sorry")
    await app.services.links.update(app.project_id, "live", link["id"],
                                    lambda x: __import__("attrs").evolve(x, expires_at_ms=1),
                                    None)
    await app.services.links.update(app.project_id, "live", gone["id"],
                                    lambda x: __import__("attrs").evolve(x, expires_at_ms=1),
                                    None)
    async with app.client(**{"user-agent": UA["ios"]}) as c:
        expired = await c.get(f"/{link['slug']}")
        assert expired.status_code == 410
        # the app's project named, not the service ("Ask svc ... for a new link")
        project = app.services.store.get_project(app.project_id)
        assert project is not None and f"Ask {project.name} or whoever" in expired.text
        assert "svc" not in expired.text.split("<body", 1)[1]
        unknown = await c.get("/doesnotexist")
        assert "(svc)" not in unknown.text
        r = await c.get(f"/{gone['slug']}")
        assert r.status_code == 302 and r.headers["location"] == "https://example.com/sorry"
    deleted = await make_link(app)
    async with app.client("sk_live") as c:
        assert (await c.delete(f"/v1/links/{deleted['id']}")).status_code == 200
    async with app.client(**{"user-agent": UA["ios"]}) as c:
        assert (await c.get(f"/{deleted['slug']}")).status_code == 404


async def test_iphone_tap_enters_the_window_only_when_matching_is_on(app: App) -> None:
    await configure(app, prob=False)
    link = await make_link(app)
    async with app.client(**{"user-agent": UA["ios"], "cf-ipcountry": "DE"}) as c:
        await c.get(f"/{link['slug']}")
    await app.flush()
    assert app.services.attribution.window(app.project_id, "live", 0) == []
    await configure(app, prob=True)
    async with app.client(**{"user-agent": UA["ios"]}) as c:
        await c.get(f"/{link['slug']}")
    await app.flush()
    entries = app.services.attribution.window(app.project_id, "live", 0)
    assert len(entries) == 1
    assert entries[0].os_major == 26 and entries[0].net_hash is None


async def test_custom_domain_routes_by_host(app: App) -> None:
    await configure(app, platforms=NO_APPS)
    async with app.client("sk_live") as c:
        r = await c.post("/v1/domains", json={"domain": "go.example.com"})
        assert r.status_code == 201 and r.json()["custom"] == ["go.example.com"]
        taken = await c.post("/v1/domains", json={"domain": "go.example.com"})
        assert taken.status_code == 400 and taken.json()["error"]["code"] == "invalid_domain"
        bad = await c.post("/v1/domains", json={"domain": "http://x"})
        assert bad.json()["error"]["code"] == "invalid_domain"
    link = await make_link(app, domain="go.example.com", slug="spring",
                           webFallbackUrl="https://example.com/spring")
    assert link["url"] == "https://go.example.com/spring"
    async with app.client(**{"user-agent": UA["desktop"], "host": "go.example.com"}) as c:
        r = await c.get("/spring")
    assert r.status_code == 302 and r.headers["location"] == "https://example.com/spring"
    async with app.client(**{"user-agent": UA["desktop"]}) as c:  # default domain: not there
        assert (await c.get("/spring")).status_code == 404


async def test_clicks_reach_the_outbox_only_when_an_endpoint_exists(app: App) -> None:
    await configure(app, platforms=NO_APPS)
    link = await make_link(app)
    async with app.client(**{"user-agent": UA["desktop"]}) as c:
        await c.get(f"/{link['slug']}")
    await app.flush()
    assert app.services.store.read_outbox() == []
    async with app.client("sk_live") as c:
        r = await c.post("/v1/webhooks/endpoints", json={"url": "https://localhost:9/hook",
                                                         "events": ["click"]})
        assert r.status_code == 201
    async with app.client(**{"user-agent": UA["desktop"]}) as c:
        await c.get(f"/{link['slug']}")
    await app.flush()
    deliveries = app.services.store.scan(b"deliveries", b"")
    outbox = app.services.store.read_outbox()
    # the click went through the outbox: it is either still there or a delivery now
    assert len(outbox) + len(deliveries) >= 1


async def test_the_outbox_is_woken_once_the_click_is_committed(app: App) -> None:
    """Nobody waits for a click's commit, so the dispatcher is woken by the
    commit itself: woken earlier, it would find nothing and back off. A
    click that queued no webhook event (no endpoint) wakes nobody."""
    await configure(app, platforms=NO_APPS)
    link = await make_link(app)
    attr = app.services.attribution
    seen: list[tuple[int, int]] = []
    woken = trio.Event()

    def notify() -> None:
        seen.append((len(attr.recent_clicks(app.project_id, "live")),
                     len(app.services.store.read_outbox())))
        woken.set()

    app.services.store.on_outbox = notify
    async with app.client(**{"user-agent": UA["desktop"]}) as c:
        r = await c.get(f"/{link['slug']}")
        assert r.status_code == 302
        await app.services.store.write(lambda txn: None)  # queued after the click
        assert len(attr.recent_clicks(app.project_id, "live")) == 1
        assert seen == []  # no endpoint: no event, no wake-up
        await make_endpoint(app, mode=Mode.LIVE)
        r = await c.get(f"/{link['slug']}")
    assert r.status_code == 302
    with trio.fail_after(5):
        await woken.wait()
    assert seen == [(2, 1)]  # the click and its event were readable


async def test_a_custom_domain_claimed_by_another_project_serves_only_its_links(
        app: App) -> None:
    """Project A gave up go.shared.com and project B claimed it: taps on it
    went on redirecting A's links (to A's app and fallbacks, a token minted
    and a click counted for A) under B's association files, and B could not
    make a link with a slug A had used there. Now a custom domain serves only
    its owner's links, and A's slugs there are B's to use."""
    import os

    from storage.layout import uid as layout_uid
    from web import tenancy

    await configure(app)
    async with app.client("sk_live") as c:
        assert (await c.post("/v1/domains", json={"domain": "go.shared.com"})).status_code == 201
    old = await make_link(app, domain="go.shared.com", slug="promo")
    tapper = {"user-agent": UA["android"], "host": "go.shared.com"}
    async with app.client(**tapper) as c:
        assert (await c.get("/promo")).status_code == 302  # A's, while A owns it
    async with app.client("sk_live") as c:
        assert (await c.delete("/v1/domains/go.shared.com")).status_code == 200
    _, keys = await tenancy.create_project(app.services.store, app.org_id, "B", os.urandom,
                                           app.services.clock.now_ms())
    async with app.client(keys["sk_live"]) as c:
        assert (await c.post("/v1/domains", json={"domain": "go.shared.com"})).status_code == 201
    async with app.client(**tapper) as c:
        gone = await c.get("/promo")
    assert gone.status_code == 404
    assert app.services.links.by_slug("go.shared.com", "promo") is None  # given up to B
    # A slug of A's left on the domain (a domain that changed hands before
    # this upgrade, when nothing released them) answers nothing either.
    slugs, old_id = app.services.store.db(b"slugs"), str(old["id"])
    await app.services.store.write(lambda txn: txn.put(
        b"go.shared.com\x00promo", layout_uid(old_id), db=slugs))
    async with app.client(**tapper) as c:
        assert (await c.get("/promo")).status_code == 404
    await app.services.store.write(lambda txn: txn.delete(b"go.shared.com\x00promo", db=slugs))
    async with app.client(keys["sk_live"]) as c:
        mine = await c.post("/v1/links", json={"path": "/b", "domain": "go.shared.com",
                                               "slug": "promo"})
    assert mine.status_code == 201, mine.text
    async with app.client(**{"user-agent": UA["desktop"], "host": "go.shared.com"}) as c:
        served = await c.get("/promo")
    assert served.status_code in (200, 302)
    await app.flush()
    clicks = app.services.store.scan(b"clicks", b"")
    assert len(clicks) == 2  # A's tap while it owned the domain, and B's
    async with app.client("sk_live") as c:
        assert (await c.get(f"/v1/links/{old['id']}")).status_code == 200  # A keeps it


async def test_a_tap_whose_token_cannot_be_stored_still_redirects(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A redirect that hands out a token waits for it to be durable; when the
    store refused that commit (a full disk or map) the person tapping got a
    JSON 503 instead of the Play Store or the web fallback. Now the redirect
    goes out without a token (no deferred link, as for a store without one)."""
    from svc_engine.errors import StorageUnavailable

    await configure(app, tokens=True)
    link = await make_link(app)
    store = app.services.store
    real = store.submit

    class Refused:
        async def wait(self) -> None:
            raise StorageUnavailable("simulated: the disk is full")

    async def refusing(op: object, *, lazy: bool = False) -> object:
        return await real(op, lazy=lazy) if lazy else Refused()  # type: ignore[arg-type]

    monkeypatch.setattr(store, "submit", refusing)
    for ua, where in (("android", "https://play.google.com/"), ("desktop", "https://")):
        async with app.client(**{"user-agent": UA[ua]}) as c:
            r = await c.get(f"/{link['slug']}")
        assert r.status_code == 302, (ua, r.text)
        assert r.headers["location"].startswith(where) and "svc_token" not in r.headers["location"]


async def test_a_page_shows_an_og_image_only_over_https(app: App) -> None:
    """The pages' security policy loads images over https only: an http
    ``ogImageUrl`` was an empty box on the page. The page leaves it out;
    preview crawlers still get it in ``og:image``."""
    await configure(app, landing=True)
    plain = await make_link(app, ogImageUrl="http://cdn.example.com/a.png", ogTitle="T")
    secure = await make_link(app, ogImageUrl="https://cdn.example.com/b.png", ogTitle="T")
    async with app.client(**{"user-agent": UA["ios"]}) as c:
        landing_plain = (await c.get(f"/{plain['slug']}")).text
        landing_secure = (await c.get(f"/{secure['slug']}")).text
    async with app.client(**{"user-agent": UA["bot"]}) as c:
        preview = (await c.get(f"/{plain['slug']}")).text
    assert "<img" not in landing_plain and "cdn.example.com" not in landing_plain
    assert '<img class="hero" src="https://cdn.example.com/b.png"' in landing_secure
    assert '<meta property="og:image" content="http://cdn.example.com/a.png">' in preview
    assert '<img src="http://' not in preview


async def test_a_link_s_own_text_is_escaped_on_every_page_it_shows_on(app: App) -> None:
    """A link's title and description are whoever made it's text (a
    publishable key ships in every copy of the app): the preview page a
    crawler gets and the landing page a person gets show it escaped, never
    as markup, as the service renders them (not only the templates alone)."""
    hostile = '<script>alert("x")</script><img src=x onerror=alert(1)> & "q"'
    await configure(app, landing=True)
    link = await make_link(app, title=hostile, ogTitle=hostile, ogDescription=hostile)
    pages = []
    for agent in (UA["bot"], UA["ios"]):
        async with app.client(**{"user-agent": agent}) as c:
            r = await c.get(f"/{link['slug']}")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
        pages.append(r.text)
    for html in pages:
        assert "<script" not in html and "<img src=x" not in html
        assert "&lt;script&gt;alert(" in html


async def test_a_host_no_project_claimed_serves_the_default_domain_s_links(app: App) -> None:
    """A proxy forwarding its own Host, or a tap on the server's address: a
    Host that is neither the public URL's nor a custom domain is read as the
    default domain (its short links answer), never as a domain of its own."""
    await configure(app)
    ln = await make_link(app, slug="spring-sale")
    for host in ("127.0.0.1:8080", "internal.proxy.example", "[::1]:8080"):
        async with app.client(**{"user-agent": UA["android"], "host": host}) as c:
            r = await c.get("/spring-sale")
        assert r.status_code == 302, (host, r.status_code)
    assert ln["domain"] == app.services.default_domain


async def test_a_custom_domain_answers_by_its_fully_qualified_name_too(app: App) -> None:
    """A Host of "go.acme.com." (the trailing dot of a fully qualified name)
    fell back to the default domain: the custom domain's links were 404."""
    await configure(app)
    async with app.client("sk_live") as c:
        assert (await c.post("/v1/domains", json={"domain": "go.acme.com"})).status_code == 201
    ln = await make_link(app, domain="go.acme.com", slug="sale")
    for host in ("go.acme.com", "go.acme.com.", "GO.ACME.COM.:443"):
        async with app.client(**{"user-agent": UA["android"], "host": host}) as c:
            r = await c.get("/sale")
        assert r.status_code == 302, (host, r.status_code)
    assert ln["domain"] == "go.acme.com"


async def test_every_answer_of_a_tap_is_neither_cached_nor_a_referrer(app: App) -> None:
    """README: a tap's answer is never cached (a cache would skip the count
    and hand one token to many) and sends no Referer on (a destination does
    not learn which short link, or whose, brought the visitor): redirects,
    the landing and OG pages, 404 and 410 alike."""
    await configure(app, landing=True)
    ln = await make_link(app)
    gone = await make_link(app, expiresAt="2099-01-01T00:00:00Z")
    await app.services.links.update(app.project_id, "live", str(gone["id"]),
                                    lambda x: __import__("attrs").evolve(x, expires_at_ms=1),
                                    None)
    answers = {}
    for name, ua, path in (("redirect", UA["android"], ln["slug"]),
                           ("landing page", UA["ios"], ln["slug"]),
                           ("OG page", UA["bot"], ln["slug"]),
                           ("404", UA["ios"], "doesnotexist"),
                           ("410", UA["desktop"], gone["slug"])):
        async with app.client(**{"user-agent": ua}) as c:
            answers[name] = await c.get(f"/{path}")
    assert [r.status_code for r in answers.values()] == [302, 200, 200, 404, 410]
    for name, r in answers.items():
        assert r.headers["cache-control"] == "no-store", name
        assert r.headers["referrer-policy"] == "no-referrer", name
