"""The schemas of the OpenAPI document (web/openapi.py): request bodies as
the parsers take them, answers as the handlers write them.

Written by hand, next to each other, so a change of a request or answer
shape shows up in review; limits come from the parsers' modules where those
name them. Where JSON Schema cannot say a rule exactly, the schema is the
stricter side and its description says the rule (web/openapi.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from svc_engine.destinations import ENTRY_MAX, HOSTS_MAX
from svc_engine.installs import Confidence, Method
from svc_engine.keys import Mode
from svc_engine.link_input import (
    PARAM_KEY_MAX,
    PARAM_STR_MAX,
    PARAMS_MAX,
    PATH_MAX,
    RESERVED_SLUGS,
    TAG_MAX,
    TAGS_MAX,
    URL_MAX,
)
from svc_engine.platforms import (
    BLOCKED_SCHEMES,
    BUNDLE_ID_MAX,
    FINGERPRINTS_MAX,
    PACKAGE_MAX,
    SCHEME_MAX,
)
from svc_engine.sdk_requests import (
    HANDOFF_MAX_SECONDS,
    OS_VERSION_MAX,
    REFERRER_MAX,
    SDK_VERSION_MAX,
    USER_ID_MAX,
)
from svc_engine.settings import WINDOW_MAX, WINDOW_MIN

Schema = dict[str, Any]


def anycase(text: str) -> str:
    """A regular expression matching ``text`` in any letter case (JSON Schema
    patterns take no flags)."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha()
                   else "\\" + c if c in "^$\\.*+?()[]{}|/" else c for c in text)


def _nullable(schema: Schema) -> Schema:
    return {**schema, "type": [schema["type"], "null"]}


def _trimmed(pattern: str) -> str:
    """``pattern``, or nothing, between optional spaces (trimmed; empty is null)."""
    return rf"^\s*(?:{pattern})?\s*$"


# -- common pieces ------------------------------------------------------------------

UUID: Schema = {"type": "string", "format": "uuid",
                "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-"
                           "[0-9a-fA-F]{12}$"}
INSTALL_ID: Schema = {"type": "string", "format": "uuid",
                      "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-"
                                 "[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$",
                      "description": "a UUID v4, made by the SDK"}
TIME: Schema = {"type": "string", "format": "date-time"}
NULLABLE_TEXT: Schema = {"type": ["string", "null"]}
MODE: Schema = {"enum": [m.value for m in Mode]}
ERROR: Schema = {
    "type": "object", "required": ["error"],
    "properties": {"error": {"type": "object", "required": ["code", "message"], "properties": {
        "code": {"type": "string"}, "message": {"type": "string"},
        "field": {"type": "string", "description": "validation_error, destination_blocked: "
                                                   "the field, parameter or header at fault"}}}},
}
_CONTROL = r"\x00-\x08\x0b\x0c\x0e-\x1f\x7f"  # tabs and line breaks fold into spaces
TEXT_PATTERN = rf"^[^{_CONTROL}]*$"
PORT_PATTERN = (r"(?::(?:[0-9]{0,4}|[0-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]"
                r"|6553[0-5]))?")  # 0 to 65535, or empty
HTTP_URL_PATTERN = (r"^[Hh][Tt][Tt][Pp][Ss]?://"
                    rf"(?:\[[0-9A-Fa-f:.]+\]|[^/?#@:\[\] \\\x00-\x1f\x7f]+){PORT_PATTERN}"
                    r"(?:[/?#][^ \\\x00-\x1f\x7f]*)?$")
URL: Schema = {"type": ["string", "null"], "maxLength": URL_MAX, "pattern": HTTP_URL_PATTERN,
               "description": "an absolute http or https URL without a user name or password "
                              "(otherwise 400 destination_blocked); a non-ASCII host is "
                              "IDNA-encoded"}


def _text(limit: int) -> Schema:
    return {"type": ["string", "null"], "maxLength": limit, "pattern": TEXT_PATTERN,
            "description": f"trimmed, at most {limit} characters; empty is null; tabs and "
                           "line breaks become spaces, other control characters are refused"}


_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_NOT_NAME = r"/:?#@\[\]\\ %\x00-\x1f\x7f"


def domain_name(prefix: str = "", max_length: int = 254) -> Schema:
    """A host name of two labels or more as ``normalize_domain`` takes it:
    letters, digits and hyphens (any case, a trailing dot ignored), or an
    internationalized name (IDNA-checked by the service); not an IP address.
    ``prefix``: a pattern allowed before it (an optional ``*.`` for a host entry)."""
    return {
        "type": "string", "maxLength": max_length,
        "anyOf": [{"pattern": rf"^{prefix}(?:{_LABEL}\.)+{_LABEL}\.?$"},
                  {"allOf": [{"pattern": rf"^{prefix}[^{_NOT_NAME}]*[^\x00-\x7f][^{_NOT_NAME}]*$"},
                             {"pattern": r"[^.]\.[^.]"}]}],
        "not": {"type": "string", "pattern": r"\.[0-9]+\.?$"},
        "description": "a host name of at least two labels, no scheme, port, path or IP "
                       "address; compared in lower case",
    }


