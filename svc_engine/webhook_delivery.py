"""The webhook delivery state machine.

Theory of operation
-------------------
A delivery is one event going to one endpoint. Its id is the ``webhook-id``
header and never changes, so receivers can deduplicate across retries.

::

    Queued --begin_attempt--> Sending --record_attempt(2xx in 10 s)--> Delivered
                                 |  ^                                      |
                  failed, retries|  |begin_attempt            resend (manual)
                          remain v  |                                      |
                              Retrying                                     v
    Sending --record_attempt(failed, no retries remain)--> Failed --retry--> Sending

* ``new_delivery`` makes a Queued delivery due at once. The owner calls
  ``begin_attempt`` when it hands the delivery to a sender (Queued or Retrying
  to Sending) and ``record_attempt`` with the classified outcome when the
  sender reports back.
* A failed scheduled attempt moves to Retrying with ``next_attempt_at_ms``
  from the retry schedule (``webhook_retry.next_attempt``), or to Failed
  after the seventh.
* Manual actions send again immediately, so they go straight to Sending:
  ``retry`` from Failed and ``resend`` from Delivered (any other state is a
  409 Conflict). A manual attempt is a single attempt: if it fails the
  delivery is Failed again, with no automatic retries (the schedule was
  already spent, or the delivery had succeeded). It keeps the same
  ``webhook-id``; only the signing timestamp changes.
* ``requeue_interrupted`` returns a delivery left in Sending by a crash to
  its waiting state, due now (at-least-once: the receiver deduplicates); an
  interrupted manual attempt is dropped instead (back to Delivered or Failed).
* Whether a waiting delivery may start (endpoint Off, plan) is the owner's
  decision; this machine only says when it is due.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import RecordError, opt_int, opt_str, req_bool, req_int, req_str
from svc_engine.errors import Conflict, InternalError
from svc_engine.keys import Mode
from svc_engine.webhook_retry import DELIVERED, Outcome, next_attempt

RESPONSE_BODY_LIMIT = 4096
"""Bytes of the endpoint's response body kept on an attempt."""

HISTORY_MS = 30 * 86_400_000
"""Delivery history is kept 30 days from creation."""

SCHEDULED = "scheduled"
MANUAL = "manual"


class DeliveryStatus(enum.StrEnum):
    QUEUED = "Queued"
    SENDING = "Sending"
    DELIVERED = "Delivered"
    RETRYING = "Retrying"
    FAILED = "Failed"


WAITING = frozenset({DeliveryStatus.QUEUED, DeliveryStatus.RETRYING})
"""Statuses of a delivery whose next attempt waits for its time."""


