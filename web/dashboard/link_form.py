"""The link form: HTML form fields to and from the links API's JSON body.

The dashboard validates links with the API's own parsers
(``parse_link_create``, ``parse_link_update``), so a link made here obeys
exactly the rules of ``POST /v1/links``. This module only translates:

- ``params`` are rows of key, type and value (``text``, ``number``,
  ``true``/``false``); blank rows are ignored, a number that does not parse,
  or a type the form does not offer (a tampered or stale form), is a
  ``ValidationError`` on ``params``;
- ``tags`` are one comma-separated field;
- ``expiresAt`` is an ``<input type=datetime-local>`` read as UTC (the form
  says so) to the minute. On edit an expiry left as it was is not sent again,
  so a link that has already expired can still be edited;
- on edit every other field is sent, an empty one as null (cleared).

Error messages name API fields (``iosFallbackUrl must be ...``); ``label_error``
turns them into the form's words.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

import attrs
from werkzeug.datastructures import MultiDict

from svc_engine.errors import ValidationError
from svc_engine.links import Link, ParamValue
from web.dashboard.formats import utc

EMPTY_PARAM_ROWS = 3
MAX_PARAM_ROWS = 50
PARAM_TYPES: Mapping[str, str] = MappingProxyType(
    {"text": "Text", "number": "Number", "true": "true", "false": "false"})
"""The types a parameter row offers: the values of its ``<select>``, in its
order, each with the label its option shows (the template reads them here)."""

TEXT_FIELDS = ("path", "title", "campaign", "channel", "iosFallbackUrl", "androidFallbackUrl",
               "webFallbackUrl", "ogTitle", "ogDescription", "ogImageUrl")
LABELS = {
    "path": "In-app path", "title": "Title", "campaign": "Campaign", "channel": "Channel",
    "tags": "Tags", "params": "Parameters", "expiresAt": "Expires at", "slug": "Slug",
    "domain": "Domain", "iosFallbackUrl": "iOS fallback URL",
    "androidFallbackUrl": "Android fallback URL", "webFallbackUrl": "Web fallback URL",
    "ogTitle": "Preview title", "ogDescription": "Preview description",
    "ogImageUrl": "Preview image URL",
}
_LABELS_OF_TYPES = tuple(PARAM_TYPES.values())
_PARAM_CHOICES = f"{', '.join(_LABELS_OF_TYPES[:-1])} or {_LABELS_OF_TYPES[-1]}"
_INT = re.compile(r"[+-]?\d+")
_FIELD_WORD = re.compile(r"^(params\.\S+|[A-Za-z]+)\b")


@attrs.frozen
class ParamRow:
    key: str = ""
    type: str = "text"  # one of PARAM_TYPES
    value: str = ""


@attrs.frozen
class LinkForm:
    """What the form shows: the text of each field and the parameter rows."""

    values: dict[str, str] = attrs.field(factory=dict, hash=False)
    params: tuple[ParamRow, ...] = ()

    def get(self, name: str) -> str:
        return self.values.get(name, "")

    def rows(self, extra: int = EMPTY_PARAM_ROWS) -> list[ParamRow]:
        """The parameter rows followed by ``extra`` blank ones (at most 50)."""
        filled = list(self.params)
        blanks = max(0, min(extra, MAX_PARAM_ROWS - len(filled)))
        return filled + [ParamRow()] * blanks


def expiry_text(ms: int | None) -> str:
    """A ``datetime-local`` value (UTC, to the minute) for ``ms``."""
    if ms is None:
        return ""
    return utc(ms).strftime("%Y-%m-%dT%H:%M")


def from_link(link: Link) -> LinkForm:
    values = {
        "path": link.path, "title": link.title or "", "campaign": link.campaign or "",
        "channel": link.channel or "", "tags": ", ".join(link.tags),
        "iosFallbackUrl": link.ios_fallback_url or "",
        "androidFallbackUrl": link.android_fallback_url or "",
        "webFallbackUrl": link.web_fallback_url or "", "ogTitle": link.og_title or "",
        "ogDescription": link.og_description or "", "ogImageUrl": link.og_image_url or "",
        "expiresAt": expiry_text(link.expires_at_ms), "slug": link.slug, "domain": link.domain,
    }
    return LinkForm(values, tuple(_row(k, v) for k, v in link.params.items()))


def from_form(form: MultiDict[str, str]) -> LinkForm:
    """The submitted form as typed (for showing it again with an error)."""
    values = {name: form.get(name, "") for name in (*TEXT_FIELDS, "tags", "expiresAt", "slug",
                                                    "domain")}
    keys, types, texts = (form.getlist(n) for n in ("param_key", "param_type", "param_value"))
    rows = []
    for i, key in enumerate(keys[:MAX_PARAM_ROWS + EMPTY_PARAM_ROWS]):
        kind = types[i] if i < len(types) else "text"
        text = texts[i] if i < len(texts) else ""
        if key.strip() or text.strip():  # a key as typed: the API keeps " k " apart from "k",
            rows.append(ParamRow(key, kind, text))  # and an unchanged Save renamed it
    return LinkForm(values, tuple(rows))


def create_body(form: LinkForm) -> dict[str, Any]:
    """The ``POST /v1/links`` body of a create form (blank fields left out)."""
    body: dict[str, Any] = {k: form.get(k) for k in TEXT_FIELDS if form.get(k).strip()}
    body.setdefault("path", "/")
    if form.params:
        body["params"] = params_of(form.params)
    tags = tags_of(form.get("tags"))
    if tags:
        body["tags"] = tags
    if form.get("expiresAt").strip():
        body["expiresAt"] = _iso(form.get("expiresAt"))
    if form.get("slug").strip():
        body["slug"] = form.get("slug").strip()
    if form.get("domain").strip():
        body["domain"] = form.get("domain").strip()
    return body


def update_body(form: LinkForm, current: Link) -> dict[str, Any]:
    """The ``PATCH /v1/links/{id}`` body of an edit form: every field, an empty
    one as null (``path`` defaults to ``/``); the expiry and the tags only
    when changed (a tag the API took with a comma in it would come back split
    from the form's one comma-separated field)."""
    body: dict[str, Any] = {k: form.get(k) if form.get(k).strip() else None
                            for k in TEXT_FIELDS}
    body["path"] = body["path"] or "/"
    body["params"] = params_of(form.params)
    if form.get("tags").strip() != ", ".join(current.tags):
        body["tags"] = tags_of(form.get("tags"))
    expiry = form.get("expiresAt").strip()
    if expiry != expiry_text(current.expires_at_ms):
        body["expiresAt"] = _iso(expiry) if expiry else None
    return body


def params_of(rows: tuple[ParamRow, ...]) -> dict[str, ParamValue]:
    out: dict[str, ParamValue] = {}
    for row in rows:
        if not row.key:
            raise ValidationError(f"the parameter with value {row.value!r} needs a name",
                                  field="params")
        if row.key in out:
            raise ValidationError(f"the parameter {row.key!r} is given twice", field="params")
        out[row.key] = _param_value(row)
    return out


def tags_of(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def label_error(e: ValidationError | Exception) -> tuple[str | None, str]:
    """``(form field, message in the form's words)`` of a validation error."""
    message = str(e)
    field = getattr(e, "field", None)
    m = _FIELD_WORD.match(message)
    word = m.group(1) if m else None
    if field is None and word in LABELS:
        field = word
    if field is not None and field.startswith("params."):
        field = "params"
    if word is not None and word.startswith("params."):
        message = f"Parameter {word.removeprefix('params.')!r}{message[len(word):]}"
    elif word in LABELS:
        message = LABELS[word] + message[len(word):]
    elif re.match(r"[a-z]+\b(?!\.)", message):  # a sentence, not a name such as go.example.com
        message = message[:1].upper() + message[1:]
    return (field if field in LABELS else None), message


def _row(key: str, value: ParamValue) -> ParamRow:
    if isinstance(value, bool):
        return ParamRow(key, "true" if value else "false", "")
    if isinstance(value, int | float):
        return ParamRow(key, "number", repr(value) if isinstance(value, float) else str(value))
    return ParamRow(key, "text", value)


def _param_value(row: ParamRow) -> ParamValue:
    if row.type not in PARAM_TYPES:  # not from this form's <select>: never guess
        raise ValidationError(
            f"the parameter {row.key!r} has a type this form does not offer "
            f"({row.type[:40]!r}): choose {_PARAM_CHOICES}", field="params")
    if row.type == "true":
        return True
    if row.type == "false":
        return False
    if row.type == "number":
        text = row.value.strip()
        if _INT.fullmatch(text):
            try:
                return int(text)  # its range is the API's to judge (64 bits)
            except ValueError:  # past the 4,300 digits int() converts
                raise ValidationError(f"the parameter {row.key!r} is too large a number",
                                      field="params") from None
        try:
            number = float(text)
        except ValueError:
            number = math.nan
        if not math.isfinite(number):
            raise ValidationError(f"the parameter {row.key!r} is not a number: {text!r}",
                                  field="params")
        return number
    return row.value


def _iso(local: str) -> str:
    """``YYYY-MM-DDTHH:MM`` (UTC) as ISO 8601 with ``Z``; other text is passed on
    for the parser to refuse with its own message."""
    text = local.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}", text):
        return text + ":00Z"
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?", text):
        return text + "Z"
    return text

