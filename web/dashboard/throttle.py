"""The sign-in throttle's memory: failure windows per e-mail and per client.

The rule is svc_engine.signin_throttle. This keeps its state in a bounded
dict, in memory only: a restart forgets it. The client is known here only as
a keyed hash of its address (the key is the server secret), so no address is
held in clear, and nothing here is ever stored or logged.
"""

from __future__ import annotations

import hashlib
import hmac
from collections import OrderedDict
from typing import TypeVar

from svc_engine.ratelimit import client_key
from svc_engine.records import normalize_email
from svc_engine.signin_throttle import (
    CLIENT_LIMIT,
    EMAIL_LIMIT,
    Failures,
    Limit,
    forget_failure,
    record_failure,
    retry_after_s,
)

MAX_ENTRIES = 50_000
K = TypeVar("K")


class SignInThrottle:
    def __init__(self, secret: bytes) -> None:
        self._secret = secret
        self._emails: OrderedDict[str, Failures] = OrderedDict()
        self._clients: OrderedDict[bytes, Failures] = OrderedDict()

    def _client(self, address: str | None) -> bytes:
        client = client_key(address) if address else b"-"
        return hmac.new(self._secret, b"signin-client:" + client,
                        hashlib.sha256).digest()[:16]

    def retry_after(self, email: str, address: str | None, now_ms: int) -> int:
        """Seconds before an attempt may be checked; 0 when it may go ahead."""
        return max(retry_after_s(self._emails.get(normalize_email(email)), EMAIL_LIMIT, now_ms),
                   retry_after_s(self._clients.get(self._client(address)), CLIENT_LIMIT,
                                 now_ms))

    def attempt(self, email: str, address: str | None, now_ms: int) -> int:
        """Seconds before an attempt may be checked, or 0: then it may go ahead
        and is counted as a failure already (``succeeded`` takes it back), so
        attempts checked at the same time are all counted."""
        wait = self.retry_after(email, address, now_ms)
        if not wait:
            _bump(self._emails, normalize_email(email), EMAIL_LIMIT, now_ms)
            _bump(self._clients, self._client(address), CLIENT_LIMIT, now_ms)
        return wait

    def succeeded(self, email: str, address: str | None, now_ms: int) -> None:
        """The attempt let through at ``now_ms`` was right: the e-mail's
        failures are cleared, and the client's count of that attempt."""
        self._emails.pop(normalize_email(email), None)
        key = self._client(address)
        if (kept := forget_failure(self._clients.get(key), now_ms)) is not None:
            self._clients[key] = kept

    def statistics(self) -> dict[str, int]:
        return {"emails": len(self._emails), "clients": len(self._clients)}


def _bump(table: OrderedDict[K, Failures], key: K, limit: Limit, now_ms: int) -> None:
    """Count a failure of ``key``. The table is in the order of each key's
    latest failure (a failure moves its key to the end), so windows expire
    from the front: each bump drops the expired ones there, and when the
    table is full of live windows, the one whose last failure is oldest.
    Work is O(1) amortized: it was a scan of the whole table on every bump
    once the table held ``MAX_ENTRIES`` and new keys came as fast as old
    ones expired (50-90 ms of the event loop a sign-in attempt)."""
    failures = record_failure(table.pop(key, None), limit, now_ms)
    while table:
        oldest = next(iter(table.values()))
        if len(table) < MAX_ENTRIES and oldest.recent(limit, now_ms).times:
            break
        table.popitem(last=False)
    table[key] = failures
