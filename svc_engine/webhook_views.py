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
"""

from __future__ import annotations

from typing import Any

from svc_engine.webhook_delivery import Attempt, Delivery
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


def delivery_summary_json(d: Delivery) -> dict[str, Any]:
    """One row of the recent deliveries list."""
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
        "nextAttemptAt": _time(d.next_attempt_at_ms),
        "durationMs": last.duration_ms if last else None,
        "responseStatus": last.status_code if last else None,
        "error": last.error if last else None,
    }


def delivery_json(
    d: Delivery, endpoint: Endpoint | None, event: WebhookEvent | None
) -> dict[str, Any]:
    """The full view of one delivery."""
    out = delivery_summary_json(d)
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
