"""The attribution benchmark's HTTP driver: the real service, end to end.

It starts ``svc serve`` on a free loopback port with its data in a fresh
directory (pinned to CPU 1 while this process runs on CPU 0, when taskset and
two CPUs exist), bootstraps it, adds the second app with ``svc project
create``, configures both apps and creates their links over the API, then
replays the population's schedule as the phones, browsers and the
integrator's server would (tests/test_deferred_e2e.py drives each flow the
same way):

- a tap is ``GET /<slug>`` with the device's user agent, ``CF-IPCountry``
  and ``X-Forwarded-For`` (``SVC_COUNTRY_HEADER`` / ``SVC_CLIENT_IP_HEADER``),
  so every device has its own country and address; an Android tap's Play
  Store ``Location`` gives the install referrer; an iPhone tap on the landing
  app gives the page whose open button the app later resolves;
- a handoff is ``POST /v1/handoffs`` with the secret key;
- a launch is ``POST /v1/sdk/init`` (publishable key, the device's country
  and address), then ``POST /v1/sdk/resolve`` with the page's open-button URL
  (landing flow) or ``POST /v1/sdk/handoffs/claim`` (handoff flow).

Events run in schedule order with at most ``concurrency`` requests in flight
from one ``httpx.AsyncClient`` on trio; a launch waits for its own tap.
Rate limits are off (``SVC_RATE_LIMIT_PER_KEY=0``, ``SVC_RATE_LIMIT_PER_CLIENT=0``).
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import trio

from bench.attribution_score import Observation, score
from bench.population import LANDING, MAIN, Device, Flow, Population, Step, schedule
from bench.server import (
    free_port,
    machine_cpu_seconds,
    start_server,
    stop_server,
    tree_cpu_seconds,
    wait_ready,
)

REPO_ROOT = Path(__file__).resolve().parent.parent
ENV = {"SVC_RATE_LIMIT_PER_KEY": "0", "SVC_RATE_LIMIT_PER_CLIENT": "0",
       "SVC_MAX_LAG_MS": "0", "SVC_COUNTRY_HEADER": "CF-IPCountry",
       "SVC_CLIENT_IP_HEADER": "X-Forwarded-For"}
SDK = {"x-svc-sdk": "flutter/0.2.0", "content-type": "application/json"}
SCHEME = "exampleshop"
PLATFORMS = {"ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
                     "teamId": "ABCDE12345", "scheme": SCHEME},
             "android": {"packageName": "com.example.shop"},
             "web": {"fallbackUrl": "https://example.com/"}}
SETTINGS = {MAIN: {"probabilisticMatching": True, "probabilisticIpMatching": True},
            LANDING: {"iosLandingPage": True}}
OPEN_BUTTON = re.compile(r'href="(' + SCHEME + r'://open\?svc_link=[^"]+)"')


def ios_ua(major: int) -> str:
    """Safari on an iPhone; from iOS 26 the OS token is frozen at 18_6 and
    ``Version/`` carries the real major, as on real phones."""
    os_token = "18_6" if major >= 26 else f"{major}_1"
    return (f"Mozilla/5.0 (iPhone; CPU iPhone OS {os_token} like Mac OS X) AppleWebKit/605.1.15 "
            f"(KHTML, like Gecko) Version/{major}.0 Mobile/15E148 Safari/604.1")


def android_ua(major: int) -> str:
    return (f"Mozilla/5.0 (Linux; Android {major}; K) AppleWebKit/537.36 (KHTML, like Gecko) "
            "Chrome/142.0.0.0 Mobile Safari/537.36")


class Setup:
    """The two apps' keys and links on a running service."""

    def __init__(self, base_url: str, data: Path, links: Mapping[str, int]) -> None:
        self.base_url = base_url
        cli = [sys.executable, "-m", "web.cli"]
        boot = json.loads(_run([*cli, "bootstrap", "--data", str(data), "--json"]))
        second = json.loads(_run([*cli, "project", "create", "--data", str(data), "--org",
                                  boot["organizationId"], "--name", "Landing app"]))
        self.keys: dict[str, dict[str, str]] = {MAIN: boot["keys"], LANDING: second["keys"]}
        self.links: dict[str, list[dict[str, Any]]] = {}
        self.link_keys: dict[str, str] = {}  # link id -> "app:index"
        for app, count in links.items():
            with httpx.Client(base_url=base_url, timeout=30, headers={
                    "authorization": f"Bearer {self.keys[app]['sk_live']}"}) as c:
                c.patch("/v1/platforms", json=PLATFORMS).raise_for_status()
                c.patch("/v1/deferred/settings", json=SETTINGS[app]).raise_for_status()
                made = []
                for i in range(count):
                    r = c.post("/v1/links", json={"path": f"/{app}/item/{i}",
                                                  "campaign": "attribution-bench"})
                    r.raise_for_status()
                    made.append(r.json())
                    self.link_keys[r.json()["id"]] = f"{app}:{i}"
            self.links[app] = made


