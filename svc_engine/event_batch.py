"""The events batch of ``POST /v1/sdk/events``: its rules, and a fast check of
the common shape that gives exactly the same answers.

Rules (SPEC.md "SDK event", "Limits"; decisions where it is silent):

- the body is ``{"installId": UUID v4, "events": [1 to 100 events]}``;
  unknown fields are ignored, JSON types are strict, ``null`` means absent;
- ``id``: a UUID of any version, hex digits in either case, kept in lower case;
- ``name``: a string of 1 to 100 characters;
- ``properties``: absent or ``null`` is ``{}``; otherwise a JSON object of at
  most 8 KiB as compact UTF-8 JSON, nested at most 8 levels (the object itself
  is level 1); what the encoder refuses (non-finite numbers for the standard
  library's) is refused;
- ``linkId``: absent, ``null`` or a UUID (lower-cased);
- ``occurredAt``: RFC 3339 (see ``sdk_requests.parse_timestamp_ms``), not
  before 1970; a time later than the batch's arrival is clamped to it (an
  event cannot have happened after it was received, and refusing it would
  make the SDK drop the whole batch for one bad device clock);
- duplicate ids inside a batch are accepted here and removed when stored
  (``svc_engine.events.split_duplicates``).

What is refused, and how much of the batch goes with it. The SDK drops a
batch that is refused (SPEC.md "Custom events" 7), and it cannot check every
rule itself (the 8 KiB of ``properties`` is measured here, on the encoder's
text), so a bad event must not take the good ones of its batch with it:

- an error of the envelope refuses the whole batch (ValidationError, a 400):
  the body not an object, a bad or missing ``installId``, ``events`` not a
  list or not 1 to 100 of them;
- an error of one event (any rule above on an item of ``events``) refuses
  that event only: the others are kept, in batch order, and each refused one
  is a :class:`Rejection` (its index, field and message) in
  :attr:`EventRows.rejected`, answered in a 200 beside the counts;
- when every event is refused there is nothing to keep: ValidationError for
  the first one, as for a bad envelope (so the SDK drops the batch).

An error names the event and field: ``events[3].name``, with a message that
starts with it and holds no value the app sent.

Theory of operation. A batch holds up to 100 events and may arrive a
thousand times a second, so its check exists twice over the same rules:

- :func:`_event` checks one event at a time, field by field in rule order,
  and raises the event's first error. It is the reference, and the only code
  that builds an error; :func:`_reference_rows` runs it on every event and
  keeps the rows of those it passes and a :class:`Rejection` for each other.
- :func:`svc_engine.event_columns.fast_rows` checks the batch a column at a
  time with work done in C (how, and its cost model: that module). It returns
  exactly the rows the reference would, or None when it cannot vouch for the
  batch; it vouches only for batches the reference refuses no event of, so a
  batch with a bad event always goes to the reference, which sorts the good
  events from the bad (or accepts a shape the fast check does not know).
  So sorting costs the fast path nothing: it is not touched, and a batch it
  vouches for only carries an empty ``rejected`` along.

The limits both checks apply, :data:`EncodeAll`, :func:`too_deep` and
:func:`text_too_deep` live in ``event_columns`` (which must not import this
module) and are re-exported here.

``properties`` is encoded before anything else is judged of it, by the
encoder in C, and its nesting measured on that text (``text_too_deep``; on
the standard library's escaped text when the encoder refuses it), so an
event whose properties are far over the limits (a MiB of ``[]``) costs a
few C passes, not a Python step per value (twice, before the size was
measured). The error is the first rule broken in this order, as before: not
an object, nested too deep, not encodable, too large.

tests/test_event_batch.py holds the two to the same answers over generated
batches, and the reference to judging each event alone.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from svc_engine.errors import ValidationError
from svc_engine.event_columns import EVENT_NAME_MAX as EVENT_NAME_MAX
from svc_engine.event_columns import PROPERTIES_MAX_BYTES as PROPERTIES_MAX_BYTES
from svc_engine.event_columns import PROPERTIES_MAX_DEPTH as PROPERTIES_MAX_DEPTH
from svc_engine.event_columns import EncodeAll as EncodeAll
from svc_engine.event_columns import Rows, fast_rows
from svc_engine.event_columns import text_too_deep as text_too_deep
from svc_engine.event_columns import too_deep as too_deep
from svc_engine.ids import is_uuid
from svc_engine.sdk_requests import json_object, parse_timestamp_ms, uuid4_field

MAX_EVENTS_PER_BATCH: Final = 100


def encode_all_stdlib(values: Sequence[object]) -> list[bytes]:
    """The default :data:`EncodeAll`: the standard library's compact JSON."""
    return [json.dumps(v, ensure_ascii=False, separators=(",", ":"),
                       allow_nan=False).encode("utf-8") for v in values]


