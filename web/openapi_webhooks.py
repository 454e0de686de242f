"""The webhooks API in the OpenAPI document (registered into web/openapi.py's
``EXTRA_PATHS`` when imported; web/api_webhooks.py imports it)."""

from __future__ import annotations

from typing import Any

from svc_engine.webhook_delivery import DeliveryStatus
from svc_engine.webhook_endpoint import DESCRIPTION_MAX, SUBSCRIBABLE_EVENTS
from web.openapi import EXTRA_PATHS, UUID, Schema, op, path_param, query

TIME: Schema = {"type": "string", "format": "date-time"}
OPT_TIME: Schema = {"type": ["string", "null"], "format": "date-time"}
EVENTS: Schema = {"type": ["array", "null"], "minItems": 1,
                  "items": {"enum": list(SUBSCRIBABLE_EVENTS)}}
FIELDS: dict[str, Schema] = {
    "url": {"type": "string", "maxLength": 2048,
            "description": "https; plain http only for localhost, 127.0.0.1 and [::1]"},
    "description": {"type": ["string", "null"], "maxLength": DESCRIPTION_MAX},
    "events": EVENTS,
}
CREATE: Schema = {"type": "object", "required": ["url"], "additionalProperties": False,
                  "properties": FIELDS}
EDIT: Schema = {"type": "object", "additionalProperties": False, "properties": FIELDS}
ENDPOINT: Schema = {
    "type": "object",
    "required": ["id", "url", "events", "status", "env", "createdAt", "health"],
    "properties": {
        "id": UUID, "url": {"type": "string"}, "description": {"type": ["string", "null"]},
        "events": {"type": "array", "items": {"type": "string"}},
        "status": {"enum": ["Active", "Failing", "Off"]}, "projectId": UUID,
        "env": {"enum": ["test", "live"]}, "createdAt": TIME, "updatedAt": TIME,
        "secret": {"type": "string", "pattern": "^whsec_",
                   "description": "in single-endpoint answers only"},
        "health": {"type": "object", "properties": {
            "lastSuccessAt": OPT_TIME, "consecutiveFailures": {"type": "integer"},
            "failingSince": OPT_TIME, "offBy": {"enum": ["manual", "automatic", None]},
            "offReason": {"type": ["string", "null"]}, "offAt": OPT_TIME}},
    },
}
STATUS: Schema = {"enum": [s.value for s in DeliveryStatus]}
DELIVERY: Schema = {
    "type": "object",
    "required": ["id", "endpointId", "event", "status", "attempts", "createdAt"],
    "properties": {
        "id": {**UUID, "description": "the webhook-id header; constant across retries"},
        "endpointId": UUID, "status": STATUS, "attempts": {"type": "integer"},
        "event": {"type": "object", "properties": {"id": UUID, "type": {"type": "string"},
                                                    "createdAt": TIME}},
        "env": {"enum": ["test", "live"]}, "createdAt": TIME, "lastAttemptAt": OPT_TIME,
        "nextAttemptAt": {**OPT_TIME, "description": (
            "when the next attempt goes; null once none is due and while the endpoint is Off")},
        "durationMs": {"type": ["integer", "null"]},
        "responseStatus": {"type": ["integer", "null"]}, "error": {"type": ["string", "null"]},
        "request": {"type": "object", "properties": {"body": {"type": ["string", "null"]}}},
        "response": {"type": ["object", "null"]},
        "attemptLog": {"type": "array", "items": {"type": "object"}},
    },
}


def _list(item: Schema) -> Schema:
    return {"type": "object", "required": ["data"],
            "properties": {"data": {"type": "array", "items": item}}}


ID = path_param("id", UUID)
PLAN = (403,)  # below the Growth plan


def _action(summary: str, answer: Schema, ok: int = 200,
            errors: tuple[int, ...] = (404,)) -> dict[str, Any]:
    return {"post": op(summary, key="server", ok=ok, answer=answer, errors=errors, write=True,
                       params=(ID,))}


PATHS: dict[str, dict[str, Any]] = {
    "/v1/webhooks/endpoints": {
        "post": op("Add a webhook endpoint (its whsec_ secret is in the answer)",
                   key="server", body=CREATE, ok=201, answer=ENDPOINT, errors=PLAN, write=True),
        "get": op("Webhook endpoints of this project and mode (no secrets)", key="server",
                  answer=_list(ENDPOINT), errors=PLAN)},
    "/v1/webhooks/endpoints/{id}": {
        "get": op("One webhook endpoint, with its secret", key="server", answer=ENDPOINT,
                  errors=(404,), params=(ID,)),
        "patch": op("Edit url, description or events", key="server", body=EDIT,
                    answer=ENDPOINT, errors=(404,), write=True, params=(ID,)),
        "delete": op("Delete an endpoint and its delivery history", key="server",
                     errors=(404,), write=True, params=(ID,))},
    "/v1/webhooks/endpoints/{id}/test": _action("Send a test event", DELIVERY, 201,
                                                (403, 404, 409)),
    "/v1/webhooks/endpoints/{id}/disable": _action("Turn the endpoint off", ENDPOINT),
    "/v1/webhooks/endpoints/{id}/enable": _action(
        "Turn the endpoint on (failure count reset; waiting deliveries resume)", ENDPOINT),
    "/v1/webhooks/endpoints/{id}/rotate-secret": _action(
        "A new signing secret; the old one stops at once", ENDPOINT),
    "/v1/webhooks/deliveries": {
        "get": op("The last 50 deliveries of this mode", key="server",
                  answer=_list(DELIVERY), errors=(403, 404), params=(
                      query("endpointId", UUID),
                      query("status", {"type": "string",
                                       "description": "Queued, Sending, Delivered, Retrying "
                                                      "or Failed"})))},
    "/v1/webhooks/deliveries/{id}": {
        "get": op("One delivery: request sent, response returned, attempts", key="server",
                  answer=DELIVERY, errors=(403, 404), params=(ID,))},
    "/v1/webhooks/deliveries/{id}/retry": _action("Send a Failed delivery again now",
                                                  DELIVERY, errors=(403, 404, 409)),
    "/v1/webhooks/deliveries/{id}/resend": _action("Send a Delivered delivery again now",
                                                   DELIVERY, errors=(403, 404, 409)),
}

EXTRA_PATHS.update(PATHS)
