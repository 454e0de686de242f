"""Deferred-link attribution: which tap, if any, a first launch came from.

Theory of operation
-------------------
The redirector leaves traces of taps: Android taps get a single-use
:class:`Token` in the store install referrer; iPhone taps of projects with
``probabilisticMatching`` on get a :class:`ClickWindowEntry` (iOS major
version, country, time and, with ``probabilisticIpMatching``, a keyed hash of
the network; see ``svc_engine.click_window``). A first launch
(``POST /v1/sdk/init`` with ``isFirstLaunch``) is tied to a trace by
:func:`decide_first_launch`, which tries the flows in this order and stops at
the first match:

1. ``install_referrer`` (Android): the referrer's ``svc_token`` names a token
   that exists in the launch's mode, is unused and unexpired
   -> deterministic / ``install_referrer``; the token is consumed.
1b. ``landing_page``: the install's app was opened from the 'Continue in app'
   page (resolved) before its first launch was reported, at most
   ``LANDING_OPEN_TTL_MS`` earlier: the button's tap is often that very
   launch, and the SDK's two requests race -> deterministic /
   ``landing_page``, as the open would have upgraded the install had the
   launch come first. Tried, and listed in the trials, only when there was
   such an open (no trial is stored for the launches that had none).
2. ``probabilistic_network`` (iOS, both settings on): window taps with the same
   network hash and iOS major version. One link -> probabilistic /
   ``probabilistic_match``; those taps are consumed and the hash is deleted.
   The iOS version filter keeps other devices behind the same NAT out. Taps
   pointing to different links decide nothing here: the launch falls through
   to 3, which judges its own cohort (where those taps, same iOS version and
   normally same country, conflict again).
3. ``probabilistic_cohort`` (iOS, ``probabilisticMatching``): window taps
   with the same iOS major version and country. One distinct link ->
   probabilistic / ``probabilistic_match``; different links -> nothing.
   Only the oldest matching tap is consumed: one tap accounts for one install,
   so a campaign link tapped by many people of one cohort can attribute as
   many installs as it had taps.
4. Otherwise the install is unattributed. Not an error: a value.

The window is exact and inclusive: a tap exactly ``probabilisticWindowMinutes``
old matches, one millisecond older does not, and a tap later than ``now_ms``
(clock skew between processes) never matches. The launch's country or iOS
version being unknown skips the step that needs it.

Steps 2 and 3 judge each group of taps from its :class:`Candidates` summary.
:func:`decide_first_launch` builds the summaries from a list of window entries;
the store, which keeps the window indexed by network and by cohort, builds them
from its indexes and calls :func:`decide_from_candidates` (it asks
:func:`network_skip` and :func:`cohort_skip` whether a group is needed at all).

Every decision carries the :class:`FlowTrial` list of what was tried and why
it did or did not match: the dashboard debugger shows it.

Later deterministic evidence (the 'Continue in app' open button, a handoff
claim) upgrades an install through :func:`upgrade_install`: an unattributed
or probabilistic install takes the deterministic link; a deterministic one
keeps its first attribution. SPEC.md only asks for unattributed -> deterministic;
probabilistic is upgraded too because it is only a hint (SPEC "Probabilistic
matching" 4) and deterministic evidence about the same install is better.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence

import attrs

from svc_engine.click_window import (
    COHORT_TAPS_COUNTED,
    NET_HASH_TTL_MS,
    Candidates,
    ClickWindowEntry,
    DeferredSettingsView,
    in_window,
    net_hash,
    window_bounds,
    window_entry_stale,
    window_retention_ms,
)
from svc_engine.handoffs import HANDOFF_TTL_MS, Handoff, handoff_expiry, pick_handoff, user_hash
from svc_engine.installs import Confidence, Install, InstallAttribution, Method, upgrade_install
from svc_engine.keys import Mode
from svc_engine.sdk_requests import InitRequest
from svc_engine.tokens import TOKEN_TTL_MS, Token, TokenState, token_state

__all__ = [  # tokens, the window, handoffs and installs have their own modules; one import site
    "HANDOFF_TTL_MS", "NET_HASH_TTL_MS", "TOKEN_TTL_MS", "Attribution", "Candidates",
    "ClickWindowEntry", "Confidence", "DeferredSettingsView", "Flow", "FlowTrial", "Handoff",
    "Install", "InstallAttribution", "LaunchFacts", "Matched", "Method", "Outcome", "Token",
    "TokenState", "Unattributed", "cohort_skip", "decide_first_launch",
    "decide_from_candidates", "handoff_expiry", "in_window", "net_hash", "network_skip",
    "pick_handoff", "token_state", "upgrade_install", "user_hash", "window_bounds",
    "window_entry_stale", "window_retention_ms",
]


class Flow(enum.StrEnum):
    INSTALL_REFERRER = "install_referrer"
    LANDING_PAGE = "landing_page"
    PROBABILISTIC_NETWORK = "probabilistic_network"
    PROBABILISTIC_COHORT = "probabilistic_cohort"


class Outcome(enum.StrEnum):
    MATCHED = "matched"
    SKIPPED = "skipped"  # the flow does not apply to this launch or project
    REJECTED = "rejected"  # the evidence exists but is not valid (token used, expired)
    NO_CANDIDATES = "no_candidates"
    CONFLICT = "conflict"  # candidates point to more than one link


@attrs.frozen
class LaunchFacts:
    """What a first launch tells about itself, reduced to what matching uses."""

    mode: Mode
    platform: str  # "ios", "android" or "other"
    os_major: int | None = None
    country: str | None = None
    referrer_token: str | None = None

    @classmethod
    def from_init(cls, request: InitRequest, *, mode: Mode, country: str | None) -> LaunchFacts:
        return cls(mode=mode, platform=request.platform, os_major=request.os_major,
                   country=country, referrer_token=request.referrer_token)


@attrs.frozen
class FlowTrial:
    """One flow tried on a launch, for the debugger."""

    flow: Flow
    outcome: Outcome
    detail: str

    def to_json(self) -> dict[str, object]:
        return {"flow": self.flow.value, "outcome": self.outcome.value, "detail": self.detail}


@attrs.frozen
class Matched:
    """A first launch tied to a tap, and what to consume because of it."""

    link_id: str
    confidence: Confidence
    method: Method
    consume_token: str | None = None
    consume_click_ids: tuple[str, ...] = ()
    delete_net_hashes: tuple[bytes, ...] = ()
    trials: tuple[FlowTrial, ...] = ()

    @property
    def attribution(self) -> InstallAttribution:
        return InstallAttribution(self.link_id, self.confidence, self.method)


@attrs.frozen
class Unattributed:
    """No flow tied the launch to a tap; ``trials`` says why."""

    trials: tuple[FlowTrial, ...] = ()

    @property
    def reasons(self) -> tuple[str, ...]:
        return tuple(f"{t.flow.value}: {t.outcome.value}: {t.detail}" for t in self.trials)


Attribution = Matched | Unattributed

LANDING_OPEN_TTL_MS = 7 * 24 * 3_600_000
"""How long a 'Continue in app' open waits for its install's first launch: as
long as a token does (a first launch report that fails is retried on the next
launch, which may be days later)."""


@attrs.frozen
class LandingOpen:
    """A 'Continue in app' open of an install not known yet: its link, when."""

    link_id: str
    at_ms: int


def decide_first_launch(launch: LaunchFacts, *, token: Token | None,
                        window: Sequence[ClickWindowEntry], settings: DeferredSettingsView,
                        net_hashes: Sequence[bytes], now_ms: int,
                        landing: LandingOpen | None = None) -> Attribution:
    """Tie a first launch to a tap (see the module docstring for the rules).

    ``token`` is the stored token named by ``launch.referrer_token`` (None when
    unknown); ``window`` the project's click-window entries (any subset that
    holds the recent ones); ``net_hashes`` the launch's network hashes, one
    for each key a tap in the window may have been hashed with
    (svc_engine/network_keys.py), none when the launch has no address;
    ``landing`` the install's 'Continue in app' open before this launch."""
    minutes = settings.probabilistic_window_minutes
    recent = [e for e in window if e.mode == launch.mode and e.os_major == launch.os_major
              and in_window(e, window_minutes=minutes, now_ms=now_ms)]
    network = cohort = Candidates()
    if network_skip(launch, settings, net_hashes) is None:
        network = Candidates.of(e for e in recent if e.net_hash in net_hashes)
    if cohort_skip(launch, settings) is None:
        cohort = Candidates.of((e for e in recent if e.country == launch.country),
                               list_all=False, tap_cap=COHORT_TAPS_COUNTED)
    return decide_from_candidates(launch, token=token, network=network, cohort=cohort,
                                  settings=settings, net_hashes=net_hashes, now_ms=now_ms,
                                  landing=landing)


