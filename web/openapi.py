"""The OpenAPI 3.1 document of the HTTP API, served at ``/v1/openapi.json``.

Kept true by tests/test_openapi.py: every route the API router serves is in
the document and every documented operation is served; the fuzz test drives
every operation from it and must see no 5xx. Schemas describe what the
handlers accept; they are written here by hand, next to each other, so a
change of a request shape shows up in review.
"""

from __future__ import annotations

from typing import Any

Schema = dict[str, Any]

UUID: Schema = {"type": "string", "format": "uuid"}
INSTALL_ID: Schema = {"type": "string", "format": "uuid",
                      "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-"
                                 "[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$",
                      "description": "a UUID v4, made by the SDK"}
ERROR: Schema = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"},
        "field": {"type": "string"}}}},
}
PARAM_VALUE: Schema = {"oneOf": [{"type": "string"}, {"type": "number"}, {"type": "boolean"}]}
RESOLVED_LINK: Schema = {
    "type": "object",
    "required": ["linkId", "url", "path", "params", "isDeferred", "confidence", "method"],
    "properties": {
        "linkId": UUID, "url": {"type": "string"}, "path": {"type": "string"},
        "params": {"type": "object", "additionalProperties": PARAM_VALUE},
        "campaign": {"type": ["string", "null"]}, "channel": {"type": ["string", "null"]},
        "isDeferred": {"type": "boolean"},
        "confidence": {"enum": ["deterministic", "probabilistic", "unattributed"]},
        "method": {"type": ["string", "null"]},
    },
}
LINK_ANSWER: Schema = {"type": "object", "required": ["link"],
                       "properties": {"link": {"oneOf": [RESOLVED_LINK, {"type": "null"}]}}}
SETTINGS: Schema = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "iosLandingPage": {"type": "boolean"}, "webFallbackTokens": {"type": "boolean"},
        "probabilisticMatching": {"type": "boolean"},
        "probabilisticIpMatching": {"type": "boolean"},
        "probabilisticWindowMinutes": {"type": "integer", "minimum": 15, "maximum": 360},
    },
}
URL: Schema = {"type": ["string", "null"], "format": "uri", "maxLength": 2048}
LINK_FIELDS: dict[str, Schema] = {
    "path": {"type": "string", "pattern": "^/", "maxLength": 2048},
    "params": {"type": ["object", "null"], "additionalProperties": PARAM_VALUE},
    "title": {"type": ["string", "null"], "maxLength": 200},
    "campaign": {"type": ["string", "null"], "maxLength": 100},
    "channel": {"type": ["string", "null"], "maxLength": 100},
    "tags": {"type": ["array", "null"], "items": {"type": "string", "maxLength": 50},
             "maxItems": 20},
    "iosFallbackUrl": URL, "androidFallbackUrl": URL, "webFallbackUrl": URL,
    "ogTitle": {"type": ["string", "null"], "maxLength": 200},
    "ogDescription": {"type": ["string", "null"], "maxLength": 1000},
    "ogImageUrl": URL,
    "expiresAt": {"type": ["string", "null"], "format": "date-time"},
}
LINK_CREATE: Schema = {"type": "object", "additionalProperties": False,
                       "properties": LINK_FIELDS}
