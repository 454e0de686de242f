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
deliveries are parked because an organization's plan lacks webhooks, it
ticks every second so they resume soon after the plan returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import attrs
import trio

from actors.clock import Clock
from actors.signal import Wakeup
from actors.timer import TimerActor
from actors.webhook_sender import HttpSender
from actors.webhooks import OUTBOX_BATCH, WebhookActor
from storage.lmdb_store import LmdbStore


@attrs.define
class DispatcherStats:
    ticks: int = 0
    dispatched: int = 0
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

    def statistics(self) -> DispatcherStats:
        return attrs.evolve(self._stats)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        interval = self._poll_s
        woken, parked = True, False
        while True:
            if woken or parked or self._store.read_outbox(1):
                result = await self._actor.tick()
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


async def start_webhooks(nursery: trio.Nursery, *, store: LmdbStore, clock: Clock,
                         timer: TimerActor, wakeup: Wakeup, random: Callable[[int], bytes],
                         allow: Sequence[str] = (), ca_bundle: str | None = None,
                         retry_scale: float = 1.0) -> WebhookActor:
    """Start the WebhookActor (with its senders and one shared HTTP client) and
    the dispatcher in ``nursery``; call before the timer runs, so the actor's
    deadline handlers are registered when the timer loads deadlines."""
    actor = WebhookActor(store, clock, timer, random, wakeup=wakeup, retry_scale=retry_scale)
    sender = HttpSender(clock, allow=allow, ca_bundle=ca_bundle)

    async def serve(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with sender:
            await actor.run(sender, task_status=task_status)

    await nursery.start(serve)
    await nursery.start(OutboxDispatcher(actor, store, wakeup).run)
    return actor
