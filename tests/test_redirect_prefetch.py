"""A browser's prefetch of a short link is not a tap (svc_engine/redirect.py
rule 9), and how the web layer tells one (web/client_facts.py ``is_prefetch``).

Browsers prefetch and prerender links speculatively (speculation rules,
``<link rel=prefetch>``, Cloudflare Speed Brain) and use the prefetched answer
when the person really follows the link, unless it was not 2xx. So a
prefetch of what a tap would count is declined with a 503: nothing counted,
no probabilistic window entry, no token; the real tap then comes afresh.
What is never counted (no link, an expired link, a bot, HEAD) is answered
as it is without the prefetch.
"""

from __future__ import annotations

import attrs
import pytest

from svc_engine.links import Link
from svc_engine.platforms import Platforms
from svc_engine.redirect import (
    Client,
    Decision,
    GonePage,
    LandingPage,
    NotFoundPage,
    OgPage,
    Platform,
    PrefetchDeclined,
    PreviewPage,
    Redirect,
    Target,
    TokenPlacement,
    decide,
)
from tests.test_redirect import (
    ANDROID,
    BARE,
    DESKTOP,
    FULL,
    IPHONE,
    NO_APPS,
    NOW,
    PLAY,
    SITE_FB,
    STORE,
    WEB_FB,
    Settings,
    every_case,
    link,
)
from web.client_facts import is_prefetch
from web.http import Request

DECLINED = Decision(PrefetchDeclined())


def prefetch(client: Client) -> Client:
    return attrs.evolve(client, is_prefetch=True)


def get(the_link: Link | None, client: Client, settings: Settings, platforms: Platforms,
        method: str = "GET") -> Decision:
    return decide(the_link, client, method="GET" if method == "GET" else "HEAD",
                  settings=settings, platforms=platforms, now_ms=NOW)


# (case, client, settings, link fallbacks, platforms, what a tap gets)
FAMILIES: list[tuple[str, Client, Settings, tuple[str, ...], Platforms, object]] = [
    ("android: play store with a referrer token", ANDROID, Settings(), (), FULL,
     Redirect(PLAY, Target.PLAY_STORE, TokenPlacement.STORE_REFERRER)),
    ("android: its fallback URL", ANDROID, Settings(), ("android",), FULL, Redirect),
    ("iphone: app store, entering the window", IPHONE,
     Settings(probabilistic_matching=True), (), FULL, Redirect(STORE, Target.APP_STORE)),
    ("iphone: its fallback URL, entering the window", IPHONE,
     Settings(probabilistic_matching=True), ("ios",), FULL, Redirect),
    ("iphone: the 'Continue in app' page", IPHONE,
     Settings(ios_landing_page=True, probabilistic_matching=True), (), FULL, LandingPage),
    ("desktop: web fallback with a token", DESKTOP, Settings(web_fallback_tokens=True),
     ("web",), FULL, Redirect(WEB_FB, Target.WEB_FALLBACK, TokenPlacement.QUERY)),
    ("desktop: project web fallback with a token", DESKTOP,
     Settings(web_fallback_tokens=True), (), NO_APPS,
     Redirect(SITE_FB, Target.PLATFORM_WEB_FALLBACK, TokenPlacement.QUERY)),
    ("android, no package: web fallback with a token", ANDROID,
     Settings(web_fallback_tokens=True), ("web",), NO_APPS,
     Redirect(WEB_FB, Target.WEB_FALLBACK, TokenPlacement.QUERY)),
    ("desktop: the plain OG page", DESKTOP, Settings(), (), BARE, OgPage),
]


@pytest.mark.parametrize(("client", "settings", "fallbacks", "platforms", "tap"),
                         [f[1:] for f in FAMILIES], ids=[f[0] for f in FAMILIES])
