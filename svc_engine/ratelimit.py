"""Token-bucket rate limiting, pure: state in, decision and new state out.

A bucket holds up to ``burst`` tokens and refills at ``rate`` tokens per second.
A request takes one token; without one it is refused with the seconds until a
token is back (the ``Retry-After`` of a 429).
"""

from __future__ import annotations

import math

import attrs

from svc_engine.click_window import network_of


@attrs.frozen
class Bucket:
    tokens: float
    at_ms: int


@attrs.frozen
class Verdict:
    allowed: bool
    bucket: Bucket
    retry_after_s: int = 0


def take(bucket: Bucket | None, *, rate: float, burst: float, now_ms: int) -> Verdict:
    if bucket is None:
        bucket = Bucket(tokens=burst, at_ms=now_ms)
    elapsed = max(0, now_ms - bucket.at_ms) / 1000.0
    tokens = min(burst, bucket.tokens + elapsed * rate)
    if tokens >= 1.0:
        return Verdict(True, Bucket(tokens - 1.0, now_ms))
    wait = (1.0 - tokens) / rate if rate > 0 else 3600.0
    return Verdict(False, Bucket(tokens, now_ms), max(1, math.ceil(wait)))


def client_key(address: str) -> bytes:
    """What a per-client limit counts by: an IPv4 address whole (as written:
    the usual case, no parsing), an IPv6 one by its /64 (the one subnet a
    home or a phone is given: counted address by address, a fresh one a
    request passed every per-client limit), the network hash's rule
    (``network_of``); an IPv4-mapped IPv6 address as its IPv4 one. Text
    that is not an address is counted as it is."""
    if ":" not in address:
        return address.encode()
    network = network_of(address)
    if network is None:
        return address.encode()
    if network.startswith(b"v4:"):  # IPv4-mapped: the IPv4 client, as written above
        return ".".join(map(str, network[3:])).encode()
    return network
