"""Webhook endpoints, deliveries and delivery bodies in LMDB.

Databases (storage/layout.py):

- ``endpoints``: scope (project | mode) | endpoint id -> Endpoint
- ``deliveries``: delivery id -> Delivery
- ``deliveries_by_project``: scope | created ms | delivery id -> endpoint id
  (the recent deliveries list of a mode, newest first by reverse scan)
- ``deliveries_by_endpoint``: endpoint id | created ms | delivery id -> b""
  (an endpoint's history: its filter, and deleting it)
- ``deliveries_by_time``: created ms | delivery id -> project id (the 30-day purge)
- ``deliveries_open``: endpoint id | delivery id -> b"" while Queued, Sending or
  Retrying (restart recovery and turn on, without reading the whole history)
- ``webhook_events``: scope | event id -> WebhookEvent: the body, once per
  event, shared by its deliveries and removed with the last of them.

A waiting delivery's next attempt is a persisted Deadline (kind
``webhook_attempt``, ref = delivery id, due = ``next_attempt_at_ms``) written
by ``save_delivery`` in the same transaction as the state that schedules it,
and removed in the transaction that records the attempt's result (or starts a
manual attempt; a scheduled attempt's start is not written, see
actors/webhooks.py).

Delivery ids are time-ordered (``webhook_delivery.new_delivery_id``), so the
deliveries of one dispatched batch, and their results, share B-tree pages in
``deliveries`` and ``deliveries_open``.

Only the WebhookActor writes these (the ops below run inside its writes); the
API reads them directly. The actor registers (``prefer``) lookups of the
delivery and endpoint states it holds and has not committed yet (an attempt
in flight, a result on its way to the disk): ``delivery``, ``recent``,
``endpoint`` and ``endpoints`` show those, so a reader never sees a record go
back to an older state. ``recent_off_loop`` (a listing filtered by status, whose
scan runs in a worker thread) instead copies those delivery states when its
read transaction begins, on the event loop (``pending``). The scans the actor
uses itself (``open_deliveries``, ``open_deliveries_from``, ``expired``,
``all_endpoints``) read committed records only.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any

import attrs
import cbor2
import lmdb
import trio

from storage import layout
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore, prefix_keys
from svc_engine.deadlines import Deadline
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import WAITING, Delivery, DeliveryStatus
from svc_engine.webhook_records import Endpoint, WebhookEvent
from svc_engine.webhook_steps import FanOut

ATTEMPT_DEADLINE = "webhook_attempt"
OPEN = (DeliveryStatus.QUEUED, DeliveryStatus.SENDING, DeliveryStatus.RETRYING)
SCAN_CAP = 20_000
"""Rows a filtered recent-deliveries listing reads at most before it stops."""
STATUS_MARKS = {s: cbor2.dumps("status") + cbor2.dumps(s.value) for s in DeliveryStatus}
"""The bytes every stored delivery of a status holds: its ``status`` map entry
as storage/codec.py writes it (``cbor2.dumps`` of ``Delivery.to_map``: a map
entry is its key followed at once by its value, each text a definite-length
string, header then UTF-8). A record without them does not have that status,
so a status filter skips it undecoded; one with them is decoded to be sure
(the same bytes could occur in, say, a response body)."""

Reader = Callable[[Callable[[], list[Delivery]]], Awaitable[list[Delivery]]]
"""How ``recent_off_loop`` runs its scan: a worker thread (``trio.to_thread.run_sync``)."""


def attempt_deadline(d: Delivery) -> Deadline | None:
    """The deadline of a waiting delivery's next attempt (None when not waiting)."""
    if d.status not in WAITING or d.next_attempt_at_ms is None:
        return None
    return Deadline(due_ms=d.next_attempt_at_ms, kind=ATTEMPT_DEADLINE, ref=d.id)


@attrs.frozen
class Expired:
    delivery: Delivery
    project_id: str


