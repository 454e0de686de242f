"""The attribution benchmark's ENGINE driver: the pure rules, no I/O.

It replays a population's schedule (``bench.population``) against an
in-memory world that keeps what the store keeps (tokens, each app's click
window, installs, pending handoffs) and changes it the way
``storage/attribution_store.py`` does: an Android tap issues a ``Token``, an
iPhone tap on an app with probabilistic matching adds a ``ClickWindowEntry``
(with the network hash of the tap's address, since IP matching is on), a first
launch calls ``svc_engine.attribution.decide_first_launch`` with the app's
window entries of the last ``probabilisticWindowMinutes`` and consumes what
the decision names (the token, the matched taps, the network hash); the
landing page's open button and handoff claims upgrade the install with
``upgrade_install`` and ``pick_handoff``.

Reported: first-launch decisions per second counting only the time inside
``decide_first_launch``, and counting the whole replay (taps, window upkeep,
consumption, upgrades), plus the mean window size a decision scanned, and
precision/recall per flow.
"""

from __future__ import annotations

import bisect
import random
import time
from collections.abc import Mapping
from typing import Any

import attrs

from bench.attribution_score import Observation, score
from bench.population import LANDING, MAIN, Device, Flow, Population, Step, schedule
from svc_engine.attribution import (
    ClickWindowEntry,
    Handoff,
    Install,
    InstallAttribution,
    LaunchFacts,
    Matched,
    Token,
    decide_first_launch,
    net_hash,
    pick_handoff,
    user_hash,
)
from svc_engine.installs import Confidence, Method
from svc_engine.keys import Mode
from svc_engine.settings import DeferredSettings

SETTINGS: Mapping[str, DeferredSettings] = {
    MAIN: DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True),
    LANDING: DeferredSettings(ios_landing_page=True),
}
SECRET = b"bench-server-secret-0123456789ab"
SALT = b"bench-project-salt-0123456789abc"


def link_key(app: str, index: int) -> str:
    return f"{app}:{index}"


