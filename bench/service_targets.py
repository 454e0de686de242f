"""The service's hot paths as benchmark targets.

Each target starts the real service (``svc serve``) on its own data dir, then
its ``prepare`` hook bootstraps the data dir with the ``svc`` CLI (LMDB lets it
write beside the server), configures the project over the API, creates links
and writes the slug list and any Lua script wrk needs. Rate limiting is off so
one key and one client address can be loaded (``SVC_RATE_LIMIT_PER_KEY=0``,
``SVC_RATE_LIMIT_PER_CLIENT=0``); everything else is the default
configuration, access log included.

The deferred-linking targets at the end (Android referrer and iOS network
launches, resolve, handoff create and claim) make the state their requests
consume with real requests first (``bench/wrk_mint.py``) and report in the
run's notes how many requests found it fresh.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx
import trio

from bench import wrk_mint
from bench.target import Prepare, Target
from bench.wrk import lua_string

LINKS = 1000
SERVER = ("{python}", "-m", "web.cli", "serve", "--port", "{port}", "--data", "{workdir}/data")
# Rate limits and load shedding off: a path's throughput is measured on the
# answers it is meant to give (wrk counts 503s and 429s as requests too); the
# overload step measures shedding on its own.
ENV = (("SVC_RATE_LIMIT_PER_KEY", "0"), ("SVC_RATE_LIMIT_PER_CLIENT", "0"),
       ("SVC_COUNTRY_HEADER", "CF-IPCountry"), ("SVC_MAX_LAG_MS", "0"))
IOS_UA = ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
          "(KHTML, like Gecko) Version/26.0 Mobile/15E148 Safari/604.1")
ANDROID_UA = ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/142.0.0.0 Mobile Safari/537.36")
DESKTOP_UA = ("Mozilla/5.0 (Windows NT 10.0; Win64; x64) AppleWebKit/537.36 (KHTML, like "
              "Gecko) Chrome/142.0.0.0 Safari/537.36")
PLATFORMS = {"ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
                     "teamId": "ABCDE12345"},
             "android": {"packageName": "com.example.shop"},
             "web": {"fallbackUrl": "https://example.com/"}}

# A fresh install id per request, so every init is a first launch.
UUID_LUA = """
do -- a different sequence in every wrk process (warm-up, loaded and unloaded runs)
  local f = assert(io.open("/dev/urandom", "rb"))
  local b = f:read(4)
  f:close()
  math.randomseed(((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4))
end
local hex = "0123456789abcdef"
local function uuid4()
  local t = {}
  for i = 1, 32 do
    local r = math.random(16)
    if i == 13 then r = 5 elseif i == 17 then r = 9 + (r % 4) end
    t[#t + 1] = hex:sub(r, r)
  end
  local s = table.concat(t)
  return s:sub(1, 8) .. "-" .. s:sub(9, 12) .. "-" .. s:sub(13, 16) .. "-" ..
         s:sub(17, 20) .. "-" .. s:sub(21, 32)
end
"""


def bootstrap(workdir: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "web.cli", "bootstrap", "--data",
                          str(workdir / "data"), "--json"], capture_output=True, text=True,
                         check=True, timeout=60)
    keys: dict[str, str] = json.loads(out.stdout)["keys"]
    return keys


async def post_retrying(client: httpx.AsyncClient, path: str,
                        body: Mapping[str, object]) -> httpx.Response:
    """POST, retrying 503s (a server with a low admission limit refuses some of
    the 16 concurrent setup requests); other errors raise."""
    for _ in range(200):
        r = await client.post(path, json=dict(body))
        if r.status_code != 503:
            r.raise_for_status()
            return r
        await trio.sleep(0.02)
    r.raise_for_status()
    return r


def configure(base_url: str, workdir: Path, settings: Mapping[str, object]
              ) -> tuple[dict[str, str], list[str]]:
    """Bootstrap, set platforms and settings, create ``LINKS`` links (16 at a
    time); writes ``slugs.txt`` (one ``/<slug>`` a line) and ``links.json``."""
    keys = bootstrap(workdir)
    auth = {"authorization": f"Bearer {keys['sk_live']}"}
    with httpx.Client(base_url=base_url, timeout=30, headers=auth) as c:
        c.patch("/v1/platforms", json=PLATFORMS).raise_for_status()
        c.patch("/v1/deferred/settings", json=dict(settings)).raise_for_status()
    links: list[dict[str, object]] = [{} for _ in range(LINKS)]

    async def create_all() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=30, headers=auth) as c:
            async def worker(first: int) -> None:
                for i in range(first, LINKS, 16):
                    r = await post_retrying(c, "/v1/links", {"path": f"/product/{i}",
                                                             "campaign": "bench"})
                    links[i] = r.json()

            async with trio.open_nursery() as n:
                for first in range(16):
                    n.start_soon(worker, first)

    trio.run(create_all)
    slugs = [str(link["slug"]) for link in links]
    (workdir / "slugs.txt").write_text("".join(f"/{s}\n" for s in slugs))
    (workdir / "links.json").write_text(json.dumps(links))
    return keys, slugs


def redirect_prepare(settings: Mapping[str, object]) -> Callable[[str, Path], None]:
    def prepare(base_url: str, workdir: Path) -> None:
        configure(base_url, workdir, settings)

    return prepare


def init_prepare(platform: str, settings: Mapping[str, object]
                 ) -> Callable[[str, Path], dict[str, str]]:
    """POST /v1/sdk/init with a new install id each request (a first launch).
    For iOS with probabilistic matching, taps fill the window first, so every
    launch scans and judges real candidates."""

    def prepare(base_url: str, workdir: Path) -> dict[str, str]:
        keys, slugs = configure(base_url, workdir, settings)
        if platform == "ios":
            with httpx.Client(base_url=base_url, headers={"user-agent": IOS_UA}) as c:
                for i, slug in enumerate(slugs[:200]):
                    c.get(f"/{slug}", headers={"cf-ipcountry": ["SE", "NO", "FI", "DK"][i % 4]})
        body = ('{"installId":"%s","isFirstLaunch":true,"sdkVersion":"0.2.0",'
                f'"platform":"{platform}","osVersion":"26.1"}}')
        (workdir / "init.lua").write_text(UUID_LUA + wrk_mint.IDEM_LUA + f"""
local template = '{body}'
request = function()
  return wrk.format("POST", "/v1/sdk/init", write_headers(), string.format(template, uuid4()))
end
""")
        (workdir / "init-body.json").write_text(body.replace("%s", "6f1c6b1e-3c1a-4b7e-9d2a-"
                                                                   "0c5b8f3e2a10"))
        return {"authorization": f"Bearer {keys['pk_live']}"}

    return prepare


def _redirect(name: str, description: str, ua: str, settings: Mapping[str, object]) -> Target:
    return Target(name=name, description=description, server=SERVER, env=ENV,
                  ready_path="/healthz", paths_file="{workdir}/slugs.txt",
                  headers=(("user-agent", ua), ("cf-ipcountry", "SE")),
                  prepare=redirect_prepare(settings))


def _init(name: str, description: str, platform: str, settings: Mapping[str, object]) -> Target:
    return Target(name=name, description=description, server=SERVER, env=ENV,
                  ready_path="/healthz", paths=("/v1/sdk/init",), method="POST",
                  expect_status=200,
                  headers=(("content-type", "application/json"), ("x-svc-sdk", "flutter/0.2.0"),
                           ("cf-ipcountry", "SE")),
                  body_file="{workdir}/init-body.json", lua_script="{workdir}/init.lua",
                  prepare=init_prepare(platform, settings))


REDIRECT_TARGETS: tuple[Target, ...] = (
    _redirect("redirect-desktop", "GET /<slug>, desktop -> 302 web fallback, click recorded",
              DESKTOP_UA, {}),
    _redirect("redirect-android-token", "GET /<slug>, Android -> 302 Play Store with a new "
              "svc_token (durable before the answer), click recorded", ANDROID_UA, {}),
    _redirect("redirect-iphone-window", "GET /<slug>, iPhone -> 302 App Store, click and "
              "probabilistic window entry recorded", IOS_UA,
              {"probabilisticMatching": True}),
)

INIT_TARGETS: tuple[Target, ...] = (
    _init("init-android-unattributed", "POST /v1/sdk/init, Android first launch, no referrer "
          "(install created, counters, outbox; durable before the answer)", "android", {}),
    _init("init-ios-probabilistic", "POST /v1/sdk/init, iOS first launch scanning a window of "
          "200 taps (cohort match or conflict)", "ios", {"probabilisticMatching": True}),
)


# -- deferred linking: launches with each flow, resolve, handoffs -----------------------

SDK_HEADERS = (("content-type", "application/json"), ("x-svc-sdk", "flutter/0.2.0"))
INSTALLS = 1000
TOKENS_PER_LOAD_SECOND = 2500
NETWORK_TAPS_PER_LOAD_SECOND = 2000
HANDOFFS_PER_LOAD_SECOND = 2500


def network_taps() -> int:
    return NETWORK_TAPS_PER_LOAD_SECOND * wrk_mint.load_seconds()


def register_installs(base_url: str, pk: str, workdir: Path, count: int = INSTALLS) -> None:
    """``count`` installs with a first launch each (Android, unattributed); ``installs.txt``."""
    ids = [str(uuid.uuid4()) for _ in range(count)]

    async def launch_all() -> None:
        async with httpx.AsyncClient(base_url=base_url, timeout=30, headers={
                **dict(SDK_HEADERS), "authorization": f"Bearer {pk}"}) as c:
            async def worker(first: int) -> None:
                for i in range(first, count, 16):
                    await post_retrying(c, "/v1/sdk/init", {
                        "installId": ids[i], "isFirstLaunch": True, "sdkVersion": "0.2.0",
                        "platform": "android", "osVersion": "14"})

            async with trio.open_nursery() as n:
                for first in range(16):
                    n.start_soon(worker, first)

    trio.run(launch_all)
    (workdir / "installs.txt").write_text("".join(f"{i}\n" for i in ids))


def _lines_lua(var: str, path: Path) -> str:
    return (f"local {var} = {{}}\nfor line in io.lines({lua_string(str(path))}) do\n"
            f"  if #line > 0 then {var}[#{var} + 1] = line end\nend\n")


def android_referrer_prepare(base_url: str, workdir: Path) -> dict[str, str]:
    """Mint tokens with Android taps (wrk reads each 302's Location), then launch
    with one token per request, in the shuffled order (bench/wrk_mint.py)."""
    keys, _ = configure(base_url, workdir, {})
    want = TOKENS_PER_LOAD_SECOND * wrk_mint.load_seconds() + 1
    tokens = workdir / "tokens.txt"
    done = wrk_mint.done_file(workdir, "tokens")
    wrk_mint.mint(base_url, _lines_lua("slugs", workdir / "slugs.txt")
                  + wrk_mint.count_lua(want, done) + f"""
local out = assert(io.open({lua_string(str(tokens))}, "w"))
out:setvbuf("line")
wrk.headers["user-agent"] = {lua_string(ANDROID_UA)}
math.randomseed(11)
request = function() return wrk.format("GET", slugs[math.random(#slugs)]) end
response = function(status, headers, body)
  local loc = headers["location"] or headers["Location"] or ""
  local tok = loc:match("svc_token%%3D([%w_-]+)")
  if status == 302 and tok then out:write(tok, "\\n") end
  mint_count(status == 302 and tok ~= nil)
end
""", workdir, "tokens")
    minted = [t for t in tokens.read_text().split() if t]
    (workdir / "minted.txt").write_text(str(len(minted) - 1))
    check = minted.pop()  # the status check's own token
    tokens.write_text("".join(f"{t}\n" for t in minted))
    body = ('{"installId":"%s","isFirstLaunch":true,"sdkVersion":"0.2.0",'
            '"platform":"android","osVersion":"14","installReferrer":"svc_token=%s&utm_source=bench"}')
    (workdir / "init-body.json").write_text(body % ("6f1c6b1e-3c1a-4b7e-9d2a-0c5b8f3e2a10", check))
    (workdir / "init.lua").write_text(UUID_LUA + wrk_mint.IDEM_LUA + _lines_lua("tokens", tokens)
                                      + wrk_mint.sequence_lua(workdir / "pos.txt", len(minted))
                                      + f"""
local template = {lua_string(body)}
request = function()
  local token = tokens[seq_next()]
  return wrk.format("POST", "/v1/sdk/init", write_headers(),
                    string.format(template, uuid4(), token))
end
""")
    return {"authorization": f"Bearer {keys['pk_live']}"}


def ios_network_prepare(base_url: str, workdir: Path) -> dict[str, str]:
    """iPhone taps from ``network_taps()`` addresses (no country), then launches
    from those addresses in the shuffled order: each is tied by its network hash."""
    taps = network_taps()
    keys, _ = configure(base_url, workdir, {"probabilisticMatching": True,
                                            "probabilisticIpMatching": True})
    wrk_mint.mint(base_url, _lines_lua("slugs", workdir / "slugs.txt")
                  + wrk_mint.HEADERS_LUA + wrk_mint.IP_LUA
                  + wrk_mint.count_lua(taps + 1, wrk_mint.done_file(workdir, "taps")) + f"""
wrk.headers["user-agent"] = {lua_string(IOS_UA)}
local sent = 0
request = function()
  sent = sent + 1
  return wrk.format("GET", slugs[(sent - 1) % #slugs + 1],
                    with_headers({{["X-Forwarded-For"] = seq_ip(sent)}}))
end
response = function(status, headers, body) mint_count(status == 302) end
""", workdir, "taps")
    (workdir / "minted.txt").write_text(str(taps))
    body = ('{"installId":"%s","isFirstLaunch":true,"sdkVersion":"0.2.0",'
            '"platform":"ios","osVersion":"26.1"}')
    (workdir / "init-body.json").write_text(body % "6f1c6b1e-3c1a-4b7e-9d2a-0c5b8f3e2a10")
    (workdir / "init.lua").write_text(UUID_LUA + wrk_mint.IP_LUA + wrk_mint.IDEM_LUA
                                      + wrk_mint.sequence_lua(workdir / "pos.txt", taps) + f"""
local template = {lua_string(body)}
request = function()
  local i = seq_next()
  return wrk.format("POST", "/v1/sdk/init", write_headers({{["X-Forwarded-For"] = seq_ip(i)}}),
                    string.format(template, uuid4()))
end
""")
    return {"authorization": f"Bearer {keys['pk_live']}"}


def resolve_prepare(base_url: str, workdir: Path) -> dict[str, str]:
    """Universal-link opens: a random link's short URL from a random registered install."""
    keys, _ = configure(base_url, workdir, {})
    register_installs(base_url, keys["pk_live"], workdir)
    links = json.loads((workdir / "links.json").read_text())
    (workdir / "urls.txt").write_text("".join(f"{link['url']}\n" for link in links))
    installs = (workdir / "installs.txt").read_text().split()
    (workdir / "resolve-body.json").write_text(json.dumps(
        {"url": links[0]["url"], "installId": installs[0]}))
    (workdir / "resolve.lua").write_text(
        wrk_mint.IDEM_LUA + _lines_lua("urls", workdir / "urls.txt")
        + _lines_lua("installs", workdir / "installs.txt") + """
math.randomseed(13)
request = function()
  return wrk.format("POST", "/v1/sdk/resolve", write_headers(), string.format(
    '{"url":"%s","installId":"%s"}', urls[math.random(#urls)], installs[math.random(#installs)]))
end
""")
    return {"authorization": f"Bearer {keys['pk_live']}"}


def handoff_create_prepare(base_url: str, workdir: Path) -> dict[str, str]:
    """The integrator's server binds a random link to a new user ID each request."""
    keys, _ = configure(base_url, workdir, {})
    links = json.loads((workdir / "links.json").read_text())
    (workdir / "link-ids.txt").write_text("".join(f"{link['id']}\n" for link in links))
    (workdir / "handoff-body.json").write_text(json.dumps(
        {"linkId": links[0]["id"], "userId": "bench-check-user", "expiresInSeconds": 3600}))
    (workdir / "handoff.lua").write_text(
        UUID_LUA + wrk_mint.IDEM_LUA + _lines_lua("links", workdir / "link-ids.txt") + """
request = function()
  return wrk.format("POST", "/v1/handoffs", write_headers(), string.format(
    '{"linkId":"%s","userId":"%s","expiresInSeconds":3600}', links[math.random(#links)], uuid4()))
end
""")
    return {"authorization": f"Bearer {keys['sk_live']}"}


def handoff_claim_prepare(base_url: str, workdir: Path) -> dict[str, str]:
    """Handoffs for users ``bench-user-1..N`` (made with wrk), then claims for
    those users in the shuffled order, each from a random registered install."""
    keys, _ = configure(base_url, workdir, {})
    register_installs(base_url, keys["pk_live"], workdir)
    links = json.loads((workdir / "links.json").read_text())
    (workdir / "link-ids.txt").write_text("".join(f"{link['id']}\n" for link in links))
    want = HANDOFFS_PER_LOAD_SECOND * wrk_mint.load_seconds()
    wrk_mint.mint(base_url, _lines_lua("links", workdir / "link-ids.txt")
                  + wrk_mint.count_lua(want, wrk_mint.done_file(workdir, "handoffs")) + f"""
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.headers["authorization"] = {lua_string("Bearer " + keys["sk_live"])}
local sent = 0
request = function()
  sent = sent + 1
  return wrk.format(nil, "/v1/handoffs", nil, string.format(
    '{{"linkId":"%s","userId":"bench-user-%d"}}', links[(sent - 1) % #links + 1], sent))
end
response = function(status, headers, body) mint_count(status == 201) end
""", workdir, "handoffs")
    (workdir / "minted.txt").write_text(str(want))
    installs = (workdir / "installs.txt").read_text().split()
    (workdir / "claim-body.json").write_text(json.dumps(
        {"userId": "bench-user-check", "installId": installs[0]}))
    (workdir / "claim.lua").write_text(
        wrk_mint.IDEM_LUA + _lines_lua("installs", workdir / "installs.txt")
        + wrk_mint.sequence_lua(workdir / "pos.txt", want) + """
math.randomseed(19)
request = function()
  return wrk.format("POST", "/v1/sdk/handoffs/claim", write_headers(), string.format(
    '{"userId":"bench-user-%d","installId":"%s"}', seq_next(), installs[math.random(#installs)]))
end
""")
    return {"authorization": f"Bearer {keys['pk_live']}"}


def coverage(item: str, fallback: str) -> Callable[[Path], str]:
    def note(workdir: Path) -> str:
        minted = int((workdir / "minted.txt").read_text())
        return wrk_mint.coverage_note(workdir / "pos.txt", minted, item, fallback)

    return note


def _sdk_post(name: str, description: str, path: str, prepare: Prepare, body: str, lua: str,
              *, env: tuple[tuple[str, str], ...] = ENV, expect: int = 200,
              note: Callable[[Path], str] | None = None,
              extra: tuple[tuple[str, str], ...] = (("cf-ipcountry", "SE"),)) -> Target:
    return Target(name=name, description=description, server=SERVER, env=env,
                  ready_path="/healthz", paths=(path,), method="POST", expect_status=expect,
                  headers=(*SDK_HEADERS, *extra), body_file=f"{{workdir}}/{body}",
                  lua_script=f"{{workdir}}/{lua}", prepare=prepare, note=note)


DEFERRED_TARGETS: tuple[Target, ...] = (
    _sdk_post("init-android-referrer", "POST /v1/sdk/init, Android first launch whose install "
              "referrer carries a fresh svc_token minted by an earlier Android tap (token "
              "consumed, deterministic install, counters, outbox; durable before the answer)",
              "/v1/sdk/init", android_referrer_prepare, "init-body.json", "init.lua",
              note=coverage("token", "reused a used token (rejected, unattributed)")),
    _sdk_post("init-ios-network", "POST /v1/sdk/init, iOS first launch from the address of "
              "one of 2,000 earlier iPhone taps per second of load (no country): matched by "
              "network hash, an index lookup whatever the window's size",
              "/v1/sdk/init", ios_network_prepare, "init-body.json", "init.lua",
              env=(*ENV, ("SVC_CLIENT_IP_HEADER", "X-Forwarded-For")), extra=(),
              note=coverage("tap", "found no tap from their network (unattributed)")),
    _sdk_post("resolve", "POST /v1/sdk/resolve, a universal-link open of a random link from "
              f"one of {INSTALLS:,} registered installs (open recorded, counters, outbox)",
              "/v1/sdk/resolve", resolve_prepare, "resolve-body.json", "resolve.lua"),
    _sdk_post("handoff-create", "POST /v1/handoffs (secret key), a random link bound to a new "
              "user ID (salted hash stored; durable before the answer)", "/v1/handoffs",
              handoff_create_prepare, "handoff-body.json", "handoff.lua", expect=201, extra=()),
    _sdk_post("handoff-claim", "POST /v1/sdk/handoffs/claim, each request a different user "
              "with one pending handoff (made first with POST /v1/handoffs), from a random "
              "registered install (open recorded, install upgraded)",
              "/v1/sdk/handoffs/claim", handoff_claim_prepare, "claim-body.json", "claim.lua",
              note=coverage("handoff", "had no pending handoff (answered {\"link\": null})")),
)
