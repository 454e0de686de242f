"""Reduce a User-Agent header to what the redirector keeps: a ``Client``.

Platform and OS version come from ua-parser (the uap-core rules, maintained);
bots come from the crawler-user-agents list (maintained) plus the link-preview
fetchers named below, which must never be counted or sent to a store. The
full user agent is never stored or logged; only the ``Client`` leaves here.

Decisions:

- ``ios`` is every iOS device that says so (iPhone, iPod touch, iPad in mobile
  mode). iPadOS Safari presents itself as a Mac by default and is ``desktop``;
  nothing in its user agent tells it apart.
- ``android`` is Android (phones, tablets, in-app browsers). Everything else
  (Windows, macOS, Linux, ChromeOS, HarmonyOS, unknown) is ``desktop``.
- ``os_major`` is set for iOS and Android. Since iOS 26, WebKit freezes the OS
  in the user agent at ``18_6``/``18_7``; Safari still carries the real major
  in ``Version/26.x``, and some in-app browsers in their own token
  (``FBSV/26.0``, ``iOS 26_0``), so the highest of these wins. Other iOS
  browsers on iOS 26 or later still report 18.
- An empty or missing user agent is a bot on ``desktop``: every browser sends
  one, scripts and link checkers often do not, and counting them would inflate
  clicks and mint tokens nobody uses. So is one longer than
  ``USER_AGENT_MAX`` (no browser's is; see there).
- ua-parser's own "Spider" device verdict is not used: its generic rules flag
  words such as "WordPress" or "Kraken" that appear in real people's browsers.

Cost: results are cached per user-agent string (``functools.lru_cache``, 4096
entries). A miss costs one ua-parser lookup plus one regular expression over
the ~1500 crawler patterns (literals folded into a trie, about 30 µs on one
core). Call ``prepare()`` at start-up to pay the compile cost before the first
request.
"""

from __future__ import annotations

import functools
import re
from typing import Any, cast

import crawleruseragents
import ua_parser

from svc_engine.redirect import Client, Platform

PREVIEW_CRAWLERS: tuple[str, ...] = (
    "Slackbot", "Slack-ImgProxy", "facebookexternalhit", "Facebot", "meta-externalagent",
    "Twitterbot", "WhatsApp", "TelegramBot", "Discordbot", "LinkedInBot", "Googlebot",
    "Google-PageRenderer", "Applebot", "SkypeUriPreview", "Pinterestbot", "redditbot",
    "Embedly", "Iframely", "Bluesky Cardyb", "Mastodon/", "Snap URL Preview", "vkShare",
    "line-poker", "KakaoTalk-Scrap", "Yahoo Link Preview", "Bitlybot",
    "MicrosoftPreview",
)
"""Link-preview fetchers, matched case-sensitively as substrings. iMessage has no
name of its own: it sends a Mac Safari user agent ending in
``facebookexternalhit/1.1 Facebot Twitterbot/1.0``."""

IN_APP_BROWSER_NAMES: dict[str, str] = {"Viber": r"^Viber\b"}
"""Names the maintained crawler list matches anywhere in a user agent that
also end the user agent of the app's in-app browser, a person following the
link (Android's Viber: ``... Mobile Safari/537.36 Viber/22.0.0.0``); each is
a crawler only where the pattern given here matches (Viber's preview fetcher
starts with its name: ``Viber/18.0.1.286 CFNetwork/1335.0.3 Darwin/21.6.0``).
Matched as a substring, the in-app browser was given the preview page, which
has no way on to the app or its store."""

_META = frozenset(".^$*+?{}[]|()")
_ESCAPED_PUNCT = re.compile(r"\\([^A-Za-z0-9])")
_SAFARI_VERSION = re.compile(r"\bVersion/(\d+)")
_APP_IOS_VERSION = re.compile(r"(?:\bFBSV/|[;,(] ?iOS )(\d+)[._]")


def _is_literal(pattern: str) -> bool:
    """True when ``pattern`` matches only itself once ``\\/``-style escapes go."""
    bare = _ESCAPED_PUNCT.sub("", pattern)
    return "\\" not in bare and not any(ch in _META for ch in bare)


