"""Where links made with the publishable key may send people.

The publishable key ships inside every copy of the app, so anyone can pull it
out and call ``POST /v1/sdk/links``. Without a limit, a short link on the
project's own, trusted domain could send people to any site (an open
redirect) and its preview page show any image. A project may therefore list
the hosts such links may point at (``sdkAllowedHosts``). Theory of operation:

1. An empty list (the default) allows every http(s) host: SPEC.md's SDK
   behaviour, unchanged for a project that sets nothing.
2. With a non-empty list, every one of ``LIMITED_FIELDS`` (the three fallback
   URLs and ``ogImageUrl``) that a link made with a publishable key sets must
   have a host the list allows; the first that does not is refused with 400
   ``destination_blocked`` naming the field, and nothing is stored.
3. An entry ``example.com`` allows that host only. ``*.example.com`` allows
   every host below it at any depth (``shop.example.com``,
   ``a.b.example.com``) and not ``example.com`` itself: list both for both.
   Exact unless asked, because a subdomain is often someone else's content
   (user pages, a storage bucket, a marketing tool's CNAME), and trusting
   all of them should be written down, not implied.
4. Hosts compare as lower-case ASCII: IDNA-encoded the way
   ``link_input`` encodes a URL's host (``bücher.example`` is
   ``xn--bcher-kva.example``), with a trailing dot ignored. An IP address is
   never allowed by a non-empty list: entries are host names.
5. Entries are host names of at least two labels (``normalize_domain``'s
   rules: no scheme, port, path, user, IP address), optionally preceded by
   ``*.``; at most ``HOSTS_MAX`` of them, duplicates dropped, order kept. A
   bad entry is a 400 ``validation_error`` naming ``sdkAllowedHosts``. There
   is no public-suffix list here: ``*.co.uk`` is accepted, and means what it
   says.
6. Links made with a secret key or in the dashboard are not limited: the
   team is trusted. The list is a project setting, shared by test and live
   modes like the deferred settings and the platforms.

Pure: no I/O, clock or randomness.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

import attrs

from svc_engine.decode import RecordError
from svc_engine.errors import DestinationBlocked, InvalidDomain, ValidationError
from svc_engine.hosts import ascii_host, distinct
from svc_engine.link_input import LinkDraft, normalize_domain

FIELD = "sdkAllowedHosts"
HOSTS_MAX = 100
ENTRY_MAX = 255
"""Characters of one entry as sent (``*.`` and a 253-character name)."""
WILDCARD = "*."

LIMITED_FIELDS: tuple[tuple[str, str], ...] = (
    ("iosFallbackUrl", "ios_fallback_url"),
    ("androidFallbackUrl", "android_fallback_url"),
    ("webFallbackUrl", "web_fallback_url"),
    ("ogImageUrl", "og_image_url"),
)
"""The JSON name and ``LinkDraft`` attribute of every URL a link carries."""


@attrs.frozen
class LinkDestinations:
    """A project's destination rules (one record a project, both modes)."""

    VERSION = 1
    sdk_allowed_hosts: tuple[str, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {FIELD: list(self.sdk_allowed_hosts)}

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, **self.to_json()}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> LinkDestinations:
        hosts = m.get(FIELD, [])  # absent: a record written before the field
        if not isinstance(hosts, list | tuple) or not all(isinstance(h, str) for h in hosts):
            raise RecordError(f"{FIELD}: expected a list of str")
        return cls(sdk_allowed_hosts=tuple(hosts))


# -- entries -----------------------------------------------------------------------


def host_entry(value: object) -> str:
    """One entry in its stored form: ``example.com`` or ``*.example.com``,
    lower-case ASCII, no trailing dot; ``ValidationError`` otherwise."""
    if not isinstance(value, str):
        raise ValidationError(f"{FIELD} must be a list of host names", field=FIELD)
    text = value.strip()
    if len(text) > ENTRY_MAX:
        raise ValidationError(f"{FIELD}: an entry is at most {ENTRY_MAX} characters",
                              field=FIELD)
    wildcard = text.startswith(WILDCARD)
    try:
        name = normalize_domain(text.removeprefix(WILDCARD))
    except InvalidDomain:
        raise ValidationError(
            f"{FIELD}: {value!r} is not a host name; give only the host, such as "
            "example.com, or *.example.com for every host below it", field=FIELD) from None
    return WILDCARD + name if wildcard else name


def parse_hosts(value: object) -> tuple[str, ...]:
    """A whole list as sent (null is the empty list)."""
    return distinct(value, host_entry, most=HOSTS_MAX, field=FIELD,
                    not_a_list=f"{FIELD} must be a list of host names",
                    too_many=f"{FIELD} may hold at most {HOSTS_MAX} hosts")


def apply_destinations_patch(current: LinkDestinations, body: object) -> LinkDestinations:
    """Validate a PATCH body (an object with any of the fields; an unknown
    field is refused) and return the result."""
    if not isinstance(body, Mapping):
        raise ValidationError(f"the body must be a JSON object such as {{{FIELD!r}: [...]}}")
    for key in body:
        if key != FIELD:
            raise ValidationError(f"unknown field {key!r}; known: {FIELD}", field=str(key))
    if FIELD not in body:
        return current
    return attrs.evolve(current, sdk_allowed_hosts=parse_hosts(body[FIELD]))


# -- matching ----------------------------------------------------------------------


def destination_host(url: str) -> str | None:
    """The host of a checked destination URL as entries are written: lower
    case, IDNA-encoded, no trailing dot (an IPv6 address without brackets)."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return None
    if not host:
        return None
    host = host.removesuffix(".")
    try:
        return ascii_host(host)
    except UnicodeError:
        return None


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def host_allowed(host: str | None, entries: Iterable[str]) -> bool:
    """Whether ``entries`` (stored form) allow ``host`` (``destination_host``
    form). Not for an empty list: that allows everything (module rule 1)."""
    if not host or _is_ip(host):
        return False
    for entry in entries:
        if entry.startswith(WILDCARD):
            suffix = entry[1:]  # ".example.com"
            if host.endswith(suffix) and len(host) > len(suffix):
                return True
        elif host == entry:
            return True
    return False


def blocked_field(rules: LinkDestinations, urls: Mapping[str, str | None]) -> str | None:
    """The first field (of ``LIMITED_FIELDS``, by JSON name) whose URL the
    rules do not allow; None when every one is allowed or the list is empty."""
    if not rules.sdk_allowed_hosts:
        return None
    for name, _ in LIMITED_FIELDS:
        url = urls.get(name)
        if url is not None and not host_allowed(destination_host(url),
                                                rules.sdk_allowed_hosts):
            return name
    return None


def draft_urls(draft: LinkDraft) -> dict[str, str | None]:
    """JSON name -> URL of a create request's destination fields."""
    return {name: getattr(draft, attr) for name, attr in LIMITED_FIELDS}


def check_sdk_link(rules: LinkDestinations, draft: LinkDraft) -> None:
    """``DestinationBlocked`` naming the first field of a publishable-key link
    that points at a host the project does not allow."""
    urls = draft_urls(draft)
    field = blocked_field(rules, urls)
    if field is not None:
        host = destination_host(urls[field] or "") or "this host"
        raise DestinationBlocked(
            f"{field} points at {host}, which is not among the hosts this project allows "
            f"for links made with the publishable key ({FIELD})", field=field)
