"""The WebhookActor's two pure steps: fan an event out, apply an attempt's answer.

``fan_out``: an outbox event becomes one shared body (``WebhookEvent``) and a
Queued delivery per endpoint that ``webhook_records.accepts`` it (the owner
has already checked the organization's plan). An event that cannot be sent
(unknown mode, data the envelope refuses) is None, like an event no endpoint
wants: the owner acknowledges it and moves on rather than stalling the outbox.

``apply_answer``: what one attempt did to its delivery (the next state, with
the retry schedule and a longer Retry-After) and to its endpoint's health.
``retry_scale`` (test only, SVC_WEBHOOK_RETRY_SCALE) shrinks the wait before
the next attempt; 1.0 leaves the schedule exact.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import attrs

from svc_engine import webhook_delivery as deliveries
from svc_engine import webhook_records as records
from svc_engine.errors import ValidationError
from svc_engine.keys import Mode
from svc_engine.outbox import OutboxEvent
from svc_engine.webhook_delivery import Delivery
from svc_engine.webhook_envelope import envelope
from svc_engine.webhook_records import Endpoint, WebhookEvent
from svc_engine.webhook_retry import classify_response


@attrs.frozen
class FanOut:
    event: WebhookEvent
    deliveries: tuple[Delivery, ...]


def fan_out(ev: OutboxEvent, endpoints: Iterable[Endpoint], now_ms: int,
            new_id: Callable[[], str], encode: Callable[[dict[str, Any]], bytes]
            ) -> FanOut | None:
    """The deliveries of one event (None: nothing to send)."""
    try:
        mode = Mode(ev.mode)
    except ValueError:
        return None
    matched = [e for e in endpoints
               if e.project_id == ev.project_id and e.mode is mode
               and records.accepts(e, ev.type.value, ev.created_at_ms)]
    if not matched:
        return None
    try:
        body = encode(envelope(ev.id, ev.type.value, ev.created_at_ms, ev.project_id,
                               mode.value, dict(ev.data)))
    except (ValidationError, TypeError):
        return None
    event = WebhookEvent(ev.id, ev.type.value, ev.project_id, mode, ev.created_at_ms, body,
                         refs=len(matched))
    made = tuple(deliveries.new_delivery(new_id(), e.id, ev.id, ev.type.value, mode, now_ms)
                 for e in matched)
    return FanOut(event, made)


@attrs.frozen
class Answer:
    """One attempt as the sender saw it."""

    started_at_ms: int
    finished_at_ms: int
    status: int | None
    error: str | None
    detail: str = ""
    response_body: bytes = b""
    elapsed_ms: int | None = None
    """The attempt's duration as measured (a monotonic clock); None: the
    difference of the two wall times, which a step of the wall clock moves."""


def apply_answer(d: Delivery, endpoint: Endpoint, answer: Answer, retry_scale: float = 1.0
                 ) -> tuple[Delivery, Endpoint]:
    """The delivery (Delivered, Retrying or Failed) and endpoint after one attempt."""
    elapsed = (answer.elapsed_ms if answer.elapsed_ms is not None
               else answer.finished_at_ms - answer.started_at_ms)
    outcome = classify_response(answer.status, answer.error, elapsed)
    if answer.error is not None and answer.detail:
        outcome = attrs.evolve(outcome, detail=answer.detail)
    after = deliveries.record_attempt(
        d, outcome, started_at_ms=answer.started_at_ms, finished_at_ms=answer.finished_at_ms,
        response_body=answer.response_body)
    if retry_scale != 1.0 and after.next_attempt_at_ms is not None:
        wait = after.next_attempt_at_ms - answer.finished_at_ms
        after = attrs.evolve(after, next_attempt_at_ms=answer.finished_at_ms
                             + max(1, round(wait * retry_scale)))
    health = records.record_outcome(endpoint, outcome.delivered, answer.finished_at_ms)
    return after, health
