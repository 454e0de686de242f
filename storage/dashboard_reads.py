"""Reads the dashboard needs that the stores do not offer: newest-first feeds
for Live events, one click by its key, one link's latest clicks, the link
list's click totals.

Reads only: every function takes the ``LmdbStore`` and opens its own short
read transaction. Writes go through the stores' own APIs (links, platforms,
domains), so quota, slug and idempotency rules stay in one place.

Costs. Clicks, opens and custom events are keyed project | mode | time | id,
so "the newest N since T" is one reverse range read. Installs are keyed by
install id (their lookup on every launch) and found by time through the
``installs_by_time`` index, also one reverse range read. Live events still
skip even that while :func:`installs_marker`, the project's install counter of
the day (one get), is unchanged. No index finds a link's clicks (none is
written on the redirect's path for it): :func:`clicks_of_link` reads the
project's clicks of the days the link's day totals name, at most
``LINK_CLICK_SCAN`` of them, in a worker thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs
import lmdb

from storage import counters, layout
from storage.attribution_store import OpenRecord
from storage.click_window_store import ClickWindow
from storage.codec import decode
from storage.events_store import StoredEvent
from storage.install_rows import InstallRow
from storage.lmdb_store import LmdbStore
from svc_engine.analytics import DAY_MS, day_start_ms
from svc_engine.clicks import Click
from svc_engine.events import PROJECT_SCOPE, Metric, revenue, utc_day
from svc_engine.installs import Install
from svc_engine.keys import Mode

LATE_EVENT_MS = 10 * 60_000
"""How much earlier than its arrival a custom event may have occurred and
still show in a Live events poll (events are keyed by when they occurred)."""

LINK_CLICK_SCAN = 100_000
"""At most this many clicks of the project are read for the clicks of one
link (:func:`clicks_of_link`): tens of milliseconds, in a worker thread."""


@attrs.frozen
class Conversion:
    """A custom event as Live events shows it."""

    id: str
    name: str
    link_id: str | None
    install_id: str
    occurred_at_ms: int
    received_at_ms: int
    revenue: tuple[str, str] | None  # (currency, amount as text)


def _newest(store: LmdbStore, dbname: bytes, scope: bytes, since_ms: int,
            limit: int) -> list[tuple[bytes, bytes]]:
    """Items keyed ``scope | ms | ...`` with ms >= ``since_ms``, newest first."""
    floor = scope + layout.ms(max(0, since_ms))
    out: list[tuple[bytes, bytes]] = []
    with store.read() as txn:
        cur = txn.cursor(db=store.db(dbname))
        ok = cur.set_range(layout.prefix_end(scope))
        ok = cur.prev() if ok else cur.last()
        while ok and len(out) < limit:
            key = bytes(cur.key())
            if not key.startswith(scope) or key < floor:
                break
            out.append((key, bytes(cur.value())))
            ok = cur.prev()
    return out


# -- clicks ---------------------------------------------------------------------------


def recent_clicks(store: LmdbStore, project_id: str, mode: Mode, *, since_ms: int = 0,
                  limit: int = 50) -> list[Click]:
    """The project's clicks at or after ``since_ms``, newest first."""
    rows = _newest(store, b"clicks", layout.scope(project_id, mode.value), since_ms, limit)
    return [decode(Click, v) for _, v in rows]


def find_click(store: LmdbStore, project_id: str, mode: Mode, click_id: str,
               at_ms: int) -> Click | None:
    """One click by its time and id (the two parts of its key)."""
    key = layout.scope(project_id, mode.value) + layout.ms(at_ms) + layout.uid(click_id)
    with store.read() as txn:
        raw = txn.get(key, db=store.db(b"clicks"))
    return decode(Click, bytes(raw)) if raw is not None else None


def in_click_window(store: LmdbStore, click: Click) -> bool:
    """Whether the click's tap is still in the probabilistic window (it leaves
    when a launch consumes it or when it is older than the longest window)."""
    with store.read() as txn:
        return ClickWindow(store).holds(txn, click.project_id, click.mode.value, click.at_ms,
                                        click.id)


@attrs.frozen
class LinkClicks:
    """The newest clicks of one link (:func:`clicks_of_link`)."""

    clicks: list[Click]
    """Newest first."""
    read: int
    """Clicks of the project read to find them."""
    stopped_at_ms: int | None = None
    """None: the clicks are the link's newest (all of them, when fewer than
    asked for). Otherwise the search stopped after ``LINK_CLICK_SCAN`` clicks
    of the project, back to one of this time: the link has no other clicks
    since, but may have older ones."""


def clicks_of_link(store: LmdbStore, project_id: str, mode: Mode, link_id: str,
                   limit: int = 20, scan: int | None = None) -> LinkClicks:
    """The newest ``limit`` clicks of one link. Clicks are keyed by time, not
    by link, so they are looked for among the project's clicks, but only on
    the days the link was clicked and only until all of a day's were found:
    the link's day totals (``clicks`` counters, written in each click's own
    commit, in this read's snapshot) say which days and how many. A click
    is decoded only when its bytes hold the link's id (a text of the record).
    At most ``scan`` (``LINK_CLICK_SCAN``) clicks are read
    (``LinkClicks.stopped_at_ms``). A read of up to tens of milliseconds:
    the debugger runs it off the loop."""
    scan = LINK_CLICK_SCAN if scan is None else scan
    scope = layout.scope(project_id, mode.value)
    wanted = link_id.encode()
    found: list[Click] = []
    read, oldest = 0, 0
    with store.read() as txn:
        cur = txn.cursor(db=store.db(b"clicks"))
        for day_ms, count in _click_days(txn, store.db(b"counters"), scope, link_id):
            ok = cur.set_range(scope + layout.ms(day_ms + DAY_MS))
            if not (cur.prev() if ok else cur.last()):
                continue
            floor = scope + layout.ms(day_ms)
            of_day = 0
            for k, v in cur.iterprev():  # from the day's newest click back
                key, value = bytes(k), bytes(v)  # (bytes already: no copy)
                if key < floor:
                    break
                if read == scan:
                    return LinkClicks(found, read, oldest)
                read, oldest = read + 1, layout.from_ms(key[len(scope):])
                if wanted in value:
                    click = decode(Click, value)
                    if click.link_id == link_id:
                        found.append(click)
                        of_day += 1
                        if len(found) == limit:
                            return LinkClicks(found, read)
                        if of_day == count:
                            break
    return LinkClicks(found, read)


