"""When a webhook attempt counts as delivered, and when the next one goes out.

An attempt is delivered when the endpoint answers any 2xx within 10 seconds
(exactly 10 000 ms still counts). Everything else fails the attempt: another
status (a 3xx redirect is never followed), a 2xx that came too late, a
timeout, a connection, TLS or blocked-address error.

Retry schedule (SPEC, Limits): after a failed attempt the next one waits 1 min,
5 min, 30 min, 2 h, 6 h and 12 h, counted from the moment the previous attempt
failed. Seven attempts in all; with instant failures they start at 0, 1m, 6m,
36m, 2h36m, 8h36m and 20h36m after the first. After the seventh failure no
attempt remains and the delivery is Failed.

A receiver's ``Retry-After`` does not move the schedule: SPEC.md's table is
the contract integrators build on ("seven attempts over about 21 hours"), and
a header many rate limiters add on their own would otherwise stretch it (up
to days, as it did until session 33, when a longer one was honoured).
"""

from __future__ import annotations

import attrs

RESPONSE_DEADLINE_MS = 10_000
"""A 2xx must arrive within this many milliseconds of the request start."""

RETRY_DELAYS_MS: tuple[int, ...] = (
    60_000,  # 1 min
    300_000,  # 5 min
    1_800_000,  # 30 min
    7_200_000,  # 2 h
    21_600_000,  # 6 h
    43_200_000,  # 12 h
)
MAX_ATTEMPTS = len(RETRY_DELAYS_MS) + 1

# Outcome kinds.
DELIVERED = "delivered"
HTTP_STATUS = "http_status"
REDIRECT = "redirect"
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"
TLS_ERROR = "tls_error"
BLOCKED_ADDRESS = "blocked_address"

ERROR_KINDS = frozenset({TIMEOUT, CONNECTION_ERROR, TLS_ERROR, BLOCKED_ADDRESS})
"""Error codes the sender passes as ``error``; any other text is a connection error."""


@attrs.frozen
class Outcome:
    """The verdict on one attempt."""

    delivered: bool
    kind: str
    status: int | None
    detail: str


def classify_response(status: int | None, error: str | None, elapsed_ms: int) -> Outcome:
    """Classify one attempt.

    ``status`` is the HTTP status when a response head arrived, ``error`` a
    failure code (one of ``ERROR_KINDS``; other text counts as a connection
    error and is kept as the detail) when the exchange failed, ``elapsed_ms``
    the time from sending the request to the end of reading the (capped)
    response. An error wins over a status.
    """
    if error is not None:
        kind = error if error in ERROR_KINDS else CONNECTION_ERROR
        return Outcome(False, kind, status, error)
    if status is None:
        return Outcome(False, CONNECTION_ERROR, None, "no response")
    if elapsed_ms > RESPONSE_DEADLINE_MS:
        return Outcome(False, TIMEOUT, status, f"HTTP {status} after {elapsed_ms} ms (limit 10 s)")
    if 200 <= status <= 299:
        return Outcome(True, DELIVERED, status, f"HTTP {status}")
    if 300 <= status <= 399:
        return Outcome(False, REDIRECT, status, f"HTTP {status} redirect (not followed)")
    return Outcome(False, HTTP_STATUS, status, f"HTTP {status}")


def next_attempt(attempt_number: int, failed_at_ms: int) -> int | None:
    """Time of the attempt after failed attempt ``attempt_number`` (1-based).

    None when no attempt remains (the delivery becomes Failed).
    """
    if attempt_number < 1:
        raise ValueError("attempt numbers start at 1")
    if attempt_number >= MAX_ATTEMPTS:
        return None
    return failed_at_ms + RETRY_DELAYS_MS[attempt_number - 1]


def schedule_offsets_ms() -> tuple[int, ...]:
    """Start times of all attempts relative to the first, when failures are instant."""
    offsets = [0]
    for delay in RETRY_DELAYS_MS:
        offsets.append(offsets[-1] + delay)
    return tuple(offsets)
