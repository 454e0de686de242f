"""Recurring housekeeping as deadlines: today the idempotency-record purge.

Each sweep removes what has aged out and persists the next sweep's deadline, so
the schedule survives restarts like every other deadline.
"""

from __future__ import annotations

import logging

import attrs
import trio

from actors.mailbox import Mailbox
from svc_engine.deadlines import Deadline
from svc_engine.idempotency import RETENTION_MS
from web.services import Services

log = logging.getLogger("svc.housekeeping")
IDEM_SWEEP = "idem_sweep"
SWEEP_EVERY_MS = 3600 * 1000


@attrs.define
class Housekeeper:
    services: Services
    mailbox: Mailbox = attrs.field(factory=lambda: Mailbox("housekeeper", 64))

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self.services.timer.register(IDEM_SWEEP, self._on_deadline)
        if not any(d.kind == IDEM_SWEEP for d in self.services.store.load_deadlines()):
            await self._schedule(self.services.clock.now_ms() + SWEEP_EVERY_MS)
        task_status.started()
        await self.mailbox.serve()

    def _on_deadline(self, d: Deadline) -> None:
        self.mailbox.call_nowait(lambda: self._sweep(d))

    async def _sweep(self, d: Deadline) -> None:
        store = self.services.store
        now = self.services.clock.now_ms()
        purged = await store.purge_responses(now - RETENTION_MS, 10_000)
        if purged:
            log.info("purged %d idempotency records", purged)
        await store.remove_deadline(d)
        await self._schedule(now + SWEEP_EVERY_MS)

    async def _schedule(self, due_ms: int) -> None:
        d = Deadline(due_ms=due_ms, kind=IDEM_SWEEP, ref="all")
        await self.services.store.add_deadlines([d])
        self.services.timer.schedule_nowait(d)
