"""The two clocks' one conversion: the trio time of a wall time. The service
sleeps until ``trio_time_for(deadline)`` and then looks at the wall clock;
a wrong sign there still fired every deadline on time, but every wait for a
future time ended at once, and the timer's and keyring's loops spun a CPU."""

from __future__ import annotations

import trio
import trio.testing

from actors.clock import SystemClock, TrioWallClock


async def test_the_system_clock_maps_a_wall_time_to_the_trio_time_it_comes() -> None:
    clock = SystemClock()
    now_ms, now = clock.now_ms(), trio.current_time()
    for ahead_s in (60, -60, 0):
        got = clock.trio_time_for(now_ms + ahead_s * 1000)
        assert abs(got - (now + ahead_s)) < 0.25, ahead_s


async def test_a_sleep_until_a_wall_time_a_second_ahead_lasts_about_that(
        autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock()
    start = clock.now_ms()
    await trio.sleep_until(clock.trio_time_for(start + 1_000))
    assert clock.now_ms() == start + 1_000
    clock.offset_ms = -5_000  # the wall clock stepped back: the same wall time is further
    assert clock.trio_time_for(start + 1_000) == trio.current_time() + 5.0
