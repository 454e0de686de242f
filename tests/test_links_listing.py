"""The links listing's order: newest first, and the links of one millisecond
in the order they were created (the listing key's sequence)."""

from __future__ import annotations

import uuid

import lmdb

from storage import layout
from storage.codec import encode
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore
from svc_engine.keys import Mode
from svc_engine.links import Link

PROJECT = "0b9c6f0e-5a4e-4d1c-9a7e-3f1e2d4c5b6a"
ORG = "7d2f4a1b-8c3e-4f5a-9b6c-1d2e3f4a5b6c"
NOW = 1_790_000_000_000


def link(i: int, ms: int) -> Link:
    return Link(id=str(uuid.uuid4()), project_id=PROJECT, mode=Mode.TEST, domain="svc.test",
                slug=f"slug{i:05d}", path=f"/item/{i}", created_at_ms=ms, updated_at_ms=ms)


async def test_links_of_one_millisecond_list_newest_first_across_pages(
        store: LmdbStore) -> None:
    links = LinksStore(store)
    made = [await links.create(link(i, NOW + (i // 20)), org_id=ORG, quota=None, idem=None)
            for i in range(60)]          # three milliseconds of twenty links each
    seen: list[str] = []
    cursor = None
    while True:
        page = links.list(PROJECT, "test", limit=7, cursor=cursor)
        seen += [x.path for x in page.links]
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == [x.path for x in reversed(made)]


async def test_delete_finds_the_key_with_or_without_a_sequence(store: LmdbStore) -> None:
    links = LinksStore(store)
    a = await links.create(link(1, NOW), org_id=ORG, quota=None, idem=None)
    legacy = link(2, NOW)                # a key from before the sequence existed
    scope = layout.scope(PROJECT, "test")

    def put_legacy(txn: lmdb.Transaction) -> None:
        txn.put(layout.uid(legacy.id), encode(legacy), db=store.db(b"links"))
        txn.put(scope + layout.ms(NOW) + layout.uid(legacy.id), b"",
                db=store.db(b"links_by_project"))

    await store.write(put_legacy)
    b = await links.create(link(3, NOW), org_id=ORG, quota=None, idem=None)
    c = await links.create(link(4, NOW), org_id=ORG, quota=None, idem=None)
    listed = [x.id for x in links.list(PROJECT, "test").links]
    assert sorted(listed) == sorted([a.id, legacy.id, b.id, c.id])
    assert listed.index(c.id) < listed.index(b.id) < listed.index(a.id)
    for gone in (legacy, a, b, c):
        await links.delete(PROJECT, "test", gone.id, ORG, NOW + 1, None)
    assert links.list(PROJECT, "test").links == []
    with store.read() as txn:
        assert txn.stat(store.db(b"links_by_project"))["entries"] == 0