class World:
    """What the store would hold, for one mode (live) of the two apps."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tokens: dict[str, Token] = {}
        self.device_token: dict[int, str] = {}
        self.window: dict[str, list[ClickWindowEntry]] = {MAIN: [], LANDING: []}
        self.window_at: dict[str, list[int]] = {MAIN: [], LANDING: []}  # sorted tap times
        self.installs: dict[str, Install] = {}
        self.handoffs: dict[bytes, list[Handoff]] = {}
        self.decide_s = 0.0
        self.decisions = 0
        self.window_scanned = 0

    def _id(self) -> str:
        return f"{self.rng.getrandbits(128):032x}"

    def tap(self, d: Device, now: int) -> None:
        assert d.link is not None and d.tap_ip is not None
        lid = link_key(d.app, d.link)
        settings = SETTINGS[d.app]
        if d.platform == "android":
            token = Token.issue(self.rng.randbytes(24), link_id=lid, mode=Mode.LIVE, now_ms=now)
            self.tokens[token.token] = token
            self.device_token[d.index] = token.token
        elif settings.probabilistic_matching:
            net = net_hash(SECRET, d.tap_ip) if settings.probabilistic_ip_matching else None
            entry = ClickWindowEntry(click_id=self._id(), link_id=lid, mode=Mode.LIVE,
                                     os_major=d.os_major, country=d.tap_country, at_ms=now,
                                     net_hash=net)
            at = self.window_at[d.app]
            i = bisect.bisect_right(at, now)
            at.insert(i, now)
            self.window[d.app].insert(i, entry)

    def create_handoff(self, d: Device, now: int) -> None:
        assert d.link is not None and d.user_id is not None
        h = Handoff(id=self._id(), link_id=link_key(d.app, d.link),
                    user_hash=user_hash(SALT, d.user_id), mode=Mode.LIVE, created_at_ms=now,
                    expires_at_ms=now + 7 * 24 * 3600 * 1000)
        self.handoffs.setdefault(h.user_hash, []).append(h)

    def launch(self, d: Device, now: int) -> str | None:
        """The first launch (plus the resolve or claim its flow makes); returns the
        link delivered to the app, or None."""
        settings = SETTINGS[d.app]
        referrer = self.device_token.get(d.index) if d.flow is Flow.ANDROID_REFERRER else None
        launch = LaunchFacts(mode=Mode.LIVE, platform=d.platform, os_major=d.os_major,
                             country=d.launch_country, referrer_token=referrer)
        token = self.tokens.get(referrer) if referrer is not None else None
        window: list[ClickWindowEntry] = []
        if d.platform == "ios" and settings.probabilistic_matching:
            since = now - settings.window_ms
            window = self.window[d.app][bisect.bisect_left(self.window_at[d.app], since):]
        net = net_hash(SECRET, d.launch_ip) if d.platform == "ios" else None
        started = time.perf_counter()
        decision = decide_first_launch(launch, token=token, window=window, settings=settings,
                                       net_hashes=(net,) if net else (), now_ms=now)
        self.decide_s += time.perf_counter() - started
        self.decisions += 1
        self.window_scanned += len(window)
        install = Install(install_id=d.install_id, project_id=d.app, mode=Mode.LIVE,
                          platform=d.platform, created_at_ms=now)
        delivered = None
        if isinstance(decision, Matched):
            self._consume(d.app, decision)
            install = attrs.evolve(install, attribution=decision.attribution)
            delivered = decision.link_id
        if d.flow is Flow.IOS_LANDING:  # the open button's URL, resolved
            assert d.link is not None
            offered = InstallAttribution(link_key(d.app, d.link), Confidence.DETERMINISTIC,
                                         Method.LANDING_PAGE)
            install = install.with_upgrade(offered, now)
            delivered = delivered or offered.link_id
        elif d.flow is Flow.HANDOFF:
            assert d.user_id is not None
            winner, _ = pick_handoff(self.handoffs.pop(user_hash(SALT, d.user_id), []), now)
            if winner is not None:
                install = install.with_upgrade(InstallAttribution(
                    winner.link_id, Confidence.DETERMINISTIC, Method.AUTHENTICATED_HANDOFF), now)
                delivered = delivered or winner.link_id
        self.installs[d.install_id] = install
        return delivered

    def _consume(self, app: str, decision: Matched) -> None:
        if decision.consume_token is not None:
            token = self.tokens[decision.consume_token]
            self.tokens[token.token] = token.consumed()
        consumed = set(decision.consume_click_ids)
        hashes = set(decision.delete_net_hashes)
        if consumed or hashes:
            self.window[app] = [
                attrs.evolve(e, net_hash=None)
                if e.net_hash is not None and e.net_hash in hashes else e
                for e in self.window[app] if e.click_id not in consumed]
            self.window_at[app] = [e.at_ms for e in self.window[app]]


def run(population: Population) -> dict[str, Any]:
    """Replay ``population`` and return decisions per second and the scores."""
    world = World(population.seed)
    got: dict[int, str | None] = {}
    events = schedule(population.devices)
    started = time.perf_counter()
    for event in events:
        d = event.device
        if event.step is Step.TAP:
            world.tap(d, event.at_ms)
        elif event.step is Step.HANDOFF:
            world.create_handoff(d, event.at_ms)
        else:
            got[d.index] = world.launch(d, event.at_ms)
    wall = time.perf_counter() - started
    observations = [Observation(d.flow.value,
                                link_key(d.app, d.link) if d.link is not None else None,
                                got[d.index]) for d in population.devices]
    scores = score(observations, [f.value for f in Flow])
    attributed = sum(1 for v in got.values() if v is not None)
    return {
        "devices": len(population.devices),
        "events": len(events),
        "decisions": world.decisions,
        "decide_seconds": world.decide_s,
        "replay_seconds": wall,
        "decisions_per_s": world.decisions / world.decide_s if world.decide_s else None,
        "replay_launches_per_s": world.decisions / wall if wall else None,
        "attributed": attributed,
        "attributions_per_s": attributed / wall if wall else None,
        "mean_window": world.window_scanned / world.decisions if world.decisions else 0.0,
        "scores": [s.to_json() for s in scores],
    }
