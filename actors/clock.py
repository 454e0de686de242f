"""Injected clocks.

The service needs two times: wall time (epoch milliseconds, persisted in
records and deadlines) and trio time (what ``trio.sleep_until`` understands).
``SystemClock`` reads the real wall clock. ``TrioWallClock`` derives wall time
from trio's clock, so under ``autojump_clock`` a test moves both at once and
21 hours of webhook retries take milliseconds.
"""

from __future__ import annotations

import time
from typing import Protocol

import trio


class Clock(Protocol):
    def now_ms(self) -> int: ...

    def trio_time_for(self, wall_ms: int) -> float: ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def trio_time_for(self, wall_ms: int) -> float:
        return trio.current_time() + (wall_ms - self.now_ms()) / 1000.0


class TrioWallClock:
    """Wall time = ``base_ms`` + trio time; for tests under a MockClock.
    ``offset_ms`` steps the wall clock (as NTP or a restored VM does) while
    trio's clock runs on."""

    def __init__(self, base_ms: int = 1_790_000_000_000) -> None:
        self._base_ms = base_ms
        self.offset_ms = 0

    def now_ms(self) -> int:
        return self._base_ms + self.offset_ms + round(trio.current_time() * 1000)

    def trio_time_for(self, wall_ms: int) -> float:
        return (wall_ms - self._base_ms - self.offset_ms) / 1000.0
