"""'Simulate a tap' and the replay of a recorded click, in words.

Both call the redirector's own pure decision (``svc_engine.redirect.decide``)
with the project's current settings and platforms, as a GET, and describe the
``Decision``: the answer (status and page or target URL), whether a
single-use token would be minted and where it would go, whether the tap is
counted as a click and whether it enters the probabilistic window. Nothing is
written: no token is minted, no click recorded.

``explain`` gives the reasons in the order ``decide`` applies its rules, so
what the page says is what the redirector does.
"""

from __future__ import annotations

import attrs

from svc_engine.links import Link
from svc_engine.platforms import Platforms
from svc_engine.redirect import (
    TOKEN_PARAM,
    Client,
    Decision,
    GonePage,
    LandingPage,
    NotFoundPage,
    OgPage,
    Platform,
    PreviewPage,
    Redirect,
    RedirectSettings,
    Target,
    TokenPlacement,
    decide,
)

DEVICES: tuple[tuple[str, str], ...] = (
    ("iphone", "iPhone"), ("android", "Android phone"), ("desktop", "Desktop browser"),
    ("bot", "Bot or link preview"),
)
DEFAULT_IOS = 18
TARGET_NAMES = {
    Target.APP_STORE: "the App Store", Target.PLAY_STORE: "the Play Store listing",
    Target.IOS_FALLBACK: "the link's iOS fallback URL",
    Target.ANDROID_FALLBACK: "the link's Android fallback URL",
    Target.WEB_FALLBACK: "the link's web fallback URL",
    Target.PLATFORM_WEB_FALLBACK: "the project's web fallback URL",
}


@attrs.frozen
class Simulation:
    device: str
    status: int
    answer: str                    # what the person gets, in a few words
    target_url: str | None         # where a redirect goes (before a token is added)
    token: str | None              # where a minted token goes; None: no token
    counted: bool
    window: bool
    reasons: tuple[str, ...]


def client_for(device: str, ios_major: int | None) -> Client:
    """The ``Client`` of a device choice of the form (``DEVICES``)."""
    if device == "iphone":
        return Client(Platform.IOS, ios_major)
    if device == "android":
        return Client(Platform.ANDROID)
    if device == "bot":
        return Client(Platform.DESKTOP, is_bot=True)
    return Client(Platform.DESKTOP)


def simulate(link: Link | None, device: str, ios_major: int | None, *,
             settings: RedirectSettings, platforms: Platforms, now_ms: int) -> Simulation:
    client = client_for(device, ios_major)
    decision = decide(link, client, method="GET", settings=settings, platforms=platforms,
                      now_ms=now_ms)
    return describe(decision, device, link=link, client=client, settings=settings,
                    platforms=platforms, now_ms=now_ms)


def describe(decision: Decision, device: str, *, link: Link | None, client: Client,
             settings: RedirectSettings, platforms: Platforms, now_ms: int) -> Simulation:
    outcome = decision.outcome
    target = None
    token = None
    if isinstance(outcome, Redirect):
        target = outcome.url
        answer = f"302 redirect to {TARGET_NAMES[outcome.target]}"
        if outcome.token is TokenPlacement.STORE_REFERRER:
            token = f"in the store's install referrer (referrer={TOKEN_PARAM}%3D…)"
        elif outcome.token is TokenPlacement.QUERY:
            token = f"added to the URL's query ({TOKEN_PARAM}=…)"
    elif isinstance(outcome, LandingPage):
        answer = "The 'Continue in app' page"
        target = outcome.app_store_url
    elif isinstance(outcome, PreviewPage):
        answer = "A preview page with the link's Open Graph tags"
    elif isinstance(outcome, OgPage):
        answer = "A plain page with the link's title and store buttons"
    elif isinstance(outcome, GonePage):
        answer = "410: this link no longer works"
    else:
        assert isinstance(outcome, NotFoundPage)
        answer = "404: no such link"
    return Simulation(device=device, status=decision.status, answer=answer, target_url=target,
                      token=token, counted=decision.record_click,
                      window=decision.record_window_entry,
                      reasons=explain(link, client, settings=settings, platforms=platforms,
                                      now_ms=now_ms))


def explain(link: Link | None, client: Client, *, settings: RedirectSettings,
            platforms: Platforms, now_ms: int) -> tuple[str, ...]:
    """Why ``decide`` answers as it does, rule by rule (see svc_engine/redirect.py)."""
    if link is None or link.deleted:
        return ("There is no live link at this address.",)
    if link.is_expired(now_ms):
        return ("The link has expired: a tap goes to the link's own fallback for the "
                "platform (else its web fallback), without a token, or to the 410 page; "
                "it is not counted.",)
    if client.is_bot:
        return ("Bots and link-preview crawlers get the Open Graph preview page and are "
                "never counted.",)
    out: list[str] = []
    web_chain = False
    if client.platform is Platform.ANDROID:
        if link.android_fallback_url:
            out.append("The link has an Android fallback URL: it wins over the Play Store, "
                       "with no token (no install-referrer attribution for this tap).")
        elif platforms.android.package_name:
            out.append(f"Android app {platforms.android.package_name}: to its Play Store "
                       f"listing with a fresh single-use token in the install referrer; the "
                       f"app's first launch reads it (install_referrer, deterministic).")
        else:
            out.append("No Android package name under Platforms: the web fallback chain.")
            web_chain = True
    elif client.platform is Platform.IOS:
        if link.ios_fallback_url:
            out.append("The link has an iOS fallback URL: it wins over the App Store and the "
                       "'Continue in app' page, with no token.")
        elif platforms.ios.app_store_id:
            if settings.ios_landing_page:
                out.append("iosLandingPage is on: the 'Continue in app' page, whose open "
                           "button attributes the install after it (landing_page).")
            else:
                out.append(f"To the App Store (app {platforms.ios.app_store_id}); "
                           "iosLandingPage is off.")
        else:
            out.append("No App Store ID under Platforms: the web fallback chain.")
            web_chain = True
    else:
        web_chain = True
    if web_chain:
        tokens = "with" if settings.web_fallback_tokens else "without"
        if link.web_fallback_url:
            out.append(f"To the link's web fallback URL, {tokens} svc_token "
                       "(webFallbackTokens).")
        elif platforms.web.fallback_url:
            out.append(f"The link has no web fallback: to the project's web fallback URL, "
                       f"{tokens} svc_token (webFallbackTokens).")
        else:
            out.append("No web fallback on the link or the project: a plain page with the "
                       "link's title and preview.")
    out.append("Counted as a click (a GET by a person on a live link).")
    if client.platform is Platform.IOS:
        if not settings.probabilistic_matching:
            out.append("Does not enter the probabilistic window: probabilisticMatching is off.")
        elif client.os_major is None:
            out.append("Does not enter the probabilistic window: the iOS version is unknown.")
        else:
            out.append(f"Enters the probabilistic window as iOS {client.os_major}, with the "
                       "tap's country and time.")
    return tuple(out)