@attrs.frozen
class Rejection:
    """An event of a batch refused by the rules while the others are kept: its
    index in the batch, the field at fault (``events[1].name``) and the
    message, which starts with the field and holds no value the app sent."""

    index: int
    field: str
    message: str
    code: str = ValidationError.code

    def to_json(self) -> dict[str, object]:
        return {"index": self.index, "field": self.field, "code": self.code,
                "message": self.message}

    def error(self) -> ValidationError:
        """The error the whole batch is refused with when no event is kept."""
        return ValidationError(self.message, field=self.field)


@attrs.frozen
class EventInput:
    """One custom event as the SDK sent it (validated, not yet stored)."""

    id: str
    name: str
    properties: dict[str, object]
    link_id: str | None
    occurred_at_ms: int


@attrs.frozen
class EventsBatch:
    """``POST /v1/sdk/events``, one record per event."""

    install_id: str
    events: tuple[EventInput, ...]
    rejected: tuple[Rejection, ...] = ()


@attrs.frozen
class EventRows:
    """A validated batch as columns: item ``i`` of every field is event ``i``.

    One record per batch, not per event: the hot path never builds a record
    per event. ``properties_json`` is each ``properties`` as the encoder gave
    it (what the 8 KiB limit measured), ready to store; ``occurred_at`` is
    the text the app sent, ``sent_at_ms`` its time exactly (what a resent
    batch repeats, so what deduplication keys on) and ``occurred_at_ms`` that
    time clamped to arrival. ``rejected`` are the events of the batch the rules
    refused, in batch order (the columns hold the others, in batch order);
    empty whenever the fast check vouched for the batch."""

    install_id: str
    ids: tuple[str, ...]
    id_bytes: bytes  # the ids as 16 bytes each, one after the other
    names: tuple[str, ...]
    properties: tuple[dict[str, object], ...]
    properties_json: tuple[bytes, ...]
    link_ids: tuple[str | None, ...]
    occurred_at_ms: tuple[int, ...]
    occurred_at: tuple[str, ...]
    sent_at_ms: tuple[int, ...]
    rejected: tuple[Rejection, ...] = ()

    def __len__(self) -> int:
        return len(self.ids)

    def inputs(self) -> tuple[EventInput, ...]:
        return tuple(EventInput(id=i, name=n, properties=p, link_id=lk, occurred_at_ms=ms)
                     for i, n, p, lk, ms in zip(self.ids, self.names, self.properties,
                                                self.link_ids, self.occurred_at_ms,
                                                strict=True))


def parse_event_rows(body: object, *, now_ms: int,
                     encode_all: EncodeAll = encode_all_stdlib,
                     fast: bool = True,
                     refused: Mapping[int, Rejection] | None = None) -> EventRows:
    """Validate a batch body (whatever the JSON decoder gave): the rows of the
    events the rules pass, and the others in ``rejected``. ValidationError for
    a bad envelope, or for the first event when every event is refused.
    ``encode_all`` measures ``properties`` (the web layer passes a faster
    encoder with the same output). ``fast=False``: the reference alone, for
    a body that may hold strings that are not Unicode text (a lone UTF-16
    surrogate, which the fast check does not look for: web/api_events.py).
    ``refused``: events already refused by a rule the caller checks (their
    index: the rejection), left out by the reference."""
    m = json_object(body)
    install_id = uuid4_field(m, "installId")
    items = m.get("events")
    if not isinstance(items, list):
        raise ValidationError("events: must be a list of events", field="events")
    if not 1 <= len(items) <= MAX_EVENTS_PER_BATCH:
        raise ValidationError(f"events: must hold 1 to {MAX_EVENTS_PER_BATCH} events",
                              field="events")
    rows = fast_rows(items, now_ms, encode_all) if fast and not refused else None
    if rows is not None:
        return EventRows(install_id, *rows)
    kept, rejected = _reference_rows(items, now_ms, encode_all, refused)
    if kept is None:
        raise rejected[0].error()
    return EventRows(install_id, *kept, rejected)


def parse_events_batch(body: object, *, now_ms: int,
                       encode_all: EncodeAll = encode_all_stdlib) -> EventsBatch:
    """:func:`parse_event_rows` as one :class:`EventInput` per event."""
    rows = parse_event_rows(body, now_ms=now_ms, encode_all=encode_all)
    return EventsBatch(install_id=rows.install_id, events=rows.inputs(),
                       rejected=rows.rejected)


# --- the reference ---------------------------------------------------------------------


def _reference_rows(items: list[Any], now_ms: int, encode_all: EncodeAll,
                    refused: Mapping[int, Rejection] | None = None,
                    ) -> tuple[Rows | None, tuple[Rejection, ...]]:
    """The rows of the events :func:`_event` passes (None if it passes none),
    and a :class:`Rejection` for each other (``refused``'s for those), in
    batch order."""
    checked = []
    rejected = []
    for i, item in enumerate(items):
        if refused and i in refused:
            rejected.append(refused[i])
            continue
        try:
            checked.append(_event(item, i, encode_all))
        except ValidationError as e:
            rejected.append(Rejection(i, e.field or f"events[{i}]", e.message))
    if not checked:
        return None, tuple(rejected)
    ids, names, properties, encoded, link_ids, sent, occurred = zip(*checked, strict=True)
    binary = bytes.fromhex("".join(ids).replace("-", ""))
    times = tuple(map(min, sent, itertools.repeat(now_ms)))
    return (ids, binary, names, properties, encoded, link_ids, times, occurred, sent), \
        tuple(rejected)