def decide_from_candidates(launch: LaunchFacts, *, token: Token | None, network: Candidates,
                           cohort: Candidates, settings: DeferredSettingsView,
                           net_hashes: Sequence[bytes], now_ms: int,
                           landing: LandingOpen | None = None) -> Attribution:
    """:func:`decide_first_launch` with the window already summarized.

    ``network``: the taps inside :func:`window_bounds` with the launch's mode,
    iOS major version and one of its network hashes, every one listed (ignored, and may be
    empty, when :func:`network_skip` gives a reason). ``cohort``: those with the
    launch's mode, iOS major version and country, at least the oldest listed
    (ignored when :func:`cohort_skip` gives a reason). ``landing``: the
    install's 'Continue in app' open made before this launch, if any."""
    trials: list[FlowTrial] = []
    match = _try_referrer(launch, token, now_ms, trials)
    if match is None and landing is not None:
        match = _try_landing(landing, now_ms, trials)
    if match is None:
        match = _try_network(launch, network, settings, net_hashes, trials)
    if match is None:
        match = _try_cohort(launch, cohort, settings, trials)
    if match is None:
        return Unattributed(trials=tuple(trials))
    return attrs.evolve(match, trials=tuple(trials))


def _try_referrer(launch: LaunchFacts, token: Token | None, now_ms: int,
                  trials: list[FlowTrial]) -> Matched | None:
    def note(outcome: Outcome, detail: str) -> None:
        trials.append(FlowTrial(Flow.INSTALL_REFERRER, outcome, detail))

    if launch.platform != "android":
        note(Outcome.SKIPPED, "Android only")
        return None
    if launch.referrer_token is None:
        note(Outcome.SKIPPED, "no svc_token in the install referrer")
        return None
    if token is not None and (token.token != launch.referrer_token or token.mode != launch.mode):
        token = None
    state = token_state(token, now_ms)
    if token is None or state is not TokenState.VALID:
        note(Outcome.REJECTED, f"token {state.value}")
        return None
    note(Outcome.MATCHED, "token valid")
    return Matched(link_id=token.link_id, confidence=Confidence.DETERMINISTIC,
                   method=Method.INSTALL_REFERRER, consume_token=token.token)


