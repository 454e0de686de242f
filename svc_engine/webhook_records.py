"""Webhook endpoints and the events they receive, as stored records.

An ``Endpoint`` is the integrator's URL with its subscription, signing secret
and health. Its project and mode are fixed at creation (those of the key that
created it). A ``WebhookEvent`` is one event's delivery body, stored once and
shared by every delivery of that event (``refs`` counts them; the record goes
when the last one goes).

Which events an endpoint gets (``accepts``), decided when the dispatcher turns
an outbox event into deliveries:

* the endpoint's project and mode, and a subscribed type (``test`` always);
* the event happened at or after ``accepting_since_ms``: the endpoint's
  creation, or its latest turn on. Past events are never replayed, and events
  that happened while it was Off are never queued;
* an endpoint that is Off now still gets an event that happened before it went
  Off (``health.off_at_ms``): that delivery waits and resumes on turn on, like
  every delivery already waiting when it went Off;
* whether the organization's plan includes webhooks is the owner's check (the
  plan is not an endpoint property).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine import endpoint_health as health_rules
from svc_engine.decode import RecordError, opt_str, req_bytes, req_int, req_str
from svc_engine.endpoint_health import EndpointHealth, HealthState
from svc_engine.errors import ValidationError
from svc_engine.keys import Mode
from svc_engine.webhook_endpoint import (
    EndpointFields,
    is_subscribed,
    validate_description,
    validate_events,
    validate_url,
)

EDITABLE_FIELDS = ("url", "description", "events")


@attrs.frozen
class Endpoint:
    VERSION = 1

    id: str
    project_id: str
    mode: Mode
    url: str
    description: str | None
    events: tuple[str, ...]
    secret: str
    created_at_ms: int
    updated_at_ms: int
    accepting_since_ms: int
    """Events from this time on are queued (creation, or the latest turn on)."""
    health: EndpointHealth = attrs.field(factory=EndpointHealth)

    @property
    def is_off(self) -> bool:
        return self.health.state is HealthState.OFF

    def to_map(self) -> dict[str, object]:
        return {
            "v": self.VERSION,
            "id": self.id,
            "project_id": self.project_id,
            "mode": self.mode.value,
            "url": self.url,
            "description": self.description,
            "events": list(self.events),
            "secret": self.secret,
            "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms,
            "accepting_since_ms": self.accepting_since_ms,
            "health": self.health.to_map(),
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Endpoint:
        if req_int(m, "v") != cls.VERSION:
            raise RecordError(f"endpoint record version {m['v']} is not {cls.VERSION}")
        events = m.get("events")
        health = m.get("health")
        if not isinstance(events, list | tuple) or not all(isinstance(e, str) for e in events):
            raise RecordError("events: expected a list of strings")
        if not isinstance(health, Mapping):
            raise RecordError("health: expected a map")
        return cls(
            id=req_str(m, "id"),
            project_id=req_str(m, "project_id"),
            mode=Mode(req_str(m, "mode")),
            url=req_str(m, "url"),
            description=opt_str(m, "description"),
            events=tuple(events),
            secret=req_str(m, "secret"),
            created_at_ms=req_int(m, "created_at_ms"),
            updated_at_ms=req_int(m, "updated_at_ms"),
            accepting_since_ms=req_int(m, "accepting_since_ms"),
            health=EndpointHealth.from_map(health),
        )


def new_endpoint(
    endpoint_id: str, project_id: str, mode: Mode, fields: EndpointFields, secret: str,
    now_ms: int,
) -> Endpoint:
    """A new Active endpoint ('No deliveries yet') that takes events from now on."""
    return Endpoint(
        id=endpoint_id,
        project_id=project_id,
        mode=Mode(mode),
        url=fields.url,
        description=fields.description,
        events=fields.events,
        secret=secret,
        created_at_ms=now_ms,
        updated_at_ms=now_ms,
        accepting_since_ms=now_ms,
    )


def parse_create(body: object, *, local: bool = True) -> EndpointFields:
    """The body of a create request: ``url`` required, ``description``, ``events``
    (``local``: whether receivers on this machine are allowed)."""
    fields = _object(body)
    if "url" not in fields:
        raise ValidationError("url is required", field="url")
    return EndpointFields(
        url=validate_url(fields["url"], local=local),
        description=validate_description(fields.get("description")),
        events=validate_events(fields.get("events")),
    )


def apply_edit(endpoint: Endpoint, body: object, now_ms: int, *, local: bool = True
               ) -> Endpoint:
    """An edit: any subset of url, description, events. Absent fields stay.

    ``"events": null`` selects all four again; ``"description": null`` clears it.
    """
    changes = edit_changes(body, local=local)
    if not changes:
        return endpoint
    return attrs.evolve(endpoint, updated_at_ms=now_ms, **changes)


def edit_changes(body: object, *, local: bool = True) -> dict[str, Any]:
    """The fields an edit body sets, checked (ValidationError otherwise): what
    :func:`apply_edit` applies, and what the API checks before the request's
    Idempotency-Key is looked up (a body refused on its own is that 400,
    never a 409)."""
    fields = _object(body)
    changes: dict[str, Any] = {}
    if "url" in fields:
        changes["url"] = validate_url(fields["url"], local=local)
    if "description" in fields:
        changes["description"] = validate_description(fields["description"])
    if "events" in fields:
        changes["events"] = validate_events(fields["events"])
    return changes


def _object(body: object) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise ValidationError("the request body must be a JSON object")
    unknown = sorted(k for k in body if k not in EDITABLE_FIELDS)
    if unknown:
        raise ValidationError(
            f"unknown field {unknown[0]!r}; the fields are url, description and events",
            field=str(unknown[0]),
        )
    return body


def rotate_secret(endpoint: Endpoint, secret: str, now_ms: int) -> Endpoint:
    """The new secret signs from the next attempt on; the old one is gone."""
    return attrs.evolve(endpoint, secret=secret, updated_at_ms=now_ms)


def turn_off(endpoint: Endpoint, now_ms: int, detail: str = "") -> Endpoint:
    """Off by a person; ``detail`` says who ("Turned off by ana@example.com")."""
    return attrs.evolve(
        endpoint, health=health_rules.turn_off(endpoint.health, now_ms, detail),
        updated_at_ms=now_ms,
    )


def turn_on(endpoint: Endpoint, now_ms: int) -> Endpoint:
    """Off to Active with the count reset; events from now on are queued again.

    Turning on an endpoint that is not Off changes nothing.
    """
    if not endpoint.is_off:
        return endpoint
    return attrs.evolve(
        endpoint,
        health=health_rules.turn_on(endpoint.health),
        accepting_since_ms=now_ms,
        updated_at_ms=now_ms,
    )


def off_if_due(endpoint: Endpoint, now_ms: int) -> Endpoint:
    """The endpoint Off as of the moment the automatic rule held, when it
    has held since its last attempt (``endpoint_health.off_since_due``);
    the same object when not."""
    health = health_rules.off_since_due(endpoint.health, now_ms)
    if health is endpoint.health:
        return endpoint
    return attrs.evolve(endpoint, health=health, updated_at_ms=now_ms)


def record_outcome(endpoint: Endpoint, delivered: bool, at_ms: int) -> Endpoint:
    """Health after one attempt (any delivery, any trigger)."""
    if delivered:
        return attrs.evolve(endpoint, health=health_rules.record_success(endpoint.health, at_ms))
    return attrs.evolve(endpoint, health=health_rules.record_failure(endpoint.health, at_ms))


def accepts(endpoint: Endpoint, event_type: str, event_created_at_ms: int) -> bool:
    """Whether an event of this type and time becomes a delivery (see module doc)."""
    if not is_subscribed(endpoint.events, event_type):
        return False
    if event_created_at_ms < endpoint.accepting_since_ms:
        return False
    if endpoint.is_off:
        off_at = endpoint.health.off_at_ms
        return off_at is not None and event_created_at_ms < off_at
    return True


@attrs.frozen
class WebhookEvent:
    """One event's delivery body, shared by its deliveries."""

    VERSION = 1

    id: str
    type: str
    project_id: str
    mode: Mode
    created_at_ms: int
    body: bytes
    """The exact envelope JSON bytes that are signed and sent."""
    refs: int

    def to_map(self) -> dict[str, object]:
        return {
            "v": self.VERSION,
            "id": self.id,
            "type": self.type,
            "project_id": self.project_id,
            "mode": self.mode.value,
            "created_at_ms": self.created_at_ms,
            "body": self.body,
            "refs": self.refs,
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> WebhookEvent:
        if req_int(m, "v") != cls.VERSION:
            raise RecordError(f"webhook event record version {m['v']} is not {cls.VERSION}")
        return cls(
            id=req_str(m, "id"),
            type=req_str(m, "type"),
            project_id=req_str(m, "project_id"),
            mode=Mode(req_str(m, "mode")),
            created_at_ms=req_int(m, "created_at_ms"),
            body=req_bytes(m, "body"),
            refs=req_int(m, "refs"),
        )
