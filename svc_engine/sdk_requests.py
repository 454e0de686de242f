"""Parsers for the SDK request bodies and the handoff creation body (sans-IO).

Every ``parse_*`` takes the decoded JSON body (whatever the JSON decoder gave)
and returns a frozen request record, or raises
:class:`~svc_engine.errors.ValidationError` whose ``field`` names the first bad
field (``installId``, ``events[3].name``) and whose message starts with it
(``"events[3].name: must be 1 to 100 characters"``).

Decisions where SPEC.md is silent:

- Unknown fields are ignored on the SDK endpoints (``/v1/sdk/...``), so that a
  newer SDK can add fields without breaking against an older service, except
  ``POST /v1/sdk/links`` (``svc_engine.link_input``): its fields are the link,
  so one the service does not know is refused (400 naming it) rather than
  dropped, which would make a link that does not do what the app asked.
  ``POST /v1/handoffs`` (server, secret key) rejects them, like
  ``PATCH /v1/deferred/settings``: a typo such as ``expiresIn`` must not give
  the silent 7-day default.
- JSON types are strict: ``true`` is not a number, ``1`` is not a boolean.
  ``null`` means the same as an absent optional field.
- ``installId`` is a UUID v4 in canonical 8-4-4-4-12 form; other ids
  (``linkId``, event ids) may be any UUID version. Hex digits may be upper or
  lower case; every id is returned in lower case.
- ``platform``: ``ios`` and ``android`` (compared case-insensitively); any
  other string becomes ``other``.
- Strings have caps: ``sdkVersion`` 1..64, ``osVersion`` up to 64,
  ``installReferrer`` up to 4096, ``url`` 1..2048 characters.
- ``occurredAt`` and other date-times: RFC 3339 (``T`` separator, seconds
  required, ``Z`` or ``+hh:mm`` offset, up to 9 fraction digits, truncated to
  milliseconds), see :func:`parse_timestamp_ms`. The events batch and its
  rules are in ``svc_engine.event_batch``.
"""

from __future__ import annotations

import datetime as dt
import re
import urllib.parse
from collections.abc import Mapping
from typing import Final

import attrs

from svc_engine.errors import ValidationError
from svc_engine.ids import is_uuid
from svc_engine.redirect import LANDING_PARAM, LANDING_VALUE

USER_ID_MAX: Final = 256
HANDOFF_MAX_SECONDS: Final = 7 * 24 * 3600
SDK_VERSION_MAX: Final = 64
OS_VERSION_MAX: Final = 64
REFERRER_MAX: Final = 4096
URL_MAX: Final = 2048

_TOKEN = re.compile(r"[A-Za-z0-9_-]{1,128}", re.A)
_RFC3339 = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))", re.A)
_FIRST_NUMBER = re.compile(r"\d+", re.A)
_EPOCH_ORDINAL = dt.date(1970, 1, 1).toordinal()


@attrs.frozen
class InitRequest:
    """``POST /v1/sdk/init``: the launch report."""

    install_id: str
    is_first_launch: bool
    sdk_version: str
    platform: str  # "ios", "android" or "other"
    os_version: str | None = None
    install_referrer: str | None = None

    @property
    def os_major(self) -> int | None:
        return os_major(self.os_version)

    @property
    def referrer_token(self) -> str | None:
        """The ``svc_token`` of an Android first launch's install referrer."""
        if self.platform != "android" or not self.is_first_launch:
            return None
        if self.install_referrer is None:
            return None
        return parse_install_referrer(self.install_referrer)


@attrs.frozen
class ResolveRequest:
    """``POST /v1/sdk/resolve``: a link that opened the app."""

    url: str
    install_id: str
    # ``platform`` as sent, normalised as the launch report's is: "ios",
    # "android" or "other"; None when not sent. Only a fallback: an install
    # the service knows keeps the platform of its launch report.
    platform: str | None = None

    @property
    def short_url(self) -> str | None:
        """The http(s) URL to look up: ``url`` itself, or the ``svc_link`` query
        parameter of a custom-scheme URL (SPEC "Delivery inside the app" 3).
        None when there is nothing to look up (the caller answers 404)."""
        parts = _split(self.url)
        if parts is None:
            return None
        if parts.scheme.lower() in ("http", "https"):
            return self.url
        for value in urllib.parse.parse_qs(parts.query).get("svc_link", []):
            inner = _split(value)
            if inner is not None and inner.scheme.lower() in ("http", "https") and inner.netloc:
                return value
        return None

    @property
    def from_landing_page(self) -> bool:
        """Opened from the 'Continue in app' page: a custom-scheme URL carrying
        ``svc_link`` (its button), or the short link marked ``svc_open=landing``
        (its button without a scheme, its app banner)."""
        parts = _split(self.url)
        if parts is None:
            return False
        if parts.scheme.lower() not in ("http", "https"):
            return self.short_url is not None
        return LANDING_VALUE in urllib.parse.parse_qs(parts.query).get(LANDING_PARAM, [])