def _run(argv: list[str]) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60,
                          cwd=REPO_ROOT).stdout


class Replay:
    def __init__(self, setup: Setup, client: httpx.AsyncClient) -> None:
        self.setup = setup
        self.client = client
        self.referrer: dict[int, str] = {}
        self.open_url: dict[int, str] = {}
        self.got: dict[int, str | None] = {}
        self.requests = 0
        self.errors: list[str] = []

    async def send(self, method: str, url: str, *, headers: Mapping[str, str],
                   body: object = None) -> httpx.Response:
        self.requests += 1
        content = json.dumps(body).encode() if body is not None else None
        return await self.client.request(method, url, headers=headers, content=content)

    def _fail(self, d: Device, what: str, r: httpx.Response) -> None:
        if len(self.errors) < 20:
            self.errors.append(f"device {d.index} ({d.flow}): {what} -> {r.status_code} "
                               f"{r.text[:200]}")

    async def tap(self, d: Device) -> None:
        assert d.link is not None and d.tap_ip is not None
        link = self.setup.links[d.app][d.link]
        ua = android_ua(d.os_major) if d.platform == "android" else ios_ua(d.os_major)
        headers = {"user-agent": ua, "x-forwarded-for": d.tap_ip}
        if d.tap_country:
            headers["cf-ipcountry"] = d.tap_country
        r = await self.send("GET", f"/{link['slug']}", headers=headers)
        if d.flow is Flow.ANDROID_REFERRER and r.status_code == 302:
            self.referrer[d.index] = parse_qs(urlsplit(r.headers["location"]).query)[
                "referrer"][0]
        elif d.flow is Flow.IOS_LANDING and r.status_code == 200:
            found = OPEN_BUTTON.search(r.text)
            if found:
                self.open_url[d.index] = html.unescape(found.group(1))
        if r.status_code not in (200, 302):
            self._fail(d, "tap", r)

    async def handoff(self, d: Device) -> None:
        assert d.link is not None
        link = self.setup.links[d.app][d.link]
        r = await self.send("POST", "/v1/handoffs", headers={
            "content-type": "application/json",
            "authorization": f"Bearer {self.setup.keys[d.app]['sk_live']}"},
            body={"linkId": link["id"], "userId": d.user_id})
        if r.status_code != 201:
            self._fail(d, "handoff", r)

    async def launch(self, d: Device) -> None:
        headers = {**SDK, "authorization": f"Bearer {self.setup.keys[d.app]['pk_live']}",
                   "x-forwarded-for": d.launch_ip}
        if d.launch_country:
            headers["cf-ipcountry"] = d.launch_country
        body: dict[str, object] = {"installId": d.install_id, "isFirstLaunch": True,
                                   "sdkVersion": "0.2.0", "platform": d.platform,
                                   "osVersion": d.os_version}
        if d.index in self.referrer:
            body["installReferrer"] = self.referrer[d.index]
        got = await self._link_of(d, "init", await self.send(
            "POST", "/v1/sdk/init", headers=headers, body=body))
        if d.flow is Flow.IOS_LANDING and d.index in self.open_url:
            opened = await self._link_of(d, "resolve", await self.send(
                "POST", "/v1/sdk/resolve", headers=headers,
                body={"url": self.open_url[d.index], "installId": d.install_id}))
            got = got or opened
        elif d.flow is Flow.HANDOFF:
            claimed = await self._link_of(d, "claim", await self.send(
                "POST", "/v1/sdk/handoffs/claim", headers=headers,
                body={"userId": d.user_id, "installId": d.install_id}))
            got = got or claimed
        self.got[d.index] = got

    async def _link_of(self, d: Device, what: str, r: httpx.Response) -> str | None:
        if r.status_code != 200:
            self._fail(d, what, r)
            return None
        link = r.json().get("link")
        if not link:
            return None
        return self.setup.link_keys.get(link["linkId"], "unknown")

    async def run(self, population: Population, concurrency: int,
                  cap_s: float | None = None) -> float:
        """Replay the schedule; returns the wall time in seconds. After ``cap_s``
        seconds no new event starts (devices not launched by then are left out)."""
        done: dict[int, trio.Event] = {}
        limiter = trio.CapacityLimiter(concurrency)

        async def one(step: Step, d: Device, borrower: object) -> None:
            try:
                if step is Step.LAUNCH:
                    if d.index in done:
                        await done[d.index].wait()
                    await self.launch(d)
                elif step is Step.TAP:
                    await self.tap(d)
                else:
                    await self.handoff(d)
            finally:
                if step is not Step.LAUNCH:
                    done[d.index].set()
                limiter.release_on_behalf_of(borrower)

        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for event in schedule(population.devices):
                if cap_s is not None and time.perf_counter() - started > cap_s:
                    break
                if event.step is not Step.LAUNCH:
                    done[event.device.index] = trio.Event()
                borrower = object()
                await limiter.acquire_on_behalf_of(borrower)
                nursery.start_soon(one, event.step, event.device, borrower)
        return time.perf_counter() - started


