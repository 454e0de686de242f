"""Recurring housekeeping as persisted deadlines.

| job              | every  | removes                                                  |
|------------------|--------|----------------------------------------------------------|
| idem_sweep       | 1 h    | idempotency records older than 24 h                      |
| attribution_sweep| 10 min | click-window entries (and their network hashes) older    |
|                  |        | than the longest window (6 h, so hashes never pass 7 h), |
|                  |        | tokens and handoffs past their expiry, and "Continue in  |
|                  |        | app" opens whose first launch did not come in 7 days     |
| events_retention | 1 day  | raw custom events received more than                     |
|                  |        | ``event_retention_days`` ago, with their dedup entries   |
|                  |        | (aggregates stay; below 1 day: raw events are kept)      |

A sweep deletes in writes of at most ``SLICE`` records each and goes on
until one deletes fewer, so whatever expired since the last run goes in
this run, at any traffic (one bounded slice an hour fell behind as soon as
more than 10,000 records expired an hour). Between two full slices it
waits ``SLICE_PAUSE_S``: a slice holds the writer (and the GIL) for 25-30
ms (10,000 idempotency records, measured), so a large backlog (a data dir
upgraded with months of records) drains in about a third of the writer's
time instead of all of it, ~120,000 records a second, while requests go
on.

Expiry itself is exact without the sweeps: a token or handoff is judged
against its ``expires_at_ms`` when used, and a window tap against the window.
The sweeps bound what is kept. Each run persists the next run's deadline, so
the schedule survives restarts like every other deadline, before it does its
work: a run that fails (the store refusing writes: a full disk or map) is
logged and leaves the schedule as it was, so the sweep that bounds how long a
network hash lives (SPEC: 7 hours at most) runs again at its time. A run
whose next deadline cannot be written is tried again a minute later. The
deadlines are wall times; when the wall clock goes back, the timer keeps a
planned run at its moment on the monotonic clock, and one read from the store
more than its period ahead (planned before a step, then a restart) runs at
once (actors/timer.py); the attribution sweep deletes taps dated ahead of now
(storage/click_window_store.py ``AHEAD_MS``).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import attrs
import trio

from actors.mailbox import Mailbox
from storage.events_store import EventsStore
from svc_engine.deadlines import Deadline
from svc_engine.errors import SvcError
from svc_engine.idempotency import RETENTION_MS
from web.services import Services

log = logging.getLogger("svc.housekeeping")
SLICE = 10_000  # records deleted in one write transaction
SLICE_PAUSE_S = 0.05  # between two full slices of one sweep
RETRY_MS = 60_000  # a run whose next deadline the store refused
IDEM_SWEEP = "idem_sweep"
ATTRIBUTION_SWEEP = "attribution_sweep"
EVENTS_RETENTION = "events_retention"


@attrs.define
class Housekeeper:
    services: Services
    mailbox: Mailbox = attrs.field(factory=lambda: Mailbox("housekeeper", 64))
    jobs: dict[str, tuple[int, Callable[[int], Awaitable[object]]]] = attrs.field(init=False)
    # Each job's one planned run (its deadline in the store and the timer).
    _next: dict[str, Deadline] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        store, attribution = self.services.store, self.services.attribution
        self.jobs = {
            IDEM_SWEEP: (3_600_000, lambda now: _drain(
                lambda: store.purge_responses(now - RETENTION_MS, SLICE))),
            ATTRIBUTION_SWEEP: (600_000, lambda now: _drain(  # each slice reads the clock:
                lambda: attribution.sweep(now, SLICE, self.services.clock.now_ms()))),
            EVENTS_RETENTION: (86_400_000, self._purge_events),
        }

    async def _purge_events(self, now_ms: int) -> int:
        days = self.services.config.event_retention_days
        if days < 1:
            return 0
        return await EventsStore(self.services.store).purge(now_ms - days * 86_400_000)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        persisted = self.services.store.first_deadlines(self.jobs)
        for kind, (every, _) in self.jobs.items():
            # a run found more than a period ahead (the wall clock went back
            # since it was planned) goes at once
            self.services.timer.register(kind, self._on_deadline, longest_ms=every)
            if kind in persisted:
                self._next[kind] = persisted[kind]
            else:
                await self._schedule(kind, self.services.clock.now_ms() + every)
        task_status.started()
        await self.mailbox.serve()

    def _on_deadline(self, d: Deadline) -> None:
        self.mailbox.call_nowait(lambda: self._run_job(d))

    async def _run_job(self, d: Deadline) -> None:
        if self._next.get(d.kind) != d:
            return  # not the job's planned run (one that ran early planned another)
        every, job = self.jobs[d.kind]
        now = self.services.clock.now_ms()
        following = Deadline(due_ms=now + every, kind=d.kind, ref=d.ref)
        try:
            await self.services.store.replace_deadline(d, following)
        except SvcError as e:  # ``d`` stays in the store: a restart runs it
            log.warning("%s: its next run could not be recorded (%s); trying again in "
                        "%d s", d.kind, e, RETRY_MS // 1000)
            retry = attrs.evolve(d, due_ms=now + RETRY_MS)
            self._next[d.kind] = retry
            self.services.timer.schedule_nowait(retry)
            return
        self._next[d.kind] = following
        self.services.timer.schedule_nowait(following)
        try:
            done = await job(now)
        except SvcError as e:
            log.warning("%s failed (%s); it runs again at its next time", d.kind, e)
            return
        except Exception:
            log.exception("%s failed; it runs again at its next time", d.kind)
            return
        if done:
            log.debug("%s: %s", d.kind, done)

    async def _schedule(self, kind: str, due_ms: int) -> None:
        d = Deadline(due_ms=due_ms, kind=kind, ref="all")
        await self.services.store.add_deadlines([d])
        self._next[kind] = d
        self.services.timer.schedule_nowait(d)


async def _drain(slice_: Callable[[], Awaitable[int | dict[str, int]]]) -> dict[str, int]:
    """Run ``slice_`` (one write deleting at most ``SLICE`` records of each
    kind; it returns the count, or the counts by kind) until a slice deletes
    fewer than ``SLICE`` of every kind; the totals by kind."""
    totals: dict[str, int] = {}
    while True:
        done = await slice_()
        counts = done if isinstance(done, dict) else {"records": done}
        for kind, n in counts.items():
            totals[kind] = totals.get(kind, 0) + n
        if all(n < SLICE for n in counts.values()):
            return {kind: n for kind, n in totals.items() if n}
        await trio.sleep(SLICE_PAUSE_S)