@attrs.frozen
class HandoffCreateRequest:
    """``POST /v1/handoffs``: exactly one of ``link_id``, ``url``, ``svc_token``."""

    user_id: str  # trimmed
    link_id: str | None = None
    url: str | None = None
    svc_token: str | None = None
    expires_in_seconds: int | None = None


@attrs.frozen
class ClaimRequest:
    """``POST /v1/sdk/handoffs/claim``."""

    user_id: str  # trimmed
    install_id: str


# --- public parsers --------------------------------------------------------------------


def _platform(value: str) -> str:
    """A platform as the SDK names it, as stored: "ios", "android" or "other"
    (never the text itself, which could be anything, a user agent too)."""
    normalised = value.strip().lower()
    return normalised if normalised in ("ios", "android") else "other"


def parse_init(body: object) -> InitRequest:
    m = json_object(body)
    platform = m.get("platform")
    if not isinstance(platform, str):
        raise ValidationError("platform: must be a string", field="platform")
    return InitRequest(
        install_id=uuid4_field(m, "installId"),
        is_first_launch=_req_bool(m, "isFirstLaunch"),
        sdk_version=_req_str(m, "sdkVersion", "sdkVersion", 1, SDK_VERSION_MAX),
        platform=_platform(platform),
        os_version=_opt_str(m, "osVersion", "osVersion", OS_VERSION_MAX),
        install_referrer=_opt_str(m, "installReferrer", "installReferrer", REFERRER_MAX),
    )


def parse_resolve(body: object) -> ResolveRequest:
    m = json_object(body)
    url = _req_str(m, "url", "url", 1, URL_MAX)
    parts = _split(url)
    if parts is None or not parts.scheme:
        raise ValidationError("url: must be an absolute URL", field="url")
    platform = m.get("platform")
    if platform is not None and not isinstance(platform, str):
        raise ValidationError("platform: must be a string", field="platform")
    return ResolveRequest(url=url, install_id=uuid4_field(m, "installId"),
                          platform=_platform(platform) if platform is not None else None)


def parse_claim(body: object) -> ClaimRequest:
    m = json_object(body)
    return ClaimRequest(user_id=_user_id(m), install_id=uuid4_field(m, "installId"))


def parse_handoff_create(body: object, *, web_fallback_tokens: bool) -> HandoffCreateRequest:
    """Parse ``POST /v1/handoffs``; ``svcToken`` needs the ``webFallbackTokens`` setting."""
    m = json_object(body)
    known = ("linkId", "url", "svcToken", "userId", "expiresInSeconds")
    for key in m:
        if key not in known:
            raise ValidationError(f"{key}: unknown field; known fields: {', '.join(known)}",
                                  field=key)
    given = [k for k in ("linkId", "url", "svcToken") if m.get(k) is not None]
    if len(given) != 1:
        where = given[1] if len(given) > 1 else "linkId"
        raise ValidationError(f"{where}: give exactly one of linkId, url or svcToken",
                              field=where)
    link_id = _opt_uuid(m, "linkId", "linkId")
    url = _opt_str(m, "url", "url", URL_MAX)
    if url is not None:
        parts = _split(url)
        if parts is None or parts.scheme.lower() not in ("http", "https") or not parts.netloc:
            raise ValidationError("url: must be an http or https URL", field="url")
    token = _opt_str(m, "svcToken", "svcToken", 128)
    if token is not None:
        if not web_fallback_tokens:
            raise ValidationError("svcToken: needs the webFallbackTokens setting",
                                  field="svcToken")
        if not _TOKEN.fullmatch(token):
            raise ValidationError("svcToken: not a valid token", field="svcToken")
    expires = m.get("expiresInSeconds")
    if expires is not None:
        expires = check_expires_in_seconds(expires)
    return HandoffCreateRequest(user_id=_user_id(m), link_id=link_id, url=url,
                                svc_token=token, expires_in_seconds=expires)


def check_expires_in_seconds(value: object) -> int:
    """``expiresInSeconds``: a whole number from 1 to 7 days in seconds."""
    if isinstance(value, bool) or not isinstance(value, int) \
            or not 1 <= value <= HANDOFF_MAX_SECONDS:
        raise ValidationError(
            f"expiresInSeconds: must be a whole number from 1 to {HANDOFF_MAX_SECONDS}",
            field="expiresInSeconds")
    return value


def parse_install_referrer(raw: str) -> str | None:
    """The ``svc_token`` carried in a Play install referrer, or None.

    The referrer is a URL-encoded query string (``svc_token=abc&utm_source=x``);
    one extra level of percent-encoding (``svc_token%3Dabc%26...``) is undone.
    The first ``svc_token`` that looks like a token wins."""
    text = raw.strip().removeprefix("?")
    for candidate in (text, urllib.parse.unquote(text)):
        for value in urllib.parse.parse_qs(candidate).get("svc_token", []):
            if _TOKEN.fullmatch(value):
                return value
    return None


