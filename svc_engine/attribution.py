"""Deferred-link attribution: which tap, if any, a first launch came from.

Theory of operation
-------------------
The redirector leaves traces of taps: Android taps get a single-use
:class:`Token` in the store install referrer; iPhone taps of projects with
``probabilisticMatching`` on get a :class:`ClickWindowEntry` (iOS major
version, country, time and, with ``probabilisticIpMatching``, a keyed hash of
the network). A first launch (``POST /v1/sdk/init`` with ``isFirstLaunch``)
is tied to a trace by :func:`decide_first_launch`, which tries the flows in
this order and stops at the first match:

1. ``install_referrer`` (Android): the referrer's ``svc_token`` names a token
   that exists in the launch's mode, is unused and unexpired
   -> deterministic / ``install_referrer``; the token is consumed.
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

Every decision carries the :class:`FlowTrial` list of what was tried and why
it did or did not match: the dashboard debugger shows it.

Later deterministic evidence (the 'Continue in app' open button, a handoff
claim) upgrades an install through :func:`upgrade_install`: an unattributed
or probabilistic install takes the deterministic link; a deterministic one
keeps its first attribution. SPEC.md only asks for unattributed -> deterministic;
probabilistic is upgraded too because it is only a hint (SPEC "Probabilistic
matching" 4) and deterministic evidence about the same install is better.

Network hash: HMAC-SHA256 under a server secret of the full IPv4 address, or of
the /64 prefix of an IPv6 address. IPv6 hosts rotate the low 64 bits (privacy
addresses, RFC 8981) within hours, so the full address would rarely survive
from tap to first launch, while the /64 is the one subnet of a home or phone.
Hashes live at most :data:`NET_HASH_TTL_MS` (7 h); window entries live for the
project's window (:func:`window_retention_ms`), which is at most 6 h.
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs

from svc_engine.decode import opt_bytes, opt_str, req_bool, req_int, req_str
from svc_engine.handoffs import HANDOFF_TTL_MS, Handoff, handoff_expiry, pick_handoff, user_hash
from svc_engine.installs import Confidence, Install, InstallAttribution, Method, upgrade_install
from svc_engine.keys import Mode
from svc_engine.sdk_requests import InitRequest

__all__ = [  # handoff and install rules live in their own modules; one import site
    "HANDOFF_TTL_MS", "NET_HASH_TTL_MS", "TOKEN_TTL_MS", "Attribution", "ClickWindowEntry",
    "Confidence", "DeferredSettingsView", "Flow", "FlowTrial", "Handoff", "Install",
    "InstallAttribution", "LaunchFacts", "Matched", "Method", "Outcome", "Token",
    "TokenState", "Unattributed", "decide_first_launch", "handoff_expiry", "in_window",
    "net_hash", "pick_handoff", "token_state", "upgrade_install", "user_hash",
    "window_entry_stale", "window_retention_ms",
]

MINUTE_MS = 60_000
DAY_MS = 24 * 60 * MINUTE_MS
TOKEN_TTL_MS = 7 * DAY_MS
NET_HASH_TTL_MS = 7 * 60 * MINUTE_MS


class TokenState(enum.StrEnum):
    VALID = "valid"
    USED = "used"
    EXPIRED = "expired"
    MISSING = "missing"


class Flow(enum.StrEnum):
    INSTALL_REFERRER = "install_referrer"
    PROBABILISTIC_NETWORK = "probabilistic_network"
    PROBABILISTIC_COHORT = "probabilistic_cohort"


class Outcome(enum.StrEnum):
    MATCHED = "matched"
    SKIPPED = "skipped"  # the flow does not apply to this launch or project
    REJECTED = "rejected"  # the evidence exists but is not valid (token used, expired)
    NO_CANDIDATES = "no_candidates"
    CONFLICT = "conflict"  # candidates point to more than one link


class DeferredSettingsView(Protocol):
    """What attribution reads of the project settings (``DeferredSettings`` fits)."""

    @property
    def probabilistic_matching(self) -> bool: ...
    @property
    def probabilistic_ip_matching(self) -> bool: ...
    @property
    def probabilistic_window_minutes(self) -> int: ...


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
class ClickWindowEntry:
    """A recent iPhone tap kept for probabilistic matching."""

    VERSION = 1
    click_id: str
    link_id: str
    mode: Mode
    os_major: int
    country: str | None
    at_ms: int
    net_hash: bytes | None = None

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "click_id": self.click_id, "link_id": self.link_id,
                "mode": self.mode.value, "os_major": self.os_major, "country": self.country,
                "at_ms": self.at_ms, "net_hash": self.net_hash}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> ClickWindowEntry:
        return cls(click_id=req_str(m, "click_id"), link_id=req_str(m, "link_id"),
                   mode=Mode(req_str(m, "mode")), os_major=req_int(m, "os_major"),
                   country=opt_str(m, "country"), at_ms=req_int(m, "at_ms"),
                   net_hash=opt_bytes(m, "net_hash"))


@attrs.frozen
class Token:
    """A single-use ``svc_token`` (store install referrer, web fallback redirects)."""

    VERSION = 1
    token: str
    link_id: str
    mode: Mode
    issued_at_ms: int
    expires_at_ms: int
    used: bool = False

    @classmethod
    def issue(cls, random_bytes: bytes, *, link_id: str, mode: Mode, now_ms: int) -> Token:
        """A fresh token: 16 or more random bytes as unpadded base64url, 7-day life."""
        if len(random_bytes) < 16:
            raise ValueError("a token needs at least 16 random bytes")
        text = base64.urlsafe_b64encode(random_bytes[:32]).rstrip(b"=").decode("ascii")
        return cls(token=text, link_id=link_id, mode=mode, issued_at_ms=now_ms,
                   expires_at_ms=now_ms + TOKEN_TTL_MS)

    def consumed(self) -> Token:
        return attrs.evolve(self, used=True)

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "token": self.token, "link_id": self.link_id,
                "mode": self.mode.value, "issued_at_ms": self.issued_at_ms,
                "expires_at_ms": self.expires_at_ms, "used": self.used}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Token:
        return cls(token=req_str(m, "token"), link_id=req_str(m, "link_id"),
                   mode=Mode(req_str(m, "mode")), issued_at_ms=req_int(m, "issued_at_ms"),
                   expires_at_ms=req_int(m, "expires_at_ms"), used=req_bool(m, "used"))


def token_state(token: Token | None, now_ms: int) -> TokenState:
    """Used wins over expired; a token expires at ``expires_at_ms`` exactly."""
    if token is None:
        return TokenState.MISSING
    if token.used:
        return TokenState.USED
    if now_ms >= token.expires_at_ms:
        return TokenState.EXPIRED
    return TokenState.VALID


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


def decide_first_launch(launch: LaunchFacts, *, token: Token | None,
                        window: Sequence[ClickWindowEntry], settings: DeferredSettingsView,
                        net_hash: bytes | None, now_ms: int) -> Attribution:
    """Tie a first launch to a tap (see the module docstring for the rules).

    ``token`` is the stored token named by ``launch.referrer_token`` (None when
    unknown); ``window`` the project's click-window entries (any subset that
    holds the recent ones); ``net_hash`` the launch's network hash, or None."""
    trials: list[FlowTrial] = []
    match = _try_referrer(launch, token, now_ms, trials)
    if match is None:
        match = _try_network(launch, window, settings, net_hash, now_ms, trials)
    if match is None:
        match = _try_cohort(launch, window, settings, now_ms, trials)
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


