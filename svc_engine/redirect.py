"""What the redirector answers to a tap on a short link: a pure decision.

Theory of operation. The web layer reduces a request to a ``Client`` (platform,
OS major version, bot or not, see ``web/useragent.py``; a browser's prefetch or
not, see ``web/client_facts.py``), loads the link by host and slug, and calls
``decide``. The decision is a value: the page to render or
the redirect to send, whether a single-use token must be minted for it, and
whether the tap is counted (a click) and kept in the probabilistic window. The
caller does the I/O: it mints the token, fills it in with
``Redirect.location(token)``, records the click and renders the page.

Rules, in order (SPEC.md "Edge redirector" and the flows; the parenthesised ones
are decisions where SPEC.md is silent):

1. No link, or a deleted one: the 404 page.
2. Expired link: the link's own fallback for the client's platform (iOS or
   Android fallback URL, else its web fallback URL), without a token; with none,
   the 410 page. (Expired links are never counted, for bots neither.)
3. Bots and link-preview crawlers: a page with the link's Open Graph and Twitter
   card tags, never counted.
4. Android: the link's Android fallback URL wins (no token). Otherwise, with a
   package name configured, 302 to the Play Store listing with a fresh
   ``svc_token`` in the install referrer. (No package name: the web chain, 6.)
5. iOS (iPhone, iPod touch, and iPads that say so; iPadOS Safari normally
   presents itself as a Mac and is desktop): the link's iOS fallback URL wins
   (no token). Otherwise, with an App Store ID configured, the 'Continue in app'
   page when ``iosLandingPage`` is on, else 302 to the App Store. (No App Store
   ID: the web chain, 6; the landing page would have nothing to offer.)
6. Desktop and everything else: the link's web fallback URL, else the
   project's web fallback URL, each with ``svc_token`` when
   ``webFallbackTokens`` is on (both are "a web fallback URL"); else a plain
   page with the link's Open Graph data.
7. HEAD gets the same status and target as GET but is never counted and never
   mints a token (a token is single-use state; a HEAD must not create any).
8. A counted tap is a GET by a non-bot on a live link. An iOS counted tap of a
   project with ``probabilisticMatching`` on, whose iOS major version is known,
   also enters the probabilistic window.
9. (A browser's prefetch or prerender of what would be a counted tap, 8, is
   not a tap: it is declined with a 503, not counted, kept out of the window
   and given no token. Browsers discard a prefetched answer that is not 2xx,
   so the person's real tap, if it comes, reaches the redirector afresh and
   is the one counted; a prefetched 302 would be used in its place, the tap
   lost and the token wasted on the prefetch. Prefetches of what is never
   counted, 1 to 3 and 7, are answered as any other request.)
"""

from __future__ import annotations

import enum
from typing import Literal, Protocol
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import attrs

from svc_engine.links import Link
from svc_engine.platforms import Platforms
from svc_engine.tokens import VIA_STORE_REFERRER, VIA_WEB_FALLBACK


class Platform(enum.StrEnum):
    IOS = "ios"
    ANDROID = "android"
    DESKTOP = "desktop"


@attrs.frozen
class Client:
    """All the redirector keeps of a request's user agent."""

    platform: Platform
    os_major: int | None = None
    is_bot: bool = False
    is_prefetch: bool = False
    """The browser fetches the link speculatively (prefetch, prerender), not
    because it was tapped (rule 9)."""


class RedirectSettings(Protocol):
    """The project settings the decision reads (``DeferredSettings`` fits)."""

    @property
    def ios_landing_page(self) -> bool: ...

    @property
    def web_fallback_tokens(self) -> bool: ...

    @property
    def probabilistic_matching(self) -> bool: ...


class TokenPlacement(enum.Enum):
    NONE = "none"
    STORE_REFERRER = VIA_STORE_REFERRER
    """``referrer=svc_token%3D<token>`` on the Play Store listing URL."""
    QUERY = VIA_WEB_FALLBACK
    """``svc_token=<token>`` added to the web fallback URL's query."""


class Target(enum.StrEnum):
    APP_STORE = "app_store"
    PLAY_STORE = "play_store"
    IOS_FALLBACK = "ios_fallback"
    ANDROID_FALLBACK = "android_fallback"
    WEB_FALLBACK = "web_fallback"
    PLATFORM_WEB_FALLBACK = "platform_web_fallback"


TOKEN_PARAM = "svc_token"  # noqa: S105 - a query parameter's name, not a secret


# -- outcomes ------------------------------------------------------------------------


@attrs.frozen
class NotFoundPage:
    status = 404


@attrs.frozen
class GonePage:
    link: Link
    status = 410


@attrs.frozen
class PreviewPage:
    """For bots and link-preview crawlers: Open Graph and Twitter card tags."""

    link: Link
    status = 200


