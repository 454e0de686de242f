"""The sign-in throttle: a sliding window of failed attempts.

Failures are counted per e-mail address and per client, each against its own
limit. While ``max_failures`` failures lie within the last ``window_ms``,
further attempts are refused (429, with ``Retry-After`` = seconds until the
oldest of them leaves the window); a refused attempt is not checked and not
counted. An attempt let through counts as a failure at once, before its
password is checked (which takes a while, in a thread), so attempts sent
together cannot all pass the check before any failure is counted; a right
password then takes its own count back. A successful sign-in clears the
e-mail's failures (not the client's other failures, so one good account does
not reset guessing at others from the same place).

| subject | failures | window |
|---|---|---|
| e-mail address | 5 | 15 minutes |
| client | 20 | 15 minutes |

State is a plain value passed in and returned; the caller keeps it in memory
only (a restart forgets it), and never stores or logs a client address.
"""

from __future__ import annotations

import math

import attrs

WINDOW_MS = 15 * 60 * 1000


@attrs.frozen
class Limit:
    max_failures: int
    window_ms: int


EMAIL_LIMIT = Limit(max_failures=5, window_ms=WINDOW_MS)
CLIENT_LIMIT = Limit(max_failures=20, window_ms=WINDOW_MS)


@attrs.frozen
class Failures:
    """Times (ms) of recent failures, oldest first."""

    times: tuple[int, ...] = ()

    def recent(self, limit: Limit, now_ms: int) -> Failures:
        return Failures(tuple(t for t in self.times if now_ms - t < limit.window_ms))


def retry_after_s(failures: Failures | None, limit: Limit, now_ms: int) -> int:
    """0 when an attempt may go ahead, else the whole seconds to wait."""
    if failures is None:
        return 0
    recent = failures.recent(limit, now_ms).times
    if len(recent) < limit.max_failures:
        return 0
    frees_at = recent[len(recent) - limit.max_failures] + limit.window_ms
    return max(1, math.ceil((frees_at - now_ms) / 1000))


def forget_failure(failures: Failures | None, at_ms: int) -> Failures | None:
    """The state without one failure recorded at ``at_ms`` (an attempt counted
    as failed before it was checked, which turned out right)."""
    if failures is None or at_ms not in failures.times:
        return failures
    times = list(failures.times)
    times.remove(at_ms)
    return Failures(tuple(times))


def record_failure(failures: Failures | None, limit: Limit, now_ms: int) -> Failures:
    """The state after one more failure (older than the window is forgotten)."""
    recent = (failures or Failures()).recent(limit, now_ms).times
    return Failures((*recent[-(limit.max_failures - 1):], now_ms)
                    if limit.max_failures > 1 else (now_ms,))
