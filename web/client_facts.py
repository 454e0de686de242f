"""The privacy boundary: a request reduced to what may be kept.

Everything the service stores about a tap or a launch passes through here:
platform and OS major version (from the user agent, which is then dropped),
country (from a trusted proxy header or a local MaxMind-format database),
referrer host (never the path or query), and, only where probabilistic network
matching needs it, a keyed HMAC of the client's network under a key that
is dropped within 14 hours (web/network_keyring.py). The client address
itself is read in memory here and nowhere else; it is never written to
storage or logs.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from svc_engine.clicks import ClickFacts, clean_country
from svc_engine.config import Config
from svc_engine.webhook_envelope import referrer_host_of
from web.http import Request
from web.network_keyring import NetworkKeyring
from web.useragent import classify

log = logging.getLogger("svc.client")


class ClientFacts:
    def __init__(self, config: Config, network_keys: NetworkKeyring) -> None:
        self._country_header = config.country_header.lower() if config.country_header else None
        self._ip_header = config.client_ip_header.lower() if config.client_ip_header else None
        self._keys = network_keys
        self._geo: Any = None
        if config.geoip_db:
            try:
                import maxminddb

                self._geo = maxminddb.open_database(config.geoip_db)
            except (ImportError, OSError, ValueError) as e:
                log.error("cannot open SVC_GEOIP_DB %s: %s", config.geoip_db, e)

    def client_ip(self, req: Request) -> str | None:
        client = req.scope.get("client")
        return client_address(req.header(self._ip_header) if self._ip_header else None,
                              str(client[0]) if client else None)

    def country(self, req: Request) -> str | None:
        if self._country_header:
            found = clean_country(req.header(self._country_header))
            if found:
                return found
        if self._geo is not None:
            ip = self.client_ip(req)
            if ip:
                try:
                    rec = self._geo.get(ip)
                except ValueError:
                    return None
                if isinstance(rec, dict):
                    iso = (rec.get("country") or {}).get("iso_code")
                    return clean_country(iso if isinstance(iso, str) else None)
        return None

    def tap_network_hash(self, req: Request) -> bytes | None:
        ip = self.client_ip(req)
        return self._keys.tap_hash(ip) if ip else None

    def of(self, req: Request, *, want_net_hash: bool) -> ClickFacts:
        """What a tap keeps of its request; its network hash only when the
        project matches by network (``want_net_hash``), else none is made."""
        client = classify(req.header("user-agent"))
        return ClickFacts(
            platform=client.platform.value, os_major=client.os_major, is_bot=client.is_bot,
            country=self.country(req), referrer_host=referrer_host_of(req.header("referer")),
            net_hash=self.tap_network_hash(req) if want_net_hash else None)


def client_address(forwarded: str | None, peer: str | None) -> str | None:
    """The client's address: the last entry of the trusted proxy header
    (``SVC_CLIENT_IP_HEADER``'s value, when set and sent), else the peer's.
    The last entry is the one the proxy in front of the service wrote (a
    proxy appends the address it saw to ``X-Forwarded-For``); the entries
    before it are what the client sent, which anyone can make up (a fresh
    one a request would dodge the per-client limits and move the network
    hash). In memory only: never stored or logged."""
    if forwarded:
        last = forwarded.rsplit(",", 1)[-1].strip()
        if last:
            return last
    return peer


_PREFETCH_HEADERS = frozenset(("sec-purpose", "purpose", "x-moz", "x-purpose"))
_QUOTED = re.compile(r'"(?:[^"\\]|\\.)*"?')


def is_prefetch(req: Request) -> bool:
    """Whether the browser sent ``req`` speculatively (a prefetch or a
    prerender), not because the link was followed: ``Sec-Purpose`` (or
    Chrome's older ``Purpose``) with a ``prefetch`` item, parameters such as
    ``prerender`` or ``anonymous-client-ip`` ignored; Firefox's older
    ``X-Moz: prefetch``; Safari's ``X-Purpose: preview``. Case-insensitive.
    A request with none of these headers, nearly every one, costs one set
    test of its header names."""
    headers = req.headers
    if headers.keys().isdisjoint(_PREFETCH_HEADERS):
        return False
    if "sec-purpose" in headers or "purpose" in headers:
        # Every field line (the headers dict keeps the last): one list.
        names = (b"sec-purpose", b"purpose")
        purpose = ",".join(v.decode("latin-1") for k, v in req.raw_headers
                           if k.lower() in names)
        if _has_prefetch_item(purpose):
            return True
    return (_is(headers.get("x-moz"), "prefetch") or _is(headers.get("x-purpose"), "preview"))


def _has_prefetch_item(value: str) -> bool:
    """Whether the Structured Fields list ``value`` (RFC 9651: items split by
    commas, each a bare item and its ``;`` parameters) has the item
    ``prefetch``. Quoted strings, which may hold either separator, are
    dropped first."""
    if '"' in value:
        value = _QUOTED.sub("", value)
    return any(item.split(";", 1)[0].strip().lower() == "prefetch"
               for item in value.split(","))


def _is(value: str | None, expected: str) -> bool:
    return value is not None and value.strip().lower() == expected
