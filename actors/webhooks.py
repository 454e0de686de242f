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
  gap is never sent. Attempts start only once that write has committed, so
  an event is never sent under a delivery id a crash could forget.
* **Waiting** deliveries (Queued, Retrying) each have a persisted deadline
  (``webhook_attempt``). When it fires the delivery joins the ready queue of
  its endpoint (actors/webhook_queue.py), unless the endpoint is Off or the
  plan lacks webhooks: then it is *parked* (its deadline removed, its state
  kept). Turning the endpoint on brings its waiting deliveries back as a
  restart does (Restart, below); a plan that returns is noticed by ``tick``
  (every second while anything is parked) and its parked deliveries resume.
* **Backlog**: an endpoint's ready queue holds at most READY_PER_ENDPOINT
  deliveries (webhook_queue.py). A due delivery it refuses (full, or newer
  than deliveries already waiting in the store) *overflows*: its state stays
  in the store as it is (Queued or Retrying, due) and its deadline is
  removed, as parking does; the queue remembers only where to read the
  endpoint's store from. When that ready queue runs down to a quarter, a
  mailbox call (``_refill``) settles the actor's writes and reads the
  endpoint's open deliveries back from there, oldest first, taking those due
  and not busy (at most REFILL_SCAN entries a call); once a read reaches the
  end, new due deliveries are queued directly again. A hung endpoint with
  events coming thus costs the data directory, not memory. Turning the
  endpoint off forgets its ready queue and overflow; turning it on, like a
  restart, queues due deliveries up to the cap and leaves the rest
  overflowed in the store (Restart, below). Manual attempts are never
  refused.
* **Sending**: ready deliveries go to the sender tasks (actors/webhook_pool.py).
  A scheduled attempt's Sending state is shown (actors/webhook_writes.py) but
  not written: the stored delivery stays Queued or Retrying with its
  deadline until the attempt's result replaces both. A crash mid-attempt
  therefore leaves what a persisted Sending would have been settled to at
  restart (waiting, due now): nothing is lost, only the interrupted attempt
  is repeated, under the same ``webhook-id``. (A manual Retry or Resend is
  written Sending before it starts, and its answer says Sending: one
  interrupted, or not started yet, is sent at restart; only when its
  endpoint is Off by then, or the plan lacks webhooks, is it dropped,
  ``requeue_interrupted``.) Bodies of recently dispatched events are kept in
  memory (actors/event_bodies.py), so a start rarely reads the store.
* **Reports** arrive in batches (one call applies every report waiting): the
  next states (retry schedule, endpoint health) and the attempts they let
  start are held, then written with others as one op (webhook_writes.py),
  without waiting for the commit; until then reads see them from memory.
* **Restart**: deliveries found Sending (manual attempts, or data written by
  an older version) are settled with ``webhook_delivery.requeue_interrupted``,
  except a manual attempt whose endpoint is on (and plan allows): it goes to
  the front of its endpoint's queue, as ``send_now`` put it before.
  The open deliveries are read once, by endpoint, oldest first; of an
  endpoint that is not Off, a waiting delivery not due yet keeps its deadline
  (restored if it is missing), and those due go through the cap as if their
  deadlines had fired in that order: the first READY_PER_ENDPOINT are
  queued, the rest stay in the store and the endpoint has overflowed from
  the oldest of them, to be read back as its queue runs down (below Growth
  all stay there, the read-back held until the plan returns). What stays in
  the store costs no write and no timer work: a backlog of any size costs a
  restart one read of it, not a deadline written, fired and removed again
  for each delivery. A retry is therefore neither lost nor run twice by a
  restart; only an attempt cut off mid-flight (or whose result had not been
  committed) is repeated: at least once, receivers deduplicate on
  ``webhook-id``. Turning an endpoint on (``rearm``) brings its waiting
  deliveries back the same way, as of the turn on, but for attempts still in
  flight from before the turn off, left to their reports.
* **History**: an hourly ``webhook_purge`` deadline removes deliveries older
  than 30 days (and bodies no delivery refers to any more):
  actors/webhook_history.py.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable
from typing import Any

import attrs
import lmdb
import orjson
import trio

