"""Delivery history is kept 30 days: the hourly purge, run inside the WebhookActor.

A ``webhook_purge`` deadline fires once an hour (the first one an hour after
the first start; each sweep persists the next), so a delivery is gone at most
an hour after its 30 days (a daily sweep kept some for 31). A sweep removes
every delivery created 30 days ago or earlier, with its indexes and attempt
deadline, and the body of any event no delivery refers to any more, in
batches of 5,000 per write. A delivery whose attempt is under way right then
is left for the next sweep. A sweep with nothing to remove reads one key.

The next sweep is recorded before this one works, so a sweep the store
refuses (a full disk or map) is logged and the next one still comes; one
whose next deadline cannot be written is tried again a minute later (the
old deadline stays in the store, so a restart runs it). The retry is a
deadline of the timer only, which names the stored one in its ref
(``all@<due ms>``), so that the retry's write replaces the stored deadline:
deleting only the retry's own (never stored) left the old one behind, and
after a restart it started a second hourly chain beside the first.

A store that already holds such a second chain is healed by the actor's
memory of the deadline it recorded last (``WebhookActor.purge_next``): a
purge deadline that fires while another one, that recorded one, is still
in the store is the second chain's; it is deleted and starts nothing. A
point read decides it, with no scan of the deadlines (a webhook backlog can
be millions of them), and it never deletes the last chain: the other one
is in the store. Within an hour or two of a start only one chain is left.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

import lmdb

from storage.webhooks_store import Expired
from svc_engine.deadlines import Deadline
from svc_engine.errors import SvcError
from svc_engine.webhook_delivery import HISTORY_MS

if TYPE_CHECKING:
    from actors.webhooks import WebhookActor

PURGE_DEADLINE = "webhook_purge"
PURGE_EVERY_MS = 3_600_000
PURGE_BATCH = 5_000
RETRY_MS = 60_000
log = logging.getLogger("svc.webhooks")


PURGE_REF = "all"
RETRY_REF = f"{PURGE_REF}@"
"""A retry's ref: the due time of the stored deadline it stands for follows."""


def first_purge(now_ms: int) -> Deadline:
    return Deadline(now_ms + PURGE_EVERY_MS, PURGE_DEADLINE, PURGE_REF)


def stored_purge(deadline: Deadline) -> Deadline:
    """The deadline in the store that ``deadline`` stands for: itself, or, for
    a retry (a deadline of the timer only), the one whose sweep it retries."""
    if deadline.ref.startswith(RETRY_REF):
        due = deadline.ref.removeprefix(RETRY_REF)
        if due.isdigit():
            return Deadline(int(due), deadline.kind, PURGE_REF)
    return deadline


async def purge(actor: WebhookActor, deadline: Deadline) -> None:
    now = actor.now_ms()
    following = first_purge(now)
    stored = stored_purge(deadline)
    live = actor.purge_next
    if live is not None and live != stored and actor.tables.store.persisted_deadlines([live]):
        await _end_chain(actor, stored, live)  # another chain's: this actor recorded live
        return

    def reschedule(txn: lmdb.Transaction) -> None:
        actor.tables.store.delete_deadline(txn, stored)
        actor.tables.store.put_deadline(txn, following)

    try:
        await actor.write(reschedule)
    except SvcError as e:
        log.warning("webhook history: the next sweep could not be recorded (%s); trying "
                    "again in %d s", e, RETRY_MS // 1000)
        actor.schedule(Deadline(now + RETRY_MS, PURGE_DEADLINE,
                                f"{RETRY_REF}{stored.due_ms}"))
        return
    actor.purge_next = following
    actor.schedule(following)
    try:
        await _sweep(actor, now)
    except SvcError as e:
        log.warning("webhook history: a sweep failed (%s); the next one is in %d s", e,
                    PURGE_EVERY_MS // 1000)


async def _end_chain(actor: WebhookActor, stored: Deadline, live: Deadline) -> None:
    """Delete ``stored``, another chain's deadline (``live`` is this one's)."""
    try:
        await actor.write(lambda txn: actor.tables.store.delete_deadline(txn, stored))
    except SvcError as e:  # it stays in the store: the next start finds it again
        log.warning("webhook history: a second hourly sweep could not be removed (%s)", e)
        return
    log.info("webhook history: removed a second hourly sweep (due at %d ms; the one "
             "due at %d ms stays)", stored.due_ms, live.due_ms)


async def _sweep(actor: WebhookActor, now: int) -> None:
    cutoff = now - HISTORY_MS + 1  # created at or before now - 30 days
    await actor.settle()  # read after this actor's own writes
    while True:
        found = actor.tables.expired(cutoff, PURGE_BATCH)
        doomed = [x for x in found if not actor.is_busy(x.delivery.id)]
        if not doomed:
            break

        def op(txn: lmdb.Transaction, doomed: list[Expired] = doomed) -> None:
            for x in doomed:
                actor.tables.delete_delivery(txn, x.project_id, x.delivery)

        await actor.write(op)
        actor.count_purged(len(doomed))
        if len(found) < PURGE_BATCH:
            break
