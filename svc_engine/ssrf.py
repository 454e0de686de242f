"""Outbound address guard for webhook deliveries (server-side request forgery).

Integrators choose webhook URLs, so every address the sender is about to dial
is judged here first. Policy (default deny of everything not globally
routable, after the Svix sender):

1. Unparseable input, IPv6 zone ids (``fe80::1%eth0``) and anything not a
   plain IP address are blocked (fail closed).
2. IPv4-mapped (``::ffff:a.b.c.d``) and IPv4-compatible (``::a.b.c.d``)
   IPv6 addresses are judged as the IPv4 address they carry.
3. NAT64 (``64:ff9b::/96``) and 6to4 (``2002::/16``) addresses are blocked
   as prefixes; when an operator allow-lists such a prefix, the embedded IPv4
   address must still pass on its own (so ``64:ff9b::a9fe:a9fe`` never
   reaches the metadata service).
4. Cloud metadata addresses are blocked even inside an allow-listed range;
   only an allow-list entry naming exactly that address (``/32``, ``/128``)
   lets one through.
5. An address inside an operator allow-list CIDR is allowed.
6. Everything in the deny table below is blocked; IPv6 outside global
   unicast ``2000::/3`` is blocked; finally the stdlib's ``is_global`` must
   hold. The deny table is explicit because ``is_global`` alone is wrong for
   multicast, 6to4, NAT64, 192.88.99.0/24 and others, and its answers moved
   between CPython patch releases (CVE-2024-4032).

``url_target_rule`` applies this to a webhook URL. The literal hosts
``localhost``, ``127.0.0.1`` and ``[::1]`` are allowed on purpose: the spec
allows plain http for exactly these, and local receivers are how
integrators and our tests receive webhooks. ``localhost`` is never looked up;
it means 127.0.0.1 and ::1. Any other name must be resolved by the caller
(I/O) and every resolved address must be allowed; the caller then dials only
the returned addresses, so a DNS rebind between check and connect has no
second lookup to exploit.
"""

from __future__ import annotations

import functools
import ipaddress
import string
from collections.abc import Sequence
from urllib.parse import urlsplit

import attrs

from svc_engine.errors import ValidationError

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

ALLOWED = "allowed"
BLOCKED = "blocked"
RESOLVE = "resolve"

LOCAL_RECEIVER_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})
"""Hosts allowed without the guard (and the only ones allowed over plain http),
unless the operator turns local receivers off (``SVC_WEBHOOK_LOCAL_RECEIVERS``)."""
LOCAL_RECEIVERS_OFF = ("receivers on this machine (localhost, 127.0.0.1, [::1]) are turned "
                       "off on this server")

MAX_URL_LENGTH = 2048
DEFAULT_PORTS = {"https": 443, "http": 80}

METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, Oracle instance metadata
        "169.254.170.2",  # AWS ECS task metadata and credentials
        "169.254.169.253",  # AWS VPC DNS resolver
        "169.254.169.123",  # AWS time sync
        "100.100.100.200",  # Alibaba Cloud metadata (inside CGNAT space)
        "192.0.0.192",  # Oracle Cloud classic metadata
        "fd00:ec2::254",  # AWS IMDS over IPv6
        "fd00:ec2::23",  # AWS VPC DNS resolver over IPv6
    )
)


def _table(rows: Sequence[tuple[str, str]]) -> tuple[tuple[IPNetwork, str], ...]:
    return tuple((ipaddress.ip_network(net), reason) for net, reason in rows)