LINK_CREATE_SERVER: Schema = {
    "type": "object", "additionalProperties": False,
    "properties": {**LINK_FIELDS,
                   "slug": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,64}$"},
                   "domain": {"type": "string"}},
}
SHORT_LINK: Schema = {
    "type": "object", "required": ["id", "url", "domain", "slug", "path"],
    "properties": {"id": UUID, "url": {"type": "string"}, "domain": {"type": "string"},
                   "slug": {"type": "string"}, "path": {"type": "string"},
                   "params": {"type": "object"}, "tags": {"type": "array"},
                   "createdAt": {"type": "string"}, "expiresAt": {"type": ["string", "null"]}},
}
PLATFORMS: Schema = {
    "type": "object", "additionalProperties": False,
    "properties": {
        "ios": {"type": "object", "additionalProperties": False, "properties": {
            "appStoreId": {"type": ["string", "null"]}, "bundleId": {"type": ["string", "null"]},
            "teamId": {"type": ["string", "null"]}, "scheme": {"type": ["string", "null"]}}},
        "android": {"type": "object", "additionalProperties": False, "properties": {
            "packageName": {"type": ["string", "null"]},
            "sha256CertFingerprints": {"type": ["array", "null"], "items": {"type": "string"}},
            "scheme": {"type": ["string", "null"]}}},
        "web": {"type": "object", "additionalProperties": False,
                "properties": {"fallbackUrl": URL}},
    },
}
INIT: Schema = {
    "type": "object", "required": ["installId", "isFirstLaunch", "sdkVersion", "platform"],
    "properties": {
        "installId": INSTALL_ID, "isFirstLaunch": {"type": "boolean"},
        "sdkVersion": {"type": "string", "minLength": 1, "maxLength": 64},
        "platform": {"type": "string", "maxLength": 32},
        "osVersion": {"type": ["string", "null"], "maxLength": 64},
        "installReferrer": {"type": ["string", "null"], "maxLength": 4096},
    },
}
RESOLVE: Schema = {"type": "object", "required": ["url", "installId"], "properties": {
    "url": {"type": "string", "maxLength": 2048}, "installId": INSTALL_ID,
    "platform": {"type": "string"}}}
CLAIM: Schema = {"type": "object", "required": ["userId", "installId"], "properties": {
    "userId": {"type": "string", "minLength": 1, "maxLength": 256}, "installId": INSTALL_ID}}
HANDOFF: Schema = {
    "type": "object", "required": ["userId"], "additionalProperties": False,
    "properties": {"linkId": UUID, "url": {"type": "string"}, "svcToken": {"type": "string"},
                   "userId": {"type": "string", "minLength": 1, "maxLength": 256},
                   "expiresInSeconds": {"type": "integer", "minimum": 1, "maximum": 604800}},
}
DOMAIN: Schema = {"type": "object", "required": ["domain"], "additionalProperties": False,
                  "properties": {"domain": {"type": "string", "maxLength": 253}}}


