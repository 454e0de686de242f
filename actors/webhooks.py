"""The WebhookActor: the one owner of endpoints and deliveries.

Theory of operation
-------------------
One actor for the whole service (not one per project, as DESIGN.md first
drew it): it is the only writer of endpoint health and of delivery state, so
the single-owner rule holds, and the senders, the timer and the dispatcher
only ever post to it without blocking, so no send goes up the graph.

* **Endpoints** live in memory (loaded at start) and in the store; every
  change is written by this actor, API changes durably before they answer.
* **Dispatch** (``tick``, called by the OutboxDispatcher): outbox events
  become deliveries for the matching endpoints (webhook_records.accepts,
  plus the organization's plan at that moment) in ONE write per batch that
  also stores each event's body once and acknowledges the outbox entries.
  Events of an organization below Growth are acknowledged and dropped: the
  gap is never sent.
* **Waiting** deliveries (Queued, Retrying) each have a persisted deadline
  (``webhook_attempt``). When it fires the delivery joins the ready queue of
  its endpoint, unless the endpoint is Off or the plan lacks webhooks: then it
  is *parked* (its deadline removed, its state kept). Turning the endpoint on
  re-arms its parked deliveries; a plan that returns is noticed by ``tick``
  (every second while anything is parked) and its parked deliveries resume.
* **Sending**: the ready queues are served round-robin to ``senders`` sender
  tasks, at most ``per_endpoint`` attempts in flight per endpoint. Starting an
  attempt writes Sending and removes the deadline; the sender reports back
  with ``call_nowait``; the report's write (attempt, next state, retry
  deadline, endpoint health) goes to the writer without waiting for the
  commit (commits are grouped; reads of deliveries by this actor first wait
  for its own outstanding writes). A report's write and the Sending writes
  of the attempts it lets start are queued as one op, before the call that
  made them ends, so they stay in order. The bodies of recently dispatched
  events are kept in memory (actors/event_bodies.py), so starting an attempt
  rarely reads its event back from the store.
* **Restart**: deliveries found Sending are settled with
  ``webhook_delivery.requeue_interrupted`` (an interrupted scheduled attempt
  is sent again, same ``webhook-id``: at least once; receivers deduplicate),
  and every waiting delivery of an endpoint that is not Off gets its deadline
  back. A retry is therefore neither lost nor run twice by a restart; only an
  attempt cut off mid-flight (or whose result had not been committed) is
  repeated.
* **History**: a daily ``webhook_purge`` deadline removes deliveries older
  than 30 days (and bodies no delivery refers to any more).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable
from typing import Any, Protocol

import attrs
import lmdb
import orjson
import trio

from actors.clock import Clock
from actors.event_bodies import RecentBodies
from actors.mailbox import Mailbox
from actors.signal import Wakeup
from actors.timer import TimerActor
from actors.webhook_history import PURGE_DEADLINE, first_purge, purge
from actors.webhook_sender import AttemptReport, SendJob
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import ATTEMPT_DEADLINE, WAITING, WebhookStore, attempt_deadline
from storage.writer import Op, Pending
from svc_engine import webhook_delivery as deliveries
from svc_engine.deadlines import Deadline
from svc_engine.errors import Overloaded, SvcError
from svc_engine.ids import new_id
from svc_engine.outbox import OutboxEvent
from svc_engine.plans import QUOTAS
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_records import Endpoint
from svc_engine.webhook_retry import CONNECTION_ERROR
from svc_engine.webhook_steps import FanOut, apply_answer, fan_out

log = logging.getLogger("svc.webhooks")
OUTBOX_BATCH = 256
MAILBOX_CAPACITY = 8192


class Attempter(Protocol):
    async def attempt(self, job: SendJob) -> AttemptReport: ...


@attrs.define
class WebhookStats:
    endpoints: int = 0
    ready: int = 0
    in_flight: int = 0
    parked_by_plan: int = 0
    events_dispatched: int = 0
    deliveries_created: int = 0
    attempts: int = 0
    delivered: int = 0
    failed_attempts: int = 0
    purged: int = 0
    write_failures: int = 0


@attrs.frozen
class TickResult:
    dispatched: int
    parked: bool


class WebhookActor:
    def __init__(self, store: LmdbStore, clock: Clock, timer: TimerActor,
                 random: Callable[[int], bytes], *, wakeup: Wakeup | None = None,
                 senders: int = 32, per_endpoint: int = 8, retry_scale: float = 1.0) -> None:
        self.mailbox = Mailbox("webhooks", MAILBOX_CAPACITY)
        self.tables = WebhookStore(store)
        self._store = store
        self._clock = clock
        self._timer = timer
        self._random = random
        self._senders = senders
        self._per_endpoint = per_endpoint
        self._retry_scale = retry_scale
        # The dispatcher's wake-up: parking for the plan makes it tick every second.
        self._wakeup = wakeup or Wakeup()
        self._endpoints: dict[str, Endpoint] = {}
        self._ready: dict[str, deque[Delivery]] = {}
        self._busy: set[str] = set()  # delivery ids ready or in flight
        self._sending: dict[str, Delivery] = {}
        self._in_flight: dict[str, int] = {}  # per endpoint
        self._running = 0  # jobs handed to senders and not yet reported
        self._parked_plan: dict[str, set[str]] = {}
        self._unchecked: deque[Pending[Any]] = deque()  # in commit order (the writer is FIFO)
        self._bodies = RecentBodies()  # of dispatched events, by (project, mode, event id)
        self._jobs_send, self._jobs_recv = trio.open_memory_channel[SendJob](senders)
        self._stats = WebhookStats()

    def statistics(self) -> WebhookStats:
        self._stats.endpoints = len(self._endpoints)
        self._stats.ready = sum(len(q) for q in self._ready.values())
        self._stats.in_flight = self._running
        self._stats.parked_by_plan = sum(len(s) for s in self._parked_plan.values())
        return attrs.evolve(self._stats)

    # -- running -----------------------------------------------------------------

    async def run(self, attempter: Attempter, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._timer.register(ATTEMPT_DEADLINE, self._on_attempt_deadline)
        self._timer.register(PURGE_DEADLINE, self._on_purge_deadline)
        await self._recover()
        async with trio.open_nursery() as nursery:
            for _ in range(self._senders):
                nursery.start_soon(self._sender_loop, attempter)
            task_status.started()
            await self.mailbox.serve(on_failure=self._reload)

    def _on_purge_deadline(self, deadline: Deadline) -> None:
        self.mailbox.call_nowait(lambda: purge(self, deadline))

    async def call(self, fn: Callable[[], Any]) -> Any:
        return await self.mailbox.call(fn)

    async def _reload(self) -> None:
        self._endpoints = {e.id: e for e in self.tables.all_endpoints()}

    async def _recover(self) -> None:
        """Load endpoints; settle interrupted attempts; re-arm waiting deliveries."""
        await self._reload()
        now = self._clock.now_ms()
        found = self.tables.open_deliveries()
        purge_due = not any(d.kind == PURGE_DEADLINE for d in self._store.load_deadlines())
        purge_first = first_purge(now)

        def op(txn: lmdb.Transaction) -> None:
            for d in found:
                endpoint = self._endpoints.get(d.endpoint_id)
                if endpoint is None:
                    continue
                settled = deliveries.requeue_interrupted(d, now)
                if settled != d:
                    self.tables.save_delivery(txn, d, settled)
                elif not endpoint.is_off and (deadline := attempt_deadline(d)) is not None:
                    self._store.put_deadline(txn, deadline)
            if purge_due:
                self._store.put_deadline(txn, purge_first)

        await self._write(op)
        if found:
            log.info("webhooks: %d open deliveries recovered", len(found))

    # -- writes --------------------------------------------------------------------

    async def _submit(self, op: Op[Any]) -> Pending[Any]:
        """Queue a write without waiting for its commit (failures are logged)."""
        unchecked = self._unchecked
        while unchecked and unchecked[0].done:
            if unchecked.popleft().failed:
                self._stats.write_failures += 1
                log.error("a webhook state write failed; reloading endpoints")
                await self._reload()
        p = await self._store.submit(op)
        unchecked.append(p)
        return p

    async def _submit_all(self, ops: list[Op[Any]]) -> None:
        """Queue several writes as one op (one child transaction, one queue entry)."""
        batch = list(ops)
        ops.clear()
        if len(batch) == 1:
            await self._submit(batch[0])
        elif batch:
            await self._submit(lambda txn: [op(txn) for op in batch])

    async def _write(self, op: Op[Any]) -> Any:
        """Queue a write and wait until it is durable."""
        return await (await self._submit(op)).wait()

    async def _settle(self) -> None:
        """Wait for this actor's own outstanding writes (read-your-writes)."""
        if self._unchecked and not self._unchecked[-1].done:
            with contextlib.suppress(SvcError):  # counted and logged by the next _submit
                await self._unchecked[-1].wait()

    # -- dispatch (outbox -> deliveries) ---------------------------------------------

    async def tick(self) -> TickResult:
        """Dispatch one outbox batch and resume plan-parked deliveries."""
        return await self.mailbox.call(self._tick)

    async def _tick(self) -> TickResult:
        dispatched = await self._dispatch(self._store.read_outbox(OUTBOX_BATCH))
        await self._resume_plan_parked()
        return TickResult(dispatched, bool(self._parked_plan))

    async def _dispatch(self, batch: list[tuple[bytes, OutboxEvent]]) -> int:
        if not batch:
            return 0
        now = self._clock.now_ms()
        planned: list[tuple[bytes, FanOut | None]] = []
        plans: dict[str, bool] = {}
        endpoints = list(self._endpoints.values())
        for key, ev in batch:
            fan = fan_out(ev, endpoints, now, self.new_id, orjson.dumps)
            if fan is not None:
                if ev.project_id not in plans:
                    plans[ev.project_id] = self._plan_allows(ev.project_id)
                if not plans[ev.project_id]:
                    fan = None  # below Growth: never sent, not even later
            planned.append((key, fan))

        def op(txn: lmdb.Transaction) -> list[Delivery]:
            created: list[Delivery] = []
            for key, fan in planned:
                self._store.ack_outbox(txn, key)
                if fan is None or self.tables.has_event(txn, fan.event.project_id,
                                                        fan.event.mode, fan.event.id):
                    continue  # nothing to send, or already dispatched once
                self.tables.put_event(txn, fan.event)
                for d in fan.deliveries:
                    self.tables.add_delivery(txn, fan.event.project_id, d)
                created.extend(fan.deliveries)
            return created

        created: list[Delivery] = await self._write(op)
        self._stats.events_dispatched += len(batch)
        self._stats.deliveries_created += len(created)
        sent = {d.event_id for d in created}
        for _, fan in planned:
            if fan is not None and (made := fan.event).id in sent:
                self._bodies.remember((made.project_id, made.mode, made.id), made.body)
        for d in created:
            await self._consider(d)
        await self._pump()
        return len(batch)

    def _event_body(self, endpoint: Endpoint, event_id: str) -> bytes | None:
        body = self._bodies.get((endpoint.project_id, endpoint.mode, event_id))
        if body is None:
            event = self.tables.event(endpoint.project_id, endpoint.mode, event_id)
            body = event.body if event is not None else None
        return body

    def _plan_allows(self, project_id: str) -> bool:
        project = self._store.get_project(project_id)
        org = self._store.get_org(project.org_id) if project is not None else None
        return org is not None and QUOTAS[org.plan].webhooks

    # -- waiting -> ready ---------------------------------------------------------------

    def _on_attempt_deadline(self, deadline: Deadline) -> None:
        self.mailbox.call_nowait(lambda: self._on_due(deadline))

    async def _on_due(self, deadline: Deadline) -> None:
        if deadline.ref in self._busy:
            return
        await self._settle()
        d = self.tables.delivery(deadline.ref)
        if d is None or attempt_deadline(d) != deadline:
            await self._submit(lambda txn: self._store.delete_deadline(txn, deadline))
            return
        await self._consider(d)
        await self._pump()

    async def _consider(self, d: Delivery, *, front: bool = False) -> None:
        """A delivery whose attempt is due: ready it, or park it."""
        endpoint = self._endpoints.get(d.endpoint_id)
        if endpoint is None or endpoint.is_off or not self._plan_allows(endpoint.project_id):
            if endpoint is not None and not endpoint.is_off:
                self._parked_plan.setdefault(endpoint.project_id, set()).add(d.id)
                self._wakeup.notify()
            if (deadline := attempt_deadline(d)) is not None:
                await self._submit(lambda txn: self._store.delete_deadline(txn, deadline))
            return
        queue = self._ready.setdefault(d.endpoint_id, deque())
        if front:
            queue.appendleft(d)
        else:
            queue.append(d)
        self._busy.add(d.id)

    async def _resume_plan_parked(self) -> None:
        for project_id in list(self._parked_plan):
            if not self._plan_allows(project_id):
                continue
            await self._settle()
            for delivery_id in self._parked_plan.pop(project_id):
                d = self.tables.delivery(delivery_id)
                if d is not None and d.status in WAITING and d.id not in self._busy:
                    await self._consider(d)
        await self._pump()

    async def rearm(self, endpoint: Endpoint) -> None:
        """Give every waiting delivery of a (newly turned on) endpoint its deadline back."""
        await self._settle()
        waiting = [d for d in self.tables.open_deliveries(endpoint.id)
                   if d.status in WAITING and d.id not in self._busy]
        deadlines = [dl for d in waiting if (dl := attempt_deadline(d)) is not None]
        if deadlines:
            await self._store.add_deadlines(deadlines)
            for dl in deadlines:
                self._timer.schedule_nowait(dl)

    # -- ready -> sending -> reported -------------------------------------------------

    async def _pump(self, ops: list[Op[Any]] | None = None) -> None:
        """Start ready deliveries while senders are free; ``ops`` (writes not yet
        queued) go to the writer together with the starts' writes, as one op."""
        ops = [] if ops is None else ops
        while self._ready and self._running < self._senders:
            started = False
            for endpoint_id in list(self._ready):
                if self._running >= self._senders:
                    break
                if self._in_flight.get(endpoint_id, 0) >= self._per_endpoint:
                    continue
                queue = self._ready.pop(endpoint_id)
                d = queue.popleft()
                if queue:
                    self._ready[endpoint_id] = queue  # to the back: round-robin
                self._start(d, ops)
                started = True
            if not started:
                break
        await self._submit_all(ops)

    def _start(self, d: Delivery, ops: list[Op[Any]]) -> None:
        """Hand ``d`` to a sender; its state write is appended to ``ops``."""
        endpoint = self._endpoints.get(d.endpoint_id)
        body = self._event_body(endpoint, d.event_id) if endpoint is not None else None
        if endpoint is None or endpoint.is_off or body is None:
            self._busy.discard(d.id)
            if d.status is DeliveryStatus.SENDING and endpoint is not None:
                settled = deliveries.requeue_interrupted(d, self._clock.now_ms())
                ops.append(lambda txn: self.tables.save_delivery(txn, d, settled))
            return
        sending = deliveries.begin_attempt(d) if d.status in WAITING else d
        if sending is not d:
            ops.append(lambda txn: self.tables.save_delivery(txn, d, sending))
        self._sending[d.id] = sending
        self._in_flight[d.endpoint_id] = self._in_flight.get(d.endpoint_id, 0) + 1
        self._running += 1
        self._jobs_send.send_nowait(SendJob(d.id, endpoint.id, endpoint.url, endpoint.secret,
                                            d.event_type, body))

    async def _sender_loop(self, attempter: Attempter) -> None:
        async for job in self._jobs_recv:
            try:
                report = await attempter.attempt(job)
            except Exception as e:  # a bug must not stop the senders: a failed attempt
                log.exception("webhook attempt of %s failed unexpectedly", job.delivery_id)
                now = self._clock.now_ms()
                report = AttemptReport(job, now, now, None, CONNECTION_ERROR,
                                       f"internal error: {type(e).__name__}")
            while True:
                try:
                    self.mailbox.call_nowait(lambda r=report: self._on_report(r))  # type: ignore[misc]
                    break
                except Overloaded:
                    await trio.sleep(0.01)

    async def _on_report(self, report: AttemptReport) -> None:
        job = report.job
        d = self._sending.pop(job.delivery_id, None)
        self._busy.discard(job.delivery_id)
        self._running -= 1
        left = self._in_flight.get(job.endpoint_id, 1) - 1
        if left > 0:
            self._in_flight[job.endpoint_id] = left
        else:
            self._in_flight.pop(job.endpoint_id, None)
        endpoint = self._endpoints.get(job.endpoint_id)
        ops: list[Op[Any]] = []
        if d is not None and endpoint is not None:
            await self._record(d, endpoint, report, ops)
        await self._pump(ops)

    async def _record(self, d: Delivery, endpoint: Endpoint, report: AttemptReport,
                      ops: list[Op[Any]]) -> None:
        """Apply the report; its write is appended to ``ops``."""
        after, health = apply_answer(d, endpoint, report.answer(), self._retry_scale)
        delivered = after.status is DeliveryStatus.DELIVERED
        self._endpoints[endpoint.id] = health
        self._stats.attempts += 1
        if delivered:
            self._stats.delivered += 1
        else:
            self._stats.failed_attempts += 1

        def op(txn: lmdb.Transaction) -> None:
            self.tables.save_delivery(txn, d, after)
            if health != endpoint:
                self.tables.put_endpoint(txn, health)

        ops.append(op)
        if (deadline := attempt_deadline(after)) is not None:
            self._timer.schedule_nowait(deadline)
        if health.is_off and not endpoint.is_off:
            await self._submit_all(ops)
            log.warning("webhook endpoint %s turned off: %s", endpoint.id,
                        health.health.off_detail)
            await self.drop_ready(endpoint.id)

    async def drop_ready(self, endpoint_id: str) -> None:
        """Forget an endpoint's ready queue (it went Off or away)."""
        queue = self._ready.pop(endpoint_id, deque())
        now = self._clock.now_ms()
        for d in queue:
            self._busy.discard(d.id)
            if d.status is DeliveryStatus.SENDING and endpoint_id in self._endpoints:
                settled = deliveries.requeue_interrupted(d, now)
                await self._submit(lambda txn, d=d, s=settled:  # type: ignore[misc]
                                   self.tables.save_delivery(txn, d, s))

    # -- the owner's state, for the management operations (webhook_admin.py) -----------

    def endpoint(self, endpoint_id: str) -> Endpoint | None:
        return self._endpoints.get(endpoint_id)

    def set_endpoint(self, endpoint: Endpoint) -> None:
        self._endpoints[endpoint.id] = endpoint

    def forget_endpoint(self, endpoint_id: str) -> None:
        self._endpoints.pop(endpoint_id, None)
        self._ready.pop(endpoint_id, None)
        for d in [d for d in self._sending.values() if d.endpoint_id == endpoint_id]:
            del self._sending[d.id]  # its report is ignored; the counters still settle

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def new_id(self) -> str:
        return new_id(self._random(16))

    def random(self, n: int) -> bytes:
        return self._random(n)

    async def write(self, op: Op[Any]) -> Any:
        """A write the caller needs durable (after this actor's earlier ones)."""
        return await self._write(op)

    async def settle(self) -> None:
        """Wait until this actor's own writes are committed (read-your-writes)."""
        await self._settle()

    async def send_now(self, d: Delivery) -> None:
        """Start a manual attempt or a test event at once (front of its queue)."""
        await self._consider(d, front=True)
        await self._pump()

    def is_busy(self, delivery_id: str) -> bool:
        return delivery_id in self._busy

    def schedule(self, deadline: Deadline) -> None:
        self._timer.schedule_nowait(deadline)

    def count_purged(self, n: int) -> None:
        self._stats.purged += n
