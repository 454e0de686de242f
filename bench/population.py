"""A seeded simulated population of devices for the attribution benchmark.

Each device follows one flow and its ground truth is known: the link it
tapped (an index into its app's links) or None for an organic install. Two
apps take part, because one project has one set of deferred settings:

- ``main``: ``probabilisticMatching`` and ``probabilisticIpMatching`` on, iOS
  and Android;
- ``landing``: ``iosLandingPage`` on (the 'Continue in app' page), iOS.

Flows (``Flow``) and how the population is built so each tests what it names:

- ``android_referrer``: Android tap (a token in the Play install referrer),
  first launch with that referrer.
- ``ios_landing``: iPhone tap on the landing app shows the page; the app's
  first launch, then ``resolve`` of the page's open button URL.
- ``ios_cohort``: campaign groups of 1-3 iPhones in one cohort (iOS major,
  country) nobody else taps in, all tapping the same link; each launches from
  a different address than it tapped from (cellular, then Wi-Fi), so only the
  cohort can tie it.
- ``ios_network``: iPhones that launch from the address they tapped from, in
  crowded cohorts of 2-4 whose taps point to different links, so only the
  network hash can tie them.
- ``cohort_conflict``: groups of 2-3 iPhones in one cohort tapping different
  links, launching from new addresses: the cohort conflicts and, by design,
  the service abstains.
- ``handoff``: the integrator's server binds a link to a signed-in user
  (``POST /v1/handoffs``); the user installs on Android (no tap trace), and
  the app claims after its first launch.
- ``organic``: installs nobody tapped for, Android without a referrer or
  iPhones in a cohort with no taps: they must stay unattributed.
- ``organic_shared_cohort``: organic iPhones that launch in the cohort of a
  campaign group: cohort matching cannot tell them from the group's tappers,
  so they may take a tap (a false attribution) and leave a tapper without one.
  This is the known price of cohort matching, measured rather than hidden.

Every address is unique (no two devices share a network) except where a flow
says otherwise. Times are virtual milliseconds from ``T0``: taps spread over
``TAP_SPAN_MS``, launches 2-30 minutes after the tap, all inside the default
120-minute window. ``schedule`` orders taps, handoff creations and launches
by time; a driver replays them in that order.
"""

from __future__ import annotations

import enum
import itertools
import random
import uuid
from collections.abc import Mapping, Sequence

import attrs

T0_MS = 1_790_000_000_000
MINUTE_MS = 60_000
TAP_SPAN_MS = 60 * MINUTE_MS
LAUNCH_DELAY_MS = (2 * MINUTE_MS, 30 * MINUTE_MS)
IOS_MAJORS = tuple(range(15, 27))
ANDROID_MAJORS = tuple(range(10, 16))
MAIN, LANDING = "main", "landing"


class Flow(enum.StrEnum):
    ANDROID_REFERRER = "android_referrer"
    IOS_LANDING = "ios_landing"
    IOS_COHORT = "ios_cohort"
    IOS_NETWORK = "ios_network"
    COHORT_CONFLICT = "cohort_conflict"
    HANDOFF = "handoff"
    ORGANIC = "organic"
    ORGANIC_SHARED_COHORT = "organic_shared_cohort"


DEFAULT_MIX: Mapping[Flow, float] = {
    Flow.ANDROID_REFERRER: 0.25, Flow.IOS_LANDING: 0.10, Flow.IOS_COHORT: 0.15,
    Flow.IOS_NETWORK: 0.12, Flow.COHORT_CONFLICT: 0.10, Flow.HANDOFF: 0.08,
    Flow.ORGANIC: 0.15, Flow.ORGANIC_SHARED_COHORT: 0.05,
}


@attrs.frozen
class Device:
    index: int
    flow: Flow
    app: str
    platform: str  # "ios" or "android"
    os_major: int
    install_id: str
    launch_at_ms: int
    launch_ip: str
    launch_country: str | None
    link: int | None = None  # ground truth: the app's link index the device tapped
    tap_at_ms: int | None = None  # a tap (GET /<slug>) or, for handoffs, the handoff creation
    tap_ip: str | None = None
    tap_country: str | None = None
    user_id: str | None = None

    @property
    def taps(self) -> bool:
        return self.tap_at_ms is not None and self.flow is not Flow.HANDOFF

    @property
    def os_version(self) -> str:
        return f"{self.os_major}.1"


