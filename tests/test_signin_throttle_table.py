"""The sign-in throttle's tables (web/dashboard/throttle.py): bounded, in the
order of each key's latest failure, and never scanned whole on a bump."""

from __future__ import annotations

from typing import Any

import pytest

from svc_engine import signin_throttle
from svc_engine.signin_throttle import EMAIL_LIMIT, WINDOW_MS
from web.dashboard import throttle
from web.dashboard.throttle import SignInThrottle


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(throttle, "MAX_ENTRIES", 1_000)
    return 1_000


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts calls of ``Failures.recent`` (how many entries a bump looks at)."""
    calls = [0]
    recent = signin_throttle.Failures.recent

    def counted(self: Any, limit: Any, now_ms: int) -> Any:
        calls[0] += 1
        return recent(self, limit, now_ms)

    monkeypatch.setattr(signin_throttle.Failures, "recent", counted)
    return calls


def test_a_full_table_with_keys_expiring_as_new_ones_come_is_not_scanned(
        small: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The table full, a new e-mail arriving as an old one's window ends:
    each attempt looked at every entry (50,000: 50-90 ms of the event loop).
    Now it looks at the oldest few."""
    t = SignInThrottle(b"s" * 32)
    for i in range(small):
        t.attempt(f"user{i}@example.com", "10.0.0.1", i * 10)
    calls = _reads(monkeypatch)
    for i in range(small, 3 * small):  # user k's window ends as user k + 1000 arrives
        before = calls[0]
        t.attempt(f"user{i}@example.com", f"10.0.{i % 250}.{i // 250}",
                  WINDOW_MS + (i - small) * 10 + 1)
        assert calls[0] - before <= 10  # a few reads an attempt, not one an entry (1,000)
        assert t.statistics()["emails"] <= small


def test_live_windows_are_kept_and_the_least_recent_goes_first(small: int) -> None:
    t = SignInThrottle(b"s" * 32)
    for i in range(small):  # each from its own address (a client may fail 20 times)
        t.attempt(f"user{i}@example.com", f"10.1.{i // 250}.{i % 250}", 1_000 + i)
    for _ in range(EMAIL_LIMIT.max_failures - 1):  # user0 fails again: now the most recent
        t.attempt("user0@example.com", None, 5_000)
    assert t.retry_after("user0@example.com", None, 5_001) > 0
    t.attempt("new@example.com", None, 5_002)  # full of live windows: user1 goes, not user0
    assert t.statistics()["emails"] == small
    assert t.retry_after("user0@example.com", None, 5_003) > 0
    assert "user1@example.com" not in t._emails and "user2@example.com" in t._emails
    later = 1_000 + small + WINDOW_MS  # every window but user0's and new's is over
    t.attempt("later@example.com", None, later)
    assert set(t._emails) == {"user0@example.com", "new@example.com", "later@example.com"}