DOMAIN_NAME = domain_name()

# -- links --------------------------------------------------------------------------

PARAM_VALUE: Schema = {
    "anyOf": [{"type": "string", "maxLength": PARAM_STR_MAX}, {"type": "boolean"},
              {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1},
              {"type": "number", "not": {"type": "integer"}}],
    "description": f"a string (at most {PARAM_STR_MAX} characters), a finite number "
                   "(integers within 64 bits) or a boolean"}
PARAM_VALUE_OUT: Schema = {
    "anyOf": [{"type": "string"}, {"type": "boolean"}, {"type": "number"}],
    "description": "as sent: a float such as 1e20 is kept (JSON Schema counts it an "
                   "integer past 64 bits, which a request may not send as an integer)"}
_SLUG_WORDS = sorted(w for w in RESERVED_SLUGS if re.fullmatch(r"[A-Za-z0-9_-]+", w))
LINK_FIELDS: dict[str, Schema] = {
    "path": {"type": "string", "minLength": 1, "maxLength": PATH_MAX,
             "pattern": r"^/[^\x00-\x1f\x7f]*$", "description": "the in-app path; '/' if left out"},
    "params": {"type": ["object", "null"], "maxProperties": PARAMS_MAX,
               "propertyNames": {"minLength": 1, "maxLength": PARAM_KEY_MAX,
                                 "pattern": r"^[^\x00-\x1f\x7f]*$"},
               "additionalProperties": PARAM_VALUE},
    "title": _text(200), "campaign": _text(100), "channel": _text(100),
    "tags": {"type": ["array", "null"], "maxItems": TAGS_MAX,
             "description": f"at most {TAGS_MAX} once duplicates are dropped (order kept)",
             "items": {"type": "string", "minLength": 1, "maxLength": TAG_MAX,
                       "pattern": rf"^[^{_CONTROL}]*[^{_CONTROL}\s][^{_CONTROL}]*$",
                       "description": f"trimmed, 1 to {TAG_MAX} characters"}},
    "iosFallbackUrl": URL, "androidFallbackUrl": URL, "webFallbackUrl": URL,
    "ogTitle": _text(200), "ogDescription": _text(1000), "ogImageUrl": URL,
    "expiresAt": {"type": ["string", "null"], "format": "date-time",
                  "description": "with a zone offset; later than now and not past "
                                 "9999-12-31T23:59:59.999Z in UTC; null: never"},
}
LINK_CREATE: Schema = {"type": "object", "additionalProperties": False,
                       "properties": LINK_FIELDS}
LINK_UPDATE: Schema = {"type": "object", "additionalProperties": False,
                       "properties": LINK_FIELDS,
                       "description": "any subset; null clears a field (path cannot be "
                                      "cleared); slug and domain are fixed"}
SLUG: Schema = {"type": ["string", "null"], "pattern": "^[A-Za-z0-9_-]{1,64}$",
                "not": {"type": "string",
                        "pattern": f"^(?:{'|'.join(anycase(w) for w in _SLUG_WORDS)})$"},
                "description": "case-sensitive; not one of the service's own top-level "
                               "paths in any case; 400 when taken on the domain"}


def link_create_server(default: str | None) -> Schema:
    """The server's create body: ``domain`` is a custom domain of the project
    (checked when the link is made) or ``default``, the default domain as
    ``GET /v1/domains`` lists it (host[:port], any case, a trailing dot on the
    host ignored); :func:`document` knows it, ``PATHS`` does not."""
    named: list[Schema] = []
    if default is not None:
        host, port = default, ""
        if ":" in default and not default.endswith("]"):  # as link_input._names_default
            host, port = default.rsplit(":", 1)
        named.append({"type": "string", "pattern": rf"^\s*{anycase(host)}\.?"
                                                   rf"{':' + port if port else ''}\s*$"})
    return {"type": "object", "additionalProperties": False, "properties": {
        **LINK_FIELDS, "slug": SLUG,
        "domain": {"anyOf": [DOMAIN_NAME, *named, {"type": "null"}],
                   "description": "a custom domain of this project, or the default domain; "
                                  "null or left out: the default"}}}


