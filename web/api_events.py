"""Custom events, analytics and exports.

SDK (publishable key):
    POST /v1/sdk/events          {"installId", "events": [1..100 events]}
                                 -> 200 {"accepted": N, "duplicates": M,
                                         "rejected": [{"index", "field", "code",
                                                       "message"}, ...]}
Server (secret key; the key's project and mode):
    GET  /v1/analytics/summary   ?from=YYYY-MM-DD&to=YYYY-MM-DD[&linkId=UUID]
    GET  /v1/analytics/links/{id}          the same for one link
    GET  /v1/analytics/links/{id}/funnel   ?from&to -> clicks, installs, opens, conversions
    GET  /v1/export/{kind}       kind: clicks, installs, opens or conversions;
                                 ?from&to&format=ndjson|csv, streamed
Benchmark only (``SVC_BENCH_ENDPOINTS=1`` in the environment; never on by default):
    POST /v1/bench/parse-only    decodes the JSON body with orjson, answers
                                 {"accepted": <number of events>}; no key, no storage.
                                 The events benchmark's baseline (bench/events_bench.py).

The events batch is the hot path: the body is decoded once (orjson), checked
(``svc_engine.event_batch.parse_event_rows``: a column-at-a-time fast check of
the usual shape, the engine's per-event rules for the rest), made into its
stored records (``storage.event_records.NewEvents``: the properties of all
events encoded by one orjson call), and stored by one write op
(storage/events_store.py) whose commit is awaited before the answer, so an
acknowledged event is durable.

What a bad event costs (the SDK drops a refused batch, and cannot check
every rule itself): a bad envelope (body, ``installId``, ``events`` not a
list of 1 to 100) is a 400 and stores nothing; a bad event is left out and
listed in the 200's ``rejected`` (index, field, code, message), the others
stored, counted and deduplicated as usual; a batch whose every event is bad
is a 400 naming the first, and stores nothing. The answer, ``rejected``
included, is what an Idempotency-Key replays. Refused events are counted for
``/metrics`` (``svc_events_rejected_total``, :class:`EventStatistics`), never
logged (they are the app's data). Events whose ``linkId`` names no link of
the project are stored and counted as given: the link may have been deleted
since the tap, and refusing would lose the event.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import attrs
import orjson

from storage.analytics_store import AnalyticsStore
from storage.event_records import NewEvents, encode_all
from storage.events_store import BatchResult, EventsStore
from svc_engine.analytics import MAX_RANGE_DAYS, DayRange, parse_day_range, parse_top
from svc_engine.errors import InstallNotFound, NotFound, ValidationError
from svc_engine.event_batch import EventRows, Rejection, parse_event_rows
from svc_engine.ids import is_uuid
from web import export, openapi
from web.auth import KeyContext
from web.http import (
    Parts,
    Request,
    Response,
    StreamResponse,
    inexact_error,
    inexact_integer,
    json_response,
)
from web.idem import IdemSlot, json_render
from web.openapi import op, path_param, query
from web.openapi_schemas import INSTALL_ID, UUID, Schema

if TYPE_CHECKING:
    from web.api import Api

BENCH_ENV = "SVC_BENCH_ENDPOINTS"

# -- the OpenAPI description of these routes (web/openapi.py EXTRA_PATHS) -------------------

_DAY: Schema = {"type": "string", "pattern": r"^\d{4}-\d{2}-\d{2}$"}
_RANGE = (query("from", _DAY), query("to", _DAY))
_COUNTS: Schema = {"type": "object", "additionalProperties": {"type": "integer"}}
_OMITTED: Schema = {
    "type": "object", "description": "with top=N only: per breakdown cut, how many values "
                                     "were left out and what they add up to",
    "additionalProperties": {"type": "object", "required": ["values", "count"],
                             "properties": {"values": {"type": "integer"},
                                            "count": {"type": "integer"}}}}
_METRIC: Schema = {"type": "object", "required": ["total", "byDay"],
                   "properties": {"total": {"type": "integer"}, "byDay": _COUNTS,
                                  "omitted": _OMITTED}}
_TOP = query("top", {"type": "integer", "minimum": 1, "maximum": 1000})
EVENTS_BATCH: Schema = {
    "type": "object", "required": ["installId", "events"],
    "properties": {
        "installId": INSTALL_ID,
        "events": {"type": "array", "minItems": 1, "maxItems": 100, "items": {
            "type": "object", "required": ["id", "name", "occurredAt"],
            "description": "an event that breaks these rules is left out and listed in "
                           "the answer's rejected, the others stored (this schema, the "
                           "stricter side, refuses the whole batch)",
            "properties": {
                "id": UUID, "name": {"type": "string", "minLength": 1, "maxLength": 100},
                "properties": {"type": ["object", "null"]},
                "linkId": {"oneOf": [UUID, {"type": "null"}]},
                "occurredAt": {"type": "string", "format": "date-time"}}}},
    },
}
REJECTION: Schema = {
    "type": "object", "required": ["index", "field", "code", "message"],
    "properties": {"index": {"type": "integer", "minimum": 0, "maximum": 99},
                   "field": {"type": "string"}, "code": {"enum": ["validation_error"]},
                   "message": {"type": "string"}}}
EVENTS_ANSWER: Schema = {
    "type": "object", "required": ["accepted", "duplicates", "rejected"],
    "properties": {
        "accepted": {"type": "integer"}, "duplicates": {"type": "integer"},
        "rejected": {"type": "array", "items": REJECTION,
                     "description": "events refused by the rules, in batch order; the "
                                    "others were stored. When every event is refused "
                                    "the answer is 400 for the first."}}}
_PER_DAY: Schema = {"type": "object", "required": ["total", "byDay"],
                    "properties": {"total": {"type": "integer"}, "byDay": _COUNTS}}


def _metric(*breakdowns: str, **more: Schema) -> Schema:
    """A metric of a summary: its total, its days, its breakdowns (largest
    first; with top=N its N largest, the rest in ``omitted``)."""
    return {**_METRIC, "required": [*_METRIC["required"], *breakdowns, *more],
            "properties": {**_METRIC["properties"], **dict.fromkeys(breakdowns, _COUNTS),
                           **more}}


SUMMARY: Schema = {
    "type": "object",
    "required": ["from", "to", "mode", "linkId", "clicks", "opens", "handoffOpens",
                 "installs", "conversions"],
    "properties": {
        "from": _DAY, "to": _DAY, "mode": {"enum": ["test", "live"]},
        "linkId": {"oneOf": [UUID, {"type": "null"}]},
        "clicks": _metric("byPlatform", "byCountry", "byReferrer"),
        "opens": _metric("byPlatform", "byMethod"),
        "handoffOpens": {**_PER_DAY, "description": "opens of handoffs (method handoff)"},
        "installs": _metric("byPlatform", "byConfidence", "byMethod",
                            unattributed={"type": "integer"}),
        "conversions": _metric("byName", revenue={
            "type": "object", "additionalProperties": {"type": "string"},
            "description": "per currency, an exact decimal string"}),
    },
}
FUNNEL: Schema = {"type": "object",
                  "required": ["from", "to", "mode", "linkId", "clicks", "installs", "opens",
                               "conversions"],
                  "properties": {"from": _DAY, "to": _DAY, "mode": {"enum": ["test", "live"]},
                                 "linkId": UUID, "clicks": {"type": "integer"},
                                 "installs": {"type": "integer"}, "opens": {"type": "integer"},
                                 "conversions": {"type": "integer"}}}
_EXPORT = op("Clicks, installs, opens or conversions of a range of days, streamed",
             key="server", errors=(400,),
             params=(path_param("kind", {"enum": ["clicks", "installs", "opens",
                                                  "conversions"]}),
                     *_RANGE, query("format", {"enum": ["ndjson", "csv"]})))
_EXPORT["responses"]["200"] = {"description": "one record a line", "content": {
    "application/x-ndjson": {"schema": {"type": "string"}},
    "text/csv": {"schema": {"type": "string"}}}}
OPENAPI_PATHS: dict[str, dict[str, Any]] = {
    "/v1/sdk/events": {"post": op(
        "Report a batch of 1 to 100 custom events", key="sdk", body=EVENTS_BATCH,
        answer=EVENTS_ANSWER, write=True, rerun_other=True,
        codes={404: "install_not_found: no install has this installId (its launch "
                    "report has not been stored)"})},
    "/v1/analytics/summary": {"get": op(
        "Counts of the project, or of one link, over a range of days", key="server",
        answer=SUMMARY, errors=(400, 404), params=(*_RANGE, query("linkId", UUID), _TOP))},
    "/v1/analytics/links/{id}": {"get": op(
        "Counts of one link over a range of days", key="server", answer=SUMMARY,
        errors=(400, 404), params=(path_param("id", UUID), *_RANGE, _TOP))},
    "/v1/analytics/links/{id}/funnel": {"get": op(
        "A link's funnel: clicks, installs, opens, conversions", key="server", answer=FUNNEL,
        errors=(400, 404), params=(path_param("id", UUID), *_RANGE))},
    "/v1/export/{kind}": {"get": _EXPORT},
}


def lenient_json(body: bytes, refused: ValidationError) -> object:
    """A batch body orjson refused, decoded by the standard library, which
    takes a lone UTF-16 surrogate escape (``"\\ud83d"``: an emoji cut in half
    by the app, which Dart's encoder writes and the SDK queues) where orjson
    refuses the whole body. The event holding it is then refused alone, in
    ``rejected``, and the others kept (``parse_event_rows(fast=False)``).
    ``refused`` again when the standard library cannot decode it either."""
    try:  # NaN, Infinity: not JSON; 1e400 is, but no double holds it (orjson refuses it)
        return json.loads(body, parse_constant=_not_json, parse_float=_finite)
    except (ValueError, RecursionError):
        raise refused from None


def _not_json(text: str) -> object:
    raise ValueError(f"{text} is not JSON")


def _finite(text: str) -> float:
    """A JSON number with a fraction or exponent, as orjson reads it: past a
    double's range (``1e400``) refused, where ``float`` gives ``inf`` (which
    the encoder then writes ``null``: the event stored another value)."""
    number = float(text)
    if math.isinf(number):
        raise ValueError(f"{text[:32]} is past a double's range")
    return number


_PAST_64_BITS = re.compile(rb"e\+(?:1[89]|[2-9][0-9]|[0-9]{3})")
"""What orjson writes for a float of 1e18 or more, as it writes an integer
past 64 bits it decoded (``9.223372036854776e+18`` and up)."""


def validated(data: object, now_ms: int, body: bytes, *, fast: bool = True,
              ) -> tuple[str, NewEvents]:
    """The install id and the events of a batch body (``data``, decoded with
    orjson from ``body``; the checks bound the nesting), ready to store, the
    refused ones in ``NewEvents.rejected``; 400 on a bad envelope, or on the
    first event when every one is refused. An event whose properties hold an
    integer orjson rounded is refused too (a ``Rejection`` naming the field).

    That last check looks again only at the kept properties whose encoded
    text holds an exponent of 18 or more: orjson decodes an integer past 64
    bits as a float of at least 2^63 (about 9.2e18), which the encoder
    writes with one (``1.2345678901234568e+29``; any float from 1e16 up is
    written ``e+``), so properties without one hold none (a ``+`` looked for
    first: 1 µs). Those are read again from the body, exactly, only when the
    body holds a run of 19 digits (``inexact_integer`` with those properties
    as its parts: a scan of the body in C, 17 µs for a batch of 100, then
    the standard library's decode); the field names the event. Only what is
    kept is checked: a long integer in a field the batch ignores, or in an
    event refused for another rule, is not stored and refuses nothing, even
    beside a ``+`` in what is kept (a phone number, ``1e+30``)."""
    rows = parse_event_rows(data, now_ms=now_ms, encode_all=encode_all, fast=fast)
    joined = b"".join(rows.properties_json)
    if b"+" in joined and _PAST_64_BITS.search(joined):
        # Such an event is refused alone, like any bad event (it took its
        # whole batch with it: the SDK drops a batch answered 400); the
        # batch is 400 only when no event is left.
        refused: dict[int, Rejection] = {}
        while (found := inexact_integer(body, _kept_properties(rows))) is not None:
            error = inexact_error(*found)
            field = error.field or ""
            if not field.startswith("events["):  # every part is an event's properties
                raise error
            index = int(field[len("events["):field.index("]")])
            refused[index] = Rejection(index, field, error.message)
            rows = parse_event_rows(data, now_ms=now_ms, encode_all=encode_all, fast=False,
                                    refused=refused)
    return rows.install_id, NewEvents.of(rows, received_at_ms=now_ms)


def _kept_properties(rows: EventRows) -> Parts:
    """The ``properties`` of the kept events whose encoded text may hold a
    rounded integer (:data:`_PAST_64_BITS`), in a batch body decoded again
    (``inexact_integer``'s parts; the two decoders keep the same values), and
    the field of each."""

    def parts(decoded: Any) -> tuple[list[Any], Callable[[int], str]]:
        items = decoded["events"]
        refused = {r.index for r in rows.rejected}
        kept = [i for i in range(len(items)) if i not in refused] if refused else range(len(items))
        at = [i for i, encoded in zip(kept, rows.properties_json, strict=True)
              if _PAST_64_BITS.search(encoded)]
        return [items[i].get("properties") for i in at], lambda n: f"events[{at[n]}].properties"

    return parts


openapi.EXTRA_PATHS.update(OPENAPI_PATHS)  # documented on import, like the webhooks


@attrs.define
class EventStatistics:
    """What the events route counts for ``/metrics`` (web/metrics_sources.py);
    updated in the event loop's thread only, so plain integers."""

    rejected: int = 0  # events refused by the rules in batches answered 200


def register(api: Api) -> None:
    services = api.services
    statistics = api.event_statistics
    events = EventsStore(services.store)
    analytics = AnalyticsStore(services.store)
    ok = json_render(200)

    def answer(value: object) -> tuple[int, str, bytes]:
        assert isinstance(value, BatchResult)
        return ok(value.to_json())

    async def track(req: Request) -> Response:
        ctx = api.sdk_auth(req)
        body = await req.body(api.max_body)
        now = services.clock.now_ms()
        # The decoded body is not kept in this frame: it is freed before the
        # write waits for its commit (see storage.event_records.NewEvents).
        try:
            install_id, new = validated(
                await req.json(api.max_body, depth_checked=False, exact_checked=False), now,
                body)
        except ValidationError as refused:
            if not body or refused.field is not None:  # the body's JSON was not at fault
                raise
            install_id, new = validated(lenient_json(body, refused), now, body, fast=False)
        if not events.has_install(ctx.project.id, ctx.mode, install_id):
            raise InstallNotFound("this install has not reported a launch; "
                                  "send events after POST /v1/sdk/init succeeded")

        async def run(slot: IdemSlot) -> Response:
            result = await events.record_batch(
                project_id=ctx.project.id, mode=ctx.mode, install_id=install_id,
                events=new, idem=slot.write(answer))
            if result.rejected:  # counted once: a replay does not come here
                statistics.rejected += len(result.rejected)
            return slot.respond(result, answer)

        # Another batch under a recorded key is stored, not 409: events are
        # deduplicated by their ids whatever the key (SPEC.md "Custom events" 6),
        # and an SDK that kept its key while its queue grew would drop a 409.
        return await api.idem.run(req, ctx.scope, body, run, rerun_other=True)

    def day_range(req: Request, *, max_days: int | None) -> DayRange:
        q = req.query()
        return parse_day_range(q.get("from") or None, q.get("to") or None,
                               now_ms=services.clock.now_ms(), max_days=max_days)

    def own_link(ctx: KeyContext, link_id: str, field: str) -> str:
        if not is_uuid(link_id):
            raise ValidationError(f"{field}: a link id is a UUID", field=field)
        link = services.links.get(link_id.lower())
        if link is None or link.project_id != ctx.project.id or link.mode is not ctx.mode:
            raise NotFound("no such link in this project and mode")
        return link.id

    async def summary(req: Request) -> Response:
        ctx = api.server_auth(req)
        days = day_range(req, max_days=MAX_RANGE_DAYS)
        link_id = req.query().get("linkId") or None
        if link_id is not None:
            link_id = own_link(ctx, link_id, "linkId")
        top = parse_top(req.query().get("top"))
        # Off the loop: a long tail of referrer hosts is 100,000s of counter
        # rows and megabytes of JSON (encoded in the worker thread too).
        return await services.off_loop(lambda: json_response(
            200, analytics.summary(ctx.project.id, ctx.mode, days, link_id, top=top)))

    async def link_summary(req: Request) -> Response:
        ctx = api.server_auth(req)
        link_id = own_link(ctx, req.params["id"], "id")
        days = day_range(req, max_days=MAX_RANGE_DAYS)
        top = parse_top(req.query().get("top"))
        return await services.off_loop(lambda: json_response(
            200, analytics.summary(ctx.project.id, ctx.mode, days, link_id, top=top)))

    async def link_funnel(req: Request) -> Response:
        ctx = api.server_auth(req)
        link_id = own_link(ctx, req.params["id"], "id")
        days = day_range(req, max_days=MAX_RANGE_DAYS)
        # Four exact reads a day (1-3 ms for a year): on the loop, so it does
        # not queue behind long summaries for a read thread.
        return json_response(200, analytics.funnel(ctx.project.id, ctx.mode, link_id, days))

    async def export_records(req: Request) -> Response:
        ctx = api.server_auth(req)
        kind = req.params["kind"]
        fmt = req.query().get("format") or "ndjson"
        export.check(kind, fmt)
        days = day_range(req, max_days=None)
        rows = export.pages(services.store, kind, ctx.project.id, ctx.mode, days.start_ms,
                            days.end_ms)
        extension = "ndjson" if fmt == "ndjson" else "csv"
        filename = f"{kind}-{ctx.mode.value}-{days.first}-{days.last}.{extension}"
        body = export.off_loop_body(services, ctx.project.id, export.chunks(kind, fmt, rows))
        return StreamResponse(200, body, [
            (b"content-type", export.FORMATS[fmt]),
            (b"content-disposition", f'attachment; filename="{filename}"'.encode()),
            (b"cache-control", b"no-store")])

    async def parse_only(req: Request) -> Response:
        data = orjson.loads(await req.body(api.max_body))
        items = data.get("events") if isinstance(data, dict) else None
        return json_response(200, {"accepted": len(items) if isinstance(items, list) else 0})

    r = api.router
    r.add("POST", "/v1/sdk/events", track)
    r.add("GET", "/v1/analytics/summary", summary)
    r.add("GET", "/v1/analytics/links/{id}", link_summary)
    r.add("GET", "/v1/analytics/links/{id}/funnel", link_funnel)
    r.add("GET", "/v1/export/{kind}", export_records)
    if os.environ.get(BENCH_ENV) == "1":
        r.add("POST", "/v1/bench/parse-only", parse_only)
        openapi.EXTRA_PATHS["/v1/bench/parse-only"] = {"post": op(
            "Benchmark baseline: decode the body, count its events (SVC_BENCH_ENDPOINTS=1)",
            key=None, answer={"type": "object"})}
    else:
        openapi.EXTRA_PATHS.pop("/v1/bench/parse-only", None)