def _errors(*statuses: int) -> dict[str, Any]:
    return {str(s): {"description": "error", "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
        for s in statuses}


def op(summary: str, *, key: str | None, body: Schema | None = None, ok: int = 200,
       answer: Schema | None = None, errors: tuple[int, ...] = (), write: bool = False,
       params: tuple[Schema, ...] = ()) -> dict[str, Any]:
    """One operation. ``key``: "sdk" (publishable), "server" (secret) or None."""
    statuses = set(errors)
    if body is not None or params or write:  # a body, a parameter or a key it refuses
        statuses.add(400)
    if body is not None:
        statuses.update((413, 415))  # too large; not application/json
    if write:
        statuses.add(409)  # idempotency_key_reused: the key with another request
    o: dict[str, Any] = {"summary": summary, "responses": {
        str(ok): {"description": "success", "content": {
            "application/json": {"schema": answer or {"type": "object"}}}},
        **_errors(*sorted(statuses))}}
    if key is not None:
        o["security"] = [{"sdkKey" if key == "sdk" else "secretKey": []}]
        o["responses"].update(_errors(401, 403, 429))
    if body is not None:
        o["requestBody"] = {"required": True,
                            "content": {"application/json": {"schema": body}}}
    parameters = list(params)
    if write:  # 503 storage_unavailable: the store cannot write now (Retry-After)
        o["responses"].update(_errors(503))
        parameters.append({"name": "Idempotency-Key", "in": "header", "required": False,
                           "schema": {"type": "string", "pattern": "^[!-~]{1,255}$"}})
    if key == "sdk":
        parameters.append({"name": "X-Svc-Sdk", "in": "header", "required": False,
                           "schema": {"type": "string"}})
    if parameters:
        o["parameters"] = parameters
    return o


def path_param(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema}


def query(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema}


LINK_ID = path_param("id", UUID)

PATHS: dict[str, dict[str, Any]] = {
    "/v1/sdk/init": {"post": op("Launch report; a first launch runs the attribution flows",
                                key="sdk", body=INIT, answer=LINK_ANSWER, errors=(409,),
                                write=True)},
    "/v1/sdk/resolve": {"post": op("A link that opened the app", key="sdk", body=RESOLVE,
                                   answer=LINK_ANSWER, errors=(404,), write=True)},
    "/v1/sdk/handoffs/claim": {"post": op("Claim the newest pending handoff of a user",
                                          key="sdk", body=CLAIM, answer=LINK_ANSWER,
                                          errors=(409,), write=True)},
    "/v1/sdk/links": {"post": op("Create a short link from the app", key="sdk",
                                 body=LINK_CREATE, ok=201, answer=SHORT_LINK, write=True)},
    "/v1/handoffs": {"post": op("Bind a link to a user ID", key="server", body=HANDOFF, ok=201,
                                errors=(404,), write=True)},
    "/v1/deferred/settings": {
        "get": op("Project settings for deferred linking", key="server", answer=SETTINGS),
        "patch": op("Change project settings", key="server", body=SETTINGS, answer=SETTINGS,
                    write=True)},
    "/v1/links": {
        "post": op("Create a link (custom slug and domain allowed)", key="server",
                   body=LINK_CREATE_SERVER, ok=201, answer=SHORT_LINK, errors=(429,),
                   write=True),
        "get": op("List links, newest first; a page reads at most 5,000 links, so a "
                  "filtered page may be short or empty with a nextCursor to go on from",
                  key="server", params=(
            query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
            query("cursor", {"type": "string"}), query("campaign", {"type": "string"}),
            query("channel", {"type": "string"}), query("tag", {"type": "string"}),
            query("q", {"type": "string"})))},
    "/v1/links/{id}": {
        "get": op("One link", key="server", answer=SHORT_LINK, errors=(404,),
                  params=(LINK_ID,)),
        "patch": op("Update a link", key="server", body=LINK_CREATE, answer=SHORT_LINK,
                    errors=(404,), write=True, params=(LINK_ID,)),
        "delete": op("Delete a link (its slug stays reserved)", key="server", errors=(404,),
                     write=True, params=(LINK_ID,))},
    "/v1/domains": {
        "get": op("Default and custom link domains", key="server"),
        "post": op("Add a custom domain", key="server", body=DOMAIN, ok=201, errors=(409,),
                   write=True)},
    "/v1/domains/{domain}": {
        "delete": op("Remove a custom domain", key="server", errors=(404, 409), write=True,
                     params=(path_param("domain", {"type": "string"}),))},
    "/v1/platforms": {
        "get": op("iOS, Android and web settings", key="server", answer=PLATFORMS),
        "patch": op("Change platform settings", key="server", body=PLATFORMS,
                    answer=PLATFORMS, write=True)},
    "/v1/openapi.json": {"get": op("This document", key=None)},
}

# Route modules added by other parts register their operations here.
EXTRA_PATHS: dict[str, dict[str, Any]] = {}


def document(base_url: str) -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {"title": "svc", "version": "0.2.0",
                 "description": "Short links, deferred deep linking, conversion events and "
                                "signed webhooks. Errors: {\"error\": {\"code\", \"message\"}}."},
        "servers": [{"url": base_url}],
        "paths": {**PATHS, **EXTRA_PATHS},
        "components": {
            "schemas": {"Error": ERROR},
            "securitySchemes": {
                "sdkKey": {"type": "http", "scheme": "bearer",
                           "description": "publishable key pk_test_... or pk_live_..."},
                "secretKey": {"type": "http", "scheme": "bearer",
                              "description": "secret key sk_test_... or sk_live_..."}},
        },
    }


from web import openapi_webhooks  # noqa: E402,F401  (registers the webhook operations)