def _pinning() -> tuple[str | None, set[int] | None]:
    """(server CPUs for taskset, this process's CPUs) or (None, None) when unpinned."""
    if shutil.which("taskset") is None or not {0, 1} <= os.sched_getaffinity(0):
        return None, None
    return "1", {0}


def measure(population: Population, *, concurrency: int = 32, cap_s: float | None = None,
            workdir: Path | None = None) -> dict[str, Any]:
    """Run the population against a fresh service; returns rates and scores."""
    own = workdir is None
    work = Path(tempfile.mkdtemp(prefix="svc-attribution-")) if workdir is None else workdir
    work.mkdir(parents=True, exist_ok=True)
    server_cpus, client_cpus = _pinning()
    port = free_port()
    server = start_server([sys.executable, "-m", "web.cli", "serve", "--port", str(port),
                           "--data", str(work / "data")], port=port, cwd=REPO_ROOT, env=ENV,
                          cpus=server_cpus, log_path=work / "server.log")
    previous = os.sched_getaffinity(0)
    try:
        wait_ready(server, "/healthz")
        setup_started = time.perf_counter()
        setup = Setup(server.base_url, work / "data", population.links)
        setup_s = time.perf_counter() - setup_started
        if client_cpus:
            os.sched_setaffinity(0, client_cpus)
        cpu_before = tree_cpu_seconds(server.pid)
        client_before = time.process_time()
        busy_before, _ = machine_cpu_seconds()

        async def go() -> tuple[Replay, float]:
            limits = httpx.Limits(max_connections=concurrency,
                                  max_keepalive_connections=concurrency)
            async with httpx.AsyncClient(base_url=server.base_url, limits=limits,
                                         timeout=30) as client:
                replay = Replay(setup, client)
                return replay, await replay.run(population, concurrency, cap_s)

        replay, wall = trio.run(go)
        server_cpu = tree_cpu_seconds(server.pid) - cpu_before
        client_cpu = time.process_time() - client_before
        busy = machine_cpu_seconds()[0] - busy_before
    finally:
        os.sched_setaffinity(0, previous)
        exit_status, clean = stop_server(server)
        if own:
            shutil.rmtree(work, ignore_errors=True)
    observations = [Observation(d.flow.value,
                                f"{d.app}:{d.link}" if d.link is not None else None,
                                replay.got[d.index])
                    for d in population.devices if d.index in replay.got]
    launches = len(observations)
    attributed = sum(1 for o in observations if o.got is not None)
    return {
        "devices": launches,
        "devices_planned": len(population.devices),
        "requests": replay.requests,
        "concurrency": concurrency,
        "setup_seconds": setup_s,
        "wall_seconds": wall,
        "requests_per_s": replay.requests / wall,
        "launches_per_s": launches / wall,
        "attributed": attributed,
        "attributions_per_s": attributed / wall,
        "server_cpu_seconds": server_cpu,
        "server_cpu_us_per_request": server_cpu * 1e6 / max(replay.requests, 1),
        "client_cpu_seconds": client_cpu,
        "other_load": max(0.0, busy - server_cpu - client_cpu) / wall,
        "pinned": server_cpus is not None,
        "errors": replay.errors,
        "stopped_cleanly": clean,
        "exit_status": exit_status,
        "scores": [s.to_json() for s in score(observations, [f.value for f in Flow])],
    }