class Step(enum.IntEnum):
    """Event kinds; at the same instant a tap or handoff comes before a launch."""

    TAP = 0
    HANDOFF = 1
    LAUNCH = 2


@attrs.frozen
class Event:
    at_ms: int
    step: Step
    device: Device


@attrs.frozen
class Population:
    seed: int
    devices: tuple[Device, ...]
    links: Mapping[str, int]  # app -> how many links it has

    def of_flow(self, flow: Flow) -> list[Device]:
        return [d for d in self.devices if d.flow is flow]


def flow_counts(n: int, mix: Mapping[Flow, float]) -> dict[Flow, int]:
    """How many of ``n`` devices follow each flow: largest remainders, summing to ``n``."""
    total = sum(mix.values())
    if n < 0 or total <= 0 or any(w < 0 for w in mix.values()):
        raise ValueError("n must be >= 0 and the mix weights non-negative with a positive sum")
    exact = {f: n * w / total for f, w in mix.items()}
    counts = {f: int(x) for f, x in exact.items()}
    order = sorted(mix, key=lambda f: (-(exact[f] - counts[f]), list(mix).index(f)))
    for f in order[: n - sum(counts.values())]:
        counts[f] += 1
    return counts


def group_sizes(total: int, low: int, high: int, rng: random.Random) -> list[int]:
    """Split ``total`` into groups of ``low``..``high``. A remainder below ``low``
    joins the previous group (which may then exceed ``high``); only a ``total``
    below ``low`` gives a smaller group."""
    sizes: list[int] = []
    while total > 0:
        size = min(total, rng.randint(low, high))
        if size < low and sizes:
            sizes[-1] += size
        else:
            sizes.append(size)
        total -= size
    return sizes


def _countries() -> list[str]:
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    return [a + b for a in letters for b in letters if a + b not in ("XX", "ZZ")]


class _Builder:
    def __init__(self, seed: int, links: Mapping[str, int]) -> None:
        self.rng = random.Random(seed)
        self.links = links
        cohorts = [(c, m) for c in _countries() for m in IOS_MAJORS]
        self.rng.shuffle(cohorts)
        self._cohorts = iter(cohorts)
        self._ips = itertools.count(1)
        self.devices: list[Device] = []
        self.campaigns: list[tuple[tuple[str, int], int, int]] = []  # cohort, first, last tap

    def cohort(self) -> tuple[str, int]:
        try:
            return next(self._cohorts)
        except StopIteration:
            raise ValueError("population too large: no exclusive cohorts left") from None

    def ip(self) -> str:
        i = next(self._ips)
        if i >= 1 << 24:
            raise ValueError("population too large: out of addresses")
        return f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"

    def uuid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def tap_time(self) -> int:
        return T0_MS + self.rng.randrange(TAP_SPAN_MS)

    def later(self, at: int) -> int:
        return at + self.rng.randrange(*LAUNCH_DELAY_MS)

    def link(self, app: str) -> int:
        return self.rng.randrange(self.links[app])

    def distinct_links(self, app: str, k: int) -> list[int]:
        return self.rng.sample(range(self.links[app]), k)

    def country(self) -> str:
        return self.rng.choice(("SE", "NO", "FI", "DK", "DE", "FR", "US", "GB"))

    def add(self, flow: Flow, **fields: object) -> None:
        self.devices.append(Device(index=len(self.devices), flow=flow,
                                   install_id=self.uuid(), **fields))  # type: ignore[arg-type]

    def ios_tapper(self, flow: Flow, cohort: tuple[str, int], link: int, *,
                   same_network: bool) -> None:
        country, major = cohort
        tap = self.tap_time()
        tap_ip = self.ip()
        self.add(flow, app=MAIN, platform="ios", os_major=major, link=link, tap_at_ms=tap,
                 tap_ip=tap_ip, tap_country=country, launch_at_ms=self.later(tap),
                 launch_ip=tap_ip if same_network else self.ip(), launch_country=country)


