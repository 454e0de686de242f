"""The OpenAPI 3.1 document of the HTTP API, served at ``/v1/openapi.json``.

Kept true by tests. tests/test_openapi.py: every route the API router
serves is in the document and every documented operation is served; the
fuzz test drives every operation from it and must see no 5xx.
tests/test_openapi_requests.py: bodies the parsers refuse, the request
schemas refuse; bodies they take, the schemas take.
tests/test_openapi_answers.py: every answer of a real run, success or error,
is documented for its status (its error code named in that status's
description) and fits its schema, with no field the schema does not name.
The schemas are in web/openapi_schemas.py, written by hand next to each
other so that a change of a request or answer shape shows up in review;
limits come from the parsers' modules where those name them.

Where JSON Schema cannot say a rule exactly, the schema is the stricter side
and its description says the rule: text is trimmed before it is counted,
duplicate tags and fingerprints are dropped before they are counted. Rules
that depend on stored state (a domain of this project, a free slug, a time
in the future) are described only.

Every operation may answer 429 (the per-client limit, and per key with a
secret key), 500 and 503 (at capacity); every error answer is
``{"error": {"code", "message", "field"?}}`` and 429 and 503 carry
``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from svc_engine.link_input import FILTER_MAX
from svc_engine.links import default_domain
from web.openapi_schemas import (
    CLAIM,
    DESTINATIONS,
    DESTINATIONS_ANSWER,
    DOMAIN,
    DOMAIN_NAME,
    DOMAINS,
    ERROR,
    HANDOFF,
    HANDOFF_ANSWER,
    INIT,
    LINK_ANSWER,
    LINK_CREATE,
    LINK_DELETED,
    LINK_PAGE,
    LINK_UPDATE,
    PLATFORMS,
    PLATFORMS_ANSWER,
    RESOLVE,
    SETTINGS,
    SETTINGS_ANSWER,
    SHORT_LINK,
    UUID,
    Schema,
    link_create_server,
)

# -- operations ---------------------------------------------------------------------

RETRY_AFTER = {"Retry-After": {"required": True, "description": "seconds to wait",
                               "schema": {"type": "integer", "minimum": 1}}}
STATUS_TEXT: dict[int, str] = {
    400: "validation_error: `field` names the field, parameter or header at fault",
    401: "invalid_api_key: no key, or a malformed, unknown or revoked one",
    403: "wrong_key_kind (a secret key on an SDK call, a publishable key on a server one) or "
         "project_suspended",
    404: "not_found", 408: "request_timeout: the body did not arrive in time",
    409: "conflict", 413: "payload_too_large: the body is over SVC_MAX_BODY_BYTES",
    415: "unsupported_media_type: a Content-Type other than application/json, or a "
         "Content-Encoding",
    429: "rate_limited: too many requests from this client address",
    500: "internal_error: the service's fault (logged)",
    503: "overloaded: the service is at capacity",
}


def _error(status: int, texts: list[str]) -> dict[str, Any]:
    answer: dict[str, Any] = {"description": "; ".join(texts), "content": {
        "application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}}
    if status in (429, 503):
        answer["headers"] = RETRY_AFTER
    elif status == 401:
        answer["headers"] = {"WWW-Authenticate": {"required": True,
                                                  "schema": {"const": 'Bearer realm="svc"'}}}
    return answer


def op(summary: str, *, key: str | None, body: Schema | None = None, ok: int = 200,
       answer: Schema | None = None, errors: tuple[int, ...] = (), write: bool = False,
       params: tuple[Schema, ...] = (), codes: Mapping[int, str] | None = None,
       rerun_other: bool = False) -> dict[str, Any]:
    """One operation. ``key``: "sdk" (publishable), "server" (secret) or None.
    ``write``: it takes an Idempotency-Key and stores; ``rerun_other``: another
    request under a used key runs again instead of a 409. ``errors``: further
    statuses, described by ``codes`` (status: the codes and when) or generically."""
    texts: dict[int, list[str]] = {s: [] for s in errors}

    def add(status: int, text: str) -> None:
        texts.setdefault(status, []).append(text)

    if key is not None:
        add(401, STATUS_TEXT[401])
        add(403, STATUS_TEXT[403])
    if body is not None or write:  # a body is read: refused when too slow or too large
        add(400, STATUS_TEXT[400])
        add(408, STATUS_TEXT[408])
        add(413, STATUS_TEXT[413])
    if body is not None:
        add(415, STATUS_TEXT[415])
    if write and not rerun_other:
        add(409, "idempotency_key_reused: the Idempotency-Key came with another request")
    for status, text in (codes or {}).items():
        add(status, text)
    add(429, STATUS_TEXT[429] + (" or with this key" if key == "server" else "")
        + "; wait Retry-After seconds")
    add(500, STATUS_TEXT[500])
    add(503, STATUS_TEXT[503])
    if write:
        add(503, "storage_unavailable: the write could not be stored now; retry with the "
                 "same Idempotency-Key")
    success: dict[str, Any] = {"description": "success", "content": {
        "application/json": {"schema": answer or {"type": "object"}}}}
    if write:
        success["headers"] = {"Idempotent-Replayed": {
            "description": "the stored answer of an earlier request with this "
                           "Idempotency-Key", "schema": {"const": "true"}}}
    o: dict[str, Any] = {"summary": summary, "responses": {
        str(ok): success,
        **{str(s): _error(s, texts[s] or [STATUS_TEXT[s]]) for s in sorted(texts)}}}
    if key is not None:
        o["security"] = [{"sdkKey" if key == "sdk" else "secretKey": []}]
    if body is not None:
        o["requestBody"] = {"required": True,
                            "content": {"application/json": {"schema": body}}}
    parameters = list(params)
    if write:
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
BLOCKED_TEXT = ("destination_blocked: a fallback or image URL that is not http(s) or carries "
                "a user name or password")
QUOTA_TEXT = "link_quota_exceeded: the organization's plan holds no more links"
LINK_404 = {404: "not_found: no such link in this project and mode (or deleted)"}
ID_400 = {400: "validation_error: the id is not a UUID"}

PATHS: dict[str, dict[str, Any]] = {
    "/v1/sdk/init": {"post": op(
        "Launch report; a first launch runs the attribution flows", key="sdk", body=INIT,
        answer=LINK_ANSWER, write=True, rerun_other=True, codes={
            409: "install_id_conflict: this installId reported its first launch already; "
                 "make a fresh install ID"})},
    "/v1/sdk/resolve": {"post": op(
        "A link that opened the app", key="sdk", body=RESOLVE, answer=LINK_ANSWER, write=True,
        codes={404: "not_found: the URL names no live link of this project and mode"})},
    "/v1/sdk/handoffs/claim": {"post": op(
        "Claim the newest pending handoff of a user", key="sdk", body=CLAIM,
        answer=LINK_ANSWER, write=True, codes={
            409: "install_not_registered: the install has not reported a launch yet"})},
    "/v1/sdk/links": {"post": op(
        "Create a short link from the app", key="sdk", body=LINK_CREATE, ok=201,
        answer=SHORT_LINK, write=True, codes={
            400: BLOCKED_TEXT + ", or whose host sdkAllowedHosts does not allow",
            429: QUOTA_TEXT})},
    "/v1/handoffs": {"post": op(
        "Bind a link to a user ID", key="server", body=HANDOFF, ok=201, answer=HANDOFF_ANSWER,
        write=True, codes={404: "not_found: linkId or url names no live link of this "
                                "project and mode"})},
    "/v1/deferred/settings": {
        "get": op("Project settings for deferred linking", key="server",
                  answer=SETTINGS_ANSWER),
        "patch": op("Change project settings", key="server", body=SETTINGS,
                    answer=SETTINGS_ANSWER, write=True)},
    "/v1/links": {
        "post": op("Create a link (custom slug and domain allowed)", key="server",
                   body=link_create_server(None), ok=201, answer=SHORT_LINK,
                   write=True, codes={400: BLOCKED_TEXT + "; invalid_domain: domain is not a "
                                                         "domain of this project",
                                      429: QUOTA_TEXT}),
        "get": op("List links, newest first; a page reads at most 5,000 links, so a "
                  "filtered page may be short or empty with a nextCursor to go on from",
                  key="server", answer=LINK_PAGE, errors=(400,), params=(
            query("limit", {"type": "integer", "minimum": 1, "maximum": 100}),
            query("cursor", {"type": "string"}),
            *(query(name, {"type": "string", "maxLength": FILTER_MAX})
              for name in ("campaign", "channel", "tag", "q"))))},
    "/v1/links/{id}": {
        "get": op("One link", key="server", answer=SHORT_LINK, codes={**ID_400, **LINK_404},
                  params=(LINK_ID,)),
        "patch": op("Update a link", key="server", body=LINK_UPDATE, answer=SHORT_LINK,
                    write=True, params=(LINK_ID,), codes={400: BLOCKED_TEXT, **LINK_404}),
        "delete": op("Delete a link (its slug stays reserved)", key="server",
                     answer=LINK_DELETED, codes=LINK_404, write=True, params=(LINK_ID,))},
    "/v1/domains": {
        "get": op("Default and custom link domains", key="server", answer=DOMAINS),
        "post": op("Add a custom domain", key="server", body=DOMAIN, ok=201, answer=DOMAINS,
                   write=True, codes={400: "invalid_domain: not a domain name, the "
                                           "service's own, or one in use already (by this "
                                           "or another project)"})},
    "/v1/domains/{domain}": {
        "delete": op("Remove a custom domain", key="server", answer=DOMAINS, write=True,
                     params=(path_param("domain", DOMAIN_NAME),), codes={
                         400: "invalid_domain: not a domain name",
                         404: "not_found: not a domain of this project"})},
    "/v1/platforms": {
        "get": op("iOS, Android and web settings", key="server", answer=PLATFORMS_ANSWER),
        "patch": op("Change platform settings", key="server", body=PLATFORMS,
                    answer=PLATFORMS_ANSWER, write=True, codes={
                        400: "destination_blocked: web.fallbackUrl is not http(s) or "
                             "carries a user name or password"})},
    "/v1/link-destinations": {
        "get": op("Hosts that links made with the publishable key may point at", key="server",
                  answer=DESTINATIONS_ANSWER),
        "patch": op("Change them", key="server", body=DESTINATIONS,
                    answer=DESTINATIONS_ANSWER, write=True)},
    "/v1/openapi.json": {"get": op("This document", key=None, answer={
        "type": "object", "required": ["openapi", "info", "paths"]})},
}

# Route modules added by other parts register their operations here.
EXTRA_PATHS: dict[str, dict[str, Any]] = {}


def document(base_url: str) -> dict[str, Any]:
    paths = {**PATHS, **EXTRA_PATHS}
    create = {**paths["/v1/links"]["post"], "requestBody": {"required": True, "content": {
        "application/json": {"schema": link_create_server(default_domain(base_url))}}}}
    paths["/v1/links"] = {**paths["/v1/links"], "post": create}
    return {
        "openapi": "3.1.0",
        "info": {"title": "svc", "version": "0.2.0",
                 "description": "Short links, deferred deep linking, conversion events and "
                                "signed webhooks. Errors: {\"error\": {\"code\", \"message\"}}; "
                                "429 and 503 carry Retry-After."},
        "servers": [{"url": base_url}],
        "paths": paths,
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