def _probabilistic_skip(launch: LaunchFacts, settings: DeferredSettingsView) -> str | None:
    if not settings.probabilistic_matching:
        return "probabilisticMatching is off"
    if launch.platform != "ios":
        return "iOS only"
    if launch.os_major is None:
        return "the launch did not report its iOS version"
    return None


def in_window(entry: ClickWindowEntry, *, window_minutes: int, now_ms: int) -> bool:
    """Whether a tap is recent enough: ``now - window <= at <= now`` (both edges in)."""
    return now_ms - window_minutes * MINUTE_MS <= entry.at_ms <= now_ms


def _candidates(launch: LaunchFacts, window: Sequence[ClickWindowEntry],
                settings: DeferredSettingsView, now_ms: int) -> list[ClickWindowEntry]:
    minutes = settings.probabilistic_window_minutes
    return sorted((e for e in window
                   if e.mode == launch.mode and e.os_major == launch.os_major
                   and in_window(e, window_minutes=minutes, now_ms=now_ms)),
                  key=lambda e: (e.at_ms, e.click_id))


def _try_network(launch: LaunchFacts, window: Sequence[ClickWindowEntry],
                 settings: DeferredSettingsView, net_hash: bytes | None, now_ms: int,
                 trials: list[FlowTrial]) -> Matched | None:
    def note(outcome: Outcome, detail: str) -> None:
        trials.append(FlowTrial(Flow.PROBABILISTIC_NETWORK, outcome, detail))

    skip = _probabilistic_skip(launch, settings)
    if skip is None and not settings.probabilistic_ip_matching:
        skip = "probabilisticIpMatching is off"
    if skip is None and net_hash is None:
        skip = "no network hash for this launch"
    if skip is not None:
        note(Outcome.SKIPPED, skip)
        return None
    found = [e for e in _candidates(launch, window, settings, now_ms) if e.net_hash == net_hash]
    links = sorted({e.link_id for e in found})
    minutes = settings.probabilistic_window_minutes
    if not links:
        note(Outcome.NO_CANDIDATES, f"no tap from this network in the last {minutes} minutes")
        return None
    if len(links) > 1:
        note(Outcome.CONFLICT, f"{len(found)} taps from this network point to {len(links)} links")
        return None
    assert net_hash is not None
    note(Outcome.MATCHED, f"{len(found)} tap(s) from this network")
    return Matched(link_id=links[0], confidence=Confidence.PROBABILISTIC,
                   method=Method.PROBABILISTIC_MATCH,
                   consume_click_ids=tuple(e.click_id for e in found),
                   delete_net_hashes=(net_hash,))