SHORT_LINK: Schema = {
    "type": "object",
    "required": ["id", "url", "domain", "slug", "path", "params", "title", "campaign",
                 "channel", "tags", "iosFallbackUrl", "androidFallbackUrl", "webFallbackUrl",
                 "ogTitle", "ogDescription", "ogImageUrl", "expiresAt", "createdAt", "mode"],
    "properties": {
        "id": UUID, "url": {"type": "string", "description": "the short URL"},
        "domain": {"type": "string"}, "slug": {"type": "string"}, "path": {"type": "string"},
        "params": {"type": "object", "additionalProperties": PARAM_VALUE_OUT},
        "title": NULLABLE_TEXT, "campaign": NULLABLE_TEXT, "channel": NULLABLE_TEXT,
        "tags": {"type": "array", "items": {"type": "string"}},
        "iosFallbackUrl": NULLABLE_TEXT, "androidFallbackUrl": NULLABLE_TEXT,
        "webFallbackUrl": NULLABLE_TEXT, "ogTitle": NULLABLE_TEXT,
        "ogDescription": NULLABLE_TEXT, "ogImageUrl": NULLABLE_TEXT,
        "expiresAt": _nullable(TIME), "createdAt": TIME, "mode": MODE,
    },
}
LINK_PAGE: Schema = {"type": "object", "required": ["data", "nextCursor"], "properties": {
    "data": {"type": "array", "items": SHORT_LINK},
    "nextCursor": {"type": ["string", "null"], "description": "?cursor= of the next page"}}}
LINK_DELETED: Schema = {"type": "object", "required": ["id", "deleted"],
                        "properties": {"id": UUID, "deleted": {"const": True}}}
DOMAIN: Schema = {"type": "object", "required": ["domain"], "additionalProperties": False,
                  "properties": {"domain": DOMAIN_NAME}}
DOMAINS: Schema = {"type": "object", "required": ["default", "custom"], "properties": {
    "default": {"type": "string", "description": "the public URL's host[:port]"},
    "custom": {"type": "array", "items": {"type": "string"}}}}
DESTINATIONS: Schema = {
    "type": "object", "additionalProperties": False, "properties": {"sdkAllowedHosts": {
        "type": ["array", "null"], "maxItems": HOSTS_MAX,
        "description": "hosts that links made with the publishable key may point at; empty "
                       "or null: any host. At most this many once duplicates are dropped",
        "items": domain_name(r"(?:\*\.)?", ENTRY_MAX)}}}
DESTINATIONS_ANSWER: Schema = {
    "type": "object", "required": ["sdkAllowedHosts"],
    "properties": {"sdkAllowedHosts": {"type": "array", "items": {"type": "string"}}}}

# -- platforms and settings ---------------------------------------------------------

_BLOCKED = "|".join(anycase(s) for s in sorted(BLOCKED_SCHEMES))
_SCHEME_END = r"(?::|:?://)?"
SCHEME: Schema = {
    "type": ["string", "null"],
    "pattern": _trimmed(rf"[A-Za-z][A-Za-z0-9+.-]{{0,{SCHEME_MAX - 1}}}{_SCHEME_END}"),
    "not": {"type": "string", "pattern": rf"^\s*(?:{_BLOCKED}){_SCHEME_END}\s*$"},
    "description": "the app's own URL scheme; not a web or browser scheme"}
_SECTION = {"type": ["object", "null"], "additionalProperties": False,
            "description": "null clears every field of the section"}
PLATFORMS: Schema = {
    "type": "object", "additionalProperties": False,
    "description": "any subset; null clears a field; strings are trimmed, empty is null",
    "properties": {
        "ios": {**_SECTION, "properties": {
            "appStoreId": {"anyOf": [
                {"type": "string", "pattern": _trimmed("(?:id)?[1-9][0-9]{0,14}")},
                {"type": "integer", "minimum": 1, "maximum": 10**15 - 1}, {"type": "null"}]},
            "bundleId": {"type": ["string", "null"], "maxLength": BUNDLE_ID_MAX,
                         "pattern": _trimmed(r"[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+")},
            "teamId": {"type": ["string", "null"], "pattern": _trimmed("[A-Z0-9]{10}")},
            "scheme": SCHEME}},
        "android": {**_SECTION, "properties": {
            "packageName": {"type": ["string", "null"], "maxLength": PACKAGE_MAX,
                            "pattern": _trimmed(r"[A-Za-z][A-Za-z0-9_]*"
                                                r"(?:\.[A-Za-z][A-Za-z0-9_]*)+")},
            "sha256CertFingerprints": {
                "type": ["array", "null"], "maxItems": FINGERPRINTS_MAX,
                "description": "at most this many once duplicates are dropped",
                "items": {"type": "string", "pattern": r"^\s*:*(?:[0-9A-Fa-f]:*){64}\s*$",
                          "description": "32 hex bytes, with or without colons"}},
            "scheme": SCHEME}},
        "web": {**_SECTION, "properties": {"fallbackUrl": URL}},
    },
}