from actors.clock import Clock
from actors.event_bodies import RecentBodies, body_key
from actors.mailbox import Mailbox
from actors.signal import Wakeup
from actors.timer import TimerActor
from actors.webhook_history import PURGE_DEADLINE, PURGE_EVERY_MS, first_purge, purge
from actors.webhook_ids import IdSource
from actors.webhook_pool import Attempter, SenderPool
from actors.webhook_queue import SendQueue
from actors.webhook_sender import AttemptReport, SendJob
from actors.webhook_writes import ActorWrites, Changes
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import ATTEMPT_DEADLINE, WebhookStore, attempt_deadline
from storage.writer import Op
from svc_engine import webhook_delivery as deliveries
from svc_engine.deadlines import Deadline
from svc_engine.endpoint_health import AUTO_OFF_STREAK_MS, off_check_at
from svc_engine.errors import Overloaded, StorageUnavailable
from svc_engine.outbox import OutboxEvent
from svc_engine.plans import QUOTAS
from svc_engine.webhook_delivery import WAITING, Delivery, DeliveryStatus
from svc_engine.webhook_records import Endpoint, off_if_due
from svc_engine.webhook_retry import RETRY_DELAYS_MS, TIMEOUT
from svc_engine.webhook_steps import FanOut, apply_answer, fan_out

log = logging.getLogger("svc.webhooks")
OFF_CHECK_DEADLINE = "webhook_off_check"
"""When a failure streak that reached 20 within 24 hours meets the automatic
turn-off rule (``endpoint_health.off_check_at``); ``ref``: the endpoint id."""
OUTBOX_BATCH = 256
RECOVER_PAGE = 1_000  # open deliveries read per page (one write at most) at start and on turn-on
MAILBOX_CAPACITY = 8192
REFILL_SCAN = 2_000
"""Open deliveries of an overflowed endpoint one read-back call reads at most
(~10 us each); it asks for another call when it stopped short."""


@attrs.define
class WebhookStats:
    endpoints: int = 0
    ready: int = 0
    in_flight: int = 0
    parked_by_plan: int = 0
    endpoints_overflowed: int = 0
    """Endpoints with due deliveries waiting in the store (their ready queue was full)."""
    body_cache_bytes: int = 0
    """What the cache of recently dispatched event bodies holds (bounded)."""
    events_dispatched: int = 0
    deliveries_created: int = 0
    attempts: int = 0
    delivered: int = 0
    failed_attempts: int = 0
    purged: int = 0
    write_failures: int = 0
    report_calls: int = 0
    """Calls that applied attempt reports (each applies every report waiting)."""
    state_writes: int = 0
    """Ops that wrote held state changes (each carries many)."""


@attrs.frozen
class TickResult:
    dispatched: int
    parked: bool


