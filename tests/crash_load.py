"""A mixed load against the real service that remembers what was acknowledged.

Workers (threads, each with its own HTTP client) run redirects, first
launches with install-referrer tokens, handoffs and claims, link creation,
custom events and settings changes in a loop. Every answer that acknowledged a
write (2xx) is recorded in ``Ledger``; connection errors while the server is
being killed are expected and ignored (an unanswered request promises
nothing). The checks after the last restart compare the ledger with the data.

Nothing here sleeps: the test paces itself by acknowledged writes
(``Ledger.wait_for_acks``), and a worker whose request failed waits for the
server to be back (``Target.up``).
"""

from __future__ import annotations

import random
import threading
import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

import attrs
import httpx

ANDROID_UA = ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/142.0.0.0 Mobile Safari/537.36")


class Target:
    """Where the workers send requests; down while the server restarts."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.up = threading.Event()
        self.up.set()

    def down(self) -> None:
        self.up.clear()

    def moved(self, url: str) -> None:
        self.url = url
        self.up.set()


@attrs.define
class Ledger:
    lock: threading.Lock = attrs.field(factory=threading.Lock)
    acks: int = 0  # answers that acknowledged a write
    changed: threading.Condition = attrs.field(init=False)
    links: dict[str, str] = attrs.field(factory=dict)  # link id -> slug
    installs: set[str] = attrs.field(factory=set)
    token_wins: dict[str, int] = attrs.field(factory=dict)  # token -> attributions seen
    handoff_users: set[str] = attrs.field(factory=set)
    claims: dict[str, int] = attrs.field(factory=dict)  # user -> non-null claims seen
    events: dict[str, str] = attrs.field(factory=dict)  # event id -> install id
    window_minutes: int | None = None
    errors: list[str] = attrs.field(factory=list)

    def __attrs_post_init__(self) -> None:
        self.changed = threading.Condition(self.lock)

    def note(self, fn: Any) -> None:
        with self.lock:
            fn(self)
            self.acks += 1
            self.changed.notify_all()

    def wait_for_acks(self, n: int, timeout: float = 60) -> None:
        """Block until ``n`` more writes are acknowledged than now."""
        with self.lock:
            start = self.acks
            if not self.changed.wait_for(lambda: self.acks >= start + n, timeout):
                raise AssertionError(f"only {self.acks - start} of {n} writes were "
                                     f"acknowledged in {timeout} s")

    def error(self, e: Exception) -> None:
        """A wrong answer (not an acknowledged write: it does not count)."""
        with self.lock:
            self.errors.append(repr(e))


class Worker(threading.Thread):
    def __init__(self, ledger: Ledger, keys: dict[str, str], target: Target, seed: int,
                 stop: threading.Event, *, settings_writer: bool = False) -> None:
        super().__init__(daemon=True)
        self.ledger, self.keys, self.target, self.rng, self.stop = (
            ledger, keys, target, random.Random(seed), stop)
        # One writer of settings, so "the last acknowledged value" is well defined.
        self.settings_writer = settings_writer

    def client(self, key: str | None = None) -> httpx.Client:
        headers = {"content-type": "application/json", "x-svc-sdk": "flutter/0.2.0"}
        if key:
            headers["authorization"] = f"Bearer {self.keys[key]}"
        return httpx.Client(base_url=self.target.url, headers=headers, timeout=5)

    def run(self) -> None:
        steps = [self.create_link, self.android_launch, self.handoff_and_claim,
                 self.events, self.redirect]
        if self.settings_writer:
            steps.append(self.patch_settings)
        while not self.stop.is_set():
            step = self.rng.choice(steps)
            try:
                step()
            except (httpx.TransportError, httpx.ReadTimeout):
                self.target.up.wait(30)  # the server is down or restarting
            except Exception as e:  # a wrong answer is a finding, not noise
                self.ledger.error(e)

    def _key(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def create_link(self) -> None:
        with self.client("pk_live") as c:
            r = c.post("/v1/sdk/links", json={"path": "/p"},
                       headers={"idempotency-key": self._key()})
        if r.status_code == 201:
            body = r.json()
            self.ledger.note(lambda led: led.links.__setitem__(body["id"], body["slug"]))

    def _some_link(self) -> str | None:
        with self.ledger.lock:
            return self.rng.choice(list(self.ledger.links.values())) if self.ledger.links \
                else None

    def redirect(self) -> None:
        slug = self._some_link()
        if slug:
            with httpx.Client(base_url=self.target.url, timeout=5) as c:
                c.get(f"/{slug}", headers={"user-agent": "Mozilla/5.0 (X11; Linux) Firefox/140"})

    def android_launch(self) -> None:
        slug = self._some_link()
        if not slug:
            return
        with httpx.Client(base_url=self.target.url, timeout=5) as c:
            r = c.get(f"/{slug}", headers={"user-agent": ANDROID_UA})
        if r.status_code != 302:
            return
        referrer = parse_qs(urlsplit(r.headers["location"]).query)["referrer"][0]
        token = parse_qs(referrer)["svc_token"][0]
        # Two devices present the same token (one legit, one replayed).
        for _ in range(2):
            install = self._key()
            with self.client("pk_live") as c:
                answer = c.post("/v1/sdk/init", headers={"idempotency-key": install}, json={
                    "installId": install, "isFirstLaunch": True, "sdkVersion": "0.2.0",
                    "platform": "android", "installReferrer": referrer})
            if answer.status_code == 200:
                won = answer.json()["link"] is not None

                def record(led: Ledger, install: str = install, won: bool = won) -> None:
                    led.installs.add(install)
                    led.token_wins[token] = led.token_wins.get(token, 0) + int(won)

                self.ledger.note(record)

    def handoff_and_claim(self) -> None:
        with self.ledger.lock:
            ids = list(self.ledger.links)
        if not ids:
            return
        user = self._key()
        with self.client("sk_live") as c:
            r = c.post("/v1/handoffs", json={"linkId": self.rng.choice(ids), "userId": user})
        if r.status_code != 201:
            return
        self.ledger.note(lambda led: led.handoff_users.add(user))
        install = self._key()
        with self.client("pk_live") as c:
            if c.post("/v1/sdk/init", json={"installId": install, "isFirstLaunch": True,
                                            "sdkVersion": "0.2.0", "platform": "ios"},
                      headers={"idempotency-key": install}).status_code != 200:
                return
            self.ledger.note(lambda led: led.installs.add(install))
            for _ in range(2):  # the second claim must find nothing
                answer = c.post("/v1/sdk/handoffs/claim",
                                json={"userId": user, "installId": install})
                if answer.status_code == 200 and answer.json()["link"] is not None:
                    self.ledger.note(
                        lambda led: led.claims.__setitem__(user, led.claims.get(user, 0) + 1))

    def events(self) -> None:
        with self.ledger.lock:
            installs = list(self.ledger.installs)
        if not installs:
            return
        install = self.rng.choice(installs)
        batch = [{"id": self._key(), "name": "purchase", "properties": {"n": i},
                  "occurredAt": "2026-11-22T10:00:00Z"} for i in range(5)]
        with self.client("pk_live") as c:
            r = c.post("/v1/sdk/events", json={"installId": install, "events": batch},
                       headers={"idempotency-key": self._key()})
        if r.status_code == 200:
            def record(led: Ledger) -> None:
                for e in batch:
                    led.events[e["id"]] = install

            self.ledger.note(record)

    def patch_settings(self) -> None:
        minutes = self.rng.randint(15, 360)
        with self.client("sk_live") as c:
            r = c.patch("/v1/deferred/settings", json={"probabilisticWindowMinutes": minutes})
        if r.status_code == 200:
            self.ledger.note(lambda led: setattr(led, "window_minutes", minutes))
