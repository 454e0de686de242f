"""Validation of a webhook endpoint's editable fields (SPEC: Webhook endpoint).

* ``url``: https; plain http only for ``localhost``, ``127.0.0.1`` and
  ``[::1]``. Also refused (our decisions, where the spec is silent): other
  schemes, a missing host, user information (``https://user:pw@host``, a
  classic way to disguise the real host, and credentials do not belong in a
  stored URL), a fragment (never sent to the server, so it can only be a
  mistake), non-ASCII text, whitespace or control characters, an empty or
  out-of-range port, numeric host names that are not a dotted-quad IPv4
  address, and URLs longer than 2048 characters. The URL is stored as given.
  Where it may connect is decided at send time by ``ssrf.url_target_rule``.
* ``description``: optional, at most 200 characters; surrounding whitespace
  is removed and an empty description is stored as None.
* ``events``: a non-empty subset of click, open, install, conversion; None
  means all four. Duplicates collapse and the result is in that canonical
  order. ``test`` is not subscribable: Send test always reaches the endpoint.

Each check raises ``ValidationError`` with ``field`` set to ``url``,
``description`` or ``events``.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from svc_engine.errors import ValidationError
from svc_engine.ssrf import LOCAL_RECEIVER_HOSTS, UrlRejected, parse_url, plain_http_allowed

SUBSCRIBABLE_EVENTS: tuple[str, ...] = ("click", "open", "install", "conversion")
DESCRIPTION_MAX = 200


@attrs.frozen
class EndpointFields:
    """The validated, user-editable fields of an endpoint."""

    url: str
    description: str | None
    events: tuple[str, ...]


def validate_url(url: object, *, local: bool = True) -> str:
    """``local=False``: the server refuses receivers on its own machine
    (``SVC_WEBHOOK_LOCAL_RECEIVERS``), whatever the scheme."""
    if not isinstance(url, str):
        raise ValidationError("url must be a string", field="url")
    parts = parse_url(url)
    if isinstance(parts, UrlRejected):
        raise ValidationError(parts.reason, field="url")
    if not local and parts.host in LOCAL_RECEIVER_HOSTS:
        raise ValidationError("url must not be localhost, 127.0.0.1 or [::1]: receivers on "
                              "this machine are turned off on this server", field="url")
    if parts.scheme != "https" and not plain_http_allowed(parts.host):
        raise ValidationError(
            "url must use https (plain http only for localhost, 127.0.0.1 and [::1])",
            field="url",
        )
    return url


def validate_description(description: object) -> str | None:
    if description is None:
        return None
    if not isinstance(description, str):
        raise ValidationError("description must be a string", field="description")
    text = description.strip()
    if not text.isprintable():
        raise ValidationError("description must not contain control characters",
                              field="description")
    if len(text) > DESCRIPTION_MAX:
        raise ValidationError(
            f"description must be at most {DESCRIPTION_MAX} characters", field="description"
        )
    return text or None


def validate_events(events: object) -> tuple[str, ...]:
    if events is None:
        return SUBSCRIBABLE_EVENTS
    if not isinstance(events, list | tuple):
        # Not any iterable: a JSON object would subscribe to its keys, so
        # {"click": false} would mean click.
        raise ValidationError("events must be a list of event names", field="events")
    chosen = list(events)
    unknown = [e for e in chosen if not isinstance(e, str) or e not in SUBSCRIBABLE_EVENTS]
    if unknown:
        raise ValidationError(
            f"unknown event {unknown[0]!r}; choose from {', '.join(SUBSCRIBABLE_EVENTS)}",
            field="events",
        )
    if not chosen:
        raise ValidationError("choose at least one event", field="events")
    return tuple(e for e in SUBSCRIBABLE_EVENTS if e in chosen)


def validate_endpoint(
    url: object, description: object = None, events: object = None
) -> EndpointFields:
    """Validate all fields; the first failing field (in that order) raises."""
    return EndpointFields(
        url=validate_url(url),
        description=validate_description(description),
        events=validate_events(events),
    )


def is_subscribed(events: Iterable[str], event_type: str) -> bool:
    """Whether an endpoint with these events gets ``event_type`` (``test`` always)."""
    return event_type == "test" or event_type in events
