"""The TimerActor fires persisted deadlines at exact virtual times, across restarts."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from actors.timer import Settle, TimerActor, TimerStats
from storage.lmdb_store import LmdbStore
from svc_engine.deadlines import Deadline
from svc_engine.errors import InternalError, Overloaded

BASE = 1_790_000_000_000
DAY = 86_400_000


async def test_fires_at_exact_virtual_times(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    fired: list[tuple[str, int]] = []
    timer = TimerActor(store, clock)
    timer.register("k", lambda d: fired.append((d.ref, clock.now_ms())))
    ds = [Deadline(BASE + 7 * DAY, "k", "week"), Deadline(BASE + 60_000, "k", "minute"),
          Deadline(BASE + 1, "k", "1ms")]
    await store.add_deadlines(ds)
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        late = Deadline(BASE + 30_000, "k", "added-later")
        await store.add_deadlines([late])
        timer.schedule_nowait(late)
        await trio.sleep(8 * 86_400)
        n.cancel_scope.cancel()
    assert fired == [("1ms", BASE + 1), ("added-later", BASE + 30_000),
                     ("minute", BASE + 60_000), ("week", BASE + 7 * DAY)]
    assert timer.statistics() == TimerStats(pending=0, fired=4, retried=0, refills=1,
                                            shrinks=0, steps_back=0, horizon_ms=None)


async def test_deadlines_persisted_before_a_restart_fire_on_time(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    fired: list[tuple[str, int]] = []

    def handler(d: Deadline) -> None:
        fired.append((d.ref, clock.now_ms()))

    await store.add_deadlines([Deadline(BASE + 3_600_000, "k", "1h"),
                               Deadline(BASE + 7_200_000, "k", "2h")])
    # First life: runs 90 minutes, fires the first deadline, then "crashes".
    first = TimerActor(store, clock)

    async def remove_after_fire(d: Deadline) -> None:
        await store.remove_deadline(d)

    first.register("k", lambda d: (handler(d), trio.lowlevel.spawn_system_task(
        remove_after_fire, d)))
    async with trio.open_nursery() as n:
        await n.start(first.run)
        await trio.sleep(90 * 60)
        n.cancel_scope.cancel()
    assert fired == [("1h", BASE + 3_600_000)]
    # Second life: a new timer on the same store loads what is left.
    second = TimerActor(store, clock)
    second.register("k", handler)
    async with trio.open_nursery() as n:
        await n.start(second.run)
        await trio.sleep(3 * 3600)
        n.cancel_scope.cancel()
    assert fired == [("1h", BASE + 3_600_000), ("2h", BASE + 7_200_000)]


async def test_overdue_deadlines_fire_at_once_after_restart(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    await trio.sleep(100)  # wall time moves past the deadline while "down"
    clock = TrioWallClock(BASE)
    fired: list[int] = []
    await store.add_deadlines([Deadline(BASE + 5_000, "k", "past")])
    timer = TimerActor(store, clock)
    timer.register("k", lambda d: fired.append(clock.now_ms()))
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await trio.sleep(1)
        n.cancel_scope.cancel()
    assert fired == [BASE + 100_000]


async def test_overloaded_handler_is_retried_a_second_later(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    calls: list[int] = []

    def handler(d: Deadline) -> None:
        calls.append(clock.now_ms())
        if len(calls) < 3:
            raise Overloaded("full")

    timer = TimerActor(store, clock)
    timer.register("k", handler)
    d = Deadline(BASE + 10, "k", "x")
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        timer.schedule_nowait(d)
        await trio.sleep(10)
        n.cancel_scope.cancel()
    assert calls == [BASE + 10, BASE + 1010, BASE + 2010]
    assert timer.statistics().fired == 1 and timer.statistics().retried == 2


async def test_cancelled_deadline_never_fires(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    fired: list[str] = []
    timer = TimerActor(store, clock)
    timer.register("k", lambda d: fired.append(d.ref))
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        a, b = Deadline(BASE + 10, "k", "a"), Deadline(BASE + 20, "k", "b")
        timer.schedule_nowait(a)
        timer.schedule_nowait(b)
        timer.cancel_nowait(a)
        await trio.sleep(1)
        n.cancel_scope.cancel()
    assert fired == ["b"]


# -- memory is bounded: the timer holds about `capacity` deadlines, the store the rest --

def _spread(n: int, *, start: int = 1_000, step: int = 1_000, ref: str = "d") -> list[Deadline]:
    return [Deadline(BASE + start + i * step, "k", f"{ref}{i:03d}") for i in range(n)]


async def _run_until_quiet(timer: TimerActor, seconds: float) -> None:
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await trio.sleep(seconds)
        n.cancel_scope.cancel()


async def test_a_backlog_larger_than_capacity_fires_in_order_holding_few(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    ds = _spread(40)
    await store.add_deadlines(ds)
    timer = TimerActor(store, clock, capacity=4)
    fired: list[tuple[str, int]] = []
    held: list[int] = []

    def handler(d: Deadline) -> None:
        fired.append((d.ref, clock.now_ms()))
        held.append(timer.statistics().pending)

    timer.register("k", handler)
    await _run_until_quiet(timer, 60)
    assert fired == [(d.ref, d.due_ms) for d in ds]
    assert max(held) <= 4
    stats = timer.statistics()
    # The first refill reads 4; each later one, once half the capacity (2) is
    # left, reads 2 more: 4 + 18 x 2 = 40.
    assert stats.refills == 19 and stats.horizon_ms is None and stats.pending == 0


async def test_deadlines_scheduled_past_the_horizon_fire_from_the_store(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    first = _spread(10, step=2_000, ref="a")  # 1 s, 3 s, ... 19 s
    await store.add_deadlines(first)
    timer = TimerActor(store, clock, capacity=4)
    fired: list[tuple[str, int]] = []
    timer.register("k", lambda d: fired.append((d.ref, clock.now_ms())))
    later = _spread(10, start=2_000, step=2_000, ref="b")  # 2 s, 4 s, ... 20 s
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        assert timer.statistics().horizon_ms == BASE + 7_000  # a003
        await store.add_deadlines(later)  # persisted, then scheduled: the rule
        for d in later:
            timer.schedule_nowait(d)
        assert timer.statistics().pending == 4 + 3  # b000-b002 are before the horizon
        await trio.sleep(30)
        n.cancel_scope.cancel()
    everything = sorted(first + later)
    assert fired == [(d.ref, d.due_ms) for d in everything]


async def test_a_flood_of_schedules_is_shrunk_to_capacity(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    timer = TimerActor(store, clock, capacity=4)
    fired: list[str] = []
    timer.register("k", lambda d: fired.append(d.ref))
    flood = list(reversed(_spread(30)))  # latest first: each one lands in memory
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await store.add_deadlines(flood)
        for d in flood:
            timer.schedule_nowait(d)
        await trio.sleep(0.0001)  # the timer runs before the first is due
        stats = timer.statistics()
        assert stats.shrinks == 1 and stats.pending == 4
        assert stats.horizon_ms == BASE + 4_000
        await trio.sleep(60)
        n.cancel_scope.cancel()
    assert fired == [d.ref for d in sorted(flood)]


@pytest.mark.parametrize(("scheduled", "shrinks", "pending"), [(6, 0, 6), (7, 1, 4)])
async def test_a_timer_shrinks_once_it_holds_half_its_capacity_more(
        store: LmdbStore, autojump_clock: trio.testing.MockClock, scheduled: int,
        shrinks: int, pending: int) -> None:
    timer = TimerActor(store, TrioWallClock(BASE), capacity=4)
    timer.register("k", lambda d: None)
    flood = _spread(scheduled)
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await store.add_deadlines(flood)
        for d in flood:
            timer.schedule_nowait(d)
        await trio.sleep(0.0001)
        stats = timer.statistics()
        assert (stats.shrinks, stats.pending) == (shrinks, pending)
        n.cancel_scope.cancel()


@pytest.mark.parametrize(("stored", "horizon"), [(4, None), (5, BASE + 4_000)])
async def test_a_store_of_exactly_capacity_deadlines_is_held_whole(
        store: LmdbStore, autojump_clock: trio.testing.MockClock, stored: int,
        horizon: int | None) -> None:
    await store.add_deadlines(_spread(stored))
    timer = TimerActor(store, TrioWallClock(BASE), capacity=4)
    timer.register("k", lambda d: None)
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        stats = timer.statistics()
        assert (stats.refills, stats.pending, stats.horizon_ms) == (1, 4, horizon)
        n.cancel_scope.cancel()


async def _two_held_of_six(store: LmdbStore, settle: Settle | None = None,
                           ) -> tuple[TimerActor, list[str]]:
    """Deadlines d000-d005 due at 1-6 s, a timer holding 2 (horizon at 2 s), and
    the refs it fires, in order."""
    await store.add_deadlines(_spread(6))
    timer = TimerActor(store, TrioWallClock(BASE), capacity=2)
    fired: list[str] = []
    timer.register("k", lambda d: fired.append(d.ref), settle=settle)
    return timer, fired


SIX = [f"d{i:03d}" for i in range(6)]


async def test_a_refill_settles_writes_held_by_a_caller_before_reading(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    # A caller like the webhook actor schedules a retry's deadline while its
    # write is still held; the refill asks it to settle before reading the store.
    held: list[Deadline] = []

    async def settle() -> None:
        await store.add_deadlines(held)
        held.clear()

    timer, fired = await _two_held_of_six(store, settle)
    retry = Deadline(BASE + 3_500, "k", "held")
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        held.append(retry)
        timer.schedule_nowait(retry)  # past the horizon, not in the store yet
        await trio.sleep(10)
        n.cancel_scope.cancel()
    assert fired == ["d000", "d001", "d002", "held", "d003", "d004", "d005"]


async def test_without_settle_an_unwritten_deadline_past_the_horizon_is_not_fired(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    # The other side of the rule above: the timer does not hold what is past the
    # horizon, so a deadline neither persisted nor settled is the caller's bug.
    timer, fired = await _two_held_of_six(store)
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        timer.schedule_nowait(Deadline(BASE + 3_500, "k", "never-written"))
        await trio.sleep(10)
        n.cancel_scope.cancel()
    assert fired == SIX


async def test_deadlines_scheduled_while_a_refill_settles_are_not_lost(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    during: list[Deadline] = []

    async def settle() -> None:
        # While the refill waits, another task schedules one past the old horizon
        # whose write lands only after the refill has read the store (the first
        # refill only: it is never written here, so the store cannot have it).
        if not during:
            during.append(Deadline(BASE + 2_500, "k", "during"))
            timer.schedule_nowait(during[0])
        await trio.sleep(0)

    timer, fired = await _two_held_of_six(store, settle)
    await _run_until_quiet(timer, 10)
    assert during, "a refill ran"
    assert fired == ["d000", "d001", "during", "d002", "d003", "d004", "d005"]


async def test_a_settle_that_fails_does_not_stop_the_timer(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    async def settle() -> None:
        raise InternalError("the store is closing")

    timer, fired = await _two_held_of_six(store, settle)
    await _run_until_quiet(timer, 10)
    assert fired == SIX


async def test_a_restart_reads_only_the_earliest_deadlines(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock(BASE)
    await store.add_deadlines(_spread(1_000))
    timer = TimerActor(store, clock, capacity=10)
    timer.register("k", lambda d: None)
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        stats = timer.statistics()
        assert stats.pending == 10 and stats.horizon_ms == BASE + 10_000
        n.cancel_scope.cancel()


async def test_refills_read_the_store_in_chunks(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    # A refill step reads at most REFILL_CHUNK, so the event loop is never held
    # for a long scan; what is due fires between steps.
    monkeypatch.setattr("actors.timer.REFILL_CHUNK", 3)
    clock = TrioWallClock(BASE)
    ds = _spread(40, step=10)
    await store.add_deadlines(ds)
    limits: list[int | None] = []

    class Recording:
        def load_deadlines(self, *, after: Deadline | None = None,
                           limit: int | None = None) -> list[Deadline]:
            limits.append(limit)
            return store.load_deadlines(after=after, limit=limit)

    timer = TimerActor(Recording(), clock, capacity=10)
    fired: list[tuple[str, int]] = []
    timer.register("k", lambda d: fired.append((d.ref, clock.now_ms())))
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        assert timer.statistics().pending < 10  # started before reading to capacity
        await trio.sleep(5)
        n.cancel_scope.cancel()
    assert fired == [(d.ref, d.due_ms) for d in ds]
    assert len(limits) >= 40 // 3 and all(n is not None and n <= 3 + 1 for n in limits)


HOUR = 3_600_000
Fired = list[tuple[str, float]]


@asynccontextmanager
async def _firing(store: LmdbStore, clock: TrioWallClock
                  ) -> AsyncIterator[tuple[TimerActor, Fired]]:
    """A running timer, and what it fired of kind "k": (ref, seconds of trio's
    clock since it started)."""
    fired: Fired = []
    timer = TimerActor(store, clock)
    start = trio.current_time()
    timer.register("k", lambda d: fired.append((d.ref, trio.current_time() - start)))
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        yield timer, fired
        n.cancel_scope.cancel()


def _plan(timer: TimerActor, clock: TrioWallClock, **ahead_ms: int) -> None:
    for ref, ahead in ahead_ms.items():
        timer.schedule_nowait(Deadline(clock.now_ms() + ahead, "k", ref))


async def test_held_deadlines_keep_their_moments_when_the_wall_clock_goes_back(
        store: LmdbStore, autojump_clock: trio.testing.MockClock,
        caplog: pytest.LogCaptureFixture) -> None:
    """A deadline planned "in one minute" (a webhook retry) waited the minute
    plus the step when NTP set a clock running 8 hours ahead back."""
    clock = TrioWallClock(BASE)
    clock.offset_ms = 8 * HOUR
    async with _firing(store, clock) as (timer, fired):
        _plan(timer, clock, min1=60_000, h2=2 * HOUR, h9=9 * HOUR)
        await trio.sleep(1)
        clock.offset_ms = 0  # the wall clock goes back 8 hours
        _plan(timer, clock, after=30_000)  # planned in the new frame
        await trio.sleep(10 * 3600)
    assert fired == [("after", 31.0), ("min1", 60.0), ("h2", 7200.0), ("h9", 9 * 3600.0)]
    assert timer.statistics().steps_back == 1
    assert [r.getMessage() for r in caplog.records] == [
        "the wall clock went back 28800.0 s: the 3 deadlines held keep their moments on "
        "the monotonic clock"]


async def test_a_step_back_noticed_only_when_the_next_deadline_is_due_still_moves_all(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    # Nothing scheduled after the step: the timer sees it when it wakes for
    # the earliest deadline, which fires on time, and the next keeps its own.
    clock = TrioWallClock(BASE)
    async with _firing(store, clock) as (timer, fired):
        _plan(timer, clock, a=60_000, b=120_000)
        await trio.sleep(1)
        clock.offset_ms = -3 * HOUR
        await trio.sleep(4 * 3600)
    assert fired == [("a", 60.0), ("b", 120.0)]


async def test_a_step_forward_or_a_slew_fires_by_the_wall_clock(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """Forward, what the step made due fires (early rather than late); less
    than a second either way (NTP slewing) is followed, not a step."""
    clock = TrioWallClock(BASE)
    async with _firing(store, clock) as (timer, fired):
        _plan(timer, clock, slewed=10_000, h2=2 * HOUR, min30=HOUR // 2)
        await trio.sleep(1)
        clock.offset_ms = -900  # 0.9 s back: a slew, not a step
        _plan(timer, clock, after_slew=1_000)
        await trio.sleep(20)
        clock.offset_ms = HOUR - 900  # an hour forward
        await trio.sleep(2 * 3600)
    assert fired[:2] == [("after_slew", 2.0), ("slewed", 10.9)]
    assert fired[2][0] == "min30" and 21 < fired[2][1] <= 21 + 60  # it looks every minute
    assert fired[3:] == [("h2", 3600.9)]  # an hour earlier, at its wall time
    assert timer.statistics().steps_back == 0


@pytest.mark.parametrize(("back_ms", "steps"), [(1_000, 0), (1_001, 1)])
async def test_a_step_is_more_than_a_second_back(
        store: LmdbStore, autojump_clock: trio.testing.MockClock, back_ms: int,
        steps: int) -> None:
    clock = TrioWallClock(BASE)
    async with _firing(store, clock) as (timer, fired):
        _plan(timer, clock, a=60_000)
        await trio.sleep(1)
        clock.offset_ms = -back_ms
        await trio.sleep(120)
    assert fired == [("a", 60.0 if steps else 60.0 + back_ms / 1000)]
    assert timer.statistics().steps_back == steps


async def test_a_kind_s_longest_wait_bounds_deadlines_read_after_a_step(
        store: LmdbStore, autojump_clock: trio.testing.MockClock) -> None:
    """Persisted before a step back, then a restart: read from the store,
    where no frame was noted, a deadline of a kind never planned more than an
    hour ahead but found 8 hours ahead fires at once; one without a bound, or
    within it, at its time."""
    clock = TrioWallClock(BASE)
    await store.add_deadlines([Deadline(BASE + 8 * HOUR, "bounded", "far"),
                               Deadline(BASE + 30 * 60_000, "bounded", "near"),
                               Deadline(BASE + 8 * HOUR, "free", "far")])
    fired: list[tuple[str, int]] = []
    timer = TimerActor(store, clock)
    timer.register("bounded", lambda d: fired.append((f"bounded {d.ref}", clock.now_ms())),
                   longest_ms=HOUR)
    timer.register("free", lambda d: fired.append((f"free {d.ref}", clock.now_ms())))
    async with trio.open_nursery() as n:
        await n.start(timer.run)
        await trio.sleep(9 * 3600)
        n.cancel_scope.cancel()
    assert fired == [("bounded far", BASE), ("bounded near", BASE + 30 * 60_000),
                     ("free far", BASE + 8 * HOUR)]
