"""Reads the dashboard needs that the stores do not offer: newest-first feeds
for Live events, one click by its key, the link list's click totals.

Reads only: every function takes the ``LmdbStore`` and opens its own short
read transaction. Writes go through the stores' own APIs (links, platforms,
domains), so quota, slug and idempotency rules stay in one place.

Costs. Clicks, opens and custom events are keyed project | mode | time | id,
so "the newest N since T" is one reverse range read. Installs are keyed by
install id (their lookup on every launch) and found by time through the
``installs_by_time`` index, also one reverse range read. Live events still
skip even that while :func:`installs_marker`, the project's install counter of
the day (one get), is unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import attrs

from storage import counters, layout
from storage.attribution_store import OpenRecord
from storage.click_window_store import ClickWindow
from storage.codec import decode
from storage.events_store import StoredEvent
from storage.install_rows import InstallRow
from storage.lmdb_store import LmdbStore
from svc_engine.clicks import Click
from svc_engine.events import PROJECT_SCOPE, Metric, revenue, utc_day
from svc_engine.installs import Install
from svc_engine.keys import Mode

LATE_EVENT_MS = 10 * 60_000
"""How much earlier than its arrival a custom event may have occurred and
still show in a Live events poll (events are keyed by when they occurred)."""

LINK_CLICK_SCAN = 5_000
"""At most this many of the project's newest clicks are examined for the
clicks of one link."""


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


def clicks_of_link(store: LmdbStore, project_id: str, mode: Mode, link_id: str,
                   limit: int = 20) -> list[Click]:
    """The newest clicks of one link among the project's last ``LINK_CLICK_SCAN``."""
    scope = layout.scope(project_id, mode.value)
    return [c for c in (decode(Click, v) for _, v in
                        _newest(store, b"clicks", scope, 0, LINK_CLICK_SCAN))
            if c.link_id == link_id][:limit]


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
