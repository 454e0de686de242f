"""Attempt classification and the retry schedule (svc_engine.webhook_retry)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import webhook_retry as wr

MIN = 60_000
HOUR = 60 * MIN

# SPEC Limits: retries after 1 min, 5 min, 30 min, 2 h, 6 h, 12 h; seven attempts.
EXPECTED_START_TIMES = (
    0,
    1 * MIN,
    6 * MIN,
    36 * MIN,
    2 * HOUR + 36 * MIN,
    8 * HOUR + 36 * MIN,
    20 * HOUR + 36 * MIN,
)


def test_walk_the_whole_schedule_with_instant_failures() -> None:
    t0 = 1_700_000_000_000
    times = [t0]
    attempt = 1
    while (nxt := wr.next_attempt(attempt, times[-1])) is not None:
        times.append(nxt)
        attempt += 1
    assert tuple(t - t0 for t in times) == EXPECTED_START_TIMES
    assert attempt == wr.MAX_ATTEMPTS == 7  # the seventh failure leaves nothing: Failed
    assert wr.schedule_offsets_ms() == EXPECTED_START_TIMES


def test_delay_counts_from_the_failure_not_the_attempt_start() -> None:
    # Attempt 1 started at 0 and failed after a 10 s timeout.
    assert wr.next_attempt(1, 10_000) == 10_000 + MIN


@pytest.mark.parametrize(
    ("attempt", "delay_ms"),
    [(1, MIN), (2, 5 * MIN), (3, 30 * MIN), (4, 2 * HOUR), (5, 6 * HOUR), (6, 12 * HOUR)],
)
def test_next_attempt(attempt: int, delay_ms: int) -> None:
    assert wr.next_attempt(attempt, 5_000) == 5_000 + delay_ms


@pytest.mark.parametrize("attempt", [7, 8, 100])
def test_no_attempt_after_the_seventh(attempt: int) -> None:
    assert wr.next_attempt(attempt, 0) is None


@pytest.mark.parametrize("attempt", [0, -1])
def test_attempt_numbers_start_at_one(attempt: int) -> None:
    with pytest.raises(ValueError, match="start at 1"):
        wr.next_attempt(attempt, 0)


@pytest.mark.parametrize(
    ("status", "error", "elapsed", "delivered", "kind"),
    [
        (200, None, 0, True, wr.DELIVERED),
        (200, None, 10_000, True, wr.DELIVERED),  # exactly 10 s is within 10 s
        (200, None, 10_001, False, wr.TIMEOUT),
        (201, None, 50, True, wr.DELIVERED),
        (204, None, 50, True, wr.DELIVERED),
        (299, None, 50, True, wr.DELIVERED),
        (300, None, 50, False, wr.REDIRECT),
        (301, None, 50, False, wr.REDIRECT),
        (302, None, 50, False, wr.REDIRECT),
        (307, None, 50, False, wr.REDIRECT),
        (308, None, 50, False, wr.REDIRECT),
        (399, None, 50, False, wr.REDIRECT),
        (100, None, 50, False, wr.HTTP_STATUS),
        (199, None, 50, False, wr.HTTP_STATUS),
        (400, None, 50, False, wr.HTTP_STATUS),
        (401, None, 50, False, wr.HTTP_STATUS),
        (404, None, 50, False, wr.HTTP_STATUS),
        (410, None, 50, False, wr.HTTP_STATUS),
        (429, None, 50, False, wr.HTTP_STATUS),
        (500, None, 50, False, wr.HTTP_STATUS),
        (503, None, 50, False, wr.HTTP_STATUS),
        (599, None, 50, False, wr.HTTP_STATUS),
        (500, None, 20_000, False, wr.TIMEOUT),
        (None, "timeout", 10_000, False, wr.TIMEOUT),
        (None, "connection_error", 3, False, wr.CONNECTION_ERROR),
        (None, "tls_error", 3, False, wr.TLS_ERROR),
        (None, "blocked_address", 0, False, wr.BLOCKED_ADDRESS),
        (None, "Connection refused", 3, False, wr.CONNECTION_ERROR),
        (200, "timeout", 10_500, False, wr.TIMEOUT),  # head arrived, body did not
        (None, None, 3, False, wr.CONNECTION_ERROR),
    ],
)
def test_classify_response(
    status: int | None, error: str | None, elapsed: int, delivered: bool, kind: str
) -> None:
    outcome = wr.classify_response(status, error, elapsed)
    assert (outcome.delivered, outcome.kind, outcome.status) == (delivered, kind, status)
    assert outcome.detail


def test_classify_details() -> None:
    assert wr.classify_response(503, None, 5).detail == "HTTP 503"
    assert wr.classify_response(302, None, 5).detail == "HTTP 302 redirect (not followed)"
    assert wr.classify_response(None, "Connection refused", 5).detail == "Connection refused"
    assert "10001 ms" in wr.classify_response(200, None, 10_001).detail


@given(
    status=st.integers(min_value=100, max_value=599),
    elapsed=st.integers(min_value=0, max_value=60_000),
)
def test_delivered_exactly_for_2xx_within_ten_seconds(status: int, elapsed: int) -> None:
    outcome = wr.classify_response(status, None, elapsed)
    assert outcome.delivered is (200 <= status <= 299 and elapsed <= 10_000)
