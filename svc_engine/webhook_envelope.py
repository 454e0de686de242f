"""The JSON body of a webhook delivery (SPEC: Webhook event envelope).

``envelope`` builds ``{id, type, createdAt, projectId, env, data}``; times are
ISO 8601 UTC with millisecond precision and a ``Z`` suffix
(``2024-05-06T07:08:09.010Z``). ``click_data`` builds the ``data`` of a click
from the click table. Both return plain dicts ready for the JSON encoder; the
encoded bytes are what gets signed and sent.

Decisions where the spec is silent: ids are canonical lower-case UUID text;
a click's ``campaign`` and ``channel`` are typed "string" (not "string or
null" like ``country``), so a link without them sends ``""``; ``country`` is
upper-cased; ``referrerHost`` is reduced to a lower-case host name without
port (``referrer_host_of`` does that from a full Referer value).
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from svc_engine.errors import ValidationError

ENVELOPE_TYPES: tuple[str, ...] = ("click", "open", "install", "conversion", "test")
ENVS: tuple[str, ...] = ("test", "live")
PLATFORMS: tuple[str, ...] = ("ios", "android", "desktop")

_MAX_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
_COUNTRY = re.compile(r"[A-Za-z]{2}")
_CANONICAL_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""What ``str(uuid.UUID(...))`` prints: lower-case hex, hyphenated 8-4-4-4-12."""


def iso_utc_ms(ms: int) -> str:
    """``YYYY-MM-DDTHH:MM:SS.mmmZ`` for milliseconds since the epoch."""
    if not isinstance(ms, int) or isinstance(ms, bool) or not 0 <= ms <= _MAX_MS:
        raise ValidationError("time must be non-negative whole milliseconds", field="time")
    days, ms_of_day = divmod(ms, 86_400_000)
    year, month, day = _civil_from_days(days)
    seconds, millis = divmod(ms_of_day, 1000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    return f"{year:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """Proleptic Gregorian date of a day count since 1970-01-01 (H. Hinnant's algorithm)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def _uuid(value: object, field: str) -> str:
    if not isinstance(value, str) or _CANONICAL_UUID.fullmatch(value) is None:
        raise ValidationError(f"{field} must be a lower-case UUID", field=field)
    return value


def envelope(
    event_id: str,
    event_type: str,
    created_at_ms: int,
    project_id: str,
    env: str,
    data: dict[str, Any],
) -> dict[str, Any]:
    """The delivery body, keys in the spec's order."""
    if event_type not in ENVELOPE_TYPES:
        raise ValidationError(f"unknown event type {event_type!r}", field="type")
    if env not in ENVS:
        raise ValidationError("env must be test or live", field="env")
    if not isinstance(data, dict):
        raise ValidationError("data must be an object", field="data")
    return {
        "id": _uuid(event_id, "id"),
        "type": event_type,
        "createdAt": iso_utc_ms(created_at_ms),
        "projectId": _uuid(project_id, "projectId"),
        "env": env,
        "data": data,
    }


def click_data(
    *,
    link_id: str,
    url: str,
    domain: str,
    slug: str,
    campaign: str | None,
    channel: str | None,
    platform: str,
    country: str | None,
    referrer_host: str | None,
    clicked_at_ms: int,
) -> dict[str, Any]:
    """``data`` of a ``click`` event. Never carries an IP, user agent or full referrer."""
    if platform not in PLATFORMS:
        raise ValidationError("platform must be ios, android or desktop", field="platform")
    if country is not None and not _COUNTRY.fullmatch(country):
        raise ValidationError("country must be a two-letter code", field="country")
    if referrer_host is not None and referrer_host_of(referrer_host) != referrer_host:
        raise ValidationError("referrerHost must be a bare lower-case host", field="referrerHost")
    return {
        "linkId": _uuid(link_id, "linkId"),
        "url": url,
        "domain": domain,
        "slug": slug,
        "campaign": campaign or "",
        "channel": channel or "",
        "platform": platform,
        "country": country.upper() if country is not None else None,
        "referrerHost": referrer_host,
        "clickedAt": iso_utc_ms(clicked_at_ms),
    }


_HOST_NAME = re.compile(r"(?=.{1,253}\Z)([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?\.)*"
                        r"[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?")
"""A DNS host name: labels of 1-63 letters, digits, hyphens (not at an end) and
underscores, 253 characters at most."""


def referrer_host_of(referrer: str | None) -> str | None:
    """The lower-case host name of a Referer value (a URL or a bare host), or
    None: for no host, for anything that is not a DNS host name (a tap's
    Referer is the sender's to write: an unbounded or odd "host" would go into
    counter keys, which LMDB bounds, and into exports), and for an IP address
    (v4 or v6), which is kept from storage like the client's own (a page
    served from an address may be a person's device) and which a bare host
    could not carry back (``::1``)."""
    if not referrer:
        return None
    text = referrer.strip()
    if "//" not in text:
        if text.count(":") > 1:  # a bare IPv6 address, or nothing a host can be
            return None
        text = "//" + text
    try:
        host = urlsplit(text).hostname
    except ValueError:
        return None
    host = (host or "").removesuffix(".")  # the root's dot: the same host
    if not host or _HOST_NAME.fullmatch(host) is None:
        return None  # an IPv6 address never matches (its colons)
    if _ends_in_a_number(host.rpartition(".")[2]):
        return None  # an IPv4 address, as a browser reads it (0xcb.0.0x71.197 too)
    return host


def _ends_in_a_number(label: str) -> bool:
    """WHATWG URL's "ends in a number" of a host's last label: all digits,
    or ``0x`` and hex digits (or nothing). Such a host is an IPv4 address to
    every browser (``0xcb.0x0.0x71.0xc5``, ``3405803973``); no top-level
    domain is all digits (RFC 3696)."""
    if label.isdigit():
        return True
    return label[:2] in ("0x", "0X") and all(c in _HEX for c in label[2:])


_HEX = frozenset("0123456789abcdefABCDEF")