def _all_of(fields: Mapping[str, Schema]) -> Schema:
    return {"type": "object", "required": list(fields), "properties": dict(fields)}


PLATFORMS_ANSWER: Schema = _all_of({
    "ios": _all_of({k: NULLABLE_TEXT for k in ("appStoreId", "bundleId", "teamId", "scheme")}),
    "android": _all_of({"packageName": NULLABLE_TEXT, "scheme": NULLABLE_TEXT,
                        "sha256CertFingerprints": {"type": "array", "items": {
                            "type": "string", "pattern": "^[0-9A-F]{2}(?::[0-9A-F]{2}){31}$"}}}),
    "web": _all_of({"fallbackUrl": NULLABLE_TEXT}),
})
SETTINGS_FIELDS: dict[str, Schema] = {
    "iosLandingPage": {"type": "boolean"}, "webFallbackTokens": {"type": "boolean"},
    "probabilisticMatching": {"type": "boolean"},
    "probabilisticIpMatching": {"type": "boolean"},
    "probabilisticWindowMinutes": {"type": "integer", "minimum": WINDOW_MIN,
                                   "maximum": WINDOW_MAX},
}
SETTINGS: Schema = {"type": "object", "additionalProperties": False,
                    "properties": SETTINGS_FIELDS}
SETTINGS_ANSWER: Schema = _all_of(SETTINGS_FIELDS)

# -- the SDK and handoffs -----------------------------------------------------------

RESOLVED_LINK: Schema = _all_of({
    "linkId": UUID, "url": {"type": "string"}, "path": {"type": "string"},
    "params": {"type": "object", "additionalProperties": PARAM_VALUE_OUT},
    "campaign": NULLABLE_TEXT, "channel": NULLABLE_TEXT, "isDeferred": {"type": "boolean"},
    "confidence": {"enum": [c.value for c in Confidence]},
    "method": {"enum": [*(m.value for m in Method), None]},
})
LINK_ANSWER: Schema = {"type": "object", "required": ["link"],
                       "properties": {"link": {"oneOf": [RESOLVED_LINK, {"type": "null"}]}}}
INIT: Schema = {
    "type": "object", "required": ["installId", "isFirstLaunch", "sdkVersion", "platform"],
    "description": "fields the service does not know are ignored",
    "properties": {
        "installId": INSTALL_ID, "isFirstLaunch": {"type": "boolean"},
        "sdkVersion": {"type": "string", "minLength": 1, "maxLength": SDK_VERSION_MAX},
        "platform": {"type": "string", "description": "ios or android (any case); any other "
                                                      "text is stored as other"},
        "osVersion": {"type": ["string", "null"], "maxLength": OS_VERSION_MAX},
        "installReferrer": {"type": ["string", "null"], "maxLength": REFERRER_MAX},
    },
}
RESOLVE: Schema = {"type": "object", "required": ["url", "installId"], "properties": {
    "url": {"type": "string", "minLength": 1, "maxLength": URL_MAX,
            "pattern": r"^[A-Za-z][A-Za-z0-9+.-]*:",
            "description": "the short link, or a custom-scheme URL carrying svc_link"},
    "installId": INSTALL_ID, "platform": {"type": ["string", "null"]}}}
USER_ID: Schema = {"type": "string", "minLength": 1, "maxLength": USER_ID_MAX, "pattern": r"\S",
                   "description": f"trimmed as Dart trims; 1 to {USER_ID_MAX} characters "
                                  "after trimming, counted as UTF-16 code units (as Dart "
                                  "counts: an emoji counts two)"}
CLAIM: Schema = {"type": "object", "required": ["userId", "installId"],
                 "properties": {"userId": USER_ID, "installId": INSTALL_ID}}
HANDOFF: Schema = {
    "type": "object", "required": ["userId"], "additionalProperties": False,
    "properties": {
        "linkId": _nullable(UUID),
        "url": {"type": ["string", "null"], "maxLength": URL_MAX,
                "pattern": r"^[Hh][Tt][Tt][Pp][Ss]?://[^/?#]"},
        "svcToken": {"type": ["string", "null"], "pattern": "^[A-Za-z0-9_-]{1,128}$",
                     "description": "a web fallback's token; needs the webFallbackTokens "
                                    "setting"},
        "userId": USER_ID,
        "expiresInSeconds": {"type": ["integer", "null"], "minimum": 1,
                             "maximum": HANDOFF_MAX_SECONDS, "description": "7 days if null"}},
    "oneOf": [{"required": [name], "properties": {name: {"type": "string"}}}
              for name in ("linkId", "url", "svcToken")],
    "description": "exactly one of linkId, url and svcToken is not null",
}
HANDOFF_ANSWER: Schema = _all_of({"id": UUID, "linkId": UUID, "expiresAt": TIME,
                                  "createdAt": TIME})
