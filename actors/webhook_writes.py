"""The WebhookActor's writes: in order, grouped, readable before they commit.

Theory of operation
-------------------
* Every write of the actor goes to the store's one writer in the order the
  actor made it (the writer is FIFO). ``write`` waits for the commit, for
  the callers whose answer depends on it; ``submit`` does not. A write that
  failed is counted and logged when the next one is queued, and the actor's
  ``on_failure`` (reload the endpoints) runs.
* The state changes of attempts (results, retry schedules, endpoint health,
  parked deadlines: a ``Changes``) are *held* and queued together as ONE op
  once the previous such op has committed and ``window_s`` has passed since
  it was queued: many attempts share one child transaction and one synced
  commit, and an endpoint's health is written once per op, in its latest
  state. Any other write queues what is held first, so the order of all the
  actor's writes is the order it made them; ``settle`` queues what is held
  and waits for everything. When the actor stops, what is held is queued
  before the writer closes.
* Until a delivery's or an endpoint's new state has committed, it is kept
  here; so is the Sending state of an attempt in flight, which for a
  scheduled attempt is never written at all (actors/webhooks.py says why
  that is safe). The store's reads (WebhookStore: the API and the dashboard)
  prefer these states, so a reader sees a delivery go Queued, Sending, then
  its result, never back. An entry is dropped once the op writing it is done
  (committed; or failed, and then the store's older state is the truth).
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import lmdb
import trio

from actors.signal import Wakeup
from storage import layout
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import WebhookStore
from storage.writer import Op, Pending
from svc_engine.errors import SvcError
from svc_engine.log_backoff import LogBackoff
from svc_engine.webhook_delivery import Delivery
from svc_engine.webhook_records import Endpoint

log = logging.getLogger("svc.webhooks")
FLUSH_WINDOW_S = 0.01
"""Held changes are queued at most this often (and never before the previous
ones committed), so that many attempts share one synced commit."""

_Step = tuple[Delivery | None, Delivery] | Op[Any]


class Changes:
    """State changes, applied in the order made; changed endpoints (the latest
    state of each) last."""

    __slots__ = ("endpoints", "saved", "steps")

    def __init__(self) -> None:
        self.steps: list[_Step] = []
        self.saved: list[Delivery] = []
        self.endpoints: dict[str, Endpoint] = {}

    def save(self, before: Delivery | None, after: Delivery) -> None:
        """A delivery goes from ``before`` (as stored) to ``after`` (save_delivery)."""
        self.steps.append((before, after))
        self.saved.append(after)

    def op(self, op: Op[Any]) -> None:
        self.steps.append(op)

    def endpoint(self, endpoint: Endpoint) -> None:
        self.endpoints[endpoint.id] = endpoint

    def extend(self, other: Changes) -> None:
        self.steps.extend(other.steps)
        self.saved.extend(other.saved)
        self.endpoints.update(other.endpoints)

    def __bool__(self) -> bool:
        return bool(self.steps or self.endpoints)


class ActorWrites:
    def __init__(self, store: LmdbStore, tables: WebhookStore,
                 on_failure: Callable[[], Awaitable[None]], *,
                 window_s: float = FLUSH_WINDOW_S) -> None:
        self._store = store
        self._tables = tables
        self._on_failure = on_failure
        self._window_s = window_s
        # in commit order: (op, keys of the deliveries and ids of the endpoints it writes)
        self._queued: deque[tuple[Pending[Any], list[bytes], list[str]]] = deque()
        # newest states not committed: (state, the op writing it; None while held or sending)
        self._deliveries: dict[bytes, tuple[Delivery, Pending[Any] | None]] = {}
        self._endpoints: dict[str, tuple[Endpoint, Pending[Any] | None]] = {}
        self._held = Changes()
        self._last: Pending[Any] | None = None  # the last op of held changes
        self._wakeup = Wakeup()
        self._order = trio.Lock()  # held changes are taken and queued in one turn
        self.failures = 0
        self._failure_log = LogBackoff()
        self.flushes = 0
        tables.prefer(self.newer, self.newer_endpoint, self.pending)

    # -- what is not committed yet ----------------------------------------------------

    def newer(self, key: bytes) -> Delivery | None:
        """A delivery's newest state not yet committed (by its 16-byte key)."""
        entry = self._deliveries.get(key)
        if entry is None:
            return None
        if entry[1] is not None and entry[1].done:
            del self._deliveries[key]
            return None
        return entry[0]

    def pending(self) -> dict[bytes, Delivery]:
        """A copy of every delivery state ``newer`` shows now (by key)."""
        return {key: d for key, (d, p) in self._deliveries.items()
                if p is None or not p.done}

    def newer_endpoint(self, endpoint_id: str) -> Endpoint | None:
        """An endpoint's newest state not yet committed."""
        entry = self._endpoints.get(endpoint_id)
        if entry is None:
            return None
        if entry[1] is not None and entry[1].done:
            del self._endpoints[endpoint_id]
            return None
        return entry[0]

    def in_flight(self, d: Delivery) -> None:
        """``d`` (Sending) is being attempted; it is shown, not written."""
        self._deliveries[layout.uid(d.id)] = (d, None)

    def forget(self, d: Delivery) -> None:
        """An attempt in flight (``d``, Sending) whose endpoint went away."""
        key = layout.uid(d.id)
        entry = self._deliveries.get(key)
        if entry is not None and entry[0] is d:
            del self._deliveries[key]

    # -- held changes -------------------------------------------------------------------

    def apply(self, changes: Changes) -> None:
        """Hold ``changes``; they are queued soon, with others, as one op."""
        if not changes:
            return
        self._held.extend(changes)
        for after in changes.saved:
            self._deliveries[layout.uid(after.id)] = (after, None)
        for endpoint in changes.endpoints.values():
            self._endpoints[endpoint.id] = (endpoint, None)
        self._wakeup.notify()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Queue what is held (see the module docstring); when cancelled, queue
        what is held before ending."""
        task_status.started()
        try:
            while True:
                await self._wakeup.wait()
                if self._last is not None:
                    await _done(self._last)
                await trio.sleep(self._window_s)
                await self._flush()
        finally:
            with trio.CancelScope(shield=True):
                try:
                    await self._flush()
                except SvcError as e:  # the store is closing: the results are sent again
                    log.error("webhook results not written at stop: %s", e)

    async def _flush(self) -> None:
        async with self._order:
            await self._flush_held()

    async def _flush_held(self) -> None:
        held = self._held
        if not held:
            return
        self._held = Changes()
        steps, endpoints = held.steps, list(held.endpoints.values())
        tables = self._tables

        def op(txn: lmdb.Transaction) -> None:
            for step in steps:
                if isinstance(step, tuple):
                    tables.save_delivery(txn, step[0], step[1])
                else:
                    step(txn)
            for endpoint in endpoints:
                tables.put_endpoint(txn, endpoint)

        keys = [layout.uid(after.id) for after in held.saved]
        p = await self._submit(op, keys, [e.id for e in endpoints])
        self._last = p
        self.flushes += 1
        for key, after in zip(keys, held.saved, strict=True):
            entry = self._deliveries.get(key)
            if entry is not None and entry[0] is after:
                self._deliveries[key] = (after, p)
        for endpoint in endpoints:
            shown = self._endpoints.get(endpoint.id)
            if shown is not None and shown[0] is endpoint:
                self._endpoints[endpoint.id] = (endpoint, p)

    # -- other writes ---------------------------------------------------------------------

    async def submit(self, op: Op[Any]) -> Pending[Any]:
        """Queue ``op`` after everything held so far, without waiting for it."""
        async with self._order:
            await self._flush_held()
            return await self._submit(op, [], [])

    async def write(self, op: Op[Any]) -> Any:
        """Queue ``op`` after everything held so far and wait until it is durable."""
        return await (await self.submit(op)).wait()

    async def settle(self) -> None:
        """Queue what is held and wait until every write so far is committed
        (before scanning the store)."""
        await self._flush()
        if self._queued:
            await _done(self._queued[-1][0])

    async def _submit(self, op: Op[Any], keys: list[bytes], endpoint_ids: list[str]
                      ) -> Pending[Any]:
        queued = self._queued
        while queued and queued[0][0].done:
            done, written, endpoints_written = queued.popleft()
            for key in written:
                entry = self._deliveries.get(key)
                if entry is not None and entry[1] is done:
                    del self._deliveries[key]
            for endpoint_id in endpoints_written:
                shown = self._endpoints.get(endpoint_id)
                if shown is not None and shown[1] is done:
                    del self._endpoints[endpoint_id]
            if done.failed:
                self.failures += 1
                # the store logs why (storage/writer.py); this, how many so far
                logged = self._failure_log.after(self.failures)
                if logged is not None:
                    log.error("a webhook state write failed; reloading endpoints (%d failed "
                              "so far)", self.failures)
                    self._failure_log = logged
                await self._on_failure()
        p = await self._store.submit(op)
        queued.append((p, keys, endpoint_ids))
        return p


async def _done(p: Pending[Any]) -> None:
    """Wait until ``p`` is done, committed or not: a failed write is counted and
    logged when the queue is trimmed (``_submit``), not here."""
    with contextlib.suppress(Exception):
        await p.wait()