def _try_landing(landing: LandingOpen, now_ms: int, trials: list[FlowTrial]) -> Matched | None:
    """``landing`` was in the store when the launch's write ran, so it came
    first even when it is dated after ``now_ms``: the launch report read its
    clock, then waited its turn, and the button's resolve was stored in
    between (it was refused as "later", and the open, taken from the store,
    was lost)."""
    if now_ms - landing.at_ms > LANDING_OPEN_TTL_MS:
        trials.append(FlowTrial(Flow.LANDING_PAGE, Outcome.REJECTED,
                                "the 'Continue in app' open is more than 7 days old"))
        return None
    trials.append(FlowTrial(Flow.LANDING_PAGE, Outcome.MATCHED,
                            "opened from the 'Continue in app' page before this launch"))
    return Matched(link_id=landing.link_id, confidence=Confidence.DETERMINISTIC,
                   method=Method.LANDING_PAGE)


def _probabilistic_skip(launch: LaunchFacts, settings: DeferredSettingsView) -> str | None:
    if not settings.probabilistic_matching:
        return "probabilisticMatching is off"
    if launch.platform != "ios":
        return "iOS only"
    if launch.os_major is None:
        return "the launch did not report its iOS version"
    return None


def network_skip(launch: LaunchFacts, settings: DeferredSettingsView,
                 net_hashes: Sequence[bytes]) -> str | None:
    """Why the network step does not apply to this launch, or None when it does."""
    skip = _probabilistic_skip(launch, settings)
    if skip is None and not settings.probabilistic_ip_matching:
        skip = "probabilisticIpMatching is off"
    if skip is None and not net_hashes:
        skip = "no network hash for this launch"
    return skip


