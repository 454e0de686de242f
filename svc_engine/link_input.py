"""Validation of link request bodies, destination URLs, custom slugs and domains.

Every function takes a decoded JSON value and either returns a clean value or
raises from the error tree: ``ValidationError`` (400 ``validation_error``, naming
the field), ``DestinationBlocked`` (400, a fallback or image URL that is not an
absolute http(s) URL, or that hides a host behind ``user@``) or ``InvalidDomain``
(400, a malformed domain name).

Limits (SPEC.md leaves them open): ``path`` 1 to 2048 characters starting with
``/``; ``title`` and ``ogTitle`` 200; ``campaign`` and ``channel`` 100;
``ogDescription`` 1000; up to 20 ``tags`` of 1 to 50 characters (duplicates
dropped, order kept); up to 50 ``params`` with keys of 1 to 100 characters and
values that are strings (up to 1000 characters), finite numbers (integers within
64 bits) or booleans; URLs up to 2048 characters. Text is trimmed, tabs and line
breaks fold into spaces, an empty optional text is the same as null, other
control characters are refused. ``expiresAt`` is an ISO 8601 date-time with an
offset (``Z`` or ``+02:00``), later than now; null means never.
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import attrs

from svc_engine.errors import DestinationBlocked, InvalidDomain, ValidationError
from svc_engine.hosts import ascii_host, distinct

ParamValue = str | int | float | bool

PATH_MAX = 2048
URL_MAX = 2048
PARAMS_MAX = 50
PARAM_KEY_MAX = 100
PARAM_STR_MAX = 1000
TAGS_MAX = 20
TAG_MAX = 50
_INT64 = 2**63
FILTER_MAX = 200
"""Characters of a links listing's filter (``campaign``, ``channel``, ``tag``,
``q``): a search looks for each word of ``q`` in every record it reads, so
its work grows with the length; 200 is a title's."""
DOMAIN_TEXT_MAX = 1000
"""Characters of a domain as sent, before IDNA: its ASCII form is at most 253,
and a Unicode form is not four times longer but for characters IDNA drops."""

_TEXT_FIELDS: dict[str, tuple[str, int]] = {
    "title": ("title", 200),
    "campaign": ("campaign", 100),
    "channel": ("channel", 100),
    "ogTitle": ("og_title", 200),
    "ogDescription": ("og_description", 1000),
}
_URL_FIELDS: dict[str, str] = {
    "iosFallbackUrl": "ios_fallback_url",
    "androidFallbackUrl": "android_fallback_url",
    "webFallbackUrl": "web_fallback_url",
    "ogImageUrl": "og_image_url",
}
_COMMON_FIELDS = frozenset({"path", "params", "tags", "expiresAt", *_TEXT_FIELDS, *_URL_FIELDS})
_CUSTOM_FIELDS = frozenset({"slug", "domain"})
_READ_ONLY = frozenset({"id", "url", "createdAt", "mode"})

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FOLDABLE = re.compile(r"[\t\r\n]+")

# -- slugs -------------------------------------------------------------------------

CUSTOM_SLUG_MAX = 64
_CUSTOM_SLUG_RE = re.compile(r"[A-Za-z0-9_-]{1,64}")

RESERVED_SLUGS: frozenset[str] = frozenset({
    "v1", "api", "dashboard", "login", "logout", "signup", "signin", "auth", "account",
    "settings", "admin", "static", "assets", "healthz", "readyz", "livez", "metrics",
    "status", "docs", "favicon.ico", "robots.txt", "sitemap.xml", ".well-known",
    "apple-app-site-association",
})
"""Top-level paths a link may never take (compared case-insensitively)."""


def is_reserved_slug(slug: str) -> bool:
    return slug.lower() in RESERVED_SLUGS


def is_valid_custom_slug(slug: str) -> bool:
    return _CUSTOM_SLUG_RE.fullmatch(slug) is not None and not is_reserved_slug(slug)


# -- times -------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
LAST_MS = 253_402_300_799_999
"""9999-12-31T23:59:59.999Z, the last time a record can be written back in
ISO 8601 (``iso_utc``); a time in year 9999 with a negative offset is later."""


