"""A recorded tap: everything the service keeps of a redirect.

Only these fields, never an IP address, a full user agent or a full referrer
(SPEC.md rule 4; DESIGN.md "Privacy is structural"): the web layer reduces the
request to ``ClickFacts`` before anything is written or logged.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import opt_int, opt_str, req_int, req_str
from svc_engine.keys import Mode

_COUNTRY = re.compile(r"[A-Z]{2}", re.A)


@attrs.frozen
class ClickFacts:
    """What a request is reduced to before anything is stored."""

    platform: str  # ios, android or desktop
    os_major: int | None
    is_bot: bool
    country: str | None
    referrer_host: str | None
    net_hash: bytes | None = None  # keyed HMAC of the network; only for iOS window taps


def clean_country(value: str | None) -> str | None:
    """A two-letter country code from a trusted header, or None ("XX", "T1" and
    other non-country markers of proxies become None, and so do "EU" and "AP",
    which GeoIP databases give for a continent: not a country to count or to
    match a cohort on)."""
    if not value:
        return None
    v = value.strip().upper()
    if not _COUNTRY.fullmatch(v) or v in _NOT_COUNTRIES:
        return None
    return v


_NOT_COUNTRIES = frozenset(("XX", "ZZ", "EU", "AP"))


@attrs.frozen
class Click:
    VERSION = 1
    id: str
    link_id: str
    project_id: str
    mode: Mode
    platform: str
    os_major: int | None
    country: str | None
    referrer_host: str | None
    at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "link_id": self.link_id,
                "project_id": self.project_id, "mode": self.mode.value,
                "platform": self.platform, "os_major": self.os_major,
                "country": self.country, "referrer_host": self.referrer_host,
                "at_ms": self.at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Click:
        return cls(id=req_str(m, "id"), link_id=req_str(m, "link_id"),
                   project_id=req_str(m, "project_id"), mode=Mode(req_str(m, "mode")),
                   platform=req_str(m, "platform"), os_major=opt_int(m, "os_major"),
                   country=opt_str(m, "country"), referrer_host=opt_str(m, "referrer_host"),
                   at_ms=req_int(m, "at_ms"))