# Order matters only for the reason reported: specific ranges come first.
_DENY = _table(
    (
        ("0.0.0.0/32", "unspecified"),
        ("0.0.0.0/8", "this_network"),
        ("10.0.0.0/8", "private"),
        ("100.64.0.0/10", "cgnat"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link_local"),
        ("172.16.0.0/12", "private"),
        ("192.0.0.0/24", "ietf_protocol_assignment"),
        ("192.0.2.0/24", "documentation"),
        ("192.88.99.0/24", "6to4_relay_anycast"),
        ("192.168.0.0/16", "private"),
        ("198.18.0.0/15", "benchmarking"),
        ("198.51.100.0/24", "documentation"),
        ("203.0.113.0/24", "documentation"),
        ("224.0.0.0/4", "multicast"),
        ("255.255.255.255/32", "broadcast"),
        ("240.0.0.0/4", "reserved"),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::ffff:0:0:0/96", "ipv4_translated"),
        ("64:ff9b::/96", "nat64"),
        ("64:ff9b:1::/48", "nat64_local"),
        ("100::/64", "discard_only"),
        ("2001:db8::/32", "documentation"),
        ("2001::/23", "ietf_protocol_assignment"),
        ("2002::/16", "6to4"),
        ("3fff::/20", "documentation"),
        ("5f00::/16", "srv6"),
        ("fc00::/7", "unique_local"),
        ("fe80::/10", "link_local"),
        ("fec0::/10", "site_local"),
        ("ff00::/8", "multicast"),
    )
)
_GLOBAL_UNICAST_V6 = ipaddress.ip_network("2000::/3")
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")


@attrs.frozen
class Verdict:
    """Whether one address may be dialled, and why."""

    allowed: bool
    reason: str


@attrs.frozen
class UrlParts:
    """The parts of a webhook URL the guard and the validator look at."""

    scheme: str
    host: str
    """Lower-case; an IPv6 literal without its brackets."""
    port: int
    is_ip_literal: bool


@attrs.frozen
class UrlRejected:
    """A URL that cannot be a webhook target, with the reason in words."""

    reason: str


@attrs.frozen
class TargetVerdict:
    """What to do with a webhook URL.

    ``decision`` is ``allowed`` (dial only ``addresses``, in order, sending
    ``host`` for SNI and ``Host``), ``blocked`` (``reason`` says why; record it
    on the attempt) or ``resolve`` (look ``host`` up and call again with the
    answers).
    """

    decision: str
    reason: str
    host: str = ""
    port: int = 0
    addresses: tuple[str, ...] = ()

    @property
    def allowed(self) -> bool:
        return self.decision == ALLOWED


def address_verdict(ip: str, allow: Sequence[str] = ()) -> Verdict:
    """Judge one address (text, no brackets, no port) against the policy."""
    try:
        address = ipaddress.ip_address(ip)
    except ValueError:
        return Verdict(False, "unparseable")
    return _judge(address, _allow_networks(tuple(allow)))


def _judge(address: IPAddress, allow: tuple[IPNetwork, ...]) -> Verdict:
    if isinstance(address, ipaddress.IPv6Address):
        if address.scope_id is not None:
            return Verdict(False, "scoped")
        if address.ipv4_mapped is not None:
            inner = _judge(address.ipv4_mapped, allow)
            return Verdict(inner.allowed, f"ipv4_mapped:{inner.reason}")
        if address in _IPV4_COMPATIBLE and int(address) > 1:
            inner = _judge(ipaddress.IPv4Address(int(address)), allow)
            return Verdict(inner.allowed, f"ipv4_compatible:{inner.reason}")
        embedded, kind = _embedded_ipv4(address)
        if embedded is not None:
            inner = _judge(embedded, allow)
            if not inner.allowed:
                return Verdict(False, f"{kind}:{inner.reason}")
    if address in METADATA_ADDRESSES:
        exact = any(net.num_addresses == 1 and address in net for net in allow)
        return Verdict(True, "allow_list") if exact else Verdict(False, "metadata")
    if any(address in net for net in allow):
        return Verdict(True, "allow_list")
    for net, reason in _DENY:
        if address in net:
            return Verdict(False, reason)
    if isinstance(address, ipaddress.IPv6Address) and address not in _GLOBAL_UNICAST_V6:
        return Verdict(False, "reserved")
    if not address.is_global:
        return Verdict(False, "not_global")
    return Verdict(True, "global")


def _embedded_ipv4(address: ipaddress.IPv6Address) -> tuple[ipaddress.IPv4Address | None, str]:
    if address in _NAT64:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF), "nat64"
    if address in _SIX_TO_FOUR:
        return address.sixtofour, "6to4"
    return None, ""


@functools.lru_cache(maxsize=64)
def _allow_networks(entries: tuple[str, ...]) -> tuple[IPNetwork, ...]:
    networks = []
    for entry in entries:
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError as exc:
            raise ValidationError(f"not a CIDR block: {entry!r}", field="allow") from exc
    return tuple(networks)


def parse_url(url: str) -> UrlParts | UrlRejected:
    """Split a webhook URL strictly; anything ambiguous is rejected.

    Rules beyond the usual: ASCII only (percent-encode paths, punycode host
    names), no whitespace or control characters, no user information, no
    fragment, no empty port, and host names that look numeric must be a
    canonical dotted-quad IPv4 address (``127.1`` or ``0x7f.1`` would be read
    as an address by resolvers).
    """
    if not isinstance(url, str) or not url:
        return UrlRejected("URL is empty")
    if len(url) > MAX_URL_LENGTH:
        return UrlRejected(f"URL is longer than {MAX_URL_LENGTH} characters")
    if not url.isascii() or any(c in string.whitespace or not c.isprintable() for c in url):
        return UrlRejected("URL must be ASCII without spaces or control characters")
    if "#" in url:
        return UrlRejected("URL must not have a fragment")
    try:
        split = urlsplit(url)
    except ValueError as exc:
        return UrlRejected(f"URL does not parse: {exc}")
    scheme = split.scheme.lower()
    if scheme not in DEFAULT_PORTS or not url[len(scheme) :].startswith("://"):
        return UrlRejected("URL scheme must be https or http")
    if not split.netloc:
        return UrlRejected("URL has no host")
    if "@" in split.netloc:
        return UrlRejected("URL must not contain user information")
    return _split_authority(scheme, split.netloc)