@attrs.frozen
class OgPage:
    """For people on a platform with nowhere to go: the link's OG data, plainly."""

    link: Link
    status = 200


@attrs.frozen
class LandingPage:
    """The 'Continue in app' page (render with ``landing_open_url``)."""

    link: Link
    app_store_id: str
    scheme: str | None
    status = 200

    @property
    def app_store_url(self) -> str:
        return app_store_url(self.app_store_id)


@attrs.frozen
class PrefetchDeclined:
    """A speculative fetch of a link that a tap would count: not answered, so
    that the browser discards it and the real tap comes to the redirector."""

    status = 503


@attrs.frozen
class Redirect:
    """A 302 to ``url``, with a token placed as ``token`` says once minted."""

    url: str
    target: Target
    token: TokenPlacement = TokenPlacement.NONE
    status = 302

    def location(self, token: str | None) -> str:
        """The ``Location`` header. With ``token`` None (none needed, or minting
        failed) it is the target without a token, which still works."""
        if token is None or self.token is TokenPlacement.NONE:
            return self.url
        if self.token is TokenPlacement.STORE_REFERRER:
            return f"{self.url}&referrer={quote(f'{TOKEN_PARAM}={token}', safe='')}"
        return with_query_param(self.url, TOKEN_PARAM, token)


Outcome = (NotFoundPage | GonePage | PreviewPage | OgPage | LandingPage | Redirect
           | PrefetchDeclined)


@attrs.frozen
class Decision:
    outcome: Outcome
    record_click: bool = False
    record_window_entry: bool = False

    @property
    def status(self) -> int:
        return self.outcome.status

    @property
    def needs_token(self) -> bool:
        return isinstance(self.outcome, Redirect) and self.outcome.token is not TokenPlacement.NONE


# -- URLs ----------------------------------------------------------------------------


def app_store_url(app_store_id: str) -> str:
    return f"https://apps.apple.com/app/id{app_store_id}"


def play_store_url(package_name: str) -> str:
    return f"https://play.google.com/store/apps/details?id={quote(package_name, safe='')}"


def android_store_url(package_name: str, token: str) -> str:
    """The Play Store listing carrying ``svc_token=<token>`` as install referrer."""
    return Redirect(play_store_url(package_name), Target.PLAY_STORE,
                    TokenPlacement.STORE_REFERRER).location(token)


def with_query_param(url: str, name: str, value: str) -> str:
    """``url`` with ``name=value`` as its last query parameter, replacing any
    earlier ``name``; other parameters and the fragment are kept byte for byte."""
    parts = urlsplit(url)
    kept = [p for p in parts.query.split("&") if p and p.split("=", 1)[0] != name]
    kept.append(f"{quote(name, safe='')}={quote(value, safe='')}")
    return urlunsplit(parts._replace(query="&".join(kept)))


LANDING_PARAM, LANDING_VALUE = "svc_open", "landing"
LANDING_MARK = f"{LANDING_PARAM}={LANDING_VALUE}"
"""The query that marks a universal link as opened from the 'Continue in app'
page (its button without a custom scheme, its app banner): resolved, it is a
``landing_page`` open, deferred, like the scheme URL carrying ``svc_link``."""


_PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # RFC 3986 pchar and "/": "?", "#", spaces escaped
_HOST_SAFE = "%!$&'()*+,;=-._~"  # RFC 3986 reg-name: ":", "@", "/", "?", "#", spaces escaped
_QUERY_SAFE = _PATH_SAFE + "?"  # RFC 3986 query: "#" and spaces escaped


def landing_open_url(scheme: str | None, short_url: str, path: str = "") -> str:
    """Target of the 'I already have the app, open it' button: the app's custom
    scheme carrying the short link in ``svc_link``, or, when the project has no
    iOS scheme, the short link itself (a universal link) marked with
    :data:`LANDING_MARK` (also the app banner's argument).

    The scheme URL is the link's own ``path`` written as SPEC.md's route
    table reads a custom-scheme URL ("the host plus path plus query, prefixed
    with /"): ``/product/1?color=red`` is ``exampleapp://product/1?color=red
    &svc_link=...``, whose route is ``/product/1?color=red&svc_link=...``, so
    that, should resolving fail, the app still routes to the link's screen
    (SPEC.md "Delivery inside the app" 3). The path's first segment is the
    URL's host, which URL parsers lower-case (Dart's ``Uri`` does): a path
    whose first segment has capitals routes in lower case. A link without
    a path opens ``exampleapp://open?svc_link=...``."""
    if scheme is None:
        return landing_universal_link(short_url)
    svc_link = f"svc_link={quote(short_url, safe='')}"
    if not path.startswith("/") or path == "/":
        return f"{scheme}://open?{svc_link}"
    where, asks, query = path[1:].partition("?")
    host, slash, rest = where.partition("/")
    url = f"{scheme}://{quote(host, safe=_HOST_SAFE)}{slash}{quote(rest, safe=_PATH_SAFE)}"
    # An svc_link of the path's own would come first and be the one resolve
    # takes (another link's: its attribution, its screen): the link's alone.
    query = "&".join(part for part in query.split("&")
                     if unquote(part.partition("=")[0]) != "svc_link")
    if asks and query:
        return f"{url}?{quote(query, safe=_QUERY_SAFE)}&{svc_link}"
    return f"{url}?{svc_link}"