def _trie(words: list[str]) -> str:
    """One regular expression matching any of ``words`` as a substring.

    Shared prefixes are factored out so the engine tests one branch per first
    character instead of every word; a word that extends a shorter one is
    dropped, as the shorter match already answers the search.
    """
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        if "" in node:
            return ""
        branches = [re.escape(ch) + emit(child) for ch, child in sorted(node.items())]
        return branches[0] if len(branches) == 1 else f"(?:{'|'.join(branches)})"

    return emit(root)


def _bot_pattern() -> re.Pattern[str]:
    data = cast(list[dict[str, Any]], crawleruseragents.CRAWLER_USER_AGENTS_DATA)
    patterns = [str(entry["pattern"]) for entry in data]
    literals = [_ESCAPED_PUNCT.sub(r"\1", p) for p in patterns
                if _is_literal(p) and p not in IN_APP_BROWSER_NAMES]
    literals.extend(PREVIEW_CRAWLERS)
    others = [f"(?:{p})" for p in patterns if not _is_literal(p)]
    others.extend(f"(?:{p})" for p in IN_APP_BROWSER_NAMES.values())
    return re.compile("|".join([_trie(literals), *others]))


@functools.cache
def _bots() -> re.Pattern[str]:
    return _bot_pattern()


def is_bot(user_agent: str) -> bool:
    return _bots().search(user_agent) is not None


def _int(value: str | None) -> int | None:
    """A version number of a user agent: ASCII digits, at most 4 (a made-up
    one of 5,000 digits is past what ``int`` converts: a ValueError, a 500)."""
    if value is None or not (value.isascii() and value.isdigit()) or len(value) > 4:
        return None
    return int(value)


def _ios_major(
    user_agent: str, os_major: int | None, browser: ua_parser.UserAgent | None
) -> int | None:
    candidates = [os_major]
    if browser is not None and browser.family == "Mobile Safari":
        match = _SAFARI_VERSION.search(user_agent)
        candidates.append(_int(match.group(1)) if match else None)
    match = _APP_IOS_VERSION.search(user_agent)
    candidates.append(_int(match.group(1)) if match else None)
    known = [c for c in candidates if c is not None]
    return max(known) if known else None


USER_AGENT_MAX = 2048
r"""Characters of the longest user agent classified: browsers send 100 to 500.
A longer one is a bot's: the crawler patterns with ``[\s\S]*`` take time
quadratic in the length (a 16 KiB one made of "Spiders" took 140 ms of the
event loop a tap), and the cache would keep every such string."""
_NO_BROWSER = Client(Platform.DESKTOP, None, is_bot=True)


def classify(user_agent: str | None) -> Client:
    """The ``Client`` for a User-Agent header value (None when absent)."""
    if not user_agent or len(user_agent) > USER_AGENT_MAX:
        return _NO_BROWSER
    return classified(user_agent)


@functools.lru_cache(maxsize=4096)
def classified(user_agent: str) -> Client:
    """``classify`` of a user agent of at most ``USER_AGENT_MAX`` characters,
    cached."""
    if not user_agent.strip():
        return _NO_BROWSER
    result = ua_parser.parser(user_agent, ua_parser.Domain.OS | ua_parser.Domain.USER_AGENT)
    os = result.os
    family = os.family if os is not None else "Other"
    major = _int(os.major) if os is not None else None
    bot = is_bot(user_agent)
    if family == "iOS":
        return Client(Platform.IOS, _ios_major(user_agent, major, result.user_agent), bot)
    if family == "Android":
        return Client(Platform.ANDROID, major, bot)
    return Client(Platform.DESKTOP, None, bot)


def prepare() -> None:
    """Load the parser's rules and compile the bot pattern now, not on first use."""
    _bots()
    classified.cache_clear()
    classify("Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
             "(KHTML, like Gecko) Version/26.0 Mobile/15E148 Safari/604.1")
    classified.cache_clear()
