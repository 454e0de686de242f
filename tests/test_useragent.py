"""User-agent classification with real user-agent strings.

Sources of the strings: the browsers' own current releases (Safari 26 on iOS 26
freezes the OS token at 18_6/18_7, WebKit blog "WebKit Features in Safari 26.0";
Chrome's reduced UA reports "Android 10; K"), the crawlers' published
documentation (Slack, Meta, X, Google, Discord, LinkedIn, Telegram, Bluesky),
and the iMessage preview fetcher, which presents itself as Mac Safari followed by
"facebookexternalhit/1.1 Facebot Twitterbot/1.0". The in-app browsers' strings
have the shapes public user-agent lists record for them (an app's token after a
system WebView's or WKWebView's), versions made current.
"""

from __future__ import annotations

from typing import Any, cast

import crawleruseragents
import pytest

from svc_engine.redirect import Client, Platform
from web.useragent import (
    IN_APP_BROWSER_NAMES,
    PREVIEW_CRAWLERS,
    USER_AGENT_MAX,
    classified,
    classify,
    is_bot,
    prepare,
)

IOS = Platform.IOS
ANDROID = Platform.ANDROID
DESKTOP = Platform.DESKTOP

PEOPLE: list[tuple[str, str, Platform, int | None]] = [
    ("iPhone Safari, iOS 26 (OS token frozen at 18_6)",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Version/26.0 Mobile/15E148 Safari/604.1", IOS, 26),
    ("iPhone Safari, iOS 26.2 (OS token frozen at 18_7)",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 18_7 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Version/26.2 Mobile/15E148 Safari/604.1", IOS, 26),
    ("iPhone Safari, iOS 18.5",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 18_5 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Version/18.5 Mobile/15E148 Safari/604.1", IOS, 18),
    ("iPhone Safari, iOS 17.7",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_7 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1", IOS, 17),
    ("iPhone Chrome, iOS 17.7",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_7 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) CriOS/141.0.7390.96 Mobile/15E148 Safari/604.1", IOS, 17),
    ("iPhone Firefox, iOS 18.6",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) FxiOS/144.0 Mobile/15E148 Safari/605.1.15", IOS, 18),
    ("iPhone Instagram in-app browser, iOS 26",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 Instagram 400.0.0.27.77 (iPhone16,2; iOS 26_0; en_US; "
     "en; scale=3.00; 1290x2796; 781246437) NW/3", IOS, 26),
    ("iPhone Facebook in-app browser, iOS 26",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 [FBAN/FBIOS;FBAV/530.0.0.40.107;FBBV/771468153;"
     "FBDV/iPhone16,2;FBMD/iPhone;FBSN/iOS;FBSV/26.0.1;FBSS/3;FBID/phone;FBLC/en_US;FBOP/5]",
     IOS, 26),
    ("iPad Safari in mobile mode",
     "Mozilla/5.0 (iPad; CPU OS 17_7 like Mac OS X) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/17.7 Mobile/15E148 Safari/604.1", IOS, 17),
    ("iPadOS Safari, default desktop mode (looks like a Mac)",
     "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/26.0 Safari/605.1.15", DESKTOP, None),
    ("Android Chrome (reduced UA)",
     "Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/141.0.0.0 Mobile Safari/537.36", ANDROID, 10),
    ("Android Samsung Internet",
     "Mozilla/5.0 (Linux; Android 14; SAMSUNG SM-S928B) AppleWebKit/537.36 (KHTML, like Gecko) "
     "SamsungBrowser/28.0 Chrome/130.0.0.0 Mobile Safari/537.36", ANDROID, 14),
    ("Android Firefox",
     "Mozilla/5.0 (Android 15; Mobile; rv:144.0) Gecko/144.0 Firefox/144.0", ANDROID, 15),
    ("Android Facebook in-app browser",
     "Mozilla/5.0 (Linux; Android 14; SM-S918B Build/UP1A.231005.007; wv) AppleWebKit/537.36 "
     "(KHTML, like Gecko) Version/4.0 Chrome/141.0.7390.97 Mobile Safari/537.36 "
     "[FB_IAB/FB4A;FBAV/530.0.0.48.74;]", ANDROID, 14),
    ("Android Instagram in-app browser",
     "Mozilla/5.0 (Linux; Android 15; Pixel 9 Build/AP4A.250105.002; wv) AppleWebKit/537.36 "
     "(KHTML, like Gecko) Version/4.0 Chrome/141.0.7390.97 Mobile Safari/537.36 "
     "Instagram 400.0.0.46.81 Android (35/15; 420dpi; 1080x2424; Google/google; Pixel 9; "
     "tokay; tokay; en_US; 781246437)", ANDROID, 15),
    # In-app browsers of messaging and social apps: a person following a link
    # inside the app, whose answer must be the app's, not a preview page.
    ("Android Viber in-app browser",
     "Mozilla/5.0 (Linux; Android 14; wv) AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 "
     "Chrome/129.0 Mobile Safari/537.36 Viber/22.0.0.0", ANDROID, 14),
    ("Android Viber in-app browser, older WebView",
     "Mozilla/5.0 (Linux; Android 10; Redmi Note 7 Build/QKQ1.190920.002; wv) "
     "AppleWebKit/537.36 (KHTML, like Gecko) Version/4.0 Chrome/81.0.4044.138 "
     "Mobile Safari/537.36 Viber/14.7.0.4", ANDROID, 10),
    ("iPhone LINE in-app browser",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_5 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 Safari Line/13.13.0", IOS, 17),
    ("iPhone KakaoTalk in-app browser",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 KAKAOTALK 10.8.5", IOS, 17),
    ("iPhone WeChat in-app browser",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 MicroMessenger/8.0.50(0x1800323c) NetType/WIFI "
     "Language/en", IOS, 17),
    ("iPhone Snapchat in-app browser",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 Snapchat/13.10.0.40 (like Safari/8618.3.11.10.5, "
     "panda)", IOS, 17),
    ("iPhone Pinterest in-app browser",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_4 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 [Pinterest/iOS]", IOS, 17),
    ("iPhone LinkedIn in-app browser",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) Mobile/15E148 [LinkedInApp]/9.30.1836", IOS, 17),
    ("iPhone Google app",
     "Mozilla/5.0 (iPhone; CPU iPhone OS 17_6 like Mac OS X) AppleWebKit/605.1.15 "
     "(KHTML, like Gecko) GSA/330.0.660183937 Mobile/15E148 Safari/604.1", IOS, 17),
    ("Android TikTok in-app browser",
     "Mozilla/5.0 (Linux; Android 14; Pixel 8 Build/AP2A.240805.005; wv) AppleWebKit/537.36 "
     "(KHTML, like Gecko) Version/4.0 Chrome/127.0.6533.103 Mobile Safari/537.36 "
     "trill_360104 JsSdk/1.0 NetType/WIFI Channel/googleplay AppName/musical_ly "
     "app_version/36.1.4 ByteLocale/en ByteFullLocale/en Region/US "
     "BytedanceWebview/d8a21c6", ANDROID, 14),
    ("desktop Chrome on Windows",
     "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/141.0.0.0 Safari/537.36", DESKTOP, None),
    ("desktop Chrome on macOS",
     "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_7) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/141.0.0.0 Safari/537.36", DESKTOP, None),
    ("desktop Edge on Windows",
     "Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/141.0.0.0 Safari/537.36 Edg/141.0.0.0", DESKTOP, None),
    ("desktop Firefox on Windows",
     "Mozilla/5.0 (Windows NT 10.0; Win64; x64; rv:144.0) Gecko/20100101 Firefox/144.0",
     DESKTOP, None),
    ("desktop Firefox on macOS",
     "Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:144.0) Gecko/20100101 Firefox/144.0",
     DESKTOP, None),
    ("desktop Firefox on Linux",
     "Mozilla/5.0 (X11; Linux x86_64; rv:144.0) Gecko/20100101 Firefox/144.0", DESKTOP, None),
    ("ChromeOS",
     "Mozilla/5.0 (X11; CrOS x86_64 14541.0.0) AppleWebKit/537.36 (KHTML, like Gecko) "
     "Chrome/141.0.0.0 Safari/537.36", DESKTOP, None),
]

BOTS: list[tuple[str, str, Platform]] = [
    ("Slackbot link expanding",
     "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)", DESKTOP),
    ("Slack image proxy", "Slack-ImgProxy (+https://api.slack.com/robots)", DESKTOP),
    ("Slackbot", "Slackbot 1.0 (+https://api.slack.com/robots)", DESKTOP),
    ("facebookexternalhit",
     "facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)", DESKTOP),
    ("Twitterbot", "Twitterbot/1.0", DESKTOP),
    ("WhatsApp on Android", "WhatsApp/2.23.20.0 A", DESKTOP),
    ("WhatsApp on iPhone", "WhatsApp/2.25.21.78 i", DESKTOP),
    ("Viber's link preview from an iPhone", "Viber/18.0.1.286 CFNetwork/1335.0.3 Darwin/21.6.0",
     IOS),
    ("Viber's preview fetcher as the maintained list records it", "Viber", DESKTOP),
    ("iMessage link preview",
     "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_11_1) AppleWebKit/601.2.4 (KHTML, like Gecko) "
     "Version/9.0.1 Safari/601.2.4 facebookexternalhit/1.1 Facebot Twitterbot/1.0", DESKTOP),
    ("Googlebot desktop",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; Googlebot/2.1; "
     "+http://www.google.com/bot.html) Chrome/141.0.7390.122 Safari/537.36", DESKTOP),
    ("Googlebot smartphone",
     "Mozilla/5.0 (Linux; Android 6.0.1; Nexus 5X Build/MMB29P) AppleWebKit/537.36 "
     "(KHTML, like Gecko) Chrome/141.0.7390.122 Mobile Safari/537.36 (compatible; "
     "Googlebot/2.1; +http://www.google.com/bot.html)", ANDROID),
    ("Googlebot classic", "Googlebot/2.1 (+http://www.google.com/bot.html)", DESKTOP),
    ("TelegramBot", "TelegramBot (like TwitterBot)", DESKTOP),
    ("Discordbot", "Mozilla/5.0 (compatible; Discordbot/2.0; +https://discordapp.com)",
     DESKTOP),
    ("LinkedInBot",
     "LinkedInBot/1.0 (compatible; Mozilla/5.0; Apache-HttpClient +http://www.linkedin.com)",
     DESKTOP),
    ("Bluesky card fetcher",
     "Mozilla/5.0 (compatible; Bluesky Cardyb/1.1; +mailto:support@bsky.app)", DESKTOP),
    ("Applebot",
     "Mozilla/5.0 (Macintosh; Intel Mac OS X 10_15_5) AppleWebKit/605.1.15 (KHTML, like Gecko) "
     "Version/13.1.1 Safari/605.1.15 (Applebot/0.1; +http://www.apple.com/go/applebot)",
     DESKTOP),
    ("Bingbot",
     "Mozilla/5.0 AppleWebKit/537.36 (KHTML, like Gecko; compatible; bingbot/2.0; "
     "+http://www.bing.com/bingbot.htm) Chrome/116.0.1938.76 Safari/537.36", DESKTOP),
    ("Teams / Skype preview",
     "Mozilla/5.0 (Windows NT 6.1; WOW64) SkypeUriPreview Preview/0.5 "
     "skype-url-preview@microsoft.com", DESKTOP),
    ("curl", "curl/8.5.0", DESKTOP),
    ("python-requests", "python-requests/2.32.3", DESKTOP),
]


@pytest.mark.parametrize(("ua", "platform", "os_major"), [r[1:] for r in PEOPLE],
                         ids=[r[0] for r in PEOPLE])
def test_people(ua: str, platform: Platform, os_major: int | None) -> None:
    assert classify(ua) == Client(platform, os_major, is_bot=False)


@pytest.mark.parametrize(("ua", "platform"), [r[1:] for r in BOTS], ids=[r[0] for r in BOTS])
def test_bots_and_preview_crawlers(ua: str, platform: Platform) -> None:
    client = classify(ua)
    assert client.is_bot
    assert client.platform is platform


@pytest.mark.parametrize(("ua", "os_major"), [
    ("Mozilla/5.0 (iPhone; CPU iPhone OS " + "9" * 5000 + "_0 like Mac OS X) AppleWebKit/605.1.15"
     " (KHTML, like Gecko) Version/" + "9" * 5000 + " Mobile/15E148 Safari/604.1", None),
    ("Mozilla/5.0 (Linux; Android " + "9" * 5000 + "; Pixel) AppleWebKit/537.36 Chrome/120 Mobile",
     None),
    ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_0 like Mac OS X) [FBAN/FBIOS;FBSV/" + "9" * 5000
     + ".0]", 17),
])
def test_a_made_up_version_too_long_for_int_is_no_version(ua: str, os_major: int | None) -> None:
    """A tap's user agent is the sender's to write: a version of 5,000 digits
    is past what int() converts (it made the tap a 500); it is no version.
    (``classify`` now calls so long a user agent a bot before parsing it; the
    parsing is held to the rule on its own.)"""
    assert classify(ua).is_bot
    client = classified(ua)
    assert client.os_major == os_major and not client.is_bot


_IOS = ("Mozilla/5.0 (iPhone; CPU iPhone OS {os} like Mac OS X) AppleWebKit/605.1.15"
        " (KHTML, like Gecko){safari} Mobile/15E148{tail}")


@pytest.mark.parametrize(("ua", "os_major"), [
    (_IOS.format(os="1234_0", safari="", tail=""), 1234),  # four digits: a version
    (_IOS.format(os="12345_0", safari="", tail=""), None),  # five: none
    # Safari's Version/ in digits other than ASCII (``\d`` matches them) is no version
    (_IOS.format(os="18_6", safari=" Version/\u0662\u0666.0", tail=" Safari/604.1"), 18),
    (_IOS.format(os="18_6", safari=" Version/26.0", tail=" Safari/604.1"), 26),
])
def test_a_version_is_at_most_four_ascii_digits(ua: str, os_major: int | None) -> None:
    assert classified(ua).os_major == os_major


@pytest.mark.parametrize("ua", [None, "", "   "])
def test_missing_user_agent_is_an_uncounted_desktop(ua: str | None) -> None:
    assert classify(ua) == Client(Platform.DESKTOP, None, is_bot=True)


def test_every_listed_crawler_example_is_a_bot() -> None:
    """The folded pattern keeps every verdict of the maintained list."""
    data = cast(list[dict[str, Any]], crawleruseragents.CRAWLER_USER_AGENTS_DATA)
    examples = [ua for entry in data for ua in entry.get("instances", [])]
    assert len(examples) > 1000
    missed = [ua for ua in examples if not is_bot(ua)]
    assert missed == []


# Written out (not PREVIEW_CRAWLERS itself): a name dropped from the list fails here.
PREVIEW_FETCHERS = (
    "Slackbot", "Slack-ImgProxy", "facebookexternalhit", "Facebot", "meta-externalagent",
    "Twitterbot", "WhatsApp", "TelegramBot", "Discordbot", "LinkedInBot", "Googlebot",
    "Google-PageRenderer", "Applebot", "SkypeUriPreview", "Pinterestbot", "redditbot",
    "Embedly", "Iframely", "Bluesky Cardyb", "Mastodon", "Snap URL Preview", "vkShare",
    "line-poker", "KakaoTalk-Scrap", "Yahoo Link Preview", "Bitlybot", "MicrosoftPreview",
)


def test_the_written_out_fetchers_are_the_list() -> None:
    assert {n.rstrip("/") for n in PREVIEW_CRAWLERS} == set(PREVIEW_FETCHERS)


@pytest.mark.parametrize("name", PREVIEW_FETCHERS)
def test_each_named_preview_crawler_is_a_bot_on_its_own(name: str) -> None:
    """A fetcher sending just its name and a version (``Pinterestbot/1.0``),
    or its name after a browser's words, gets the preview page and is not
    counted, whether or not the maintained list knows it."""
    for ua in (f"{name}/1.0", f"Mozilla/5.0 (compatible; {name}/2.1; +https://example.com/bot)"):
        assert is_bot(ua), ua
        assert classify(ua).is_bot, ua


def test_people_agree_with_the_maintained_list() -> None:
    """Except where the list names an app whose in-app browser carries the
    same name (``IN_APP_BROWSER_NAMES``): a person there, by our reading."""
    for _, ua, _, _ in PEOPLE:
        assert not is_bot(ua)
        if not any(name in ua for name in IN_APP_BROWSER_NAMES):
            assert not crawleruseragents.is_crawler(ua)


def test_results_are_cached() -> None:
    prepare()
    ua = PEOPLE[0][1]
    first = classify(ua)
    hits = classified.cache_info().hits
    assert classify(ua) is first
    assert classified.cache_info().hits == hits + 1
    assert classified.cache_info().maxsize == 4096


def test_a_user_agent_longer_than_any_browser_s_is_a_bot_and_not_cached() -> None:
    """No browser sends more than a few hundred characters; a 16 KiB one of
    repeated "Spiders" made three crawler patterns (``[\\s\\S]*``) take time
    quadratic in its length on the event loop, and each such string stayed
    in the cache. Now it is a bot on desktop at once, the pattern and the
    cache untouched."""
    prepare()
    real = PEOPLE[0][1]
    at_limit = real + " " * (USER_AGENT_MAX - len(real))
    assert classify(at_limit) == classify(real)  # classified (trailing spaces: the same)
    before = classified.cache_info()
    for word in ("Spiders", "Spider", "Current"):
        huge = (word * (16_000 // len(word)))[:16_000]
        assert classify(huge) == Client(Platform.DESKTOP, None, is_bot=True)
        assert classify(real + "x" * USER_AGENT_MAX).is_bot
    after = classified.cache_info()
    assert (after.hits, after.misses) == (before.hits, before.misses)