def landing_universal_link(short_url: str) -> str:
    """The short link marked as opened from its 'Continue in app' page."""
    return f"{short_url}{'&' if '?' in short_url else '?'}{LANDING_MARK}"


# -- the decision --------------------------------------------------------------------


def decide(
    link: Link | None,
    client: Client,
    *,
    method: Literal["GET", "HEAD"],
    settings: RedirectSettings,
    platforms: Platforms,
    now_ms: int,
) -> Decision:
    """The redirector's answer; see the module docstring for the rules."""
    if link is None or link.deleted:
        return Decision(NotFoundPage())
    if link.is_expired(now_ms):
        return Decision(_expired(link, client.platform))
    if client.is_bot:
        return Decision(PreviewPage(link))
    is_get = method == "GET"
    if is_get and client.is_prefetch:  # every live outcome of a GET counts a click (8)
        return Decision(PrefetchDeclined())
    outcome = _live(link, client.platform, settings, platforms, mint=is_get)
    window = (is_get and client.platform is Platform.IOS and client.os_major is not None
              and settings.probabilistic_matching)
    return Decision(outcome, record_click=is_get, record_window_entry=window)


def _expired(link: Link, platform: Platform) -> Outcome:
    if platform is Platform.IOS and link.ios_fallback_url:
        return Redirect(link.ios_fallback_url, Target.IOS_FALLBACK)
    if platform is Platform.ANDROID and link.android_fallback_url:
        return Redirect(link.android_fallback_url, Target.ANDROID_FALLBACK)
    if link.web_fallback_url:
        return Redirect(link.web_fallback_url, Target.WEB_FALLBACK)
    return GonePage(link)


def _live(
    link: Link, platform: Platform, settings: RedirectSettings, platforms: Platforms,
    *, mint: bool,
) -> Outcome:
    if platform is Platform.ANDROID:
        if link.android_fallback_url:
            return Redirect(link.android_fallback_url, Target.ANDROID_FALLBACK)
        package = platforms.android.package_name
        if package:
            placement = TokenPlacement.STORE_REFERRER if mint else TokenPlacement.NONE
            return Redirect(play_store_url(package), Target.PLAY_STORE, placement)
    elif platform is Platform.IOS:
        if link.ios_fallback_url:
            return Redirect(link.ios_fallback_url, Target.IOS_FALLBACK)
        app_store_id = platforms.ios.app_store_id
        if app_store_id:
            if settings.ios_landing_page:
                return LandingPage(link, app_store_id, platforms.ios.scheme)
            return Redirect(app_store_url(app_store_id), Target.APP_STORE)
    placement = (TokenPlacement.QUERY if mint and settings.web_fallback_tokens
                 else TokenPlacement.NONE)
    if link.web_fallback_url:
        return Redirect(link.web_fallback_url, Target.WEB_FALLBACK, placement)
    if platforms.web.fallback_url:
        return Redirect(platforms.web.fallback_url, Target.PLATFORM_WEB_FALLBACK, placement)
    return OgPage(link)


# -- what the pages show -------------------------------------------------------------


@attrs.frozen
class PageMeta:
    """Open Graph / Twitter card values of a link's pages."""

    url: str
    title: str
    description: str | None
    image_url: str | None
    site_name: str

    @property
    def twitter_card(self) -> str:
        return "summary_large_image" if self.image_url else "summary"

    @property
    def page_image_url(self) -> str | None:
        """The image a page shows itself: https only, which is all the pages'
        security policy loads (an http one was an empty box). Crawlers still
        get ``image_url`` in ``og:image``, whichever scheme."""
        image = self.image_url
        return image if image is not None and image[:8].lower() == "https://" else None


def page_meta(link: Link, *, short_url: str, site_name: str) -> PageMeta:
    """Title: ``ogTitle``, else ``title``, else the site (app) name."""
    return PageMeta(
        url=short_url,
        title=link.og_title or link.title or site_name,
        description=link.og_description,
        image_url=link.og_image_url,
        site_name=site_name,
    )