def _click_days(txn: lmdb.Transaction, counters_db: Any, scope: bytes,
                link_id: str) -> Iterator[tuple[int, int]]:
    """(start ms, clicks) of each day the link was clicked, newest first: its
    ``clicks`` counters are ``metric NUL link NUL day NUL dimension NUL
    value`` (storage/counters.py), so one step back a day."""
    prefix = scope + f"{Metric.CLICKS.value}\x00{link_id}\x00".encode()
    cur = txn.cursor(db=counters_db)
    ok = cur.set_range(layout.prefix_end(prefix))
    ok = cur.prev() if ok else cur.last()
    while ok:
        key = bytes(cur.key())
        if not key.startswith(prefix):
            return
        day = key[len(prefix):].split(b"\x00", 1)[0]
        raw = txn.get(prefix + day + b"\x00total\x00", db=counters_db)
        count = counters.read_value(bytes(raw)) if raw is not None else 0
        try:
            start = day_start_ms(day.decode())
        except ValueError:
            start = None  # not a day (never written): nothing to look for
        if isinstance(count, int) and count > 0 and start is not None:
            yield start, count
        cur.set_range(prefix + day)  # the day's first key, then the day before's last
        ok = cur.prev()


def link_click_totals(store: LmdbStore, project_id: str, mode: Mode, link_ids: Iterable[str],
                      days: Sequence[str]) -> dict[str, int]:
    """Clicks of each link over ``days`` (``YYYY-MM-DD``), from the day totals."""
    db = store.db(b"counters")
    out: dict[str, int] = {}
    with store.read() as txn:
        for link_id in link_ids:
            total = 0
            for day in days:
                raw = txn.get(counters.counter_key(
                    project_id, mode.value, (Metric.CLICKS.value, link_id, day, "total", "")),
                    db=db)
                if raw is not None:
                    value = counters.read_value(bytes(raw))
                    total += value if isinstance(value, int) else 0
            out[link_id] = total
    return out


def slugs_on_domain(store: LmdbStore, domain: str, cap: int = 10_000) -> int:
    """How many slugs (links, deleted ones too: their slugs stay reserved) are
    taken on ``domain``, counting at most ``cap``."""
    prefix = domain.encode() + b"\x00"
    count = 0
    with store.read() as txn:
        cur = txn.cursor(db=store.db(b"slugs"))
        ok = cur.set_range(prefix)
        while ok and count < cap and bytes(cur.key()).startswith(prefix):
            count += 1
            ok = cur.next()
    return count


# -- opens, installs, conversions -------------------------------------------------------


def recent_opens(store: LmdbStore, project_id: str, mode: Mode, *, since_ms: int = 0,
                 limit: int = 50) -> list[OpenRecord]:
    rows = _newest(store, b"opens", layout.scope(project_id, mode.value), since_ms, limit)
    return [decode(OpenRecord, v) for _, v in rows]


def recent_installs(store: LmdbStore, project_id: str, mode: Mode, *, since_ms: int = 0,
                    limit: int = 50) -> list[Install]:
    """Installs created at or after ``since_ms``, newest first."""
    scope = layout.scope(project_id, mode.value)
    rows = _newest(store, b"installs_by_time", scope, since_ms, limit)
    return [decode(InstallRow, v).install for _, v in rows]


def installs_marker(store: LmdbStore, project_id: str, mode: Mode, now_ms: int) -> str:
    """``<day>:<installs of the project that day>``: changes whenever an install
    is recorded (the counter is written in the install's own commit)."""
    day = utc_day(now_ms)
    key = counters.counter_key(project_id, mode.value,
                               (Metric.INSTALLS.value, PROJECT_SCOPE, day, "total", ""))
    with store.read() as txn:
        raw = txn.get(key, db=store.db(b"counters"))
    return f"{day}:{counters.read_value(bytes(raw)) if raw is not None else 0}"


def recent_conversions(store: LmdbStore, project_id: str, mode: Mode, *, since_ms: int = 0,
                       limit: int = 50) -> list[Conversion]:
    """Custom events received at or after ``since_ms`` that occurred at most
    ``LATE_EVENT_MS`` before it, newest (by occurrence) first."""
    scope = layout.scope(project_id, mode.value)
    floor = since_ms - LATE_EVENT_MS if since_ms > 0 else 0
    out: list[Conversion] = []
    for key, value in _newest(store, b"events", scope, floor, limit):
        stored = StoredEvent.from_item(key, value)
        if stored.received_at_ms < since_ms:
            continue
        fields = stored.fields()
        properties = fields.get("properties")
        found = revenue(properties) if isinstance(properties, dict) else None
        link_id = fields.get("linkId")
        out.append(Conversion(
            id=stored.id, name=str(fields.get("name", "")),
            link_id=link_id if isinstance(link_id, str) else None,
            install_id=stored.install_id, occurred_at_ms=stored.occurred_at_ms,
            received_at_ms=stored.received_at_ms,
            revenue=(found[0], format(found[1], "f")) if found else None))
    return out