def _event(item: object, index: int, encode_all: EncodeAll,
           ) -> tuple[str, str, dict[str, object], bytes, str | None, int, str]:
    """One event's row, or ValidationError for its first bad field."""
    # Field names are built only for an error.
    if not isinstance(item, dict):
        raise ValidationError(f"events[{index}]: must be an object", field=f"events[{index}]")
    event_id = item.get("id")
    if event_id is None:
        raise ValidationError(f"events[{index}].id: required", field=f"events[{index}].id")
    if not isinstance(event_id, str) or not is_uuid(event_id):
        raise ValidationError(f"events[{index}].id: must be a UUID", field=f"events[{index}].id")
    name = item.get("name")
    if not isinstance(name, str):
        raise ValidationError(f"events[{index}].name: must be a string",
                              field=f"events[{index}].name")
    if not 1 <= len(name) <= EVENT_NAME_MAX:
        raise ValidationError(f"events[{index}].name: must be 1 to {EVENT_NAME_MAX} characters",
                              field=f"events[{index}].name")
    if not is_text(name):
        raise ValidationError(f"events[{index}].name: must be Unicode text (a lone UTF-16 "
                              "surrogate is not)", field=f"events[{index}].name")
    properties = item.get("properties")
    if properties is None:
        properties = {}
    encoded = _properties_json(properties, index, encode_all)
    occurred = item.get("occurredAt")
    occurred_ms = parse_timestamp_ms(occurred) if isinstance(occurred, str) else None
    if occurred_ms is None:
        field = f"events[{index}].occurredAt"
        if not isinstance(occurred, str):
            raise ValidationError(f"{field}: must be an RFC 3339 date-time string", field=field)
        raise ValidationError(
            f"{field}: must be an RFC 3339 date-time with seconds and a Z or +hh:mm offset, "
            "not before 1970", field=field)
    link_id = item.get("linkId")
    if link_id is not None:
        if not isinstance(link_id, str) or not is_uuid(link_id):
            raise ValidationError(f"events[{index}].linkId: must be a UUID",
                                  field=f"events[{index}].linkId")
        link_id = link_id.lower()
    assert isinstance(occurred, str)
    return event_id.lower(), name, properties, encoded, link_id, occurred_ms, occurred


def is_text(value: str) -> bool:
    """Whether ``value`` is Unicode text: no lone UTF-16 surrogate (which a JSON
    ``\\ud83d`` escape gives, from an emoji cut in half), so it has a UTF-8 form."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _properties_json(value: object, index: int, encode_all: EncodeAll) -> bytes:
    """``properties`` (``{}`` for absent) as the encoder gives it, or
    ValidationError for the first of its rules it breaks: a JSON object,
    nested at most :data:`PROPERTIES_MAX_DEPTH` levels, encodable, at most
    :data:`PROPERTIES_MAX_BYTES` encoded.

    Encoded first, once, and the nesting measured on that text
    (:func:`text_too_deep`), or on the standard library's text of it when
    the encoder refuses it (orjson past 254 levels or for a lone surrogate,
    the standard library's past its recursion limit or for a non-finite
    number): never a Python step per value of a value that may be a MiB."""
    if not isinstance(value, dict):
        raise _properties_error(index, "must be a JSON object")
    encoded: bytes | None
    try:
        (encoded,) = encode_all([value])
    except (TypeError, ValueError, RecursionError) as exc:
        encoded, refused = None, exc
    deep = (_unencodable_too_deep(value) if encoded is None
            else text_too_deep(encoded, PROPERTIES_MAX_DEPTH))
    if deep:
        raise _properties_error(index, f"nested deeper than {PROPERTIES_MAX_DEPTH} levels")
    if encoded is None:
        raise _properties_error(index, "not encodable as JSON") from refused
    if len(encoded) > PROPERTIES_MAX_BYTES:
        raise _properties_error(index, f"larger than {PROPERTIES_MAX_BYTES} bytes as JSON")
    return encoded


def _unencodable_too_deep(value: dict[Any, Any]) -> bool:
    """:func:`too_deep` for properties the encoder refused, measured on the
    standard library's escaped text (lone surrogates as ``\\ud83d``,
    non-finite numbers as ``NaN``), which only a value nested past the
    recursion limit, far past the limit here, or one that is not JSON data
    at all (walked), keeps from being written."""
    try:
        text = json.dumps(value, allow_nan=True, separators=(",", ":")).encode()
    except RecursionError:
        return True
    except (TypeError, ValueError):
        return too_deep(value, PROPERTIES_MAX_DEPTH)
    return text_too_deep(text, PROPERTIES_MAX_DEPTH)


def _properties_error(index: int, problem: str) -> ValidationError:
    field = f"events[{index}].properties"
    return ValidationError(f"{field}: {problem}", field=field)
