"""The redirector's pure decision, table-driven from SPEC.md's flows.

SPEC.md: Android without the app -> store with a single-use svc_token in the
install referrer, unless the link has an Android fallback URL (the fallback
wins, no token). iPhone -> 'Continue in app' page when iosLandingPage is on and
the link has no iOS fallback URL, else the App Store (or the iOS fallback).
webFallbackTokens -> redirects to a web fallback carry svc_token. Bots are never
counted; HEAD is never counted.
"""

from __future__ import annotations

import itertools
from urllib.parse import parse_qs, unquote, urlsplit

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.platforms import AndroidPlatform, IosPlatform, Platforms, WebPlatform
from svc_engine.redirect import (
    Client,
    Decision,
    GonePage,
    LandingPage,
    NotFoundPage,
    OgPage,
    PageMeta,
    Platform,
    PreviewPage,
    Redirect,
    Target,
    TokenPlacement,
    android_store_url,
    app_store_url,
    decide,
    landing_open_url,
    page_meta,
    play_store_url,
    with_query_param,
)

NOW = 1_750_000_000_000
IOS_FB = "https://example.com/ios"
ANDROID_FB = "https://example.com/android"
WEB_FB = "https://example.com/web?x=1"
SITE_FB = "https://example.com/"
STORE_ID = "1234567890"
PACKAGE = "com.example.app"


@attrs.frozen
class Settings:
    ios_landing_page: bool = False
    web_fallback_tokens: bool = False
    probabilistic_matching: bool = False


def link(*fallbacks: str, expires_at_ms: int | None = None, deleted: bool = False) -> Link:
    return Link(
        id="7f1c0e4e-8a38-4c55-9a43-4c6f9f1f2a10", project_id="p1", mode=Mode.LIVE,
        domain="go.example.com", slug="abc", path="/product/1", created_at_ms=NOW - 1000,
        updated_at_ms=NOW - 1000,
        ios_fallback_url=IOS_FB if "ios" in fallbacks else None,
        android_fallback_url=ANDROID_FB if "android" in fallbacks else None,
        web_fallback_url=WEB_FB if "web" in fallbacks else None,
        expires_at_ms=expires_at_ms, deleted=deleted,
    )


FULL = Platforms(
    ios=IosPlatform(app_store_id=STORE_ID, bundle_id="com.example.app", team_id="ABCDE12345",
                    scheme="exampleapp"),
    android=AndroidPlatform(package_name=PACKAGE),
    web=WebPlatform(fallback_url=SITE_FB),
)
NO_APPS = Platforms(web=WebPlatform(fallback_url=SITE_FB))
BARE = Platforms()

IPHONE = Client(Platform.IOS, 26)
ANDROID = Client(Platform.ANDROID, 15)
DESKTOP = Client(Platform.DESKTOP)

STORE = app_store_url(STORE_ID)
PLAY = play_store_url(PACKAGE)

