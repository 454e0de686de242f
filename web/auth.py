"""API key authentication and the per-key rate limit."""

from __future__ import annotations

import attrs

from svc_engine.errors import InvalidApiKey, ProjectSuspended, RateLimited
from svc_engine.keys import ApiKey, KeyKind, Mode, check_key_kind, key_hash, parse_bearer
from svc_engine.ratelimit import Bucket, take
from svc_engine.records import Organization, Project
from web.http import Request
from web.services import Services

MAX_BUCKETS = 100_000


@attrs.frozen
class KeyContext:
    key: ApiKey
    project: Project
    org: Organization

    @property
    def mode(self) -> Mode:
        return self.key.mode

    @property
    def scope(self) -> str:
        return f"{self.project.id}:{self.key.mode.value}"


class RateLimiter:
    """Per-key token buckets, in memory (a restart refills them)."""

    def __init__(self, rate_per_s: int) -> None:
        self.rate = float(rate_per_s)
        self._buckets: dict[bytes, Bucket] = {}

    def check(self, who: bytes, now_ms: int) -> None:
        if self.rate <= 0:
            return
        verdict = take(self._buckets.get(who), rate=self.rate, burst=self.rate * 2,
                       now_ms=now_ms)
        if len(self._buckets) >= MAX_BUCKETS and who not in self._buckets:
            self._buckets.clear()  # bounded memory; at worst a few keys get a fresh burst
        self._buckets[who] = verdict.bucket
        if not verdict.allowed:
            raise RateLimited("too many requests; slow down",
                              retry_after=verdict.retry_after_s)


def authenticate(req: Request, services: Services, kind: KeyKind,
                 limiter: RateLimiter | None = None) -> KeyContext:
    parsed = parse_bearer(req.header("authorization"))
    h = key_hash(parsed.raw)
    found, project, org = services.store.key_with_owners(h)
    key = check_key_kind(found, kind)
    if project is None or org is None:
        raise InvalidApiKey("the API key's project no longer exists")
    if project.suspended:
        raise ProjectSuspended("this project is suspended")
    if limiter is not None:
        limiter.check(h, services.clock.now_ms())
    return KeyContext(key=key, project=project, org=org)
