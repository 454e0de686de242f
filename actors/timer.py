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
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Callable
from typing import Protocol

import attrs
import trio

from actors.clock import Clock
from svc_engine.deadlines import Deadline
from svc_engine.errors import Overloaded

log = logging.getLogger("svc.timer")
Handler = Callable[[Deadline], None]
RETRY_MS = 1000


class DeadlineSource(Protocol):
    """What the timer needs of the store: the persisted deadlines."""

    def load_deadlines(self) -> list[Deadline]: ...


@attrs.define
class TimerStats:
    pending: int = 0
    fired: int = 0
    retried: int = 0


class TimerActor:
    def __init__(self, store: DeadlineSource, clock: Clock) -> None:
        self._store = store
        self._clock = clock
        self._handlers: dict[str, Handler] = {}
        # (fire at ms, sequence, deadline): a retried deadline keeps its identity
        # (the handler removes the persisted record by it) but fires later.
        self._heap: list[tuple[int, int, Deadline]] = []
        self._known: set[Deadline] = set()
        self._seq = 0
        self._wake = trio.Event()
        self._stats = TimerStats()

    def register(self, kind: str, handler: Handler) -> None:
        self._handlers[kind] = handler

    def statistics(self) -> TimerStats:
        self._stats.pending = len(self._heap)
        return attrs.evolve(self._stats)

    def schedule_nowait(self, deadline: Deadline) -> None:
        """Add a deadline that is already persisted. Never blocks."""
        if deadline in self._known:
            return
        self._push(deadline.due_ms, deadline)

    def _push(self, fire_at_ms: int, deadline: Deadline) -> None:
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

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        for d in self._store.load_deadlines():
            self.schedule_nowait(d)
        task_status.started()
        while True:
            self._wake = trio.Event()
            if not self._heap:
                await self._wake.wait()
                continue
            due = self._heap[0][0]
            if due > self._clock.now_ms():
                with trio.move_on_at(self._clock.trio_time_for(due)):
                    await self._wake.wait()
                    continue
            self._fire_due()
            await trio.lowlevel.checkpoint()

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
