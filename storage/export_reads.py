"""Raw records for exports, a bounded page at a time.

Clicks and opens are keyed project | mode | time | id, so a time range is one
key range. Installs are keyed by install id (their lookup on every launch),
so an export of installs walks the project's installs and keeps those created
in the range: constant memory, but time proportional to all the project's
installs. Custom events are read by ``EventsStore.pages``.
"""

from __future__ import annotations

from collections.abc import Iterator

from storage import layout
from storage.attribution_store import OpenRecord
from storage.codec import decode
from storage.events_store import range_pages
from storage.lmdb_store import LmdbStore
from svc_engine.clicks import Click
from svc_engine.installs import Install
from svc_engine.keys import Mode

PAGE_SIZE = 500


def clicks(store: LmdbStore, project_id: str, mode: Mode, start_ms: int, end_ms: int,
           page_size: int = PAGE_SIZE) -> Iterator[list[Click]]:
    scope = layout.scope(project_id, mode.value)
    for page in range_pages(store, b"clicks", scope + layout.ms(max(0, start_ms)),
                            scope + layout.ms(max(0, end_ms)), page_size):
        yield [decode(Click, v) for _, v in page]


def opens(store: LmdbStore, project_id: str, mode: Mode, start_ms: int, end_ms: int,
          page_size: int = PAGE_SIZE) -> Iterator[list[OpenRecord]]:
    scope = layout.scope(project_id, mode.value)
    for page in range_pages(store, b"opens", scope + layout.ms(max(0, start_ms)),
                            scope + layout.ms(max(0, end_ms)), page_size):
        yield [decode(OpenRecord, v) for _, v in page]


def installs(store: LmdbStore, project_id: str, mode: Mode, start_ms: int, end_ms: int,
             page_size: int = PAGE_SIZE) -> Iterator[list[Install]]:
    """Installs created in ``[start_ms, end_ms)``, in install id order."""
    scope = layout.scope(project_id, mode.value)
    for page in range_pages(store, b"installs", scope, layout.prefix_end(scope), page_size):
        kept = [i for i in (decode(Install, v) for _, v in page)
                if start_ms <= i.created_at_ms < end_ms]
        if kept:
            yield kept