class WebhookActor:
    def __init__(self, store: LmdbStore, clock: Clock, timer: TimerActor,
                 random: Callable[[int], bytes], *, wakeup: Wakeup | None = None,
                 senders: int = 32, per_endpoint: int = 8, retry_scale: float = 1.0,
                 local: bool = True) -> None:
        self.mailbox = Mailbox("webhooks", MAILBOX_CAPACITY)
        self.tables = WebhookStore(store)
        self._store = store
        self._clock = clock
        self._timer = timer
        self._random = random
        self._ids = IdSource(random, clock)
        self._retry_scale = retry_scale
        self.local_receivers = local  # endpoints on this machine allowed (edits check it)
        # The dispatcher's wake-up: parking for the plan makes it tick every second.
        self._wakeup = wakeup or Wakeup()
        self._endpoints: dict[str, Endpoint] = {}
        self._queue = SendQueue(senders, per_endpoint)
        self._writes = ActorWrites(store, self.tables, self._reload)
        self._senders = SenderPool(senders, clock, self.mailbox.call_nowait)
        self._parked_plan: dict[str, set[str]] = {}
        # project id -> overflowed endpoints whose read-back waits for the plan
        self._held_refills: dict[str, set[str]] = {}
        # endpoints turned on whose backlog could not all be brought back (a
        # write failed): each tick tries again (``rearm_later``)
        self._rearm_pending: set[str] = set()
        self._bodies = RecentBodies()  # of dispatched events (body_key)
        self._stats = WebhookStats()
        # the history purge deadline this actor recorded last (webhook_history)
        self.purge_next: Deadline | None = None

    def statistics(self) -> WebhookStats:
        self._stats.endpoints = len(self._endpoints)
        self._stats.ready = self._queue.ready_count
        self._stats.in_flight = self._queue.running
        self._stats.parked_by_plan = sum(len(s) for s in self._parked_plan.values())
        self._stats.endpoints_overflowed = self._queue.overflowed
        self._stats.body_cache_bytes = self._bodies.size_bytes
        self._stats.write_failures = self._writes.failures
        self._stats.state_writes = self._writes.flushes
        return attrs.evolve(self._stats)

    # -- running -----------------------------------------------------------------

    async def run(self, attempter: Attempter, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        # A retry's deadline is scheduled when its write is held, not yet queued.
        # How far ahead each kind is ever planned: one found further ahead (the
        # wall clock went back since it was planned) fires at once.
        self._timer.register(ATTEMPT_DEADLINE, self._on_attempt_deadline,
                             settle=self._writes.settle, longest_ms=math.ceil(
                                 max(RETRY_DELAYS_MS) * max(1.0, self._retry_scale)))
        self._timer.register(PURGE_DEADLINE, self._on_purge_deadline,
                             longest_ms=PURGE_EVERY_MS)
        self._timer.register(OFF_CHECK_DEADLINE, self._on_off_check,
                             settle=self._writes.settle, longest_ms=AUTO_OFF_STREAK_MS + 1)
        await self._recover()
        async with trio.open_nursery() as nursery:
            await nursery.start(self._writes.run)
            await nursery.start(self._senders.run, attempter, self._on_reports)
            task_status.started()
            await self.mailbox.serve(on_failure=self._reload)

    def _on_purge_deadline(self, deadline: Deadline) -> None:
        self.mailbox.call_nowait(lambda: purge(self, deadline))

    async def call(self, fn: Callable[[], Any]) -> Any:
        return await self.mailbox.call(fn)

    async def _reload(self) -> None:
        self._endpoints = {e.id: e for e in self.tables.all_endpoints()}

    async def _recover(self) -> None:
        """Load endpoints; settle interrupted attempts; bring the waiting
        deliveries back (``_bring_back``), a page at a time: a backlog of
        open deliveries is never all in memory, nor one huge transaction, and
        what of it stays in the store costs no write and no timer work."""
        await self._reload()
        now = self._clock.now_ms()
        if not self._store.deadline_kinds({PURGE_DEADLINE}):
            first = first_purge(now)
            await self._writes.write(lambda txn: self._store.put_deadline(txn, first))
            self.purge_next = first
        plans: dict[str, bool] = {}
        recovered = 0
        after: bytes | None = None
        while True:
            found, after = self.tables.open_deliveries_page(after, RECOVER_PAGE)
            recovered += len(found)
            await self._bring_back(found, now, plans, schedule=False)  # the timer loads them
            if after is None:
                break
        # Once serving: start what was queued, ask for the read-backs.
        self.mailbox.call_nowait(lambda: self._pump(Changes()))
        if recovered:
            log.info("webhooks: %d open deliveries recovered; %d endpoints have due ones"
                     " left in the store", recovered, self._queue.overflowed)

    async def rearm(self, endpoint: Endpoint) -> None:
        """Bring back the waiting deliveries of an endpoint just turned on, as
        a restart does (``_bring_back``): those not due yet keep their
        deadlines, those due go through the cap oldest first and the rest
        stay in the store, the endpoint overflowed from the oldest of them
        (turning it off forgot its ready queue and overflow). A backlog of
        any size costs one read of it, not a deadline written, fired and
        removed again for each delivery. Attempts still in flight from
        before the turn off (busy) are left to their reports, which cannot
        land meanwhile: they are calls of this actor's mailbox, run after
        this one, so once ``settle`` returns the store holds every state."""
        await self._writes.settle()  # the scan reads committed states
        now = self._clock.now_ms()
        plans: dict[str, bool] = {}
        after: bytes | None = None
        while True:
            found, after = self.tables.open_deliveries_page(after, RECOVER_PAGE, endpoint.id)
            await self._bring_back([d for d in found if not self._queue.is_busy(d.id)],
                                   now, plans, schedule=True)
            if after is None:
                break
        self._pump(Changes())  # start what was queued; read back as the queue runs down

    async def rearm_or_later(self, endpoint: Endpoint) -> None:
        """``rearm``; when the store cannot write part way, the rest of the
        backlog is brought back by a later tick (every second until a write
        works) instead of waiting for a restart. Bringing back again what
        was brought back is a no-op (queued ones are busy, those left are
        left again, deadlines stored are not written twice)."""
        try:
            await self.rearm(endpoint)
        except StorageUnavailable as e:
            log.warning("webhooks: endpoint %s is on, but bringing back its waiting "
                        "deliveries failed (%s); retrying every second", endpoint.id, e)
            self._rearm_pending.add(endpoint.id)
            self._wakeup.notify()
        else:
            self._rearm_pending.discard(endpoint.id)  # turned off and on again meanwhile

    async def _rearm_pending_ones(self) -> None:
        for endpoint_id in list(self._rearm_pending):
            endpoint = self._endpoints.get(endpoint_id)
            if endpoint is None or endpoint.is_off:  # deleted or off again: nothing to do
                self._rearm_pending.discard(endpoint_id)
                continue
            try:
                await self.rearm(endpoint)
            except StorageUnavailable:
                return  # the store still cannot write: next tick
            except Exception:  # a fault of ours: logged, not retried every second
                log.exception("webhooks: bringing back the deliveries of endpoint %s failed",
                              endpoint_id)
            self._rearm_pending.discard(endpoint_id)

    async def _bring_back(self, found: list[Delivery], now_ms: int, plans: dict[str, bool],
                          *, schedule: bool) -> None:
        """Bring back one page of open deliveries (``_bring_back_page``) and
        write what that takes; ``schedule``: then hand the deadlines it
        restored to the timer (persisted first, the timer's rule; at a
        restart the timer, not started yet, loads them from the store)."""
        op, armed = self._bring_back_page(found, now_ms, plans)
        if op is not None:
            await self._writes.write(op)
        if schedule:
            for deadline in armed:
                self._timer.schedule_nowait(deadline)

    def _bring_back_page(self, found: list[Delivery], now_ms: int, plans: dict[str, bool]
                         ) -> tuple[Op[None] | None, list[Deadline]]:
        """Bring back one page of open deliveries (in the store's order: by
        endpoint, oldest first), at a restart or when their endpoint is turned
        on. A delivery found Sending is settled (``requeue_interrupted``). Of
        an endpoint that is not Off (turning it on brings them back), a
        waiting delivery not due yet keeps its deadline (written again only
        if it is not in the store); one due is queued in its endpoint's ready
        queue while the cap allows (its stored deadline removed: the queue
        holds it, a restart finds it open), and otherwise left in the store to be
        read back, oldest first, as if ``add`` had refused it: without a
        deadline, so the timer does not fire it. While the organization's
        plan lacks webhooks, every due delivery is left there (its read-back
        is held until the plan returns). Returns the write that takes (None:
        nothing to write) and the deadlines it restores."""
        settles: list[tuple[Delivery, Delivery]] = []
        keep: list[Deadline] = []  # not due yet
        left: list[Deadline] = []  # due, left in the store
        queued: list[Deadline] = []  # due, in the ready queue: the timer has nothing to do
        manual: list[Delivery] = []  # acknowledged Retry and Resend not yet sent
        for d in found:
            endpoint = self._endpoints.get(d.endpoint_id)
            if endpoint is None:
                continue
            if (d.status is DeliveryStatus.SENDING and d.next_trigger == deliveries.MANUAL
                    and not endpoint.is_off and self._plan_allows(endpoint.project_id, plans)):
                manual.append(d)  # sent now, as the team member's click was answered
                continue
            settled = deliveries.requeue_interrupted(d, now_ms)
            if settled != d:
                settles.append((d, settled))  # with its deadline, if waiting
            deadline = attempt_deadline(settled)
            if endpoint.is_off or deadline is None:
                continue
            if not deliveries.is_due(settled, now_ms):
                keep.append(deadline)
            elif not self._plan_allows(endpoint.project_id, plans):
                self._queue.leave(settled)
                left.append(deadline)
            elif self._queue.add(settled):
                queued.append(deadline)
            else:
                left.append(deadline)
        for d in reversed(manual):  # each to the front: in the order they were made
            self._queue.add(d, front=True)
        written = {dl for _, s in settles if (dl := attempt_deadline(s)) is not None}
        stored = self._store.persisted_deadlines(keep + left + queued) | written
        arm = [dl for dl in keep if dl not in stored]
        disarm = [dl for dl in left + queued if dl in stored]
        if not (settles or arm or disarm):
            return None, []

        def op(txn: lmdb.Transaction) -> None:
            for before, after in settles:
                self.tables.save_delivery(txn, before, after)
            for dl in disarm:
                self._store.delete_deadline(txn, dl)
            for dl in arm:
                self._store.put_deadline(txn, dl)

        return op, arm

    # -- dispatch (outbox -> deliveries) ---------------------------------------------

    async def tick(self) -> TickResult:
        """Dispatch one outbox batch and resume plan-parked deliveries."""
        return await self.mailbox.call(self._tick)

    async def _tick(self) -> TickResult:
        refused: StorageUnavailable | None = None
        try:
            dispatched = await self._dispatch(self._store.read_outbox(OUTBOX_BATCH))
        except StorageUnavailable as e:  # the events stay in the outbox
            dispatched, refused = 0, e
        self._resume_plan_parked()
        await self._rearm_pending_ones()
        if refused is not None:
            raise refused  # the dispatcher ticks again in a second
        return TickResult(dispatched, bool(self._parked_plan or self._held_refills
                                           or self._rearm_pending))

    async def _dispatch(self, batch: list[tuple[bytes, OutboxEvent]]) -> int:
        if not batch:
            return 0
        now = self._clock.now_ms()
        self._turn_off_due(now)
        planned: list[tuple[bytes, FanOut | None]] = []
        plans: dict[str, bool] = {}
        endpoints = list(self._endpoints.values())
        for key, ev in batch:
            fan = fan_out(ev, endpoints, now, self._ids.new_delivery_id, orjson.dumps)
            if fan is not None and not self._plan_allows(ev.project_id, plans):
                fan = None  # below Growth: never sent, not even later
            planned.append((key, fan))

        created: list[Delivery] = await self._writes.write(
            lambda txn: self.tables.add_fan_outs(txn, planned))
        self._stats.events_dispatched += len(batch)
        self._stats.deliveries_created += len(created)
        sent = {d.event_id for d in created}
        for _, fan in planned:
            if fan is not None and (made := fan.event).id in sent:
                self._bodies.remember(body_key(made.project_id, made.mode, made.id), made.body)
        changes = Changes()
        for d in created:
            self._consider(d, changes, plans=plans)
        self._pump(changes)
        return len(batch)

    def _turn_off_due(self, now_ms: int) -> None:
        """Endpoints whose failure streak met the automatic rule since their
        last attempt go Off as of that moment, before events are fanned out
        (an event after it is not queued for them). The rule's own deadline
        (``_on_off_check``) does it at that moment; this is for a deadline
        not fired yet (held up by a busy mailbox, or a restart)."""
        changes = Changes()
        for endpoint in list(self._endpoints.values()):
            if self._endpoint_now(endpoint.id, changes, now_ms) is not endpoint:
                self._drop_ready(endpoint.id, changes)
        if changes:
            self._writes.apply(changes)

    def _endpoint_now(self, endpoint_id: str, changes: Changes,
                      now_ms: int | None = None) -> Endpoint | None:
        """The endpoint as the automatic rule has it now: Off as of the moment
        the rule held, if its streak met it since its last attempt (the
        change held in ``changes``). Its ready queue is the caller's."""
        endpoint = self._endpoints.get(endpoint_id)
        if endpoint is None or endpoint.is_off:
            return endpoint
        due = off_if_due(endpoint, self._clock.now_ms() if now_ms is None else now_ms)
        if due is not endpoint:
            self._endpoints[endpoint_id] = due
            changes.endpoint(due)
            log.warning("webhook endpoint %s turned off: %s", endpoint_id,
                        due.health.off_detail)
        return due

    def _on_off_check(self, deadline: Deadline) -> None:
        self.mailbox.call_nowait(lambda: self._off_check(deadline))

    def _off_check(self, deadline: Deadline) -> None:
        """A streak's turn-off moment: Off now if nothing ended the streak
        since (a success, turning off and on), whatever is waiting to retry."""
        changes = Changes()
        changes.op(lambda txn: self._store.delete_deadline(txn, deadline))
        endpoint = self._endpoints.get(deadline.ref)
        if endpoint is not None and self._endpoint_now(endpoint.id, changes) is not endpoint:
            self._drop_ready(endpoint.id, changes)
        self._pump(changes)

    def _event_body(self, endpoint: Endpoint, event_id: str) -> bytes | None:
        body = self._bodies.get(body_key(endpoint.project_id, endpoint.mode, event_id))
        if body is None:
            event = self.tables.event(endpoint.project_id, endpoint.mode, event_id)
            body = event.body if event is not None else None
        return body

    def _plan_allows(self, project_id: str, known: dict[str, bool] | None = None) -> bool:
        """Whether the project's organization has webhooks now (``known``: the
        answers already read while handling this call)."""
        if known is not None and project_id in known:
            return known[project_id]
        project = self._store.get_project(project_id)
        org = self._store.get_org(project.org_id) if project is not None else None
        allowed = org is not None and QUOTAS[org.plan].webhooks
        if known is not None:
            known[project_id] = allowed
        return allowed

    # -- waiting -> ready ---------------------------------------------------------------

    def _on_attempt_deadline(self, deadline: Deadline) -> None:
        self.mailbox.call_nowait(lambda: self._on_due(deadline))

    def _on_due(self, deadline: Deadline) -> None:
        if self._queue.is_busy(deadline.ref):
            return
        d = self.tables.delivery(deadline.ref)  # its newest state, committed or not
        changes = Changes()
        if d is None or attempt_deadline(d) != deadline:
            changes.op(lambda txn: self._store.delete_deadline(txn, deadline))
        else:
            self._consider(d, changes)
        self._pump(changes)

    def _consider(self, d: Delivery, changes: Changes, *, front: bool = False,
                  plans: dict[str, bool] | None = None) -> None:
        """A delivery whose attempt is due: ready it, park it, or leave it in
        the store (its endpoint's ready queue is full: module docstring)."""
        endpoint = self._endpoint_now(d.endpoint_id, changes)
        if (endpoint is None or endpoint.is_off
                or not self._plan_allows(endpoint.project_id, plans)):
            if endpoint is not None and not endpoint.is_off:
                self._parked_plan.setdefault(endpoint.project_id, set()).add(d.id)
                self._wakeup.notify()
            if (deadline := attempt_deadline(d)) is not None:
                changes.op(lambda txn: self._store.delete_deadline(txn, deadline))
            return
        if self._queue.add(d, front=front):
            return
        # Overflowed: read back by _refill, not fired again by the timer.
        if (overflowed := attempt_deadline(d)) is not None:
            changes.op(lambda txn: self._store.delete_deadline(txn, overflowed))

    def _resume_plan_parked(self) -> None:
        changes = Changes()
        for project_id in list(self._held_refills):
            if self._plan_allows(project_id):
                for endpoint_id in self._held_refills.pop(project_id):
                    self._queue.refill_ended(endpoint_id)  # _pump asks for it again
        for project_id in list(self._parked_plan):
            if not self._plan_allows(project_id):
                continue
            for delivery_id in self._parked_plan.pop(project_id):
                d = self.tables.delivery(delivery_id)
                if d is not None and d.status in WAITING and not self._queue.is_busy(d.id):
                    self._consider(d, changes)
        self._pump(changes)

    async def _refill(self, endpoint_id: str) -> None:
        """Read an overflowed endpoint's due deliveries back into its ready
        queue (a mailbox call asked for by ``_pump``)."""
        held = False
        try:
            await self._writes.settle()  # the scan reads committed states
            held = self._read_back(endpoint_id)
        finally:
            if not held:
                self._queue.refill_ended(endpoint_id)
        self._pump(Changes())

    def _read_back(self, endpoint_id: str) -> bool:
        """The synchronous part of ``_refill``, after the actor's writes have
        committed: every delivery before where it stops was taken, is not due
        (its deadline is in the timer or the store), is busy, or is parked for
        the plan (``tick`` resumes it through the cap). True: held, not read,
        while the organization's plan lacks webhooks (``tick`` lets it go on
        when the plan returns)."""
        go_on = self._queue.overflow_from(endpoint_id)
        endpoint = self._endpoints.get(endpoint_id)
        if go_on is None or endpoint is None or endpoint.is_off:
            self._queue.refilled(endpoint_id, None)  # Off: turning on brings them back
            return False
        if not self._plan_allows(endpoint.project_id):  # held in the store, not parked
            self._held_refills.setdefault(endpoint.project_id, set()).add(endpoint_id)
            self._wakeup.notify()
            return True
        parked = self._parked_plan.get(endpoint.project_id, set())  # tick resumes those
        now = self._queue.due_by(endpoint_id, self._clock.now_ms())
        room = self._queue.room(endpoint_id)
        scanned = 0
        while go_on is not None and scanned < REFILL_SCAN:
            limit = min(RECOVER_PAGE, REFILL_SCAN - scanned)
            page, after = self.tables.open_deliveries_from(endpoint_id, go_on, limit)
            scanned += limit
            for d in page:
                if (not deliveries.is_due(d, now) or self._queue.is_busy(d.id)
                        or d.id in parked):
                    continue
                if room == 0:
                    self._queue.refilled(endpoint_id, d.id)
                    return False
                room -= 1
                self._queue.take_back(d)
            go_on = after
        self._queue.refilled(endpoint_id, go_on)
        return False

    # -- ready -> sending -> reported -------------------------------------------------

    def _pump(self, changes: Changes) -> None:
        """Start ready deliveries while senders are free; hold ``changes`` (with
        what the starts change) to be written; ask for the read-back of
        overflowed endpoints whose ready queue ran low."""
        plans: dict[str, bool] = {}
        for d in self._queue.startable(self._project_of):
            self._start(d, changes, plans)
        self._writes.apply(changes)
        for endpoint_id in self._queue.refills_due():
            try:
                self.mailbox.call_nowait(functools.partial(self._refill, endpoint_id))
            except Overloaded:  # the calls queued will pump, and ask again
                self._queue.refill_ended(endpoint_id)

    def _project_of(self, endpoint_id: str) -> str | None:
        endpoint = self._endpoints.get(endpoint_id)
        return endpoint.project_id if endpoint is not None else None

    def _start(self, d: Delivery, changes: Changes, plans: dict[str, bool]) -> None:
        """Hand ``d`` (as stored) to a sender; park it instead if its
        organization's plan no longer has webhooks (it lapsed while ``d``
        was ready: nothing is sent below Growth). ``plans``: the answers
        read in this pump. No attempt starts once the automatic rule holds
        (``_endpoint_now``; its ready queue is given up a delivery at a time,
        here, as ``startable`` takes them)."""
        endpoint = self._endpoint_now(d.endpoint_id, changes)
        if (endpoint is not None and not endpoint.is_off
                and not self._plan_allows(endpoint.project_id, plans)):
            self._queue.release(d)
            self._consider(d, changes, plans=plans)  # parked until the plan returns
            return
        body = self._event_body(endpoint, d.event_id) if endpoint is not None else None
        if endpoint is None or endpoint.is_off or body is None:
            self._queue.release(d)
            if d.status is DeliveryStatus.SENDING and endpoint is not None:
                changes.save(d, deliveries.requeue_interrupted(d, self._clock.now_ms()))
            return
        if d.status in WAITING:
            sending = deliveries.begin_attempt(d)
            self._writes.in_flight(sending)  # shown, not written (module docstring)
        else:
            sending = d  # a manual attempt, written Sending by its action
        self._queue.started(d, sending, endpoint.project_id)
        self._senders.send_nowait(SendJob(d.id, endpoint.id, endpoint.url, endpoint.secret,
                                          d.event_type, body))

    def _on_reports(self, reports: list[AttemptReport]) -> None:
        self._stats.report_calls += 1
        changes = Changes()
        turned_off: list[Endpoint] = []
        for report in reports:
            job = report.job
            started = self._queue.finished(job.delivery_id, job.endpoint_id)
            self._queue.answered(job.endpoint_id, hung=report.error == TIMEOUT)
            endpoint = self._endpoints.get(job.endpoint_id)
            if started is not None and endpoint is not None:
                health = self._record(*started, endpoint, report, changes)
                if health.is_off and not endpoint.is_off:
                    turned_off.append(health)
        for endpoint in turned_off:
            log.warning("webhook endpoint %s turned off: %s", endpoint.id,
                        endpoint.health.off_detail)
            self._drop_ready(endpoint.id, changes)
        self._pump(changes)

    def _record(self, stored: Delivery, sending: Delivery, endpoint: Endpoint,
                report: AttemptReport, changes: Changes) -> Endpoint:
        """Apply one report to the delivery and its endpoint; returns the endpoint."""
        after, health = apply_answer(sending, endpoint, report.answer(), self._retry_scale)
        self._endpoints[endpoint.id] = health
        if (check_at := off_check_at(endpoint.health, health.health)) is not None:
            check = Deadline(check_at, OFF_CHECK_DEADLINE, endpoint.id)
            changes.op(lambda txn: self._store.put_deadline(txn, check))
            self._timer.schedule_nowait(check)
        self._stats.attempts += 1
        if after.status is DeliveryStatus.DELIVERED:
            self._stats.delivered += 1
        else:
            self._stats.failed_attempts += 1
        changes.save(stored, after)
        if health != endpoint:
            changes.endpoint(health)
        if (deadline := attempt_deadline(after)) is not None:
            self._timer.schedule_nowait(deadline)
        return health

    def _drop_ready(self, endpoint_id: str, changes: Changes) -> None:
        now = self._clock.now_ms()
        for d in self._queue.drop_ready(endpoint_id):
            if d.status is DeliveryStatus.SENDING and endpoint_id in self._endpoints:
                changes.save(d, deliveries.requeue_interrupted(d, now))

    def drop_ready(self, endpoint_id: str) -> None:
        """Forget an endpoint's ready queue (it went Off or away)."""
        changes = Changes()
        self._drop_ready(endpoint_id, changes)
        self._writes.apply(changes)

    # -- the owner's state, for the management operations (webhook_admin.py) -----------

    def endpoint(self, endpoint_id: str) -> Endpoint | None:
        return self._endpoints.get(endpoint_id)

    def set_endpoint(self, endpoint: Endpoint) -> None:
        self._endpoints[endpoint.id] = endpoint

    def forget_endpoint(self, endpoint_id: str) -> None:
        self._endpoints.pop(endpoint_id, None)
        for sending in self._queue.forget(endpoint_id):
            self._writes.forget(sending)  # its report is ignored; the counters still settle

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def new_id(self) -> str:
        return self._ids.new_id()

    def new_delivery_id(self) -> str:
        return self._ids.new_delivery_id()

    def random(self, n: int) -> bytes:
        return self._random(n)

    async def write(self, op: Op[Any]) -> Any:
        """A write the caller needs durable (after this actor's earlier ones)."""
        return await self._writes.write(op)

    async def settle(self) -> None:
        """Wait until this actor's own writes are committed (read-your-writes)."""
        await self._writes.settle()

    def send_now(self, d: Delivery) -> None:
        """Start a manual attempt or a test event at once (front of its queue)."""
        changes = Changes()
        self._consider(d, changes, front=True)
        self._pump(changes)

    def is_busy(self, delivery_id: str) -> bool:
        return self._queue.is_busy(delivery_id)

    def manual_waiting(self, endpoint_id: str) -> int:
        """Manual attempts of the endpoint waiting to start (``send_now``)."""
        return self._queue.manual_waiting(endpoint_id)

    def schedule(self, deadline: Deadline) -> None:
        self._timer.schedule_nowait(deadline)

    def count_purged(self, n: int) -> None:
        self._stats.purged += n
