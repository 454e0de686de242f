"""The webhooks API in the OpenAPI document (registered into web/openapi.py's
``EXTRA_PATHS`` when imported; web/api_webhooks.py imports it). Answers are
svc_engine/webhook_views.py's shapes; tests/test_openapi_answers.py checks
real answers against them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from svc_engine.endpoint_health import OFF_AUTOMATIC, OFF_MANUAL, HealthState
from svc_engine.outbox import EventType
from svc_engine.webhook_delivery import MANUAL, SCHEDULED, DeliveryStatus
from svc_engine.webhook_endpoint import DESCRIPTION_MAX, SUBSCRIBABLE_EVENTS
from web.openapi import EXTRA_PATHS, op, path_param, query
from web.openapi_schemas import MODE, TIME, UUID, Schema, anycase

OPT_TIME: Schema = {"type": ["string", "null"], "format": "date-time"}
EVENTS: Schema = {"type": ["array", "null"], "minItems": 1,
                  "items": {"enum": list(SUBSCRIBABLE_EVENTS)},
                  "description": "null: all four; duplicates are dropped"}
_VISIBLE = r"!\x22$-~"  # visible ASCII but '#'
_AUTHORITY = r"[!\x22$-.0->A-~]+"  # visible ASCII but '#', '/', '?' and '@'
_LOCAL = rf"(?:{anycase('localhost')}|127\.0\.0\.1|\[::1\])(?::[0-9]{{1,5}})?"
FIELDS: dict[str, Schema] = {
    "url": {"type": "string", "maxLength": 2048,
            "pattern": rf"^(?:{anycase('https')}://{_AUTHORITY}|{anycase('http')}://{_LOCAL})"
                       rf"(?:[/?][{_VISIBLE}]*)?$",
            "description": "https; plain http only for localhost, 127.0.0.1 and [::1]; ASCII "
                           "without spaces, user information or a fragment"},
    "description": {"type": ["string", "null"], "maxLength": DESCRIPTION_MAX,
                    "pattern": r"^[^\x00-\x1f\x7f]*$",
                    "description": "trimmed; printable characters; empty is null"},
    "events": EVENTS,
}
CREATE: Schema = {"type": "object", "required": ["url"], "additionalProperties": False,
                  "properties": FIELDS}
EDIT: Schema = {"type": "object", "additionalProperties": False, "properties": FIELDS}
HEALTH: Schema = {
    "type": "object",
    "required": ["lastSuccessAt", "consecutiveFailures", "failingSince", "offBy", "offReason",
                 "offAt"],
    "properties": {
        "lastSuccessAt": OPT_TIME, "consecutiveFailures": {"type": "integer", "minimum": 0},
        "failingSince": OPT_TIME, "offBy": {"enum": [OFF_MANUAL, OFF_AUTOMATIC, None]},
        "offReason": {"type": ["string", "null"]}, "offAt": OPT_TIME}}
ENDPOINT: Schema = {
    "type": "object",
    "required": ["id", "url", "description", "events", "status", "projectId", "env",
                 "createdAt", "updatedAt", "health"],
    "properties": {
        "id": UUID, "url": {"type": "string"}, "description": {"type": ["string", "null"]},
        "events": {"type": "array", "items": {"enum": list(SUBSCRIBABLE_EVENTS)}},
        "status": {"enum": [s.value for s in HealthState]}, "projectId": UUID,
        "env": MODE, "createdAt": TIME, "updatedAt": TIME,
        "secret": {"type": "string", "pattern": "^whsec_",
                   "description": "in single-endpoint answers only"},
        "health": HEALTH,
    },
}
LISTED_ENDPOINT: Schema = {**ENDPOINT, "properties": {
    k: v for k, v in ENDPOINT["properties"].items() if k != "secret"}}
ENDPOINT_DELETED: Schema = {
    "type": "object", "required": ["id", "deleted", "deliveriesRemoved"],
    "properties": {"id": UUID, "deleted": {"const": True},
                   "deliveriesRemoved": {"type": "integer", "minimum": 0}}}
STATUS: Schema = {"enum": [s.value for s in DeliveryStatus]}
EVENT_TYPE: Schema = {"enum": [t.value for t in EventType]}
_SUMMARY_FIELDS: dict[str, Schema] = {
    "id": {**UUID, "description": "the webhook-id header; constant across retries"},
    "endpointId": UUID,
    "event": {"type": "object", "required": ["id", "type"],
              "properties": {"id": UUID, "type": EVENT_TYPE}},
    "env": MODE, "status": STATUS, "attempts": {"type": "integer", "minimum": 0},
    "createdAt": TIME, "lastAttemptAt": OPT_TIME,
    "nextAttemptAt": {**OPT_TIME, "description": (
        "when the next attempt goes; null once none is due and while the endpoint is Off")},
    "durationMs": {"type": ["integer", "null"]},
    "responseStatus": {"type": ["integer", "null"]}, "error": {"type": ["string", "null"]},
}
DELIVERY_SUMMARY: Schema = {"type": "object", "required": list(_SUMMARY_FIELDS),
                            "properties": _SUMMARY_FIELDS}
ATTEMPT: Schema = {
    "type": "object",
    "required": ["number", "trigger", "startedAt", "durationMs", "responseStatus", "outcome",
                 "error"],
    "properties": {
        "number": {"type": "integer", "minimum": 1}, "trigger": {"enum": [SCHEDULED, MANUAL]},
        "startedAt": TIME, "durationMs": {"type": "integer"},
        "responseStatus": {"type": ["integer", "null"]},
        "outcome": {"type": "string", "description": "delivered, or why the attempt failed"},
        "error": {"type": ["string", "null"]}}}
DELIVERY: Schema = {
    "type": "object",
    "required": [*_SUMMARY_FIELDS, "endpoint", "request", "response", "attemptLog"],
    "properties": {
        **_SUMMARY_FIELDS,
        "event": {"type": "object", "required": ["id", "type"], "properties": {
            "id": UUID, "type": EVENT_TYPE,
            "createdAt": {**TIME, "description": "absent once the event is swept"}}},
        "endpoint": {"type": "object", "required": ["id", "url"],
                     "properties": {"id": UUID, "url": {"type": ["string", "null"]}}},
        "request": {"type": "object", "required": ["body"], "properties": {
            "body": {"type": ["string", "null"],
                     "description": "the exact JSON text signed and sent"}}},
        "response": {"oneOf": [{"type": "null"}, {
            "type": "object", "required": ["status", "body", "truncated"],
            "properties": {"status": {"type": "integer"}, "body": {"type": "string"},
                           "truncated": {"type": "boolean",
                                         "description": "more than the 4 KiB kept came"}}}],
                     "description": "the last attempt's answer; null before any"},
        "attemptLog": {"type": "array", "items": ATTEMPT},
    },
}


def _list(item: Schema) -> Schema:
    return {"type": "object", "required": ["data"],
            "properties": {"data": {"type": "array", "items": item}}}


ID = path_param("id", UUID)
PLAN = {403: "forbidden: webhooks need the Growth plan or higher"}
NO_ENDPOINT = {404: "not_found: no such endpoint in this project and mode"}
NO_DELIVERY = {404: "not_found: no such delivery in this project and mode"}


def _action(summary: str, answer: Schema, ok: int = 200,
            codes: Mapping[int, str] = NO_ENDPOINT) -> dict[str, Any]:
    return {"post": op(summary, key="server", ok=ok, answer=answer, codes=codes, write=True,
                       params=(ID,))}


PATHS: dict[str, dict[str, Any]] = {
    "/v1/webhooks/endpoints": {
        "post": op("Add a webhook endpoint (its whsec_ secret is in the answer)",
                   key="server", body=CREATE, ok=201, answer=ENDPOINT, codes=PLAN, write=True),
        "get": op("Webhook endpoints of this project and mode (no secrets)", key="server",
                  answer=_list(LISTED_ENDPOINT), codes=PLAN)},
    "/v1/webhooks/endpoints/{id}": {
        "get": op("One webhook endpoint, with its secret", key="server", answer=ENDPOINT,
                  codes=NO_ENDPOINT, params=(ID,)),
        "patch": op("Edit url, description or events", key="server", body=EDIT,
                    answer=ENDPOINT, codes=NO_ENDPOINT, write=True, params=(ID,)),
        "delete": op("Delete an endpoint and its delivery history", key="server",
                     answer=ENDPOINT_DELETED, codes=NO_ENDPOINT, write=True, params=(ID,))},
    "/v1/webhooks/endpoints/{id}/test": _action("Send a test event", DELIVERY, 201, {
        **PLAN, **NO_ENDPOINT, 409: "conflict: the endpoint is Off"}),
    "/v1/webhooks/endpoints/{id}/disable": _action("Turn the endpoint off", ENDPOINT),
    "/v1/webhooks/endpoints/{id}/enable": _action(
        "Turn the endpoint on (failure count reset; waiting deliveries resume)", ENDPOINT),
    "/v1/webhooks/endpoints/{id}/rotate-secret": _action(
        "A new signing secret; the old one stops at once", ENDPOINT),
    "/v1/webhooks/deliveries": {
        "get": op("The last 50 deliveries of this mode", key="server",
                  answer=_list(DELIVERY_SUMMARY), codes={
                      400: "validation_error: a filter other than endpointId and status, or "
                           "an unknown status", **PLAN,
                      404: "not_found: endpointId names no endpoint of this project and mode"},
                  params=(query("endpointId", UUID),
                          query("status", {"type": "string", "description": (
                              "Queued, Sending, Delivered, Retrying or Failed (any case)")})))},
    "/v1/webhooks/deliveries/{id}": {
        "get": op("One delivery: request sent, response returned, attempts", key="server",
                  answer=DELIVERY, codes={**PLAN, **NO_DELIVERY}, params=(ID,))},
    "/v1/webhooks/deliveries/{id}/retry": _action(
        "Send a Failed delivery again now", DELIVERY, codes={
            **PLAN, **NO_DELIVERY, 409: "conflict: the delivery is not Failed, its endpoint "
                                        "is Off, or an attempt is under way"}),
    "/v1/webhooks/deliveries/{id}/resend": _action(
        "Send a Delivered delivery again now", DELIVERY, codes={
            **PLAN, **NO_DELIVERY, 409: "conflict: the delivery is not Delivered, its "
                                        "endpoint is Off, or an attempt is under way"}),
}

EXTRA_PATHS.update(PATHS)