def cohort_skip(launch: LaunchFacts, settings: DeferredSettingsView) -> str | None:
    """Why the cohort step does not apply to this launch, or None when it does."""
    skip = _probabilistic_skip(launch, settings)
    if skip is None and launch.country is None:
        skip = "the launch's country is unknown"
    return skip


def _try_network(launch: LaunchFacts, found: Candidates, settings: DeferredSettingsView,
                 net_hashes: Sequence[bytes], trials: list[FlowTrial]) -> Matched | None:
    def note(outcome: Outcome, detail: str) -> None:
        trials.append(FlowTrial(Flow.PROBABILISTIC_NETWORK, outcome, detail))

    skip = network_skip(launch, settings, net_hashes)
    if skip is not None:
        note(Outcome.SKIPPED, skip)
        return None
    minutes = settings.probabilistic_window_minutes
    if found.links == 0:
        note(Outcome.NO_CANDIDATES, f"no tap from this network in the last {minutes} minutes")
        return None
    if found.links > 1:
        note(Outcome.CONFLICT, "taps from this network point to more than one link")
        return None
    if found.link_id is None or not net_hashes or len(found.click_ids) != found.taps:
        raise ValueError("a network group with one link names it and lists every tap")
    note(Outcome.MATCHED, f"{found.taps} tap(s) from this network")
    return Matched(link_id=found.link_id, confidence=Confidence.PROBABILISTIC,
                   method=Method.PROBABILISTIC_MATCH, consume_click_ids=found.click_ids,
                   delete_net_hashes=tuple(net_hashes))


def _try_cohort(launch: LaunchFacts, found: Candidates, settings: DeferredSettingsView,
                trials: list[FlowTrial]) -> Matched | None:
    def note(outcome: Outcome, detail: str) -> None:
        trials.append(FlowTrial(Flow.PROBABILISTIC_COHORT, outcome, detail))

    skip = cohort_skip(launch, settings)
    if skip is not None:
        note(Outcome.SKIPPED, skip)
        return None
    cohort = f"iOS {launch.os_major} in {launch.country}"
    minutes = settings.probabilistic_window_minutes
    if found.links == 0:
        note(Outcome.NO_CANDIDATES, f"no tap from {cohort} in the last {minutes} minutes")
        return None
    if found.links > 1:
        note(Outcome.CONFLICT, f"taps from {cohort} point to more than one link")
        return None
    if found.link_id is None or not found.click_ids:
        raise ValueError("a cohort group with one link names it and lists its oldest tap")
    counted = f"{found.taps} or more taps" if found.more else f"{found.taps} tap(s)"
    note(Outcome.MATCHED, f"{counted} from {cohort}; the oldest is consumed")
    return Matched(link_id=found.link_id, confidence=Confidence.PROBABILISTIC,
                   method=Method.PROBABILISTIC_MATCH, consume_click_ids=found.click_ids[:1])


def first_launch_again(link_id: str | None, method: str | None) -> Matched | Unattributed:
    """What a first launch's own retry is answered once its stored answer is
    gone (idempotency records are kept 24 hours; the SDK retries a failed
    first launch report on the next launch, however much later): the
    decision it was judged with, from the install's record of it
    (``link_id`` and ``method`` as stored, None when unattributed)."""
    if link_id is None or method is None:
        return Unattributed()
    how = Method(method)
    confidence = (Confidence.PROBABILISTIC if how is Method.PROBABILISTIC_MATCH
                  else Confidence.DETERMINISTIC)
    return Matched(link_id=link_id, confidence=confidence, method=how)
