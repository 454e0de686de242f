"""The service's hot paths as benchmark targets.

Each target starts the real service (``svc serve``) on its own data dir, then
its ``prepare`` hook bootstraps the data dir with the ``svc`` CLI (LMDB lets it
write beside the server), configures the project over the API, creates links
and writes the slug list and any Lua script wrk needs. Rate limiting is off so
one key can be loaded (``SVC_RATE_LIMIT_PER_KEY=0``); everything else is the
default configuration, access log included.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

import httpx

from bench.target import Target

LINKS = 1000
SERVER = ("{python}", "-m", "web.cli", "serve", "--port", "{port}", "--data", "{workdir}/data")
ENV = (("SVC_RATE_LIMIT_PER_KEY", "0"), ("SVC_COUNTRY_HEADER", "CF-IPCountry"))
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


def configure(base_url: str, workdir: Path, settings: Mapping[str, object]
              ) -> tuple[dict[str, str], list[str]]:
    keys = bootstrap(workdir)
    slugs = []
    with httpx.Client(base_url=base_url, timeout=30,
                      headers={"authorization": f"Bearer {keys['sk_live']}"}) as c:
        c.patch("/v1/platforms", json=PLATFORMS).raise_for_status()
        c.patch("/v1/deferred/settings", json=dict(settings)).raise_for_status()
        for i in range(LINKS):
            r = c.post("/v1/links", json={"path": f"/product/{i}", "campaign": "bench"})
            r.raise_for_status()
            slugs.append(r.json()["slug"])
    (workdir / "slugs.txt").write_text("".join(f"/{s}\n" for s in slugs))
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
        (workdir / "init.lua").write_text(UUID_LUA + f"""
local template = '{body}'
request = function()
  return wrk.format("POST", "/v1/sdk/init", nil, string.format(template, uuid4()))
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
                  ready_path="/healthz", method="POST", expect_status=200,
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