# (case, client, landing, tokens, link fallbacks, platforms, expected outcome)
TABLE: list[tuple[str, Client, bool, bool, tuple[str, ...], Platforms, object]] = [
    # Android: store with a referrer token, unless the link's Android fallback wins.
    ("android store", ANDROID, False, False, (), FULL,
     Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)),
    ("android store, tokens on", ANDROID, False, True, (), FULL,
     Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)),
    ("android store, landing on", ANDROID, True, False, (), FULL,
     Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)),
    ("android fallback wins", ANDROID, False, False, ("android",), FULL,
     Redirect(ANDROID_FB, Target.ANDROID_FALLBACK)),
    ("android fallback wins, tokens on", ANDROID, False, True, ("android", "web"), FULL,
     Redirect(ANDROID_FB, Target.ANDROID_FALLBACK)),
    ("android ignores ios fallback", ANDROID, False, False, ("ios",), FULL,
     Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)),
    ("android store beats web fallback", ANDROID, False, True, ("web",), FULL,
     Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)),
    ("android, no package: link web fallback", ANDROID, False, False, ("web",), NO_APPS,
     Redirect(WEB_FB, Target.WEB_FALLBACK)),
    ("android, no package: web fallback with token", ANDROID, False, True, ("web",), NO_APPS,
     Redirect(WEB_FB, Target.WEB_FALLBACK, TokenPlacement.QUERY)),
    ("android, no package: platform web fallback", ANDROID, False, False, (), NO_APPS,
     Redirect(SITE_FB, Target.PLATFORM_WEB_FALLBACK)),
    ("android, nothing configured: OG page", ANDROID, False, False, (), BARE, OgPage),
    # iPhone: App Store, or the landing page, unless the iOS fallback wins.
    ("iphone app store", IPHONE, False, False, (), FULL, Redirect(STORE, Target.APP_STORE)),
    ("iphone app store, tokens on", IPHONE, False, True, ("web",), FULL,
     Redirect(STORE, Target.APP_STORE)),
    ("iphone landing page", IPHONE, True, False, (), FULL, LandingPage),
    ("iphone landing page with web fallback", IPHONE, True, True, ("web",), FULL, LandingPage),
    ("iphone landing page ignores android fallback", IPHONE, True, False, ("android",), FULL,
     LandingPage),
    ("iphone ios fallback", IPHONE, False, False, ("ios",), FULL,
     Redirect(IOS_FB, Target.IOS_FALLBACK)),
    ("iphone ios fallback skips landing page", IPHONE, True, False, ("ios",), FULL,
     Redirect(IOS_FB, Target.IOS_FALLBACK)),
    ("iphone ios fallback, tokens on: no token", IPHONE, True, True, ("ios", "web"), FULL,
     Redirect(IOS_FB, Target.IOS_FALLBACK)),
    ("iphone, no store id: link web fallback", IPHONE, True, False, ("web",), NO_APPS,
     Redirect(WEB_FB, Target.WEB_FALLBACK)),
    ("iphone, no store id: token on web fallback", IPHONE, True, True, ("web",), NO_APPS,
     Redirect(WEB_FB, Target.WEB_FALLBACK, TokenPlacement.QUERY)),
    ("iphone, no store id: platform web fallback", IPHONE, False, True, (), NO_APPS,
     Redirect(SITE_FB, Target.PLATFORM_WEB_FALLBACK, TokenPlacement.QUERY)),
    ("iphone, nothing configured: OG page", IPHONE, True, False, (), BARE, OgPage),
    # Desktop and others: web fallback (token when on), platform fallback, OG page.
    ("desktop web fallback", DESKTOP, False, False, ("web",), FULL,
     Redirect(WEB_FB, Target.WEB_FALLBACK)),
    ("desktop web fallback with token", DESKTOP, False, True, ("web",), FULL,
     Redirect(WEB_FB, Target.WEB_FALLBACK, TokenPlacement.QUERY)),
    ("desktop ignores landing page", DESKTOP, True, False, ("web",), FULL,
     Redirect(WEB_FB, Target.WEB_FALLBACK)),
    ("desktop ignores mobile fallbacks", DESKTOP, False, False, ("ios", "android"), FULL,
     Redirect(SITE_FB, Target.PLATFORM_WEB_FALLBACK)),
    ("desktop platform web fallback with token", DESKTOP, False, True, (), FULL,
     Redirect(SITE_FB, Target.PLATFORM_WEB_FALLBACK, TokenPlacement.QUERY)),
    ("desktop OG page", DESKTOP, False, False, (), BARE, OgPage),
    ("desktop OG page, tokens on", DESKTOP, True, True, ("ios", "android"), BARE, OgPage),
]


@pytest.mark.parametrize(
    ("client", "landing", "tokens", "fallbacks", "platforms", "expected"),
    [row[1:] for row in TABLE], ids=[row[0] for row in TABLE],
)
def test_decision_table(
    client: Client, landing: bool, tokens: bool, fallbacks: tuple[str, ...],
    platforms: Platforms, expected: object,
) -> None:
    the_link = link(*fallbacks)
    d = decide(the_link, client, method="GET",
               settings=Settings(ios_landing_page=landing, web_fallback_tokens=tokens),
               platforms=platforms, now_ms=NOW)
    if isinstance(expected, type):
        assert type(d.outcome) is expected
        assert d.outcome.status == 200
    else:
        assert d.outcome == expected
        assert d.status == 302
    assert d.record_click
    if expected is LandingPage:
        assert d.outcome == LandingPage(the_link, STORE_ID, "exampleapp")
    if expected is OgPage:
        assert d.outcome == OgPage(the_link)


CLIENTS = [IPHONE, ANDROID, DESKTOP, Client(Platform.IOS, None)]
FALLBACK_SETS = [(), ("ios",), ("android",), ("web",), ("ios", "android", "web")]


