"""The JSON shapes of the webhooks API (endpoints and deliveries).

Decisions where SPEC.md is silent:

* Times are ISO 8601 UTC strings with milliseconds (as in the envelope).
* An endpoint's ``secret`` is in every single-endpoint answer (create, get,
  edit, turn on or off, rotate) and never in the list.
* ``health`` shows what the dashboard shows per state: the last success time
  (null: 'No deliveries yet'), the count of consecutive failures and when the
  streak began, and for Off who turned it off (``manual`` or ``automatic``),
  the reason in words and when.
* A delivery's ``request.body`` is the exact JSON text that was signed and
  sent; ``response`` is the last attempt's status and body (at most 4 KiB
  kept, ``truncated`` says when more came), null before any attempt.
* ``nextAttemptAt`` is when the next automatic attempt will be made, or null
  when none is waiting (see ``next_attempt_at_ms``). While the endpoint is Off
  its Queued and Retrying deliveries are held, not attempted at their time,
  so it is null then (the status stays Queued or Retrying). Once the
  endpoint is on again it is a time again: the stored one, or the turn-on
  time for a delivery whose time passed while it was Off (it goes at once).
  Two holds this view does not know of show the stored time although it
  has passed: a delivery held while its organization's plan lacks webhooks
  (it goes when the plan returns), and one of a slow endpoint's backlog
  waiting in the store for room in its ready queue (it goes in its turn);
  after a turn on, such a delivery whose time passed while the endpoint was
  Off shows the turn-on time (it has waited since then).
"""

from __future__ import annotations

from typing import Any

from svc_engine.webhook_delivery import WAITING, Attempt, Delivery
from svc_engine.webhook_envelope import iso_utc_ms
from svc_engine.webhook_records import Endpoint, WebhookEvent


def _time(ms: int | None) -> str | None:
    return None if ms is None else iso_utc_ms(ms)


def endpoint_json(endpoint: Endpoint, *, with_secret: bool) -> dict[str, Any]:
    h = endpoint.health
    out: dict[str, Any] = {
        "id": endpoint.id,
        "url": endpoint.url,
        "description": endpoint.description,
        "events": list(endpoint.events),
        "status": h.state.value,
        "projectId": endpoint.project_id,
        "env": endpoint.mode.value,
        "createdAt": iso_utc_ms(endpoint.created_at_ms),
        "updatedAt": iso_utc_ms(endpoint.updated_at_ms),
        "health": {
            "lastSuccessAt": _time(h.last_success_at_ms),
            "consecutiveFailures": h.consecutive_failures,
            "failingSince": _time(h.streak_started_at_ms),
            "offBy": h.off_reason,
            "offReason": h.off_detail or None,
            "offAt": _time(h.off_at_ms),
        },
    }
    if with_secret:
        out["secret"] = endpoint.secret
    return out


def _attempt_json(a: Attempt) -> dict[str, Any]:
    return {
        "number": a.number,
        "trigger": a.trigger,
        "startedAt": iso_utc_ms(a.started_at_ms),
        "durationMs": a.duration_ms,
        "responseStatus": a.status_code,
        "outcome": a.kind,
        "error": a.error,
    }


def next_attempt_at_ms(d: Delivery, endpoint: Endpoint | None) -> int | None:
    """When the delivery's next automatic attempt will be made, as far as
    anyone can say now: None when no attempt waits (Sending, Delivered,
    Failed), and while ``endpoint`` (the delivery's) is Off or gone.

    An Off endpoint's waiting deliveries are held (actors/webhooks.py parks
    them when their time comes and starts nothing), so their stored time
    says nothing: no attempt is made then, nor at any time until someone
    turns the endpoint on. Turning it on brings each back at its stored
    time, so one whose time passed while the endpoint was Off is due from
    the turn on (``accepting_since_ms``), not from a moment when it was held:
    it is queued then, or (a backlog past its endpoint's ready queue) waits
    in the store from then for its turn.
    """
    if d.status not in WAITING:
        return None
    if d.next_attempt_at_ms is None or endpoint is None or endpoint.is_off:
        return None
    return max(d.next_attempt_at_ms, endpoint.accepting_since_ms)


def delivery_summary_json(d: Delivery, endpoint: Endpoint | None) -> dict[str, Any]:
    """One row of the recent deliveries list (``endpoint``: the delivery's,
    as it is now; None when gone)."""
    last = d.last_attempt
    return {
        "id": d.id,
        "endpointId": d.endpoint_id,
        "event": {"id": d.event_id, "type": d.event_type},
        "env": d.mode.value,
        "status": d.status.value,
        "attempts": len(d.attempts),
        "createdAt": iso_utc_ms(d.created_at_ms),
        "lastAttemptAt": _time(last.started_at_ms if last else None),
        "nextAttemptAt": _time(next_attempt_at_ms(d, endpoint)),
        "durationMs": last.duration_ms if last else None,
        "responseStatus": last.status_code if last else None,
        "error": last.error if last else None,
    }


def delivery_json(
    d: Delivery, endpoint: Endpoint | None, event: WebhookEvent | None
) -> dict[str, Any]:
    """The full view of one delivery."""
    out = delivery_summary_json(d, endpoint)
    last = d.last_attempt
    if event is not None:
        out["event"]["createdAt"] = iso_utc_ms(event.created_at_ms)
    out["endpoint"] = {"id": d.endpoint_id, "url": endpoint.url if endpoint else None}
    out["request"] = {
        "body": event.body.decode("utf-8", errors="replace") if event is not None else None
    }
    out["response"] = (
        None
        if last is None or last.status_code is None
        else {
            "status": last.status_code,
            "body": last.response_body,
            "truncated": last.response_truncated,
        }
    )
    out["attemptLog"] = [_attempt_json(a) for a in d.attempts]
    return out
