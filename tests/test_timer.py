"""The TimerActor fires persisted deadlines at exact virtual times, across restarts."""

from __future__ import annotations

import trio
import trio.testing

from actors.clock import TrioWallClock
from actors.timer import TimerActor
from storage.lmdb_store import LmdbStore
from svc_engine.deadlines import Deadline
from svc_engine.errors import Overloaded

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