def every_case() -> list[tuple[Client, bool, bool, bool, tuple[str, ...], Platforms]]:
    return list(itertools.product(CLIENTS, [False, True], [False, True], [False, True],
                                  FALLBACK_SETS, [FULL, NO_APPS, BARE]))


@pytest.mark.parametrize(("client", "landing", "tokens", "prob", "fallbacks", "platforms"),
                         every_case())
def test_invariants_over_every_combination(
    client: Client, landing: bool, tokens: bool, prob: bool, fallbacks: tuple[str, ...],
    platforms: Platforms,
) -> None:
    settings = Settings(ios_landing_page=landing, web_fallback_tokens=tokens,
                        probabilistic_matching=prob)
    the_link = link(*fallbacks)
    get = decide(the_link, client, method="GET", settings=settings, platforms=platforms,
                 now_ms=NOW)
    head = decide(the_link, client, method="HEAD", settings=settings, platforms=platforms,
                  now_ms=NOW)
    bot = decide(the_link, attrs.evolve(client, is_bot=True), method="GET", settings=settings,
                 platforms=platforms, now_ms=NOW)

    # A live link tapped with GET by a person is counted; the window only for iOS.
    assert get.record_click
    assert get.record_window_entry == (
        prob and client.platform is Platform.IOS and client.os_major is not None
    )
    # HEAD: same status and target, never counted, never mints a token.
    assert not head.record_click and not head.record_window_entry and not head.needs_token
    assert head.status == get.status
    if isinstance(get.outcome, Redirect):
        assert isinstance(head.outcome, Redirect)
        assert (head.outcome.url, head.outcome.target) == (get.outcome.url, get.outcome.target)
    else:
        assert head.outcome == get.outcome
    # Bots: the preview page, never counted.
    assert bot == Decision(PreviewPage(the_link))
    # A platform's own link fallback always wins, without a token.
    if client.platform is Platform.ANDROID and "android" in fallbacks:
        assert get.outcome == Redirect(ANDROID_FB, Target.ANDROID_FALLBACK)
    if client.platform is Platform.IOS and "ios" in fallbacks:
        assert get.outcome == Redirect(IOS_FB, Target.IOS_FALLBACK)
    # Tokens only go to the Play Store referrer or, with the setting, to web fallbacks.
    if isinstance(get.outcome, Redirect) and get.needs_token:
        assert get.outcome.target in (Target.PLAY_STORE, Target.WEB_FALLBACK,
                                      Target.PLATFORM_WEB_FALLBACK)
        assert get.outcome.target is Target.PLAY_STORE or tokens
    # The landing page only for iOS with the setting on and no iOS fallback.
    if isinstance(get.outcome, LandingPage):
        assert client.platform is Platform.IOS and landing and "ios" not in fallbacks


UNKNOWN_CASES = [
    ("unknown slug", None),
    ("deleted link", link("web", deleted=True)),
    # deleted after it expired: still sends nobody anywhere (not its fallback, not 410)
    ("deleted expired link", link("ios", "android", "web", expires_at_ms=NOW - 1,
                                  deleted=True)),
]


@pytest.mark.parametrize("client", [IPHONE, ANDROID, DESKTOP, Client(Platform.DESKTOP,
                                                                      is_bot=True)])
@pytest.mark.parametrize(("case", "the_link"), UNKNOWN_CASES, ids=[c[0] for c in UNKNOWN_CASES])
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_unknown_link_is_404_and_not_counted(
    case: str, the_link: Link | None, client: Client, method: str
) -> None:
    d = decide(the_link, client, method="GET" if method == "GET" else "HEAD",
               settings=Settings(True, True, True), platforms=FULL, now_ms=NOW)
    assert d == Decision(NotFoundPage())
    assert d.status == 404


GONE = None
EXPIRED: list[tuple[Client, tuple[str, ...], Redirect | None]] = [
    # (client, link fallbacks, expected redirect or GONE for the 410 page)
    (IPHONE, (), GONE),
    (IPHONE, ("ios",), Redirect(IOS_FB, Target.IOS_FALLBACK)),
    (IPHONE, ("web",), Redirect(WEB_FB, Target.WEB_FALLBACK)),
    (IPHONE, ("android",), GONE),
    (ANDROID, (), GONE),
    (ANDROID, ("android",), Redirect(ANDROID_FB, Target.ANDROID_FALLBACK)),
    (ANDROID, ("android", "web"), Redirect(ANDROID_FB, Target.ANDROID_FALLBACK)),
    (ANDROID, ("web",), Redirect(WEB_FB, Target.WEB_FALLBACK)),
    (ANDROID, ("ios",), GONE),
    (DESKTOP, (), GONE),
    (DESKTOP, ("web",), Redirect(WEB_FB, Target.WEB_FALLBACK)),
    (DESKTOP, ("ios", "android"), GONE),
    (Client(Platform.DESKTOP, is_bot=True), ("web",), Redirect(WEB_FB, Target.WEB_FALLBACK)),
    (Client(Platform.DESKTOP, is_bot=True), (), GONE),
]