class WebhookStore:
    def __init__(self, store: LmdbStore) -> None:
        self.store = store
        self._endpoints = store.db(b"endpoints")
        self._deliveries = store.db(b"deliveries")
        self._by_project = store.db(b"deliveries_by_project")
        self._by_endpoint = store.db(b"deliveries_by_endpoint")
        self._by_time = store.db(b"deliveries_by_time")
        self._open = store.db(b"deliveries_open")
        self._events = store.db(b"webhook_events")
        self._newer: Callable[[bytes], Delivery | None] = _nothing_newer
        self._newer_endpoint: Callable[[str], Endpoint | None] = _nothing_newer
        self._pending: Callable[[], Mapping[bytes, Delivery]] = dict

    def prefer(self, newer: Callable[[bytes], Delivery | None],
               newer_endpoint: Callable[[str], Endpoint | None],
               pending: Callable[[], Mapping[bytes, Delivery]]) -> None:
        """Reads of a stored delivery show ``newer(its 16-byte key)``, and of a
        stored endpoint ``newer_endpoint(its id)``, when that is not None (the
        owner's state, not yet committed). ``pending()`` is a copy of every
        delivery state ``newer`` would show now (for ``recent_off_loop``,
        whose scan must not call the owner's lookups from another thread)."""
        self._newer = newer
        self._newer_endpoint = newer_endpoint
        self._pending = pending

    # -- keys -----------------------------------------------------------------

    @staticmethod
    def endpoint_key(project_id: str, mode: Mode, endpoint_id: str) -> bytes:
        return layout.scope(project_id, mode.value) + layout.uid(endpoint_id)

    @staticmethod
    def event_key(project_id: str, mode: Mode, event_id: str) -> bytes:
        return layout.scope(project_id, mode.value) + layout.uid(event_id)

    # -- reads ----------------------------------------------------------------

    def all_endpoints(self) -> list[Endpoint]:
        """Every endpoint as committed."""
        return [decode(Endpoint, v) for _, v in self.store.scan(b"endpoints", b"")]

    def endpoints(self, project_id: str, mode: Mode) -> list[Endpoint]:
        rows = self.store.scan(b"endpoints", layout.scope(project_id, mode.value))
        found = [self._endpoint_of(k, v) for k, v in rows]
        return sorted(found, key=lambda e: (e.created_at_ms, e.id))

    def endpoint(self, project_id: str, mode: Mode, endpoint_id: str) -> Endpoint | None:
        with self.store.read() as txn:
            raw = txn.get(self.endpoint_key(project_id, mode, endpoint_id), db=self._endpoints)
        if raw is None:
            return None
        return self._newer_endpoint(endpoint_id) or decode(Endpoint, bytes(raw))

    def _endpoint_of(self, key: bytes, raw: bytes) -> Endpoint:
        return self._newer_endpoint(layout.from_uid(key[-16:])) or decode(Endpoint, raw)

    def delivery(self, delivery_id: str) -> Delivery | None:
        key = layout.uid(delivery_id)
        with self.store.read() as txn:
            raw = txn.get(key, db=self._deliveries)
        if raw is None:
            return None
        return self._newer(key) or decode(Delivery, bytes(raw))

    def event(self, project_id: str, mode: Mode, event_id: str) -> WebhookEvent | None:
        with self.store.read() as txn:
            raw = txn.get(self.event_key(project_id, mode, event_id), db=self._events)
        return decode(WebhookEvent, bytes(raw)) if raw is not None else None

    def open_deliveries(self, endpoint_id: str | None = None) -> list[Delivery]:
        """Queued, Sending and Retrying deliveries (of one endpoint, or all), as
        committed."""
        return self.open_deliveries_page(None, sys.maxsize, endpoint_id)[0]

    def open_deliveries_page(self, after: bytes | None, limit: int,
                             endpoint_id: str | None = None
                             ) -> tuple[list[Delivery], bytes | None]:
        """``open_deliveries`` a page at a time: at most ``limit`` index
        entries after the entry ``after`` (None: from the first), and the
        entry to go on from (None when there are no more)."""
        prefix = layout.uid(endpoint_id) if endpoint_id is not None else b""
        out, last, rest = self._scan_open(after + b"\x00" if after is not None else prefix,
                                          prefix, limit)
        return out, last if rest is not None else None

    def open_deliveries_from(self, endpoint_id: str, first_id: str, limit: int
                             ) -> tuple[list[Delivery], str | None]:
        """One endpoint's open deliveries as committed, oldest first (by id),
        from the delivery ``first_id`` on (included, whether it exists or
        not), at most ``limit`` index entries; and the id to go on from (the
        next entry, not read; None when there are no more)."""
        prefix = layout.uid(endpoint_id)
        out, _, rest = self._scan_open(prefix + layout.uid(first_id), prefix, limit)
        return out, layout.from_uid(rest[16:32]) if rest is not None else None

    def _scan_open(self, start: bytes, prefix: bytes, limit: int
                   ) -> tuple[list[Delivery], bytes | None, bytes | None]:
        """The open deliveries of the index entries from ``start`` on that
        begin with ``prefix``, at most ``limit`` entries, as committed; the
        last entry read, and the first one left unread (None: no more)."""
        out: list[Delivery] = []
        last: bytes | None = None
        with self.store.read() as txn:
            cur = txn.cursor(db=self._open)
            ok = cur.set_range(start)
            taken = 0
            while ok:
                key = bytes(cur.key())
                if not key.startswith(prefix):
                    break
                if taken == limit:
                    return out, last, key
                taken, last = taken + 1, key
                raw = txn.get(key[16:32], db=self._deliveries)
                if raw is not None:
                    out.append(decode(Delivery, bytes(raw)))
                ok = cur.next()
        return out, last, None

    def recent(self, project_id: str, mode: Mode, *, endpoint_id: str | None = None,
               status: DeliveryStatus | None = None, limit: int = 50) -> list[Delivery]:
        """The newest deliveries of a mode, optionally of one endpoint or status.
        With a status, a stored record is decoded only when its bytes hold
        the status (``STATUS_MARKS``), but a rare status still reads up to
        ``SCAN_CAP`` entries (tens of milliseconds): the listings run
        :meth:`recent_off_loop`."""
        with self.store.read() as txn:
            return self._recent(txn, self._newer, project_id, mode, endpoint_id, status, limit)

    async def recent_off_loop(self, reads: AbstractAsyncContextManager[Any], project_id: str,
                              mode: Mode, *, endpoint_id: str | None = None,
                              status: DeliveryStatus | None = None, limit: int = 50,
                              run: Reader = trio.to_thread.run_sync) -> list[Delivery]:
        """:meth:`recent` with its scan run in a worker thread (``run``),
        once one of ``reads`` (``Services.reads``) is free: a listing waiting
        for its turn holds no read transaction (no LMDB reader slot, no old
        snapshot). What it reads is then fixed on the event loop, in one turn:
        the read transaction begins and the states the owner has not
        committed are copied (``pending``), so the answer is the one
        ``recent`` gives at that moment (a state committed meanwhile is not
        read older from the transaction while the copy misses it)."""
        async with reads:
            txn = self.store.env.begin(buffers=False)
            try:
                newer = self._pending().get
                return await run(lambda: self._recent(txn, newer, project_id, mode,
                                                      endpoint_id, status, limit))
            finally:
                txn.abort()

    def _recent(self, txn: lmdb.Transaction, newer: Callable[[bytes], Delivery | None],
                project_id: str, mode: Mode, endpoint_id: str | None,
                status: DeliveryStatus | None, limit: int) -> list[Delivery]:
        if endpoint_id is not None:
            db, prefix = self._by_endpoint, layout.uid(endpoint_id)
        else:
            db, prefix = self._by_project, layout.scope(project_id, mode.value)
        mark = STATUS_MARKS[status] if status is not None else None
        out: list[Delivery] = []
        for n, key in enumerate(prefix_keys(txn, db, prefix, reverse=True)):
            if n >= SCAN_CAP or len(out) >= limit:
                break
            did = key[-16:]
            raw = txn.get(did, db=self._deliveries)
            if raw is None:
                continue
            d = newer(did)
            if d is None:
                if mark is not None and mark not in raw:
                    continue  # stored with another status, and not changed since
                d = decode(Delivery, bytes(raw))
            if status is None or d.status is status:
                out.append(d)
        return out

    def expired(self, before_ms: int, limit: int) -> list[Expired]:
        """Deliveries created before ``before_ms``, oldest first."""
        out: list[Expired] = []
        with self.store.read() as txn:
            for key, value in txn.cursor(db=self._by_time).iternext():
                key = bytes(key)
                if len(out) >= limit or layout.from_ms(key) >= before_ms:
                    break
                raw = txn.get(key[8:24], db=self._deliveries)
                if raw is not None:
                    out.append(Expired(decode(Delivery, bytes(raw)),
                                       layout.from_uid(bytes(value))))
        return out

    # -- writes (inside an op's transaction) ------------------------------------

    def put_endpoint(self, txn: lmdb.Transaction, endpoint: Endpoint) -> None:
        key = self.endpoint_key(endpoint.project_id, endpoint.mode, endpoint.id)
        txn.put(key, encode(endpoint), db=self._endpoints)

    def has_event(self, txn: lmdb.Transaction, project_id: str, mode: Mode,
                  event_id: str) -> bool:
        return txn.get(self.event_key(project_id, mode, event_id), db=self._events) is not None

    def put_event(self, txn: lmdb.Transaction, event: WebhookEvent) -> None:
        key = self.event_key(event.project_id, event.mode, event.id)
        txn.put(key, encode(event), db=self._events)

    def add_delivery(self, txn: lmdb.Transaction, project_id: str, d: Delivery) -> None:
        """A new delivery with its indexes (and its deadline, if waiting)."""
        did, at = layout.uid(d.id), layout.ms(d.created_at_ms)
        eid = layout.uid(d.endpoint_id)
        txn.put(layout.scope(project_id, d.mode.value) + at + did, eid, db=self._by_project)
        txn.put(eid + at + did, b"", db=self._by_endpoint)
        txn.put(at + did, layout.uid(project_id), db=self._by_time)
        self.save_delivery(txn, None, d)

    def add_fan_outs(self, txn: lmdb.Transaction,
                     planned: Sequence[tuple[bytes, FanOut | None]]) -> list[Delivery]:
        """Acknowledge each outbox entry (key) and store its event, once, with its
        deliveries (None: nothing to send; an event already stored was dispatched
        before and is skipped). Returns the deliveries created."""
        created: list[Delivery] = []
        for key, fan in planned:
            self.store.ack_outbox(txn, key)
            if fan is None or self.has_event(txn, fan.event.project_id, fan.event.mode,
                                             fan.event.id):
                continue
            self.put_event(txn, fan.event)
            for d in fan.deliveries:
                self.add_delivery(txn, fan.event.project_id, d)
            created.extend(fan.deliveries)
        return created

    def save_delivery(self, txn: lmdb.Transaction, before: Delivery | None,
                      after: Delivery) -> None:
        """Store ``after``; move its open-index entry and attempt deadline along."""
        did = layout.uid(after.id)
        txn.put(did, encode(after), db=self._deliveries)
        open_key = layout.uid(after.endpoint_id) + did
        if after.status in OPEN:
            txn.put(open_key, b"", db=self._open)
        else:
            txn.delete(open_key, db=self._open)
        old = attempt_deadline(before) if before is not None else None
        new = attempt_deadline(after)
        if old is not None and old != new:
            self.store.delete_deadline(txn, old)
        if new is not None:
            self.store.put_deadline(txn, new)

    def delete_delivery(self, txn: lmdb.Transaction, project_id: str, d: Delivery) -> None:
        """Remove a delivery, its indexes and deadline, and release its event."""
        did, at = layout.uid(d.id), layout.ms(d.created_at_ms)
        eid = layout.uid(d.endpoint_id)
        txn.delete(did, db=self._deliveries)
        txn.delete(layout.scope(project_id, d.mode.value) + at + did, db=self._by_project)
        txn.delete(eid + at + did, db=self._by_endpoint)
        txn.delete(at + did, db=self._by_time)
        txn.delete(eid + did, db=self._open)
        deadline = attempt_deadline(d)
        if deadline is not None:
            self.store.delete_deadline(txn, deadline)
        self._release_event(txn, project_id, d.mode, d.event_id)

    def _release_event(self, txn: lmdb.Transaction, project_id: str, mode: Mode,
                       event_id: str) -> None:
        key = self.event_key(project_id, mode, event_id)
        raw = txn.get(key, db=self._events)
        if raw is None:
            return
        event = decode(WebhookEvent, bytes(raw))
        if event.refs <= 1:
            txn.delete(key, db=self._events)
        else:
            txn.put(key, encode(attrs.evolve(event, refs=event.refs - 1)), db=self._events)

    def delete_endpoint(self, txn: lmdb.Transaction, endpoint: Endpoint) -> int:
        """Remove an endpoint and its whole delivery history; returns the count."""
        eid = layout.uid(endpoint.id)
        keys = list(prefix_keys(txn, self._by_endpoint, eid))
        for key in keys:
            raw = txn.get(key[-16:], db=self._deliveries)
            if raw is not None:
                self.delete_delivery(txn, endpoint.project_id, decode(Delivery, bytes(raw)))
            txn.delete(key, db=self._by_endpoint)
        txn.delete(self.endpoint_key(endpoint.project_id, endpoint.mode, endpoint.id),
                   db=self._endpoints)
        return len(keys)


def _nothing_newer(key: object) -> None:
    return None