def test_a_prefetch_of_a_counted_tap_is_declined(
        client: Client, settings: Settings, fallbacks: tuple[str, ...], platforms: Platforms,
        tap: object) -> None:
    the_link = link(*fallbacks)
    real = get(the_link, client, settings, platforms)
    assert real.record_click  # the tap itself: as before
    if isinstance(tap, type):
        assert type(real.outcome) is tap
    else:
        assert real.outcome == tap
    assert real.record_window_entry == (client.platform is Platform.IOS)

    d = get(the_link, prefetch(client), settings, platforms)
    assert d == DECLINED
    assert d.status == 503
    assert not d.record_click and not d.record_window_entry and not d.needs_token


@pytest.mark.parametrize(("client", "landing", "tokens", "prob", "fallbacks", "platforms"),
                         every_case())
def test_every_counted_get_prefetched_is_declined_and_nothing_else_changes(
        client: Client, landing: bool, tokens: bool, prob: bool, fallbacks: tuple[str, ...],
        platforms: Platforms) -> None:
    settings = Settings(ios_landing_page=landing, web_fallback_tokens=tokens,
                        probabilistic_matching=prob)
    the_link = link(*fallbacks)
    assert get(the_link, client, settings, platforms).record_click
    assert get(the_link, prefetch(client), settings, platforms) == DECLINED
    # What is never counted is answered alike, prefetched or not.
    bot = attrs.evolve(client, is_bot=True)
    for who, method in ((bot, "GET"), (bot, "HEAD"), (client, "HEAD")):
        plain = get(the_link, who, settings, platforms, method)
        assert not plain.record_click
        assert get(the_link, prefetch(who), settings, platforms, method) == plain
    expired = link(*fallbacks, expires_at_ms=NOW)
    for who in (client, bot):
        assert (get(expired, prefetch(who), settings, platforms)
                == get(expired, who, settings, platforms))


ALL_ON = Settings(True, True, True)


@pytest.mark.parametrize("client", [IPHONE, ANDROID, DESKTOP])
def test_a_bot_prefetching_gets_the_preview_page_a_person_does_not(client: Client) -> None:
    the_link = link("web")
    bot = prefetch(attrs.evolve(client, is_bot=True))
    assert get(the_link, bot, ALL_ON, FULL) == Decision(PreviewPage(the_link))
    assert get(the_link, prefetch(client), ALL_ON, FULL) == DECLINED


@pytest.mark.parametrize("client", [IPHONE, ANDROID, DESKTOP])
def test_head_with_a_prefetch_purpose_is_answered_as_head_get_is_declined(
        client: Client) -> None:
    the_link = link("web")
    head = get(the_link, prefetch(client), ALL_ON, FULL, "HEAD")
    assert head == get(the_link, client, ALL_ON, FULL, "HEAD")
    assert isinstance(head.outcome, Redirect | LandingPage) and head.status in (200, 302)
    assert not head.record_click and not head.needs_token
    assert get(the_link, prefetch(client), ALL_ON, FULL, "GET") == DECLINED


@pytest.mark.parametrize(("client", "fallbacks", "expected"), [
    (IPHONE, ("ios",), Redirect("https://example.com/ios", Target.IOS_FALLBACK)),
    (ANDROID, ("web",), Redirect(WEB_FB, Target.WEB_FALLBACK)),
    (DESKTOP, (), None),
])
def test_an_expired_link_prefetched_gets_its_fallback_or_410_a_live_one_is_declined(
        client: Client, fallbacks: tuple[str, ...], expected: Redirect | None) -> None:
    """Expired links are never counted: their answer may be prefetched."""
    expired = link(*fallbacks, expires_at_ms=NOW)
    d = get(expired, prefetch(client), ALL_ON, FULL)
    assert d == Decision(GonePage(expired) if expected is None else expected)
    live = link(*fallbacks, expires_at_ms=NOW + 1)
    assert get(live, prefetch(client), ALL_ON, FULL) == DECLINED


@pytest.mark.parametrize("missing", [None, link("web", deleted=True)])
def test_no_link_prefetched_is_404_a_live_one_is_declined(missing: Link | None) -> None:
    d = get(missing, prefetch(ANDROID), ALL_ON, FULL)
    assert d == Decision(NotFoundPage()) and d.status == 404
    assert get(link("web"), prefetch(ANDROID), ALL_ON, FULL) == DECLINED


