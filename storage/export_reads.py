"""Raw records for exports, a bounded page at a time.

Clicks and opens are keyed project | mode | time | id, so a time range is one
key range. Installs are keyed by install id (their lookup on every launch)
and found by time through ``installs_by_time``. Custom events are read by
``EventsStore.pages``.
"""

from __future__ import annotations

from collections.abc import Iterator

from storage import layout
from storage.attribution_store import OpenRecord
from storage.codec import decode
from storage.events_store import range_pages
from storage.install_rows import InstallRow
from storage.lmdb_store import LmdbStore
from svc_engine.clicks import Click
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
             page_size: int = PAGE_SIZE) -> Iterator[list[InstallRow]]:
    """Installs created in ``[start_ms, end_ms)``, oldest first, each with how
    its first launch was judged (none for one a later launch registered)."""
    scope = layout.scope(project_id, mode.value)
    for page in range_pages(store, b"installs_by_time", scope + layout.ms(max(0, start_ms)),
                            scope + layout.ms(max(0, end_ms)), page_size):
        yield [decode(InstallRow, v) for _, v in page]
