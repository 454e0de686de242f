"""The probabilistic click window: recent iPhone taps kept for matching.

Theory of operation
-------------------
With ``probabilisticMatching`` on, each iPhone tap leaves a
:class:`ClickWindowEntry`: iOS major version, country, tap time and, with
``probabilisticIpMatching``, a keyed hash of the network (:func:`net_hash`).
A first launch looks at the taps of the last ``probabilisticWindowMinutes``
(:func:`window_bounds`, both edges in) in two groups:

- the network group: taps with the launch's mode, iOS major version and
  network hash;
- the cohort group: taps with the launch's mode, iOS major version and country.

Each group reaches the decision (``svc_engine.attribution``) as
:class:`Candidates`: how many distinct links its taps point to, up to two
(two or more is a conflict, whatever the rest), and with exactly one link,
that link, its taps counted and its click IDs oldest first (tap time, then
click ID). A group can be summarized from a list of entries
(:meth:`Candidates.of`) or by the store straight from its indexes, without
reading the rest of the window: the summary is all the decision needs, so a
launch costs at most its network group and a bounded part of its cohort
group (:data:`COHORT_TAPS_COUNTED`), not the window, and not a crowded
cohort.

Entries live for the project's window (:func:`window_retention_ms`, at most
6 h); a network hash goes with its entry, or earlier when a launch matched it,
so a hash never lives past :data:`NET_HASH_TTL_MS` (7 h).

Network hash: HMAC-SHA256 under a server secret of the full IPv4 address, or of
the /64 prefix of an IPv6 address. IPv6 hosts rotate the low 64 bits (privacy
addresses, RFC 8981) within hours, so the full address would rarely survive
from tap to first launch, while the /64 is the one subnet of a home or phone.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

import attrs

from svc_engine.decode import opt_bytes, opt_str, req_int, req_str
from svc_engine.keys import Mode

MINUTE_MS = 60_000
NET_HASH_TTL_MS = 7 * 60 * MINUTE_MS


class DeferredSettingsView(Protocol):
    """What attribution reads of the project settings (``DeferredSettings`` fits)."""

    @property
    def probabilistic_matching(self) -> bool: ...
    @property
    def probabilistic_ip_matching(self) -> bool: ...
    @property
    def probabilistic_window_minutes(self) -> int: ...


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


COHORT_TAPS_COUNTED = 100
"""How many taps of a cohort's one link a launch counts (for the debugger's
words) before it stops: a crowded cohort costs a launch no more than this."""


@attrs.frozen
class Candidates:
    """One group of window taps a launch may match, summarized.

    ``links`` counts the distinct links the taps point to, up to 2: two means
    two or more, a conflict, and the count stops there, so a crowded group
    costs a launch no more than a quiet one. With exactly one link,
    ``link_id`` names it, ``taps`` counts its taps (up to ``tap_cap`` when one
    is given; ``more``: there are more than that) and ``click_ids`` lists them
    oldest first (tap time, then click ID): every tap for the network group (a
    network match consumes them all), the oldest for the cohort group (a
    cohort match consumes only the oldest). With none or two, ``taps`` is 0
    and nothing is listed: the decision needs nothing more."""

    taps: int = 0
    links: int = 0
    link_id: str | None = None
    click_ids: tuple[str, ...] = ()
    more: bool = False

    @classmethod
    def of(cls, entries: Iterable[ClickWindowEntry], *, list_all: bool = True,
           tap_cap: int | None = None) -> Candidates:
        """The summary of ``entries`` (already filtered to one group): every tap
        listed, or only the oldest (``list_all=False``); taps counted up to
        ``tap_cap``."""
        found = sorted(entries, key=lambda e: (e.at_ms, e.click_id))
        links = {e.link_id for e in found}
        if len(links) != 1:
            return cls(links=min(len(links), 2))
        ids = tuple(e.click_id for e in found)
        taps = len(found) if tap_cap is None else min(len(found), tap_cap)
        return cls(taps=taps, links=1, link_id=found[0].link_id,
                   click_ids=ids if list_all else ids[:1], more=taps < len(found))


def window_bounds(window_minutes: int, now_ms: int) -> tuple[int, int]:
    """The tap times a launch at ``now_ms`` looks at: ``(first, last)``, both in.

    A tap exactly ``window_minutes`` old matches, one millisecond older does
    not, and a tap later than ``now_ms`` (clock skew) never does."""
    return now_ms - window_minutes * MINUTE_MS, now_ms


def in_window(entry: ClickWindowEntry, *, window_minutes: int, now_ms: int) -> bool:
    """Whether a tap is recent enough: ``now - window <= at <= now`` (both edges in)."""
    first, last = window_bounds(window_minutes, now_ms)
    return first <= entry.at_ms <= last


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


_OCTET = r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])"
# Exactly what ipaddress.IPv4Address accepts: four decimal octets, no leading zero.
_IPV4 = re.compile(r"\.".join([_OCTET] * 4))


def net_hash(secret: bytes, ip: str) -> bytes | None:
    """Keyed hash of a network: the full IPv4 address, the /64 of an IPv6 one.

    An IPv4-mapped IPv6 address counts as IPv4. None when ``ip`` is not an
    address (the network step is then skipped, it is not an error)."""
    hashes = net_hashes((secret,), ip)
    return hashes[0] if hashes else None


def net_hashes(keys: Sequence[bytes], ip: str) -> tuple[bytes, ...]:
    """:func:`net_hash` of ``ip`` under each of ``keys`` (a launch's: its
    epoch's key and the one before's, svc_engine/network_keys.py); empty
    when ``ip`` is not an address."""
    material = network_of(ip.strip())
    if material is None:
        return ()
    return tuple(hmac.new(key, material, hashlib.sha256).digest() for key in keys)


def network_of(text: str) -> bytes | None:
    """The network an address is of, as bytes: ``v4:`` and the IPv4 address
    (an IPv4-mapped IPv6 one too), or ``v6/64:`` and an IPv6 address's /64;
    None when ``text`` is not an address. What the network hash hashes and
    the per-client limits count by (svc_engine/ratelimit.py ``client_key``)."""
    quad = _IPV4.fullmatch(text)  # the usual case, parsed in C (ipaddress takes ~2 µs more)
    if quad is not None:
        return b"v4:" + bytes(map(int, quad.groups()))
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if isinstance(addr, ipaddress.IPv4Address):
        return b"v4:" + addr.packed
    return b"v6/64:" + addr.packed[:8]