def parse_iso_ms(text: str) -> int | None:
    """ISO 8601 date-time with a zone offset (or ``Z``) to epoch milliseconds.

    None for anything else, including a time without an offset: a local time is
    ambiguous, and guessing UTC would silently shift the expiry. None too for a
    time before 1970 or after :data:`LAST_MS` in UTC.
    """
    try:
        dt = datetime.fromisoformat(text)
    except ValueError:
        return None
    if dt.utcoffset() is None:
        return None
    delta = dt - _EPOCH
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return ms if 0 <= ms <= LAST_MS else None


# -- URLs and domains --------------------------------------------------------------

_ASCII_PRINTABLE = "".join(chr(c) for c in range(0x21, 0x7F))
_HOST_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)*")
_LABEL_RE = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def check_destination_url(value: object, *, field: str) -> str:
    """An absolute http(s) URL a browser may be sent to, in ASCII form.

    Non-ASCII hosts are IDNA-encoded and other non-ASCII characters
    percent-encoded, so the result fits a ``Location`` header.
    """
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string URL", field=field)
    url = value.strip()
    if not url or len(url) > URL_MAX:
        raise ValidationError(f"{field} must be 1 to {URL_MAX} characters", field=field)
    if _CONTROL.search(url) or " " in url or "\\" in url:
        raise ValidationError(
            f"{field} must not contain spaces, backslashes or control characters", field=field
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise ValidationError(f"{field} is not a valid URL", field=field) from exc
    if parts.scheme.lower() not in ("http", "https"):
        raise DestinationBlocked(f"{field} must be an absolute http or https URL", field=field)
    if "@" in parts.netloc:
        raise DestinationBlocked(f"{field} must not carry a user name or password", field=field)
    host = parts.hostname or ""
    if not host:
        raise ValidationError(f"{field} must name a host", field=field)
    if parts.netloc.startswith("[") or ":" in host:
        # Brackets hold an IPv6 address, plain: not a "future" literal
        # (``[v1.x]``) nor a zone (``%eth0``), which urlsplit passes and no
        # browser opens (webhook URLs are refused so too: ssrf.parse_url).
        try:
            address: ipaddress.IPv6Address | None = ipaddress.IPv6Address(host)
        except ValueError:
            address = None
        if address is None or address.scope_id is not None:
            raise ValidationError(f"{field} has an invalid IPv6 address", field=field)
        netloc = f"[{host}]"
    else:
        try:
            netloc = ascii_host(host)
        except UnicodeError as exc:
            raise ValidationError(f"{field} has an invalid host name", field=field) from exc
        if not _HOST_RE.fullmatch(netloc.removesuffix(".")):
            raise ValidationError(f"{field} has an invalid host name", field=field)
    if url.isascii():
        return url
    if port is not None:
        netloc = f"{netloc}:{port}"
    return urlunsplit((
        parts.scheme.lower(), netloc, quote(parts.path, safe=_ASCII_PRINTABLE),
        quote(parts.query, safe=_ASCII_PRINTABLE), quote(parts.fragment, safe=_ASCII_PRINTABLE),
    ))


def normalize_domain(name: object) -> str:
    """A custom domain in lower-case ASCII (IDNA) form, or ``InvalidDomain``.

    A domain is a host name of at least two labels: no scheme, port, path, user
    or trailing data, not an IP address, not ``localhost``. Whether the domain is
    taken by another project is the caller's check.
    """
    if not isinstance(name, str):
        raise InvalidDomain("the domain must be a string such as links.example.com")
    text = name.strip().lower()
    text = text.removesuffix(".")
    if len(text) > DOMAIN_TEXT_MAX:  # before IDNA, which is linear but slow (µs a character)
        raise InvalidDomain("a domain name is at most 253 characters")
    if not text or any(ch in text for ch in "/:?#@[]\\ %") or _CONTROL.search(text):
        raise InvalidDomain(
            f"{name!r} is not a domain name; give only the host, e.g. links.example.com"
        )
    try:
        ascii_name = ascii_host(text)
    except UnicodeError as exc:
        raise InvalidDomain(f"{name!r} is not a valid internationalized domain name") from exc
    try:
        ipaddress.ip_address(ascii_name)
    except ValueError:
        pass
    else:
        raise InvalidDomain("an IP address cannot serve links; use a domain name")
    labels = ascii_name.split(".")
    if len(ascii_name) > 253 or len(labels) < 2:
        raise InvalidDomain(f"{name!r} is not a full domain name such as links.example.com")
    if not all(_LABEL_RE.fullmatch(label) for label in labels) or labels[-1].isdigit():
        raise InvalidDomain(f"{name!r} is not a valid domain name")
    return ascii_name


# -- field parsers -----------------------------------------------------------------


def _text(value: object, *, field: str, limit: int) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string", field=field)
    text = _FOLDABLE.sub(" ", value).strip()
    if _CONTROL.search(text):
        raise ValidationError(f"{field} must not contain control characters", field=field)
    if len(text) > limit:
        raise ValidationError(f"{field} must be at most {limit} characters", field=field)
    return text or None


def _path(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError("path must be a string starting with '/'", field="path")
    if not value.startswith("/"):
        raise ValidationError("path must start with '/'", field="path")
    if len(value) > PATH_MAX:
        raise ValidationError(f"path must be at most {PATH_MAX} characters", field="path")
    if _CONTROL.search(value):
        raise ValidationError("path must not contain control characters", field="path")
    return value


def _param_value(key: str, value: object) -> ParamValue:
    field = f"params.{key}"
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not -_INT64 <= value < _INT64:
            raise ValidationError(f"{field} is too large for a 64-bit integer", field=field)
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValidationError(f"{field} must be a finite number", field=field)
        return value
    if isinstance(value, str):
        if len(value) > PARAM_STR_MAX:
            raise ValidationError(f"{field} must be at most {PARAM_STR_MAX} characters",
                                  field=field)
        return value
    raise ValidationError(f"{field} must be a string, number or boolean", field=field)


def _params(value: object) -> dict[str, ParamValue]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("params must be an object", field="params")
    if len(value) > PARAMS_MAX:
        raise ValidationError(f"params may have at most {PARAMS_MAX} keys", field="params")
    out: dict[str, ParamValue] = {}
    for key, item in value.items():
        if not isinstance(key, str) or not 1 <= len(key) <= PARAM_KEY_MAX or _CONTROL.search(key):
            raise ValidationError(
                f"params keys must be 1 to {PARAM_KEY_MAX} characters", field="params"
            )
        out[key] = _param_value(key, item)
    return out


def _tags(value: object) -> tuple[str, ...]:
    def tag(item: object) -> str:
        text = _text(item, field="tags", limit=TAG_MAX) if isinstance(item, str) else None
        if text is None:
            raise ValidationError(f"each tag must be 1 to {TAG_MAX} characters", field="tags")
        return text

    return distinct(value, tag, most=TAGS_MAX, field="tags",
                    not_a_list="tags must be a list of strings",
                    too_many=f"a link may have at most {TAGS_MAX} tags")


def _expires(value: object, *, now_ms: int) -> int | None:
    if value is None:
        return None
    ms = parse_iso_ms(value) if isinstance(value, str) else None
    if ms is None:
        raise ValidationError(
            "expiresAt must be an ISO 8601 date-time with an offset, "
            "e.g. 2030-01-31T12:00:00Z", field="expiresAt"
        )
    if ms <= now_ms:
        raise ValidationError("expiresAt must be in the future", field="expiresAt")
    return ms


def _check_fields(body: object, allowed: frozenset[str]) -> Mapping[str, Any]:
    if not isinstance(body, Mapping):
        raise ValidationError("the body must be a JSON object")
    for key in body:
        if key not in allowed:
            kind = "read-only" if key in _READ_ONLY else "unknown"
            if key in _CUSTOM_FIELDS:
                kind = "not accepted here"
            raise ValidationError(f"field {key!r} is {kind}", field=str(key))
    return body


def _common(body: Mapping[str, Any], *, now_ms: int) -> dict[str, Any]:
    """Attribute name -> clean value for every common field present in ``body``."""
    out: dict[str, Any] = {}
    if "path" in body:
        out["path"] = _path(body["path"])
    if "params" in body:
        out["params"] = _params(body["params"])
    if "tags" in body:
        out["tags"] = _tags(body["tags"])
    if "expiresAt" in body:
        out["expires_at_ms"] = _expires(body["expiresAt"], now_ms=now_ms)
    for key, (attr, limit) in _TEXT_FIELDS.items():
        if key in body:
            out[attr] = _text(body[key], field=key, limit=limit)
    for key, attr in _URL_FIELDS.items():
        if key in body:
            value = body[key]
            out[attr] = None if value is None else check_destination_url(value, field=key)
    return out


# -- drafts and patches ------------------------------------------------------------


@attrs.frozen
class LinkDraft:
    """A validated create request. ``slug``/``domain`` None: random / default."""

    path: str = "/"
    params: dict[str, ParamValue] = attrs.field(factory=dict, hash=False)
    title: str | None = None
    campaign: str | None = None
    channel: str | None = None
    tags: tuple[str, ...] = ()
    ios_fallback_url: str | None = None
    android_fallback_url: str | None = None
    web_fallback_url: str | None = None
    og_title: str | None = None
    og_description: str | None = None
    og_image_url: str | None = None
    expires_at_ms: int | None = None
    slug: str | None = None
    domain: str | None = None


@attrs.frozen
class LinkPatch:
    """A validated update: attribute name -> new value (None clears a field)."""

    changes: dict[str, Any] = attrs.field(factory=dict, hash=False)


def parse_link_create(
    body: object, *, allow_custom_slug: bool, now_ms: int, default_domain: str = ""
) -> LinkDraft:
    """Validate a create body. The SDK call passes ``allow_custom_slug=False``:
    its links always get a random slug on the default domain, so ``slug`` and
    ``domain`` are refused there.

    ``domain`` naming ``default_domain`` (``GET /v1/domains``'s ``default``:
    the public URL's host[:port], which a custom domain could never be, with a
    port or a single label such as ``localhost``) is the default domain, as if
    left out.
    """
    allowed = _COMMON_FIELDS | _CUSTOM_FIELDS if allow_custom_slug else _COMMON_FIELDS
    m = _check_fields(body, allowed)
    fields = _common(m, now_ms=now_ms)
    slug = m.get("slug")
    if slug is not None:
        if not isinstance(slug, str) or _CUSTOM_SLUG_RE.fullmatch(slug) is None:
            raise ValidationError(
                f"slug must be 1 to {CUSTOM_SLUG_MAX} characters of letters, digits, '_' "
                "or '-'", field="slug"
            )
        if is_reserved_slug(slug):
            raise ValidationError(f"slug {slug!r} is reserved by the service", field="slug")
        fields["slug"] = slug
    domain = m.get("domain")
    if domain is not None and not _names_default(domain, default_domain):
        fields["domain"] = normalize_domain(domain)
    return LinkDraft(**fields)


def _names_default(domain: object, default_domain: str) -> bool:
    if not default_domain or not isinstance(domain, str):
        return False
    text = domain.strip().lower()
    if ":" in text and not text.endswith("]"):  # host:port ("[::1]:8080" too)
        host, port = text.rsplit(":", 1)
        text = f"{host.removesuffix('.')}:{port}"
    else:
        text = text.removesuffix(".")
    return text == default_domain.lower()


def parse_link_update(body: object, *, now_ms: int) -> LinkPatch:
    """Validate an update body: any subset of the create fields except ``slug``
    and ``domain`` (a printed short URL must keep working). ``path`` cannot be
    cleared; null clears the other fields.
    """
    m = _check_fields(body, _COMMON_FIELDS)
    return LinkPatch(changes=_common(m, now_ms=now_ms))
