"""The TimerActor: one owner for every deadline of the service.

Theory of operation: deadlines are persisted by the operation that causes them
(same transaction), then handed to ``schedule_nowait``. At start the timer
loads every persisted deadline, so a restart loses none; overdue ones fire at
once. It sleeps on trio's clock until the earliest deadline, converting wall
time with the injected Clock, so ``autojump_clock`` tests fire them at exact
virtual times. Firing calls the handler registered for the deadline's kind;
handlers never block (they post to an actor's mailbox without waiting) and are
idempotent, because the deadline is removed by the handler's own write and a
crash in between fires it again after restart. A handler that reports
``Overloaded`` is retried one second later.

Memory is bounded: the timer holds at most about ``capacity`` deadlines (the
earliest), the rest wait in the store. ``horizon`` is the last deadline (in
``Deadline`` order: due ms, kind, ref, which is the store's key order) up to
which every persisted deadline is held; ``None`` means every one is. A
deadline scheduled past the horizon is not held: the store has it. When what
is held runs low, the timer reads the next ones after the horizon
(``refill``); when schedules push it past ``capacity`` by half, it keeps the
earliest ``capacity`` and lowers the horizon (``shrink``). A receiver down
for a day with webhook deliveries waiting to retry costs the store, not the
process's memory.

That rests on one rule for the callers: a deadline handed to
``schedule_nowait`` has been persisted, or its write has been handed to the
writer (or to a holder of writes that ``settle`` flushes) before the call
returns to the event loop. Before reading the store a refill awaits every
``settle`` given to ``register`` (the webhook actor's held writes), then the
store's own ordering does the rest: whatever was scheduled before that point
is committed when the refill reads. Deadlines scheduled past the old horizon
while a refill waits are kept aside and held if the new horizon covers them;
later ones are found by the next refill, which settles first.

Deadlines are wall times, and the wall clock can step: NTP correcting a clock
that ran ahead, a VM restored from a snapshot. A deadline never waits longer
than it was planned to, whichever way the clock steps. The timer notes wall
time minus trio time (the clock's *frame*) whenever it looks at the clock,
which it does at least every ``WATCH_S`` while it holds deadlines. When the
frame moves back by more than ``STEP_MS`` (the wall clock went back), every
deadline it holds keeps its moment on trio's clock: a webhook retry planned
"in one minute" still goes a minute later, not a minute plus the step. A step
forward moves nothing: what it made due fires within ``WATCH_S``, early
rather than late. Deadlines read from the store after a step (at a restart,
a refill) carry the old frame's times; for those, a kind registered with
``longest_ms`` (the furthest ahead of now it is ever planned) fires one
found further ahead at once.
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Awaitable, Callable
from typing import Protocol

import attrs
import trio

from actors.clock import Clock
from svc_engine.deadlines import Deadline
from svc_engine.errors import Overloaded, SvcError

log = logging.getLogger("svc.timer")
Handler = Callable[[Deadline], None]
Settle = Callable[[], Awaitable[None]]
RETRY_MS = 1000
CAPACITY = 20_000
"""Deadlines held in memory: ~370 bytes each with a delivery id as ``ref``
(~7 MB). A shrink sorts ~1.5 times this many (~25 ms on this kind of machine)."""
STEP_MS = 1_000
"""A move of the clock's frame (wall minus trio time) larger than this is a
step of the wall clock; smaller ones (NTP slewing) are followed as they come."""
WATCH_S = 60
"""While it holds deadlines the timer looks at the wall clock at least this often."""
REFILL_CHUNK = 1_000
"""Deadlines read from the store per refill step (~3 ms), between which the
timer fires what is due."""


class DeadlineSource(Protocol):
    """What the timer needs of the store: the persisted deadlines."""

    def load_deadlines(self, *, after: Deadline | None = None,
                       limit: int | None = None) -> list[Deadline]: ...


@attrs.define
class TimerStats:
    pending: int = 0  # held in memory
    fired: int = 0
    retried: int = 0
    refills: int = 0
    shrinks: int = 0
    steps_back: int = 0  # wall clock steps back the held deadlines followed
    horizon_ms: int | None = None  # later deadlines wait in the store only


class TimerActor:
    def __init__(self, store: DeadlineSource, clock: Clock, *,
                 capacity: int | None = None) -> None:
        capacity = CAPACITY if capacity is None else capacity
        if capacity < 2:
            raise ValueError("a timer holds at least 2 deadlines")
        self._store = store
        self._clock = clock
        self._capacity = capacity
        self._handlers: dict[str, Handler] = {}
        self._longest: dict[str, int] = {}  # kind -> furthest ahead it is planned
        self._frame_ms: int | None = None  # wall minus trio ms, the held deadlines' frame
        self._settles: list[Settle] = []
        # (fire at ms, sequence, deadline): a retried deadline keeps its identity
        # (the handler removes the persisted record by it) but fires later.
        self._heap: list[tuple[int, int, Deadline]] = []
        self._known: set[Deadline] = set()
        self._horizon: Deadline | None = None  # see the module's docstring
        self._aside: list[Deadline] | None = None  # past the horizon during a refill
        self._seq = 0
        self._wake = trio.Event()
        self._stats = TimerStats()

    def register(self, kind: str, handler: Handler, *, settle: Settle | None = None,
                 longest_ms: int | None = None) -> None:
        """``handler`` fires deadlines of ``kind``. ``settle``: for a caller
        whose deadline writes may be held back (not yet handed to the store's
        writer) when it schedules them; it must hand over what it holds and
        wait for its commit. ``longest_ms``: the furthest ahead of now a
        deadline of ``kind`` is ever planned; one found further ahead was
        planned before the wall clock went back, and fires at once (the
        module's docstring)."""
        self._handlers[kind] = handler
        if longest_ms is not None:
            self._longest[kind] = longest_ms
        if settle is not None:
            self._settles.append(settle)

    def statistics(self) -> TimerStats:
        self._stats.pending = len(self._heap)
        self._stats.horizon_ms = self._horizon.due_ms if self._horizon is not None else None
        return attrs.evolve(self._stats)

    def schedule_nowait(self, deadline: Deadline) -> None:
        """Add a deadline that is already persisted. Never blocks."""
        self._follow_clock()  # the caller planned it in the frame of now
        if deadline in self._known:
            return
        if self._horizon is not None and deadline > self._horizon:
            if self._aside is not None:
                self._aside.append(deadline)
            return  # the store has it; a refill reads it in time
        self._push(deadline.due_ms, deadline)

    def _push(self, fire_at_ms: int, deadline: Deadline) -> None:
        longest = self._longest.get(deadline.kind)
        if longest is not None:
            now = self._clock.now_ms()
            if fire_at_ms - now > longest:
                fire_at_ms = now  # planned before a step back: at once
        self._known.add(deadline)
        self._seq += 1
        heapq.heappush(self._heap, (fire_at_ms, self._seq, deadline))
        self._wake.set()

    def cancel_nowait(self, deadline: Deadline) -> None:
        """Forget a deadline whose cause went away (its record is removed by the caller)."""
        if deadline in self._known:
            self._known.discard(deadline)
            self._heap = [e for e in self._heap if e[2] != deadline]
            heapq.heapify(self._heap)
        if self._aside is not None and deadline in self._aside:
            self._aside.remove(deadline)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        await self._refill(first=True)
        task_status.started()
        while True:
            if len(self._heap) > self._capacity + self._capacity // 2:
                self._shrink()
            if self._horizon is not None and len(self._heap) <= self._capacity // 2:
                await self._refill()
            self._follow_clock()
            self._wake = trio.Event()
            if not self._heap:
                await self._wake.wait()
                continue
            due = self._heap[0][0]
            if due > self._clock.now_ms():  # looks at the clock a minute later at most
                with trio.move_on_at(min(self._clock.trio_time_for(due),
                                         trio.current_time() + WATCH_S)):
                    await self._wake.wait()
                continue
            self._fire_due()
            await trio.lowlevel.checkpoint()

    def _follow_clock(self) -> None:
        """Note the clock's frame; if the wall clock went back since it was
        last noted, move every held deadline back with it (module docstring)."""
        frame = self._clock.now_ms() - round(trio.current_time() * 1000)
        step = 0 if self._frame_ms is None else frame - self._frame_ms
        self._frame_ms = frame
        if step >= -STEP_MS:
            return
        self._heap = [(at + step, seq, d) for at, seq, d in self._heap]  # same order
        self._stats.steps_back += 1
        log.warning("the wall clock went back %.1f s: the %d deadlines held keep their "
                    "moments on the monotonic clock", -step / 1000, len(self._heap))

    async def _refill(self, *, first: bool = False) -> None:
        """Hold the next persisted deadlines after the horizon, up to
        ``capacity`` (``first``: from the start of the store, whose writes
        made before the timer started are committed)."""
        horizon = None if first else self._horizon
        self._aside = []
        try:
            if not first:
                for fn in self._settles:
                    try:
                        await fn()
                    except SvcError as e:  # the store is closing or failing: its
                        log.warning("timer refill: %s", e)  # held writes are lost anyway
            room = min(max(self._capacity - len(self._heap), 1), REFILL_CHUNK)
            found = self._store.load_deadlines(after=horizon, limit=room + 1)
            if len(found) > room:
                found = found[:room]
                self._horizon = found[-1]
            else:
                self._horizon = None
            for d in found:
                if d not in self._known:
                    self._push(d.due_ms, d)
            aside = self._aside
        finally:
            self._aside = None
        for d in aside:
            self.schedule_nowait(d)  # held if the new horizon covers it
        self._stats.refills += 1

    def _shrink(self) -> None:
        """Keep the earliest ``capacity`` deadlines; the store has the rest."""
        kept = sorted(self._known, key=_order)[:self._capacity]
        self._horizon = kept[-1]
        self._known = set(kept)
        self._heap = [e for e in self._heap if e[2] in self._known]
        heapq.heapify(self._heap)
        self._stats.shrinks += 1

    def _fire_due(self) -> None:
        now = self._clock.now_ms()
        while self._heap and self._heap[0][0] <= now:
            _, _, d = heapq.heappop(self._heap)
            self._known.discard(d)
            handler = self._handlers.get(d.kind)
            if handler is None:
                log.error("no handler for deadline kind %r; dropping %s", d.kind, d.ref)
                continue
            try:
                handler(d)
            except Overloaded:
                self._stats.retried += 1
                self._push(now + RETRY_MS, d)
                continue
            except Exception:
                log.exception("deadline handler for %r failed", d.kind)
                continue
            self._stats.fired += 1


def _order(d: Deadline) -> tuple[int, str, str]:
    """``Deadline``'s own order as a plain tuple: sorting by it is 20 times faster."""
    return (d.due_ms, d.kind, d.ref)