def _try_cohort(launch: LaunchFacts, window: Sequence[ClickWindowEntry],
                settings: DeferredSettingsView, now_ms: int,
                trials: list[FlowTrial]) -> Matched | None:
    def note(outcome: Outcome, detail: str) -> None:
        trials.append(FlowTrial(Flow.PROBABILISTIC_COHORT, outcome, detail))

    skip = _probabilistic_skip(launch, settings)
    if skip is None and launch.country is None:
        skip = "the launch's country is unknown"
    if skip is not None:
        note(Outcome.SKIPPED, skip)
        return None
    found = [e for e in _candidates(launch, window, settings, now_ms)
             if e.country == launch.country]
    links = sorted({e.link_id for e in found})
    cohort = f"iOS {launch.os_major} in {launch.country}"
    minutes = settings.probabilistic_window_minutes
    if not links:
        note(Outcome.NO_CANDIDATES, f"no tap from {cohort} in the last {minutes} minutes")
        return None
    if len(links) > 1:
        note(Outcome.CONFLICT, f"{len(found)} taps from {cohort} point to {len(links)} links")
        return None
    note(Outcome.MATCHED, f"{len(found)} tap(s) from {cohort}; the oldest is consumed")
    return Matched(link_id=links[0], confidence=Confidence.PROBABILISTIC,
                   method=Method.PROBABILISTIC_MATCH, consume_click_ids=(found[0].click_id,))


def window_retention_ms(settings: DeferredSettingsView) -> int:
    """How long a click-window entry is worth keeping: the project's window while
    probabilistic matching is on (older taps can never match), else nothing."""
    if not settings.probabilistic_matching:
        return 0
    return settings.probabilistic_window_minutes * MINUTE_MS


def window_entry_stale(entry: ClickWindowEntry, settings: DeferredSettingsView,
                       now_ms: int) -> bool:
    """Whether the purge may drop ``entry`` (it can no longer match any launch)."""
    return entry.at_ms < now_ms - window_retention_ms(settings)


def net_hash(secret: bytes, ip: str) -> bytes | None:
    """Keyed hash of a network: the full IPv4 address, the /64 of an IPv6 one.

    An IPv4-mapped IPv6 address counts as IPv4. None when ``ip`` is not an
    address (the network step is then skipped, it is not an error)."""
    text = ip.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if isinstance(addr, ipaddress.IPv4Address):
        material = b"v4:" + addr.packed
    else:
        material = b"v6/64:" + addr.packed[:8]
    return hmac.new(secret, material, hashlib.sha256).digest()