# -- telling a prefetch by its headers ----------------------------------------------


def request(*headers: tuple[str, str]) -> Request:
    scope = {"method": "GET", "path": "/abc", "query_string": b"",
             "headers": [(b"host", b"svc.test"), (b"user-agent", b"Mozilla/5.0"),
                         *((k.encode("latin-1"), v.encode("latin-1")) for k, v in headers)]}

    async def receive() -> dict[str, object]:
        raise AssertionError("no body is read")

    return Request(scope, receive)


PREFETCHES = [
    ("sec-purpose", "prefetch"),                       # speculation rules, rel=prefetch
    ("sec-purpose", "prefetch;prerender"),             # speculation rules prerender
    ("sec-purpose", "prefetch;anonymous-client-ip"),   # Chrome's private prefetch proxy
    ("Sec-Purpose", "Prefetch"),
    ("sec-purpose", " prefetch ; prerender "),
    ("sec-purpose", "something-new, prefetch;x=1"),    # any item of the list
    ("sec-purpose", 'other;why="a,b", prefetch'),      # a comma inside a string
    ("purpose", "prefetch"),                           # Chrome before Sec-Purpose
    ("Purpose", "PREFETCH"),
    ("x-moz", "prefetch"),                             # Firefox before Sec-Purpose
    ("X-Moz", "Prefetch"),
    ("x-purpose", "preview"),                          # Safari
    ("X-Purpose", "Preview"),
]
# (near miss, which is no prefetch; the same request that is one)
NOT_PREFETCHES: list[tuple[tuple[tuple[str, str], ...], tuple[str, str]]] = [
    ((), ("sec-purpose", "prefetch")),
    ((("sec-purpose", "prerender"),), ("sec-purpose", "prefetch;prerender")),
    ((("sec-purpose", "prefetching"),), ("sec-purpose", "prefetch")),
    ((("sec-purpose", "preview"),), ("x-purpose", "preview")),
    ((("sec-purpose", '"prefetch"'),), ("sec-purpose", "prefetch")),  # a string, no token
    ((("sec-purpose", 'other;why="x,prefetch"'),),                    # in a parameter's string
     ("sec-purpose", 'other;why="x,y", prefetch')),
    ((("sec-purpose", 'other;why="x, prefetch, y"'),),                # an item of its own there
     ("sec-purpose", 'other;why="x, y", prefetch')),
    ((("sec-purpose", 'other;why="x\\",prefetch"'),),                 # an escaped quote in it
     ("sec-purpose", 'other;why="x\\"", prefetch')),
    ((("sec-purpose", "other;prefetch"),), ("sec-purpose", "other, prefetch")),  # a parameter
    ((("purpose", "preview"),), ("purpose", "prefetch")),
    ((("x-moz", "microsummary"),), ("x-moz", "prefetch")),
    ((("x-purpose", "prefetch"),), ("x-purpose", "preview")),
    ((("x-purpose", "previews"),), ("x-purpose", "preview")),
]


@pytest.mark.parametrize("header", PREFETCHES, ids=[f"{k}: {v}" for k, v in PREFETCHES])
def test_a_prefetch_header_is_recognised(header: tuple[str, str]) -> None:
    assert is_prefetch(request(header))


@pytest.mark.parametrize(("near_miss", "prefetching"), NOT_PREFETCHES,
                         ids=["; ".join(f"{k}: {v}" for k, v in h) or "none"
                              for h, _ in NOT_PREFETCHES])
def test_a_near_miss_is_not_a_prefetch(near_miss: tuple[tuple[str, str], ...],
                                       prefetching: tuple[str, str]) -> None:
    assert not is_prefetch(request(*near_miss))
    assert is_prefetch(request(prefetching))


def test_every_sec_purpose_field_line_counts() -> None:
    """The headers dict keeps the last of repeated field lines; a list field's
    lines are one list."""
    assert is_prefetch(request(("sec-purpose", "prefetch"), ("sec-purpose", "other")))
    assert not is_prefetch(request(("sec-purpose", "other"), ("sec-purpose", "more")))