@attrs.frozen
class Attempt:
    """One HTTP exchange with the endpoint, as shown in delivery history."""

    number: int
    trigger: str
    started_at_ms: int
    duration_ms: int
    status_code: int | None
    kind: str
    """The outcome kind from ``webhook_retry`` (``delivered`` on success)."""
    error: str | None
    """What went wrong, in words; None when delivered."""
    response_body: str = ""
    response_truncated: bool = False

    @property
    def delivered(self) -> bool:
        return self.kind == DELIVERED

    def to_map(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "trigger": self.trigger,
            "started_at_ms": self.started_at_ms,
            "duration_ms": self.duration_ms,
            "status_code": self.status_code,
            "kind": self.kind,
            "error": self.error,
            "response_body": self.response_body,
            "response_truncated": self.response_truncated,
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Attempt:
        return cls(
            number=req_int(m, "number"),
            trigger=req_str(m, "trigger"),
            started_at_ms=req_int(m, "started_at_ms"),
            duration_ms=req_int(m, "duration_ms"),
            status_code=opt_int(m, "status_code"),
            kind=req_str(m, "kind"),
            error=opt_str(m, "error"),
            response_body=req_str(m, "response_body"),
            response_truncated=req_bool(m, "response_truncated"),
        )


@attrs.frozen
class Delivery:
    """One event on its way to one endpoint."""

    VERSION = 1

    id: str
    endpoint_id: str
    event_id: str
    event_type: str
    mode: Mode
    status: DeliveryStatus
    created_at_ms: int
    attempts: tuple[Attempt, ...] = ()
    next_attempt_at_ms: int | None = None
    next_trigger: str = SCHEDULED
    """Trigger of the attempt that is waiting or in flight."""

    @property
    def last_attempt(self) -> Attempt | None:
        return self.attempts[-1] if self.attempts else None

    @property
    def scheduled_attempts(self) -> int:
        return sum(1 for a in self.attempts if a.trigger == SCHEDULED)

    def to_map(self) -> dict[str, Any]:
        return {
            "v": self.VERSION,
            "id": self.id,
            "endpoint_id": self.endpoint_id,
            "event_id": self.event_id,
            "event_type": self.event_type,
            "mode": self.mode.value,
            "status": self.status.value,
            "created_at_ms": self.created_at_ms,
            "attempts": [a.to_map() for a in self.attempts],
            "next_attempt_at_ms": self.next_attempt_at_ms,
            "next_trigger": self.next_trigger,
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Delivery:
        if req_int(m, "v") != cls.VERSION:
            raise RecordError(f"delivery record version {m['v']} is not {cls.VERSION}")
        attempts = m.get("attempts")
        if not isinstance(attempts, list | tuple) or not all(
            isinstance(a, Mapping) for a in attempts
        ):
            raise RecordError("attempts: expected a list of maps")
        return cls(
            id=req_str(m, "id"),
            endpoint_id=req_str(m, "endpoint_id"),
            event_id=req_str(m, "event_id"),
            event_type=req_str(m, "event_type"),
            mode=Mode(req_str(m, "mode")),
            status=DeliveryStatus(req_str(m, "status")),
            created_at_ms=req_int(m, "created_at_ms"),
            attempts=tuple(Attempt.from_map(a) for a in attempts),
            next_attempt_at_ms=opt_int(m, "next_attempt_at_ms"),
            next_trigger=req_str(m, "next_trigger"),
        )


def new_delivery_id(now_ms: int, random10: bytes) -> str:
    """A new delivery id: a UUID version 7 (RFC 9562), the creation time in Unix
    milliseconds followed by 74 random bits.

    Ids made one after another sort one after another, so the deliveries of a
    dispatched batch, and their results, sit together in every index keyed by
    id (a few B-tree pages per batch instead of one page per delivery).
    """
    if not 0 <= now_ms < 1 << 48:
        raise ValueError("a delivery id needs a time of 0 to 2**48 - 1 ms")
    if len(random10) < 10:
        raise ValueError("a delivery id needs 10 random bytes")
    b = bytearray(now_ms.to_bytes(6, "big") + random10[:10])
    b[6] = (b[6] & 0x0F) | 0x70
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def new_delivery(
    delivery_id: str, endpoint_id: str, event_id: str, event_type: str, mode: Mode, now_ms: int
) -> Delivery:
    """A Queued delivery, due at once."""
    return Delivery(
        id=delivery_id,
        endpoint_id=endpoint_id,
        event_id=event_id,
        event_type=event_type,
        mode=Mode(mode),
        status=DeliveryStatus.QUEUED,
        created_at_ms=now_ms,
        next_attempt_at_ms=now_ms,
    )


def is_due(delivery: Delivery, now_ms: int) -> bool:
    """True when a waiting delivery's next attempt time has come."""
    return (
        delivery.status in WAITING
        and delivery.next_attempt_at_ms is not None
        and delivery.next_attempt_at_ms <= now_ms
    )


def begin_attempt(delivery: Delivery) -> Delivery:
    """Queued or Retrying to Sending: the delivery was handed to a sender."""
    if delivery.status not in WAITING:
        raise InternalError(f"cannot start an attempt of a {delivery.status} delivery")
    return attrs.evolve(delivery, status=DeliveryStatus.SENDING, next_attempt_at_ms=None)


def record_attempt(
    delivery: Delivery,
    outcome: Outcome,
    *,
    started_at_ms: int,
    finished_at_ms: int,
    response_body: bytes = b"",
) -> Delivery:
    """Sending to Delivered, Retrying or Failed, with the attempt appended."""
    if delivery.status is not DeliveryStatus.SENDING:
        raise InternalError(f"cannot record an attempt of a {delivery.status} delivery")
    kept = response_body[:RESPONSE_BODY_LIMIT]
    attempt = Attempt(
        number=len(delivery.attempts) + 1,
        trigger=delivery.next_trigger,
        started_at_ms=started_at_ms,
        duration_ms=max(0, finished_at_ms - started_at_ms),
        status_code=outcome.status,
        kind=outcome.kind,
        error=None if outcome.delivered else outcome.detail,
        response_body=kept.decode("utf-8", errors="replace"),
        response_truncated=len(response_body) > RESPONSE_BODY_LIMIT,
    )
    done = attrs.evolve(
        delivery,
        attempts=(*delivery.attempts, attempt),
        next_attempt_at_ms=None,
        next_trigger=SCHEDULED,
    )
    if outcome.delivered:
        return attrs.evolve(done, status=DeliveryStatus.DELIVERED)
    if attempt.trigger == MANUAL:
        return attrs.evolve(done, status=DeliveryStatus.FAILED)
    when = next_attempt(done.scheduled_attempts, finished_at_ms)
    if when is None:
        return attrs.evolve(done, status=DeliveryStatus.FAILED)
    return attrs.evolve(done, status=DeliveryStatus.RETRYING, next_attempt_at_ms=when)


def retry(delivery: Delivery) -> Delivery:
    """The Retry action: a Failed delivery is sent again immediately."""
    if delivery.status is not DeliveryStatus.FAILED:
        raise Conflict(f"only a Failed delivery can be retried; this one is {delivery.status}")
    return attrs.evolve(
        delivery, status=DeliveryStatus.SENDING, next_attempt_at_ms=None, next_trigger=MANUAL
    )


def resend(delivery: Delivery) -> Delivery:
    """The Resend action: a Delivered delivery is sent again immediately."""
    if delivery.status is not DeliveryStatus.DELIVERED:
        raise Conflict(f"only a Delivered delivery can be resent; this one is {delivery.status}")
    return attrs.evolve(
        delivery, status=DeliveryStatus.SENDING, next_attempt_at_ms=None, next_trigger=MANUAL
    )


def requeue_interrupted(delivery: Delivery, now_ms: int) -> Delivery:
    """After a restart: settle a delivery found in Sending.

    An interrupted scheduled attempt waits again, due now (Queued or
    Retrying). A manual attempt is sent at restart (the actor queues it as
    it is) unless its endpoint is Off or the plan lacks webhooks; then, and
    only then, it is settled here, dropped: the delivery returns to
    Delivered or Failed as its last recorded attempt says, and the team
    member can press Retry or Resend again once the endpoint can be sent to.
    """
    if delivery.status is not DeliveryStatus.SENDING:
        return delivery
    if delivery.next_trigger == MANUAL:
        last = delivery.last_attempt
        settled = (
            DeliveryStatus.DELIVERED
            if last is not None and last.delivered
            else DeliveryStatus.FAILED
        )
        return attrs.evolve(delivery, status=settled, next_trigger=SCHEDULED)
    waiting = DeliveryStatus.RETRYING if delivery.attempts else DeliveryStatus.QUEUED
    return attrs.evolve(delivery, status=waiting, next_attempt_at_ms=now_ms)


def is_expired(delivery: Delivery, now_ms: int) -> bool:
    """True once the delivery is older than the 30-day history."""
    return now_ms - delivery.created_at_ms >= HISTORY_MS
