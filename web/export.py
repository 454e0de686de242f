"""Exports of raw records as NDJSON or CSV, produced a page at a time.

``GET /v1/export/{clicks|installs|opens|conversions}`` streams its body:
``chunks`` yields one encoded chunk per storage page (storage/export_reads.py,
``EventsStore.pages``), each page read in its own short read transaction, so
memory stays constant however long the range and no read transaction waits
on a slow client.

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
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import orjson

from storage import export_reads
from storage.attribution_store import OpenRecord
from storage.events_store import EventsStore, StoredEvent
from storage.install_rows import InstallRow
from storage.lmdb_store import LmdbStore
from svc_engine.clicks import Click
from svc_engine.errors import ValidationError
from svc_engine.keys import Mode
from svc_engine.links import iso_utc

Row = dict[str, Any]
T = TypeVar("T")
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
