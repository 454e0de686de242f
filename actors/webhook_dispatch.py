"""The OutboxDispatcher: turns recorded events into webhook deliveries promptly.

Whoever records a click, open, install or conversion appends an OutboxEvent in
the same transaction and then calls ``outbox_wakeup.notify()``. This task
waits for that wake-up and asks the WebhookActor to ``tick`` (dispatch a batch;
it repeats at once while batches come back full), so an event normally becomes
a delivery within milliseconds of its commit.

It also polls, as a safety net for a missed wake-up: one second after
activity, doubling while the outbox stays empty up to ``max_poll_s`` (60 s),
so a forgotten notify costs at most a minute (SPEC: "within about a minute").
An idle poll is one read of the outbox, without a call to the actor, so an
idle service (or a test jumping a virtual month) stays cheap. While
deliveries are parked because an organization's plan lacks webhooks, or an
endpoint turned on waits for the rest of its backlog (``rearm_or_later``), it
ticks every second so they resume soon after.

A tick the store cannot write (a full disk or map: ``StorageUnavailable``)
leaves the events in the outbox; the dispatcher logs it once, ticks again
every second, and logs when a tick works again. It never ends the service.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

import attrs
import trio

from actors.clock import Clock
from actors.signal import Wakeup
from actors.timer import TimerActor
from actors.webhook_sender import HttpSender
from actors.webhooks import OUTBOX_BATCH, TickResult, WebhookActor
from storage.lmdb_store import LmdbStore
from svc_engine.errors import StorageUnavailable

log = logging.getLogger("svc.webhooks")


@attrs.define
class DispatcherStats:
    ticks: int = 0
    dispatched: int = 0
    failed_ticks: int = 0  # ticks the store could not write
    poll_s: float = 0.0


class OutboxDispatcher:
    def __init__(self, actor: WebhookActor, store: LmdbStore, wakeup: Wakeup, *,
                 poll_s: float = 1.0,
                 max_poll_s: float = 60.0) -> None:
        self._actor = actor
        self._store = store
        self._wakeup = wakeup
        self._poll_s = poll_s
        self._max_poll_s = max_poll_s
        self._stats = DispatcherStats(poll_s=poll_s)
        self._failing = False

    def statistics(self) -> DispatcherStats:
        return attrs.evolve(self._stats)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self._poll_s
        woken, parked = True, False
        while True:
            if woken or parked or self._store.read_outbox(1):
                result = await self._tick()
                self._stats.ticks += 1
                self._stats.dispatched += result.dispatched
                if result.dispatched >= OUTBOX_BATCH:
                    continue  # more may be waiting
                parked = result.parked
                busy = bool(result.dispatched) or parked
            else:
                busy = False
            interval = self._poll_s if busy else min(interval * 2, self._max_poll_s)
            self._stats.poll_s = interval
            woken = False
            with trio.move_on_after(interval):
                await self._wakeup.wait()
                woken = True


    async def _tick(self) -> TickResult:
        """The actor's tick; a tick the store refused counts as parked (again
        in a second), logged when the refusals start and when they end."""
        try:
            result = await self._actor.tick()
        except StorageUnavailable as e:
            self._stats.failed_ticks += 1
            if not self._failing:
                log.warning("webhooks: the store cannot write (%s); events wait in the "
                            "outbox, trying again every second", e)
            self._failing = True
            return TickResult(0, True)
        if self._failing:
            log.warning("webhooks: the store writes again; dispatching")
            self._failing = False
        return result


async def start_webhooks(nursery: trio.Nursery, *, store: LmdbStore, clock: Clock,
                         timer: TimerActor, wakeup: Wakeup, random: Callable[[int], bytes],
                         allow: Sequence[str] = (), ca_bundle: str | None = None,
                         retry_scale: float = 1.0, local: bool = True) -> WebhookActor:
    """Start the WebhookActor (with its senders and one shared HTTP client) and
    the dispatcher in ``nursery``; call before the timer runs, so the actor's
    deadline handlers are registered when the timer loads deadlines."""
    actor = WebhookActor(store, clock, timer, random, wakeup=wakeup, retry_scale=retry_scale,
                         local=local)
    sender = HttpSender(clock, allow=allow, ca_bundle=ca_bundle, local=local)

    async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with sender:
            await actor.run(sender, task_status=task_status)

    await nursery.start(serve)
    await nursery.start(OutboxDispatcher(actor, store, wakeup).run)
    return actor