def build(n: int, *, seed: int = 20261122, links: Mapping[str, int] | None = None,
          mix: Mapping[Flow, float] = DEFAULT_MIX) -> Population:
    """``n`` devices following ``mix``, the same for the same arguments."""
    links = dict(links or {MAIN: 200, LANDING: 50})
    if links.get(MAIN, 0) < 4 or links.get(LANDING, 0) < 1:
        raise ValueError("the main app needs at least 4 links and the landing app 1")
    b = _Builder(seed, links)
    counts = flow_counts(n, mix)
    for _ in range(counts.get(Flow.ANDROID_REFERRER, 0)):
        tap = b.tap_time()
        b.add(Flow.ANDROID_REFERRER, app=MAIN, platform="android",
              os_major=b.rng.choice(ANDROID_MAJORS), link=b.link(MAIN), tap_at_ms=tap,
              tap_ip=b.ip(), tap_country=b.country(), launch_at_ms=b.later(tap),
              launch_ip=b.ip(), launch_country=b.country())
    for _ in range(counts.get(Flow.IOS_LANDING, 0)):
        tap = b.tap_time()
        country = b.country()
        b.add(Flow.IOS_LANDING, app=LANDING, platform="ios", os_major=b.rng.choice(IOS_MAJORS),
              link=b.link(LANDING), tap_at_ms=tap, tap_ip=b.ip(), tap_country=country,
              launch_at_ms=b.later(tap), launch_ip=b.ip(), launch_country=country)
    for size in group_sizes(counts.get(Flow.IOS_COHORT, 0), 1, 3, b.rng):
        cohort, link = b.cohort(), b.link(MAIN)
        first = len(b.devices)
        for _ in range(size):
            b.ios_tapper(Flow.IOS_COHORT, cohort, link, same_network=False)
        taps = [d.tap_at_ms or 0 for d in b.devices[first:]]
        launches = [d.launch_at_ms for d in b.devices[first:]]
        b.campaigns.append((cohort, min(taps), max(launches)))
    for size in group_sizes(counts.get(Flow.IOS_NETWORK, 0), 2, 4, b.rng):
        cohort = b.cohort()
        for link in b.distinct_links(MAIN, size):
            b.ios_tapper(Flow.IOS_NETWORK, cohort, link, same_network=True)
    for size in group_sizes(counts.get(Flow.COHORT_CONFLICT, 0), 2, 3, b.rng):
        cohort = b.cohort()
        for link in b.distinct_links(MAIN, max(size, 2))[:size]:
            b.ios_tapper(Flow.COHORT_CONFLICT, cohort, link, same_network=False)
    for _ in range(counts.get(Flow.HANDOFF, 0)):
        created = b.tap_time()
        b.add(Flow.HANDOFF, app=MAIN, platform="android", os_major=b.rng.choice(ANDROID_MAJORS),
              link=b.link(MAIN), tap_at_ms=created, user_id=b.uuid(),
              launch_at_ms=b.later(created), launch_ip=b.ip(), launch_country=b.country())
    for i in range(counts.get(Flow.ORGANIC, 0)):
        launch = T0_MS + b.rng.randrange(TAP_SPAN_MS + LAUNCH_DELAY_MS[1])
        if i % 2 == 0:
            b.add(Flow.ORGANIC, app=MAIN, platform="android",
                  os_major=b.rng.choice(ANDROID_MAJORS), launch_at_ms=launch,
                  launch_ip=b.ip(), launch_country=b.country())
        else:
            country, major = b.cohort()
            b.add(Flow.ORGANIC, app=MAIN, platform="ios", os_major=major, launch_at_ms=launch,
                  launch_ip=b.ip(), launch_country=country)
    shared = counts.get(Flow.ORGANIC_SHARED_COHORT, 0)
    if shared and not b.campaigns:
        raise ValueError("organic_shared_cohort needs ios_cohort campaign groups")
    for _ in range(shared):
        (country, major), first_tap, last_launch = b.rng.choice(b.campaigns)
        b.add(Flow.ORGANIC_SHARED_COHORT, app=MAIN, platform="ios", os_major=major,
              launch_at_ms=b.rng.randrange(first_tap + 1, last_launch + 2),
              launch_ip=b.ip(), launch_country=country)
    return Population(seed=seed, devices=tuple(b.devices), links=links)


def schedule(devices: Sequence[Device]) -> list[Event]:
    """Every tap, handoff creation and launch in time order (ties: tap, handoff, launch,
    then device index), so a device's launch always follows its own tap."""
    events = []
    for d in devices:
        if d.tap_at_ms is not None:
            step = Step.HANDOFF if d.flow is Flow.HANDOFF else Step.TAP
            events.append(Event(d.tap_at_ms, step, d))
        events.append(Event(d.launch_at_ms, Step.LAUNCH, d))
    events.sort(key=lambda e: (e.at_ms, e.step, e.device.index))
    return events