def os_major(os_version: str | None) -> int | None:
    """Major version from an OS version string: ``"17.4.1"`` and
    ``"Version 17.4 (Build 21E219)"`` give 17. None when there is none."""
    if os_version is None:
        return None
    found = _FIRST_NUMBER.search(os_version)
    if found is None or len(found.group()) > 3:
        return None
    major = int(found.group())
    return major if major > 0 else None


def parse_timestamp_ms(text: str) -> int | None:
    """RFC 3339 date-time to UTC milliseconds since the epoch (fraction
    truncated), or None when ``text`` is not one or is before 1970.

    Calendar arithmetic instead of building a ``datetime`` (this runs for every
    event of a batch); the rules are the same: a real calendar date, hours
    0-23, minutes and seconds 0-59 (no leap second), an offset under 24 hours."""
    found = _RFC3339.fullmatch(text)
    if found is None:
        return None
    y, mo, d, h, mi, s, frac, zulu, sign, oh, om = found.groups()
    hour, minute, second = int(h), int(mi), int(s)
    if hour > 23 or minute > 59 or second > 59:
        return None
    try:
        days = dt.date(int(y), int(mo), int(d)).toordinal() - _EPOCH_ORDINAL
    except ValueError:
        return None
    offset_s = 0
    if not zulu:
        offset_min = int(oh) * 60 + int(om)
        if offset_min >= 24 * 60:
            return None
        offset_s = -offset_min * 60 if sign == "-" else offset_min * 60
    micros = int(frac[:6].ljust(6, "0")) if frac else 0
    seconds = days * 86_400 + hour * 3600 + minute * 60 + second - offset_s
    ms = (seconds * 1_000_000 + micros) // 1000
    return ms if ms >= 0 else None


DART_WHITESPACE: Final = ("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004"
                          "\u2005\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f"
                          "\u205f\u3000\ufeff")
"""What Dart's ``String.trim`` removes (the SDK trims a user ID with it):
Unicode's White_Space and the byte order mark. Python's ``str.strip``
differs: it also removes U+001C to U+001F, and keeps U+FEFF."""


def trimmed_user_id(value: object, field: str = "userId") -> str:
    """A user ID, trimmed as the SDK trims it (:data:`DART_WHITESPACE`), 1 to
    256 characters after trimming, counted as the SDK counts them (Dart's
    ``String.length``: UTF-16 code units, so a character outside the Basic
    Multilingual Plane, an emoji say, counts two). A longer ID could be
    handed off but never claimed: the SDK refuses it before sending."""
    if not isinstance(value, str):
        raise ValidationError(f"{field}: must be a string", field=field)
    trimmed = value.strip(DART_WHITESPACE)
    if not 1 <= utf16_length(trimmed) <= USER_ID_MAX:
        raise ValidationError(f"{field}: must be 1 to {USER_ID_MAX} characters after trimming "
                              "(UTF-16 code units, as Dart counts)", field=field)
    return trimmed


def utf16_length(text: str) -> int:
    """``text``'s length as Dart counts it: UTF-16 code units."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


# --- pieces ----------------------------------------------------------------------------


def _split(url: str) -> urllib.parse.SplitResult | None:
    try:
        return urllib.parse.urlsplit(url)
    except ValueError:  # "Invalid IPv6 URL" and the like
        return None


def json_object(body: object) -> Mapping[str, object]:
    """The body as a JSON object, or a 400."""
    if not isinstance(body, dict):
        raise ValidationError("the request body must be a JSON object")
    return body


def _req_bool(m: Mapping[str, object], key: str) -> bool:
    value = m.get(key)
    if not isinstance(value, bool):
        raise ValidationError(f"{key}: must be true or false", field=key)
    return value


def _req_str(m: Mapping[str, object], key: str, field: str, lo: int, hi: int) -> str:
    value = m.get(key)
    if not isinstance(value, str):
        raise ValidationError(f"{field}: must be a string", field=field)
    if not lo <= len(value) <= hi:
        raise ValidationError(f"{field}: must be {lo} to {hi} characters", field=field)
    return value


def _opt_str(m: Mapping[str, object], key: str, field: str, hi: int) -> str | None:
    if m.get(key) is None:
        return None
    return _req_str(m, key, field, 0, hi)


def _opt_uuid(m: Mapping[str, object], key: str, field: str) -> str | None:
    value = m.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not is_uuid(value):
        raise ValidationError(f"{field}: must be a UUID", field=field)
    return value.lower()


def uuid4_field(m: Mapping[str, object], key: str) -> str:
    """``m[key]`` as a lower-case UUID v4, or a 400 naming ``key``."""
    value = m.get(key)
    if not isinstance(value, str) or not is_uuid(value, v4=True):
        raise ValidationError(f"{key}: must be a UUID v4", field=key)
    return value.lower()


def _user_id(m: Mapping[str, object]) -> str:
    return trimmed_user_id(m.get("userId"))