@pytest.mark.parametrize(("client", "fallbacks", "expected"), EXPIRED)
@pytest.mark.parametrize("method", ["GET", "HEAD"])
def test_expired_link_gets_its_fallback_or_410_and_is_not_counted(
    client: Client, fallbacks: tuple[str, ...], expected: Redirect | None, method: str
) -> None:
    the_link = link(*fallbacks, expires_at_ms=NOW)
    d = decide(the_link, client, method="GET" if method == "GET" else "HEAD",
               settings=Settings(True, True, True), platforms=FULL, now_ms=NOW)
    assert d == Decision(GonePage(the_link) if expected is GONE else expected)
    assert d.status == (410 if expected is GONE else 302)
    assert not d.needs_token


def test_link_expiring_later_is_live() -> None:
    d = decide(link(expires_at_ms=NOW + 1), IPHONE, method="GET", settings=Settings(),
               platforms=FULL, now_ms=NOW)
    assert d.outcome == Redirect(STORE, Target.APP_STORE) and d.record_click


def test_decide_accepts_deferred_settings_record() -> None:
    from svc_engine.settings import DeferredSettings

    d = decide(link(), IPHONE, method="GET",
               settings=DeferredSettings(ios_landing_page=True, probabilistic_matching=True),
               platforms=FULL, now_ms=NOW)
    assert isinstance(d.outcome, LandingPage) and d.record_window_entry


# -- URLs -------------------------------------------------------------------------


def test_android_store_url_carries_token_in_encoded_referrer() -> None:
    url = android_store_url("com.example.app", "tok_AbC-123")
    assert url == ("https://play.google.com/store/apps/details?id=com.example.app"
                   "&referrer=svc_token%3Dtok_AbC-123")
    query = parse_qs(urlsplit(url).query)
    assert query == {"id": ["com.example.app"], "referrer": ["svc_token=tok_AbC-123"]}


def test_redirect_location_fills_in_the_token() -> None:
    play = Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)
    assert play.location("t1") == android_store_url(PACKAGE, "t1")
    assert play.location(None) == PLAY
    web = Redirect(WEB_FB, Target.WEB_FALLBACK, TokenPlacement.QUERY)
    assert web.location("t2") == "https://example.com/web?x=1&svc_token=t2"
    assert Redirect(STORE, Target.APP_STORE).location("ignored") == STORE


@pytest.mark.parametrize(("url", "expected"), [
    ("https://a.example/p", "https://a.example/p?svc_token=T"),
    ("https://a.example/p?x=1", "https://a.example/p?x=1&svc_token=T"),
    ("https://a.example/p?x=a%20b&y", "https://a.example/p?x=a%20b&y&svc_token=T"),
    ("https://a.example/p?svc_token=old&x=1", "https://a.example/p?x=1&svc_token=T"),
    ("https://a.example/p?x=1#frag", "https://a.example/p?x=1&svc_token=T#frag"),
    ("https://a.example", "https://a.example?svc_token=T"),
])
def test_with_query_param(url: str, expected: str) -> None:
    assert with_query_param(url, "svc_token", "T") == expected


@given(st.text(min_size=1, max_size=40))
def test_with_query_param_round_trips_any_value(value: str) -> None:
    url = with_query_param("https://a.example/p?k=v#f", "svc_token", value)
    parts = urlsplit(url)
    assert parts.fragment == "f"
    assert parse_qs(parts.query)["svc_token"] == [value]
    assert parse_qs(parts.query)["k"] == ["v"]


