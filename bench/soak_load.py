"""The soak's load: a mixed, paced stream of real requests with many distinct keys.

``Load.run`` sends about ``rate`` requests a second (a producer hands ops to
``workers`` concurrent tasks over one httpx client; when every worker is busy
an op is skipped and counted, so a slow server lowers the rate rather than
building a backlog). The ops (``OPS``, with weights) are what a deployment
sees: taps from desktops, Androids (the Play Store redirect's ``svc_token``
is kept and later sent by an Android first launch), iPhones (the tap's
address and iOS version are kept and later sent by an iOS first launch, a
probabilistic match), link-preview bots; SDK first and later launches,
resolves, event batches (names, revenue in several currencies, link IDs),
handoff creation and claims; server-key link creation, reads and analytics;
idempotent replays; and the usual refusals (unknown key, the wrong kind of
key, malformed and invalid bodies, a reused Idempotency-Key, a repeated
first launch, unknown paths and slugs, a wrong method). Beside them a slow
task signs in to the dashboard with wrong passwords (the sign-in throttle's
per-e-mail and per-client tables).

``KeySpace`` draws every value that could key an in-memory table (client
address, sent in ``X-Forwarded-For``, user agent, user ID, e-mail, event
name, currency and amount, link, bad API key) from a fixed pool during the
``warmup`` and ``same`` phases, and fresh, never-seen values during the
``fresh`` phase; it counts the distinct values sent in each phase.
"""

from __future__ import annotations

import json
import random
import re
import time
import uuid
from collections import Counter, deque
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import trio

SDK_HEADERS = {"content-type": "application/json", "x-svc-sdk": "flutter/0.2.0"}
CURRENCIES = ("USD", "EUR", "SEK", "GBP", "JPY", "NOK", "DKK", "CHF")
PRICES = (0.99, 1.99, 4.99, 9.99, 19.99, 49.0, 99.0, 120, 250, 1000)
EVENT_NAMES = ("purchase", "add_to_cart", "signup", "level_up", "share", "view_item",
               "subscribe", "tutorial_complete")
CAMPAIGNS = ("spring", "summer", "autumn", "winter", "launch", "retarget", "newsletter")
CHANNELS = ("email", "sms", "social", "qr", "partner", "ads")
IOS_MODELS = ("iPhone14,5", "iPhone15,2", "iPhone16,1", "iPhone17,3", "iPhone13,2")
ANDROID_MODELS = ("K", "SM-S918B", "Pixel 8", "Pixel 7a", "moto g(60)", "2201117TY",
                  "CPH2451", "SM-A546B")
BOT_UAS = ("facebookexternalhit/1.1 (+http://www.facebook.com/externalhit_uatext.php)",
           "Slackbot-LinkExpanding 1.0 (+https://api.slack.com/robots)",
           "Twitterbot/1.0", "WhatsApp/2.23.20.0", "Mozilla/5.0 (compatible; Googlebot/2.1; "
           "+http://www.google.com/bot.html)", "TelegramBot (like TwitterBot)")


PLATFORM_SEEDS = {"ios": 1, "android": 2, "desktop": 3}


def _address(n: int, block: int) -> str:
    """The ``n``-th address of a block: IPv4 in 10.<block..>.x.y, every 8th an
    IPv6 address in 2001:db8::/32 (a /64 each, as phones on IPv6 have)."""
    if n % 8 == 7:
        return f"2001:db8:{block:x}:{n:x}::{(n * 2654435761) % 65521:x}"
    return f"10.{block + (n >> 16) % 64}.{(n >> 8) & 255}.{n & 255}"