def _split_authority(scheme: str, netloc: str) -> UrlParts | UrlRejected:
    if netloc.startswith("["):
        inside, bracket, rest = netloc[1:].partition("]")
        if not bracket or "%" in inside:
            return UrlRejected("bracketed host must be a plain IPv6 address")
        try:
            host = str(ipaddress.IPv6Address(inside))
        except ValueError:
            return UrlRejected("bracketed host must be a plain IPv6 address")
        literal = True
    else:
        name, colon, port_text = netloc.partition(":")
        rest = colon + port_text
        literal, rejected = _check_name(name.lower())
        if rejected is not None:
            return rejected
        host = name.lower()
    if not rest:
        return UrlParts(scheme, host, DEFAULT_PORTS[scheme], literal)
    digits = rest[1:]
    if not rest.startswith(":") or not digits.isdigit() or len(digits) > 5:
        return UrlRejected("URL port must be digits after ':'")
    port = int(digits)
    if not 1 <= port <= 65535:
        return UrlRejected("URL port must be 1 to 65535")
    return UrlParts(scheme, host, port, literal)


_NAME_CHARACTERS = frozenset(string.ascii_lowercase + string.digits + "-_.")


def _check_name(name: str) -> tuple[bool, UrlRejected | None]:
    """Return (is an IPv4 literal, rejection or None) for an unbracketed host."""
    if not name:
        return False, UrlRejected("URL has no host")
    if len(name) > 253:
        return False, UrlRejected("host name is longer than 253 characters")
    if not set(name) <= _NAME_CHARACTERS:
        return False, UrlRejected("host name has characters outside a-z, 0-9, '-', '_', '.'")
    labels = name.split(".")
    if any(not label or len(label) > 63 for label in labels):
        return False, UrlRejected("host name has an empty or over-long label")
    last = labels[-1]
    looks_numeric = last.isdigit() or (last.startswith("0x") and _is_hex(last[2:]))
    if not looks_numeric:
        return False, None
    try:
        canonical = str(ipaddress.IPv4Address(name))
    except ValueError:
        canonical = ""
    if canonical != name:
        return False, UrlRejected("numeric host must be a dotted-quad IPv4 address")
    return True, None


def _is_hex(text: str) -> bool:
    return all(c in string.hexdigits for c in text)


def plain_http_allowed(host: str) -> bool:
    """Plain http is allowed only for the local receiver hosts."""
    return host in LOCAL_RECEIVER_HOSTS


def url_target_rule(
    url: str, resolved: Sequence[str] | None = None, allow: Sequence[str] = (),
    local: bool = True,
) -> TargetVerdict:
    """Decide whether (and where) a delivery to ``url`` may connect.

    Call first with ``resolved=None``; for a host name the answer is
    ``resolve``; look it up and call again with every address the lookup
    returned. A name is allowed only when all of its addresses are.
    ``local=False`` (an operator's setting): the local receiver hosts are
    refused like any other loopback address.
    """
    parts = parse_url(url)
    if isinstance(parts, UrlRejected):
        return TargetVerdict(BLOCKED, parts.reason)
    host, port = parts.host, parts.port
    if host in LOCAL_RECEIVER_HOSTS and not local:
        return TargetVerdict(BLOCKED, LOCAL_RECEIVERS_OFF, host, port)
    if parts.scheme == "http" and not plain_http_allowed(host):
        return TargetVerdict(BLOCKED, "plain http is only for localhost", host, port)
    if host in LOCAL_RECEIVER_HOSTS:
        here = ("127.0.0.1", "::1") if host == "localhost" else (host,)
        return TargetVerdict(ALLOWED, "local_receiver", host, port, here)
    networks = _allow_networks(tuple(allow))
    if parts.is_ip_literal:
        candidates: Sequence[str] = (host,)
    elif resolved is None:
        return TargetVerdict(RESOLVE, "host name must be resolved", host, port)
    elif not resolved:
        return TargetVerdict(BLOCKED, "host name has no addresses", host, port)
    else:
        candidates = resolved
    addresses: list[str] = []
    for candidate in candidates:
        try:
            address = ipaddress.ip_address(candidate)
        except ValueError:
            return TargetVerdict(BLOCKED, f"{candidate!r}: unparseable", host, port)
        verdict = _judge(address, networks)
        if not verdict.allowed:
            return TargetVerdict(BLOCKED, f"{candidate}: {verdict.reason}", host, port)
        if str(address) not in addresses:
            addresses.append(str(address))
    return TargetVerdict(ALLOWED, "allowed", host, port, tuple(addresses))