def test_landing_open_url() -> None:
    short = "https://go.example.com/abc?x=1&y=2"
    url = landing_open_url("exampleapp", short)
    assert url == "exampleapp://open?svc_link=https%3A%2F%2Fgo.example.com%2Fabc%3Fx%3D1%26y%3D2"
    assert unquote(url.split("svc_link=", 1)[1]) == short
    # with the link's path, which the app routes by should resolving fail
    assert landing_open_url("exampleapp", short, "/product/1") == (
        "exampleapp://product/1?svc_link=https%3A%2F%2Fgo.example.com%2Fabc%3Fx%3D1%26y%3D2")
    assert landing_open_url("exampleapp", short, "/a b?c#d").startswith(
        "exampleapp://a%20b?c%23d&svc_link=")
    assert landing_open_url("exampleapp", short, "/") == url
    # an svc_link in the link's own path (another link's) was the first, the
    # one resolve took: only the link's own is carried
    other = "https://go.example.com/other9"
    for path in (f"/share?svc_link={other}", f"/share?a=1&svc%5Flink={other}&b=2"):
        opened = landing_open_url("exampleapp", short, path)
        assert opened.count("svc_link") == 1 and "svc%5Flink" not in opened, opened
        assert unquote(opened.split("svc_link=", 1)[1]) == short
    assert landing_open_url("exampleapp", short, "/share?svc_link_x=1").startswith(
        "exampleapp://share?svc_link_x=1&svc_link=")


@pytest.mark.parametrize("path", [
    "/product/1", "/product/1?color=red", "/p?a=1&b=2", "/a b/ü", "/x:y@z/w", "/?q=1",
    "//x", "/deep/er/still?k=v/w", "/p?"])
def test_the_open_button_routes_to_the_links_path(path: str) -> None:
    """SPEC.md's route of a custom-scheme URL ("/" + host + path + query) is
    the link's path, should resolving fail (the svc_link the SDK resolves
    rides along in the query), and the service finds the short link in it."""
    short = "https://go.example.com/abc?x=1"
    url = landing_open_url("exampleapp", short, path)
    parts = urlsplit(url)
    assert parts.scheme == "exampleapp"
    route = unquote("/" + parts.netloc + parts.path + (f"?{parts.query}" if parts.query else ""))
    svc_link = f"svc_link={short}"
    expected = path.rstrip("?")
    assert route in (f"{expected}?{svc_link}", f"{expected}&{svc_link}"), (url, route)
    assert parse_qs(parts.query)["svc_link"] == [short]
    # without a scheme: the universal link itself, marked as opened from the page
    assert landing_open_url(None, short) == short + "&svc_open=landing"
    assert landing_open_url(None, "https://go.example.com/abc") == (
        "https://go.example.com/abc?svc_open=landing")


def test_store_urls() -> None:
    assert app_store_url("123") == "https://apps.apple.com/app/id123"
    assert play_store_url("com.a.b") == "https://play.google.com/store/apps/details?id=com.a.b"


def test_page_meta_prefers_og_fields() -> None:
    base = link()
    meta = page_meta(base, short_url="https://go.example.com/abc", site_name="Example")
    assert (meta.title, meta.description, meta.image_url) == ("Example", None, None)
    assert meta.twitter_card == "summary"
    titled = attrs.evolve(base, title="Shoes", og_description="Red shoes",
                          og_image_url="https://cdn.example.com/s.png")
    meta = page_meta(titled, short_url="u", site_name="Example")
    assert (meta.title, meta.description) == ("Shoes", "Red shoes")
    assert meta.twitter_card == "summary_large_image"
    assert page_meta(attrs.evolve(titled, og_title="OG"), short_url="u",
                     site_name="Example").title == "OG"


@pytest.mark.parametrize(("image", "shown"), [
    ("https://cdn.example.com/a.png", "https://cdn.example.com/a.png"),
    ("HTTPS://cdn.example.com/a.png", "HTTPS://cdn.example.com/a.png"),  # a scheme has no case
    ("Https://cdn.example.com/a.png", "Https://cdn.example.com/a.png"),
    ("http://cdn.example.com/a.png", None),  # the pages' policy loads https only
    ("//cdn.example.com/a.png", None),
    ("https:/cdn.example.com/a.png", None),
    (None, None),
])
def test_a_page_shows_its_image_only_over_https_whatever_the_scheme_s_case(
        image: str | None, shown: str | None) -> None:
    meta = PageMeta(url="https://sho.rt/a", title="T", description=None, image_url=image,
                    site_name="App")
    assert meta.page_image_url == shown
    assert meta.image_url == image  # crawlers get it in og:image, whatever its scheme
    assert meta.twitter_card == ("summary_large_image" if image else "summary")