def _currency(n: int) -> str:
    """The ``n``-th (0 to 17575) well-formed currency code, from ZZZ down: the
    service takes any three capital letters (made-up ones too)."""
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    m = 17575 - n % 17576
    return letters[m // 676] + letters[(m // 26) % 26] + letters[m % 26]


class KeySpace:
    """Where each keyed value comes from: a fixed pool, or (``fresh``) new ones."""

    def __init__(self, rng: random.Random, *, pool_addresses: int = 3000,
                 pool_user_agents: int = 400, pool_users: int = 500,
                 pool_emails: int = 60) -> None:
        self.rng = rng
        self.fresh = False
        self.phase = "warmup"
        self._n = 0
        self.pool_addresses = [_address(i, 1) for i in range(pool_addresses)]
        self.pool_uas = {p: [self._make_ua(p, i, fresh=False) for i in range(pool_user_agents)]
                         for p in ("ios", "android", "desktop")}
        self.pool_users = [f"user-{i}" for i in range(pool_users)]
        self.pool_emails = [f"someone{i}@example.com" for i in range(pool_emails)]
        self.seen: dict[str, dict[str, set[str]]] = {}
        self.counted: dict[str, Counter[str]] = {}
        self.ever: dict[str, set[str]] = {}

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.fresh = phase == "fresh"

    def _next(self) -> int:
        self._n += 1
        return self._n

    def note(self, kind: str, value: str) -> str:
        self.seen.setdefault(self.phase, {}).setdefault(kind, set()).add(value)
        self.ever.setdefault(kind, set()).add(value)
        return value

    def count(self, kind: str, n: int = 1) -> None:
        self.counted.setdefault(self.phase, Counter())[kind] += n

    def distinct(self, phase: str) -> dict[str, int]:
        out = {k: len(v) for k, v in self.seen.get(phase, {}).items()}
        out.update(self.counted.get(phase, {}))
        return out

    # -- the keyed values ---------------------------------------------------------------

    def address(self) -> str:
        if self.fresh:
            return self.note("addresses", _address(self._next(), 100))
        return self.note("addresses", self.rng.choice(self.pool_addresses))

    def user_agent(self, platform: str) -> str:
        if self.fresh:
            ua = self._make_ua(platform, self._next(), fresh=True)
        else:
            ua = self.rng.choice(self.pool_uas[platform])
        return self.note("user_agents", ua)

    def ios_version_of(self, ua: str) -> str:
        m = re.search(r"OS (\d+)_(\d+)", ua)
        return f"{m.group(1)}.{m.group(2)}" if m else "18.0"

    def _make_ua(self, platform: str, i: int, *, fresh: bool) -> str:
        # Each string carries ``i`` in a field that real ones vary (a build, a
        # patch version), so that pool strings are distinct and fresh ones new.
        r = random.Random(i * 7919 + (1 if fresh else 0) + PLATFORM_SEEDS[platform])
        if platform == "ios":
            major, minor = r.choice((16, 17, 18, 26)), r.randint(0, 7)
            build = f"{15 + i % 8}{'ABCDEFGH'[i % 8]}{i}" if fresh else f"15E{148 + i}"
            safari = (f"Mozilla/5.0 (iPhone; CPU iPhone OS {major}_{minor} like Mac OS X) "
                      f"AppleWebKit/605.1.15 (KHTML, like Gecko) Version/{major}.{minor} "
                      f"Mobile/{build} Safari/604.1")
            if r.random() < 0.5:
                return safari
            # in-app browsers: a build number and device in every string
            app = r.choice(("Instagram", "FBAN/FBIOS;FBAV", "LinkedInApp", "TikTok"))
            return (f"Mozilla/5.0 (iPhone; CPU iPhone OS {major}_{minor} like Mac OS X) "
                    f"AppleWebKit/605.1.15 (KHTML, like Gecko) Mobile/15E148 {app} "
                    f"{r.randint(200, 400)}.0.0.{i % 1000}.{i} ({r.choice(IOS_MODELS)}; "
                    f"iOS {major}_{minor}; en_US; en; scale=3.00; 1179x2556; {i})")
        if platform == "android":
            v = r.choice((10, 11, 12, 13, 14, 15, 16))
            chrome = f"{r.randint(120, 142)}.0.{r.randint(6000, 7400)}.{i}"
            tail = f" [FB_IAB/FB4A;FBAV/{i}.0.0.{i % 97};]" if r.random() < 0.3 else ""
            return (f"Mozilla/5.0 (Linux; Android {v}; {r.choice(ANDROID_MODELS)}) "
                    f"AppleWebKit/537.36 (KHTML, like Gecko) Chrome/{chrome} Mobile "
                    f"Safari/537.36{tail}")
        if r.random() < 0.5:
            return (f"Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, "
                    f"like Gecko) Chrome/{r.randint(120, 142)}.0.{r.randint(6000, 7400)}."
                    f"{i} Safari/537.36")
        return (f"Mozilla/5.0 (Macintosh; Intel Mac OS X 10.15; rv:{r.randint(115, 140)}.0) "
                f"Gecko/{20100101 + i} Firefox/{r.randint(115, 140)}.0.{i}")

    def user_id(self) -> str:
        if self.fresh:
            return self.note("user_ids", f"fresh-user-{self._next()}")
        return self.note("user_ids", self.rng.choice(self.pool_users))

    def email(self) -> str:
        if self.fresh:
            return self.note("emails", f"fresh{self._next()}@example.org")
        return self.note("emails", self.rng.choice(self.pool_emails))

    def event_name(self) -> str:
        if self.fresh and self.rng.random() < 0.5:
            return self.note("event_names", f"custom_event_{self._next()}")
        return self.note("event_names", self.rng.choice(EVENT_NAMES))

    def revenue(self) -> tuple[str, float]:
        if self.fresh:
            currency = (self.rng.choice(CURRENCIES) if self.rng.random() < 0.5
                        else _currency(self._next() % 17576))
            amount = round(self.rng.uniform(0.5, 500.0), 2)
        else:
            currency, amount = self.rng.choice(CURRENCIES), self.rng.choice(PRICES)
        self.note("currencies", currency)
        self.note("amounts", f"{currency}{amount!r}")
        return currency, amount

    def idem_key(self) -> str:
        self.count("idempotency_keys")
        return str(uuid.uuid4())

    def bad_key(self, kind: str) -> str:
        if self.fresh:
            return self.note("bad_api_keys", f"{kind}_live_" + uuid.uuid4().hex[:32])
        n = self.rng.randrange(20)
        return self.note("bad_api_keys", f"{kind}_live_" + "x" * 28 + f"{n:04d}")


@attrs.define
class Tenant:
    base_url: str
    project_id: str
    pk: dict[str, list[str]]   # mode -> publishable keys
    sk: dict[str, list[str]]   # mode -> secret keys
    links: dict[str, list[dict[str, Any]]]   # mode -> links (newest last)
    owner_email: str


@attrs.define
class Stats:
    ops: Counter[str] = attrs.field(factory=Counter)
    statuses: Counter[tuple[str, int]] = attrs.field(factory=Counter)
    requests: int = 0
    skipped: int = 0
    errors: Counter[str] = attrs.field(factory=Counter)
    latency_s: float = 0.0
    unexpected: list[str] = attrs.field(factory=list)

    def status_classes(self) -> dict[str, int]:
        out: Counter[str] = Counter()
        for (_, status), n in self.statuses.items():
            out[f"{status // 100}xx" if status else "err"] += n
        return dict(out)


def _now_iso(rng: random.Random) -> str:
    t = datetime.now(UTC) - timedelta(seconds=rng.uniform(0, 600))
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


# Which statuses each op may get without it being a surprise (besides 429 and
# 503, which the limits and the load shedding may give anything).
EXPECTED: dict[str, set[int]] = {
    "tap_desktop": {302, 200}, "tap_android": {302}, "tap_iphone": {302, 200},
    "tap_bot": {200}, "tap_unknown_slug": {404}, "wellknown": {200, 404},
    "init_android": {200}, "init_ios": {200}, "init_other": {200}, "init_later": {200},
    "resolve": {200, 404}, "events": {200, 404}, "claim": {200, 409}, "sdk_link": {201},
    "handoff_create": {201}, "link_create": {201}, "links_list": {200}, "link_get": {200},
    "link_patch": {200}, "analytics": {200}, "deliveries": {200}, "replay": {200, 201},
    "bad_key": {401}, "wrong_kind": {403}, "malformed_json": {400}, "invalid_body": {400},
    "idem_conflict": {409}, "idem_rerun": {200}, "install_conflict": {409},
    "wrong_method": {405},
    "unknown_api_path": {404}, "claim_unregistered": {409}, "resolve_unknown": {404},
    "healthz": {200}, "signin_page": {200}, "signin_wrong": {400, 429},
}


# The mix: each op (the ``Load`` method of that name) and its weight, how often
# it is picked relative to the others.
OPS: dict[str, float] = {
    "tap_desktop": 10, "tap_android": 12, "tap_iphone": 12, "tap_bot": 2,
    "tap_unknown_slug": 2, "wellknown": 1, "init_android": 8, "init_ios": 7, "init_other": 3,
    "init_later": 4, "resolve": 6, "events": 10, "claim": 3, "sdk_link": 0.5,
    "handoff_create": 3, "link_create": 1, "links_list": 0.7, "link_get": 1, "link_patch": 0.5,
    "analytics": 0.5, "deliveries": 0.3, "replay": 1, "bad_key": 2, "wrong_kind": 1,
    "malformed_json": 1, "invalid_body": 1, "idem_conflict": 0.7, "install_conflict": 0.7,
    "wrong_method": 0.5, "unknown_api_path": 1, "claim_unregistered": 0.5,
    "resolve_unknown": 0.5, "healthz": 0.3,
}
Op = Callable[[], Awaitable[None]]


def _deque(maxlen: int) -> Callable[[], deque[Any]]:
    """An attrs factory: an empty deque of at most ``maxlen`` items."""
    return lambda: deque(maxlen=maxlen)


@attrs.define(eq=False)
class Load:
    t: Tenant
    keys: KeySpace
    rate: float = attrs.field(kw_only=True)
    workers: int = attrs.field(kw_only=True)
    signin_rate: float = attrs.field(kw_only=True)
    rng: random.Random = attrs.field(kw_only=True)
    stats: Stats = attrs.field(init=False, factory=Stats)
    tokens: deque[tuple[str, str]] = attrs.field(init=False,  # (mode, referrer)
                                                 factory=_deque(4000))
    ios_taps: deque[tuple[str, str, str]] = attrs.field(init=False,  # mode, addr, osver
                                                        factory=_deque(4000))
    installs: dict[str, deque[str]] = attrs.field(init=False, factory=lambda: {
        "live": deque(maxlen=5000), "test": deque(maxlen=2000)})
    handoff_users: deque[tuple[str, str]] = attrs.field(init=False,  # mode, user
                                                        factory=_deque(3000))
    replayable: deque[tuple[str, str, str, bytes, str]] = attrs.field(init=False,
                                                                      factory=_deque(500))
    client: httpx.AsyncClient | None = attrs.field(init=False, default=None)
    # Held by each dashboard sign-in from its GET to its answer; the sampler
    # takes it to read the server's memory with no sign-in in flight (each
    # holds 64 MiB for argon2 while its password is checked).
    signin_lock: trio.Lock = attrs.field(init=False, factory=trio.Lock)
    _cumulative: list[tuple[float, str, Op]] = attrs.field(init=False, factory=list)

    def __attrs_post_init__(self) -> None:
        total = sum(OPS.values())
        acc = 0.0
        for name, w in OPS.items():
            acc += w / total
            self._cumulative.append((acc, name, getattr(self, name)))

    # -- plumbing -------------------------------------------------------------------------

    def _mode(self) -> str:
        return "test" if self.rng.random() < 0.15 else "live"

    def _pk(self, mode: str) -> str:
        return self.rng.choice(self.t.pk[mode])

    def _sk(self, mode: str) -> str:
        return self.rng.choice(self.t.sk[mode])

    def _link(self, mode: str) -> dict[str, Any]:
        links = self.t.links[mode]
        if self.keys.fresh and self.rng.random() < 0.5:  # the newest links, read for the first time
            return links[-1 - self.rng.randrange(min(len(links), 50))]
        return self.rng.choice(links)

    async def _send(self, op: str, method: str, path: str, *, headers: dict[str, str] | None = None,
                    body: bytes | None = None, json_body: Any = None,
                    address: str | None = None) -> httpx.Response | None:
        assert self.client is not None
        h = dict(headers or {})
        h["x-forwarded-for"] = address or self.keys.address()
        if json_body is not None:
            body = json.dumps(json_body).encode()
            h.setdefault("content-type", "application/json")
        started = time.perf_counter()
        try:
            r = await self.client.request(method, path, headers=h, content=body)
        except httpx.HTTPError as e:
            self.stats.errors[f"{op}: {type(e).__name__}"] += 1
            self.stats.statuses[(op, 0)] += 1
            return None
        finally:
            self.stats.latency_s += time.perf_counter() - started
            self.stats.requests += 1
        self.stats.statuses[(op, r.status_code)] += 1
        if (r.status_code not in EXPECTED.get(op, ()) and r.status_code not in (429, 503)
                and len(self.stats.unexpected) < 50):
                self.stats.unexpected.append(f"{op} {method} {path} -> {r.status_code}: "
                                             f"{r.text[:200]}")
        return r

    def _sdk(self, key: str, *, write: bool = True) -> dict[str, str]:
        h = {**SDK_HEADERS, "authorization": f"Bearer {key}"}
        if write:
            h["idempotency-key"] = self.keys.idem_key()
        return h

    def _server(self, key: str, *, write: bool = False) -> dict[str, str]:
        h = {"authorization": f"Bearer {key}", "content-type": "application/json"}
        if write:
            h["idempotency-key"] = self.keys.idem_key()
        return h

    def _new_install(self) -> str:
        self.keys.count("install_ids")
        return str(uuid.uuid4())

    # -- taps ---------------------------------------------------------------------------

    async def _tap(self, op: str, platform: str) -> tuple[httpx.Response | None, str, str, str]:
        mode = "live" if self.rng.random() < 0.9 else "test"
        link = self._link(mode)
        self.keys.note("slugs", link["slug"])
        ua = self.keys.user_agent(platform)
        addr = self.keys.address()
        query = f"?utm_source={self.rng.choice(CHANNELS)}" if self.rng.random() < 0.3 else ""
        r = await self._send(op, "GET", f"/{link['slug']}{query}", address=addr,
                             headers={"user-agent": ua,
                                      "cf-ipcountry": self.rng.choice(("SE", "US", "DE", "BR")),
                                      "referer": self.rng.choice(
                                          ("https://t.co/x", "https://www.instagram.com/",
                                           "https://mail.google.com/", ""))})
        return r, mode, addr, ua

    async def tap_desktop(self) -> None:
        await self._tap("tap_desktop", "desktop")

    async def tap_android(self) -> None:
        r, mode, _, _ = await self._tap("tap_android", "android")
        if r is not None and r.status_code == 302:
            q = parse_qs(urlsplit(r.headers.get("location", "")).query)
            referrer = (q.get("referrer") or [""])[0]
            if "svc_token=" in referrer:
                self.tokens.append((mode, referrer))

    async def tap_iphone(self) -> None:
        r, mode, addr, ua = await self._tap("tap_iphone", "ios")
        if r is not None and r.status_code in (200, 302):
            self.ios_taps.append((mode, addr, self.keys.ios_version_of(ua)))

    async def tap_bot(self) -> None:
        link = self._link("live")
        await self._send("tap_bot", "GET", f"/{link['slug']}",
                         headers={"user-agent": self.rng.choice(BOT_UAS)})

    async def tap_unknown_slug(self) -> None:
        await self._send("tap_unknown_slug", "GET", f"/no{uuid.uuid4().hex[:10]}",
                         headers={"user-agent": self.keys.user_agent("desktop")})

    async def wellknown(self) -> None:
        path = self.rng.choice(("/.well-known/apple-app-site-association",
                                "/.well-known/assetlinks.json"))
        await self._send("wellknown", "GET", path)

    async def healthz(self) -> None:
        await self._send("healthz", "GET", "/healthz")

    # -- SDK ----------------------------------------------------------------------------

    async def _init(self, op: str, mode: str, body: dict[str, Any], address: str | None = None
                    ) -> httpx.Response | None:
        key = self._pk(mode)
        h = self._sdk(key)
        raw = json.dumps(body).encode()
        r = await self._send(op, "POST", "/v1/sdk/init", headers=h, body=raw, address=address)
        if r is not None and r.status_code == 200:
            self.installs[mode].append(body["installId"])
            self.replayable.append((op, "/v1/sdk/init", key, raw, h["idempotency-key"]))
        return r

    async def init_android(self) -> None:
        mode, referrer = self.tokens.popleft() if self.tokens else (self._mode(), None)
        body: dict[str, Any] = {"installId": self._new_install(), "isFirstLaunch": True,
                                "sdkVersion": "0.2.0", "platform": "android",
                                "osVersion": str(self.rng.choice((12, 13, 14, 15)))}
        if referrer is not None:
            body["installReferrer"] = referrer + "&utm_source=google-play&utm_medium=organic"
        await self._init("init_android", mode, body)

    async def init_ios(self) -> None:
        mode, addr, osver = (self.ios_taps.popleft() if self.ios_taps and self.rng.random() < 0.8
                             else (self._mode(), None, "18.5"))
        body = {"installId": self._new_install(), "isFirstLaunch": True, "sdkVersion": "0.2.0",
                "platform": "ios", "osVersion": osver}
        await self._init("init_ios", mode, body, address=addr)

    async def init_other(self) -> None:
        body = {"installId": self._new_install(), "isFirstLaunch": True, "sdkVersion": "0.2.0",
                "platform": self.rng.choice(("web", "macos", "windows"))}
        await self._init("init_other", self._mode(), body)

    async def init_later(self) -> None:
        mode = self._mode()
        known = self.installs[mode]
        install = self.rng.choice(known) if known and self.rng.random() < 0.8 else \
            self._new_install()
        body = {"installId": install, "isFirstLaunch": False, "sdkVersion": "0.2.0",
                "platform": self.rng.choice(("ios", "android")), "osVersion": "14"}
        await self._send("init_later", "POST", "/v1/sdk/init", headers=self._sdk(self._pk(mode)),
                         json_body=body)

    def _install(self, mode: str) -> str:
        known = self.installs[mode]
        return self.rng.choice(known) if known else self._new_install()

    async def resolve(self) -> None:
        mode = self._mode()
        link = self._link(mode)
        url = link["url"] + (f"?ref={self.rng.randrange(100)}" if self.rng.random() < 0.3 else "")
        await self._send("resolve", "POST", "/v1/sdk/resolve",
                         headers=self._sdk(self._pk(mode)),
                         json_body={"url": url, "installId": self._install(mode)})

    async def events(self) -> None:
        mode = self._mode()
        events = []
        for _ in range(self.rng.choice((1, 1, 2, 3, 5, 10))):
            ev: dict[str, Any] = {"id": str(uuid.uuid4()), "name": self.keys.event_name(),
                                  "occurredAt": _now_iso(self.rng)}
            if self.rng.random() < 0.4:
                currency, amount = self.keys.revenue()
                ev["properties"] = {"revenue": amount, "currency": currency,
                                    "sku": f"sku-{self.rng.randrange(1000)}"}
            elif self.rng.random() < 0.5:
                ev["properties"] = {"screen": self.rng.choice(("home", "cart", "pdp")),
                                    "n": self.rng.randrange(100)}
            if self.rng.random() < 0.3:
                ev["linkId"] = self._link(mode)["id"]
            events.append(ev)
        self.keys.count("event_ids", len(events))
        key = self._pk(mode)
        h = self._sdk(key)
        raw = json.dumps({"installId": self._install(mode), "events": events}).encode()
        r = await self._send("events", "POST", "/v1/sdk/events", headers=h, body=raw)
        if r is not None and r.status_code == 200:
            self.replayable.append(("events", "/v1/sdk/events", key, raw, h["idempotency-key"]))

    async def claim(self) -> None:
        if not self.handoff_users:
            return await self.handoff_create()
        mode, user = self.handoff_users.popleft()
        await self._send("claim", "POST", "/v1/sdk/handoffs/claim",
                         headers=self._sdk(self._pk(mode)),
                         json_body={"userId": user, "installId": self._install(mode)})

    async def claim_unregistered(self) -> None:
        mode = self._mode()
        await self._send("claim_unregistered", "POST", "/v1/sdk/handoffs/claim",
                         headers=self._sdk(self._pk(mode)),
                         json_body={"userId": self.keys.user_id(),
                                    "installId": self._new_install()})

    async def sdk_link(self) -> None:
        mode = self._mode()
        r = await self._send("sdk_link", "POST", "/v1/sdk/links",
                             headers=self._sdk(self._pk(mode)),
                             json_body={"path": f"/shared/{self.rng.randrange(10**6)}",
                                        "channel": "share"})
        if r is not None and r.status_code == 201:
            self.t.links[mode].append(r.json())
            self.keys.count("links_created")

    # -- server keys -----------------------------------------------------------------------

    async def handoff_create(self) -> None:
        mode = self._mode()
        user = self.keys.user_id()
        body: dict[str, Any] = {"userId": user, "linkId": self._link(mode)["id"]}
        if self.rng.random() < 0.3:
            body["expiresInSeconds"] = self.rng.choice((600, 3600, 86400))
        r = await self._send("handoff_create", "POST", "/v1/handoffs",
                             headers=self._server(self._sk(mode), write=True), json_body=body)
        if r is not None and r.status_code == 201:
            self.handoff_users.append((mode, user))

    async def link_create(self) -> None:
        mode = self._mode()
        n = self.rng.randrange(10**6)
        body: dict[str, Any] = {"path": f"/product/{n}", "campaign": self.rng.choice(CAMPAIGNS),
                                "channel": self.rng.choice(CHANNELS),
                                "tags": [f"t{self.rng.randrange(30)}"],
                                "params": {"sku": str(n),
                                           "color": self.rng.choice(("red", "blue"))},
                                "ogTitle": f"Product {n}"}
        if self.rng.random() < 0.2:
            body["webFallbackUrl"] = f"https://example.com/p/{n}"
        key = self._sk(mode)
        h = self._server(key, write=True)
        raw = json.dumps(body).encode()
        r = await self._send("link_create", "POST", "/v1/links", headers=h, body=raw)
        if r is not None and r.status_code == 201:
            self.t.links[mode].append(r.json())
            self.keys.count("links_created")
            self.replayable.append(("link_create", "/v1/links", key, raw, h["idempotency-key"]))

    async def links_list(self) -> None:
        mode = self._mode()
        q = self.rng.choice(("?limit=20", "?limit=50&campaign=spring", "?q=product&limit=10",
                             "?limit=100"))
        await self._send("links_list", "GET", "/v1/links" + q,
                         headers=self._server(self._sk(mode)))

    async def link_get(self) -> None:
        mode = self._mode()
        await self._send("link_get", "GET", f"/v1/links/{self._link(mode)['id']}",
                         headers=self._server(self._sk(mode)))

    async def link_patch(self) -> None:
        mode = self._mode()
        await self._send("link_patch", "PATCH", f"/v1/links/{self._link(mode)['id']}",
                         headers=self._server(self._sk(mode), write=True),
                         json_body={"ogDescription": f"edited {self.rng.randrange(10**6)}"})

    async def analytics(self) -> None:
        mode = self._mode()
        path = self.rng.choice(("/v1/analytics/summary",
                                f"/v1/analytics/links/{self._link(mode)['id']}",
                                f"/v1/analytics/links/{self._link(mode)['id']}/funnel"))
        await self._send("analytics", "GET", path, headers=self._server(self._sk(mode)))

    async def deliveries(self) -> None:
        await self._send("deliveries", "GET", "/v1/webhooks/deliveries",
                         headers=self._server(self._sk("live")))

    def _sent_before(self) -> tuple[str, bytes, dict[str, str]] | None:
        """A request sent before with an Idempotency-Key, to send again: its path,
        its body, and its headers with its key (None while there is none)."""
        if not self.replayable:
            return None
        _, path, key, raw, idem = self.rng.choice(self.replayable)
        h = self._sdk(key, write=False) if key.startswith("pk_") else self._server(key)
        h["idempotency-key"] = idem
        return path, raw, h

    async def replay(self) -> None:
        if (before := self._sent_before()) is None:
            return
        path, raw, h = before
        await self._send("replay", "POST", path, headers=h, body=raw)

    # -- refusals ---------------------------------------------------------------------------

    async def bad_key(self) -> None:
        if self.rng.random() < 0.5:
            await self._send("bad_key", "POST", "/v1/sdk/init",
                             headers=self._sdk(self.keys.bad_key("pk")),
                             json_body={"installId": str(uuid.uuid4()), "isFirstLaunch": True,
                                        "sdkVersion": "0.2.0", "platform": "ios"})
        else:
            await self._send("bad_key", "GET", "/v1/links",
                             headers=self._server(self.keys.bad_key("sk")))

    async def wrong_kind(self) -> None:
        await self._send("wrong_kind", "GET", "/v1/links", headers=self._server(self._pk("live")))

    async def malformed_json(self) -> None:
        await self._send("malformed_json", "POST", "/v1/sdk/events",
                         headers=self._sdk(self._pk("live")),
                         body=b'{"installId": "' + uuid.uuid4().hex.encode() + b'", "events": [')

    async def invalid_body(self) -> None:
        choice = self.rng.randrange(3)
        if choice == 0:
            body: dict[str, Any] = {"installId": "not-a-uuid", "isFirstLaunch": True,
                                    "sdkVersion": "0.2.0", "platform": "ios"}
            path = "/v1/sdk/init"
        elif choice == 1:
            body = {"installId": str(uuid.uuid4()),
                    "events": [{"id": str(uuid.uuid4()), "name": "", "occurredAt": "yesterday"}]}
            path = "/v1/sdk/events"
        else:
            body = {"url": "not a url", "installId": str(uuid.uuid4())}
            path = "/v1/sdk/resolve"
        await self._send("invalid_body", "POST", path, headers=self._sdk(self._pk("live")),
                         json_body=body)

    async def idem_conflict(self) -> None:
        if (before := self._sent_before()) is None:
            return
        path, raw, h = before
        changed = json.loads(raw)  # a known field changed: another body, the same key
        if path == "/v1/links":
            changed["path"] = f"/changed/{self.rng.randrange(10**6)}"
        elif path == "/v1/sdk/init":
            changed["sdkVersion"] = f"0.2.{self.rng.randrange(1, 10**6)}"
        else:
            changed["events"][0]["name"] = f"changed_{self.rng.randrange(10**6)}"
        # A launch report or an events batch under a recorded key with another
        # body runs again (the SDK's retries may carry an updated app's body):
        # 200; a link under it is 409 idempotency_key_reused.
        op = "idem_conflict" if path == "/v1/links" else "idem_rerun"
        await self._send(op, "POST", path, headers=h, body=json.dumps(changed).encode())

    async def install_conflict(self) -> None:
        known = self.installs["live"]
        if not known:
            return
        body = {"installId": self.rng.choice(known), "isFirstLaunch": True,
                "sdkVersion": "0.2.0", "platform": "android"}
        await self._send("install_conflict", "POST", "/v1/sdk/init",
                         headers=self._sdk(self._pk("live")), json_body=body)

    async def wrong_method(self) -> None:
        await self._send("wrong_method", "PUT", "/v1/sdk/init",
                         headers=self._sdk(self._pk("live")), body=b"{}")

    async def unknown_api_path(self) -> None:
        await self._send("unknown_api_path", "GET", f"/v1/{uuid.uuid4().hex[:8]}",
                         headers=self._server(self._sk("live")))

    async def resolve_unknown(self) -> None:
        await self._send("resolve_unknown", "POST", "/v1/sdk/resolve",
                         headers=self._sdk(self._pk("live")),
                         json_body={"url": f"{self.t.base_url}/nope{uuid.uuid4().hex[:8]}",
                                    "installId": self._install("live")})

    # -- the dashboard sign-in ---------------------------------------------------------------

    async def signin_wrong(self) -> None:
        """GET the sign-in page (its CSRF nonce cookie and field), POST a wrong password."""
        addr = self.keys.address()
        email = self.t.owner_email if self.rng.random() < 0.05 else self.keys.email()
        async with httpx.AsyncClient(base_url=self.t.base_url, timeout=30) as c:
            h = {"x-forwarded-for": addr, "user-agent": self.keys.user_agent("desktop")}
            try:
                page = await c.get("/dashboard", headers=h)
            except httpx.HTTPError as e:
                self.stats.errors[f"signin_page: {type(e).__name__}"] += 1
                return
            self.stats.requests += 1
            self.stats.statuses[("signin_page", page.status_code)] += 1
            m = re.search(r'name="csrf" value="([^"]+)"', page.text)
            if page.status_code != 200 or m is None:
                return
            try:
                r = await c.post("/dashboard/sign-in", headers=h, data={
                    "csrf": m.group(1), "email": email, "next": "",
                    "password": f"wrong-{self.rng.randrange(10**9)}"})
            except httpx.HTTPError as e:
                self.stats.errors[f"signin_wrong: {type(e).__name__}"] += 1
                return
            self.stats.requests += 1
            self.stats.statuses[("signin_wrong", r.status_code)] += 1
            if r.status_code not in (400, 429) and len(self.stats.unexpected) < 50:
                self.stats.unexpected.append(f"signin_wrong -> {r.status_code}: {r.text[:200]}")

    # -- running -----------------------------------------------------------------------------

    def pick(self) -> tuple[str, Op]:
        x = self.rng.random()
        for acc, name, fn in self._cumulative:
            if x <= acc:
                return name, fn
        return self._cumulative[-1][1], self._cumulative[-1][2]

    async def run(self, until: float) -> None:
        """Send the mix until ``time.monotonic()`` reaches ``until``."""
        limits = httpx.Limits(max_connections=self.workers, max_keepalive_connections=self.workers)
        async with httpx.AsyncClient(base_url=self.t.base_url, timeout=30, limits=limits,
                                     follow_redirects=False) as client:
            self.client = client
            send, receive = trio.open_memory_channel[tuple[str, Op]](self.workers)

            async def worker() -> None:
                async for name, fn in receive:
                    self.stats.ops[name] += 1
                    try:
                        await fn()
                    except Exception as e:  # a harness bug must not stop the soak
                        self.stats.errors[f"{name}: {type(e).__name__}: {e}"[:200]] += 1

            async def producer() -> None:
                tick = 0.02
                owed = 0.0
                next_at = time.monotonic()
                async with send:
                    while time.monotonic() < until:
                        owed += self.rate * tick
                        while owed >= 1:
                            owed -= 1
                            try:
                                send.send_nowait(self.pick())
                            except trio.WouldBlock:
                                self.stats.skipped += 1
                        next_at += tick
                        await trio.sleep_until(max(next_at, time.monotonic()) - time.monotonic()
                                               + trio.current_time())

            async def signins() -> None:
                if self.signin_rate <= 0:
                    return
                while time.monotonic() < until:
                    async with self.signin_lock:
                        await self.signin_wrong()
                    await trio.sleep(self.rng.expovariate(self.signin_rate))

            async with trio.open_nursery() as n:
                for _ in range(self.workers):
                    n.start_soon(worker)
                n.start_soon(signins)
                await producer()
            self.client = None
