"""Exports of raw records as NDJSON or CSV, produced a page at a time.

``GET /v1/export/{clicks|installs|opens|conversions}`` streams its body:
``chunks`` yields one encoded chunk per storage page (storage/export_reads.py,
``EventsStore.pages``), each page read in its own short read transaction, so
memory stays constant however long the range and no read transaction waits
on a slow client.

A page (500 records read, converted and encoded: 9 ms typically, up to tens
of milliseconds) is made in a worker thread (:class:`OffLoopBody`,
``Services.off_loop``), never on the event loop every redirect waits on;
the bytes are the same. A project streams one export at a time: another
one asked for meanwhile is 429 ``rate_limited`` with ``Retry-After``
(:func:`off_loop_body`), so a script cannot take every read thread.

Columns (CSV header order; NDJSON objects carry the same keys):

============  ==================================================================
clicks        id, clickedAt, linkId, platform, osMajor, country, referrerHost
installs      installId, installedAt, platform, linkId, confidence, method,
              upgradedAt, firstLaunch (false: registered by a later launch,
              not counted as an install)
opens         id, openedAt, linkId, installId, platform, method
conversions   id, occurredAt, receivedAt, name, linkId, installId, properties
============  ==================================================================

Times are ISO 8601 UTC with milliseconds, except a conversion's
``occurredAt``, which is kept exactly as the app sent it. In CSV an empty
cell is null and ``properties`` is a JSON object in one cell; a text cell
that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return (an
event name an app sent, say) starts with a ``'`` added, so that a
spreadsheet shows it as text instead of running it as a formula (OWASP's
CSV injection advice); NDJSON carries every value as it is. A click never
carries an IP address, user agent or full referrer (none is stored).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

import orjson

from storage import export_reads
from storage.attribution_store import OpenRecord
from storage.events_store import EventsStore, StoredEvent
from storage.install_rows import InstallRow
from storage.lmdb_store import LmdbStore
from svc_engine.clicks import Click
from svc_engine.errors import RateLimited, ValidationError
from svc_engine.keys import Mode
from svc_engine.links import iso_utc
from web.services import Services

Row = dict[str, Any]
T = TypeVar("T")
RETRY_AFTER_S = 30
"""The ``Retry-After`` of an export refused while another of its project
streams (1.7 million clicks took 35 to 87 s)."""
FORMATS = {"ndjson": b"application/x-ndjson", "csv": b"text/csv; charset=utf-8"}
COLUMNS: dict[str, tuple[str, ...]] = {
    "clicks": ("id", "clickedAt", "linkId", "platform", "osMajor", "country", "referrerHost"),
    "installs": ("installId", "installedAt", "platform", "linkId", "confidence", "method",
                 "upgradedAt", "firstLaunch"),
    "opens": ("id", "openedAt", "linkId", "installId", "platform", "method"),
    "conversions": ("id", "occurredAt", "receivedAt", "name", "linkId", "installId",
                    "properties"),
}


def click_row(c: Click) -> Row:
    # a version past 4 digits is made up (stored before taps were bounded, and
    # past the 64 bits JSON here encodes): no version
    os_major = c.os_major if c.os_major is not None and 0 <= c.os_major < 10_000 else None
    return {"id": c.id, "clickedAt": iso_utc(c.at_ms), "linkId": c.link_id,
            "platform": c.platform, "osMajor": os_major, "country": c.country,
            "referrerHost": c.referrer_host}


def install_row(row: InstallRow) -> Row:
    i, a = row.install, row.install.attribution
    return {"installId": i.install_id, "installedAt": iso_utc(i.created_at_ms),
            "platform": i.platform, "linkId": a.link_id if a else None,
            "confidence": i.confidence.value, "method": a.method.value if a else None,
            "upgradedAt": iso_utc(i.upgraded_at_ms) if i.upgraded_at_ms is not None else None,
            "firstLaunch": row.decision is not None}


def open_row(o: OpenRecord) -> Row:
    return {"id": o.id, "openedAt": iso_utc(o.at_ms), "linkId": o.link_id,
            "installId": o.install_id, "platform": o.platform, "method": o.method}


def conversion_row(e: StoredEvent) -> Row:
    f = e.fields()
    return {"id": e.id, "occurredAt": f.get("occurredAt"), "receivedAt": iso_utc(e.received_at_ms),
            "name": f.get("name"), "linkId": f.get("linkId"), "installId": e.install_id,
            "properties": f.get("properties", {})}


def check(kind: str, fmt: str) -> None:
    if kind not in COLUMNS:
        raise ValidationError(f"kind: one of {', '.join(COLUMNS)}", field="kind")
    if fmt not in FORMATS:
        raise ValidationError("format: ndjson or csv", field="format")


def pages(store: LmdbStore, kind: str, project_id: str, mode: Mode, start_ms: int,
          end_ms: int) -> Iterator[list[Row]]:
    """Rows of ``kind`` recorded in ``[start_ms, end_ms)``, a page at a time
    (conversions: by the time they occurred)."""
    if kind == "clicks":
        return _rows(export_reads.clicks(store, project_id, mode, start_ms, end_ms), click_row)
    if kind == "installs":
        return _rows(export_reads.installs(store, project_id, mode, start_ms, end_ms),
                     install_row)
    if kind == "opens":
        return _rows(export_reads.opens(store, project_id, mode, start_ms, end_ms), open_row)
    return _rows(EventsStore(store).pages(project_id, mode, start_ms, end_ms), conversion_row)


def _rows(source: Iterable[list[T]], convert: Callable[[T], Row]) -> Iterator[list[Row]]:
    for page in source:
        yield [convert(item) for item in page]


def chunks(kind: str, fmt: str, rows: Iterable[list[Row]]) -> Iterator[bytes]:
    """The encoded body: one chunk per page (CSV: a header line first)."""
    columns = COLUMNS[kind]
    if fmt == "ndjson":
        for page in rows:
            yield b"".join(orjson.dumps(row) + b"\n" for row in page)
        return
    yield _csv_lines([list(columns)])
    for page in rows:
        yield _csv_lines([[_cell(row.get(c)) for c in columns] for row in page])


_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict | list):
        return orjson.dumps(value).decode()
    if isinstance(value, str) and value.startswith(_FORMULA_START):
        return "'" + value  # a spreadsheet would run it as a formula (CSV injection)
    return str(value)


def _csv_lines(rows: list[list[str]]) -> bytes:
    out = io.StringIO()
    csv.writer(out, lineterminator="\r\n").writerows(rows)
    return out.getvalue().encode("utf-8")


def off_loop_body(services: Services, project_id: str, chunks: Iterator[bytes]
                  ) -> OffLoopBody:
    """The body of an export of ``project_id`` (``chunks``), each chunk made
    by ``services.off_loop``, the project in ``services.exports`` until the
    body ends. While another export of the project streams: 429
    ``rate_limited`` with ``Retry-After``."""
    running = services.exports
    if project_id in running:
        raise RateLimited("an export of this project is already streaming; a project "
                          "streams one export at a time", retry_after=RETRY_AFTER_S)
    running.add(project_id)
    return OffLoopBody(services.off_loop, chunks, lambda: running.discard(project_id))


class OffLoopBody:
    """An asynchronous iterable of ``chunks``, each made in a worker thread
    (``next`` of the generator: the page's read, rows and encoding), one at a
    time. ``close`` (web/http.py ``StreamResponse`` calls it however the
    sending ends) closes ``chunks`` and calls ``release``, once; the thread
    is never abandoned (``off_loop`` waits for it even when cancelled), so
    the generator is not closed while it runs."""

    __slots__ = ("_chunks", "_closed", "_off_loop", "_release")

    def __init__(self, off_loop: Callable[[Callable[[], bytes | None]], Awaitable[bytes | None]],
                 chunks: Iterator[bytes], release: Callable[[], None]) -> None:
        self._off_loop = off_loop
        self._chunks = chunks
        self._release = release
        self._closed = False

    def __aiter__(self) -> OffLoopBody:
        return self

    async def __anext__(self) -> bytes:
        if self._closed:
            raise StopAsyncIteration
        chunk = await self._off_loop(self._next)
        if chunk is None:
            self.close()
            raise StopAsyncIteration
        return chunk

    def _next(self) -> bytes | None:
        return next(self._chunks, None)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            close = getattr(self._chunks, "close", None)
            if close is not None:
                close()
        finally:
            self._release()
