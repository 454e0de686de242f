"""What the Webhooks pages say about endpoints and deliveries, in words.

Plain functions over the records (no request, no store), so the pages and the
tests agree on one wording:

* ``health_line``: an endpoint's status the way SPEC.md's endpoint table
  shows it: Active with the last success time or 'No deliveries yet';
  Failing with the count of consecutive failed attempts and when the streak
  began; Off with the reason (the stored one, which names who or what turned
  it off) and when.
* ``form_body``: the add and edit forms as the webhooks API's JSON body, so
  ``webhook_records.parse_create`` and ``apply_edit`` validate them with the
  API's own rules (nothing is checked twice, nothing differently).
* ``form_error``: a rule's message (``url must use https ...``) in the
  form's words, and the field it belongs to.
* ``pretty_json``, ``duration``, ``next_try``, ``paused``: details of a
  delivery. The next try is the API's ``nextAttemptAt``
  (``webhook_views.next_attempt_at_ms``): while the endpoint is Off a
  waiting delivery shows as paused, never as a time it will not be sent at.
* ``secret_check``: which secret a Rotate form was made for.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

import attrs

from svc_engine.endpoint_health import OFF_AUTOMATIC, HealthState
from svc_engine.errors import CallerError
from svc_engine.webhook_delivery import WAITING, Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import SUBSCRIBABLE_EVENTS
from svc_engine.webhook_records import Endpoint
from svc_engine.webhook_retry import MAX_ATTEMPTS
from svc_engine.webhook_views import next_attempt_at_ms
from web.dashboard.context import fmt_time
from web.dashboard.formats import stamp

FIELDS = ("url", "description", "events")
FIELD_NAMES = {"url": "The URL", "description": "The description"}
EVENT_HELP = {
    "click": "A short link was opened (bots are never sent)",
    "open": "The app was opened from a link",
    "install": "First launch after an install or reinstall",
    "conversion": "A custom event sent with Svc.trackEvent",
}
STATUS_BADGES = {
    DeliveryStatus.QUEUED: "muted", DeliveryStatus.SENDING: "accent",
    DeliveryStatus.DELIVERED: "success", DeliveryStatus.RETRYING: "warning",
    DeliveryStatus.FAILED: "danger",
}
IN_FLIGHT = (DeliveryStatus.QUEUED, DeliveryStatus.SENDING)


@attrs.frozen
class HealthLine:
    state: str      # Active, Failing, Off
    badge: str      # success, warning, muted: the badge's colour
    text: str       # the detail under the badge


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def health_line(endpoint: Endpoint) -> HealthLine:
    h = endpoint.health
    if h.state is HealthState.OFF:
        when = fmt_time(h.off_at_ms)
        if h.off_reason == OFF_AUTOMATIC and h.streak_started_at_ms is not None:
            text = (f"Turned off automatically on {when} after "
                    f"{plural(h.consecutive_failures, 'failed attempt')} in a row since "
                    f"{fmt_time(h.streak_started_at_ms)}")
        else:
            reason = h.off_detail or "Turned off"
            text = f"{reason} on {when}" if when else reason
        return HealthLine(HealthState.OFF.value, "muted", text)
    if h.state is HealthState.FAILING:
        since = fmt_time(h.streak_started_at_ms)
        text = f"{plural(h.consecutive_failures, 'failed attempt')} in a row"
        return HealthLine(HealthState.FAILING.value, "warning",
                          f"{text} since {since}" if since else text)
    if h.last_success_at_ms is None:
        return HealthLine(HealthState.ACTIVE.value, "success", "No deliveries yet")
    return HealthLine(HealthState.ACTIVE.value, "success",
                      f"Last success {fmt_time(h.last_success_at_ms)}")


@attrs.frozen
class EndpointForm:
    """What the add or edit form holds (as typed, for showing it again)."""

    url: str = ""
    description: str = ""
    events: tuple[str, ...] = SUBSCRIBABLE_EVENTS


def read_form(form: Any) -> EndpointForm:
    """The form's fields; ``form`` is the request's MultiDict."""
    events = tuple(e for e in form.getlist("events") if isinstance(e, str))
    return EndpointForm(url=str(form.get("url", "")).strip(),
                        description=str(form.get("description", "")), events=events)


def of_endpoint(endpoint: Endpoint) -> EndpointForm:
    return EndpointForm(endpoint.url, endpoint.description or "", endpoint.events)


def form_body(form: EndpointForm) -> dict[str, Any]:
    """The webhooks API's body for this form: every field (an empty description
    clears it; no event ticked is the API's empty list, which it refuses)."""
    return {"url": form.url, "description": form.description, "events": list(form.events)}


_LEADING_FIELD = re.compile(r"^(url|description|events)\b")


def form_error(e: CallerError) -> tuple[str | None, str]:
    """``(form field or None, message in the form's words)``."""
    message = e.message
    field = getattr(e, "field", None)
    m = _LEADING_FIELD.match(message)
    if m and m.group(1) in FIELD_NAMES:
        message = FIELD_NAMES[m.group(1)] + message[m.end():]
    elif message[:1].islower():
        message = message[:1].upper() + message[1:]
    return (field if field in FIELDS else None), message


def secret_check(endpoint: Endpoint) -> str:
    """Names the secret a Rotate form was shown with (16 hex digits of its SHA-256:
    nothing to learn from). A form sent again, say by reloading the page that
    showed the new secret, names an old secret and rotates nothing."""
    return hashlib.sha256(endpoint.secret.encode()).hexdigest()[:16]


def pretty_json(text: str | None) -> str:
    """JSON text indented for reading; anything else as it came."""
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def duration(ms: int | None) -> str:
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s"


def paused(d: Delivery, endpoint: Endpoint | None) -> bool:
    """A Queued or Retrying delivery held because its endpoint is Off: nothing
    is attempted until the endpoint is turned on."""
    return (d.status in WAITING
            and endpoint is not None and endpoint.is_off)


def next_try(d: Delivery, endpoint: Endpoint | None) -> str | None:
    """'<time to the second> (attempt 3 of 7)' while Retrying (the time the API
    shows as ``nextAttemptAt``), 'Paused while the endpoint is off (attempt 3
    of 7)' while it is held; else None."""
    if d.status is not DeliveryStatus.RETRYING:
        return None
    attempt = f"(attempt {d.scheduled_attempts + 1} of {MAX_ATTEMPTS})"
    if paused(d, endpoint):
        return f"Paused while the endpoint is off {attempt}"
    when = next_attempt_at_ms(d, endpoint)
    return None if when is None else f"{stamp(when)} {attempt}"


def endpoint_label(endpoint: Endpoint | None, limit: int = 60) -> str:
    """How a filter or a row names an endpoint: its description, else its URL."""
    if endpoint is None:
        return "Deleted endpoint"
    text = endpoint.description or endpoint.url
    return text if len(text) <= limit else text[: limit - 1] + "…"
