"""The links listing's order: newest first, and the links of one millisecond
in the order they were created (the listing key's sequence)."""

from __future__ import annotations

import uuid

import attrs
import lmdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage import layout, links_store
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


# -- a page reads a bounded part of the listing ---------------------------------------------


async def test_a_search_reads_a_bounded_page_and_goes_on_by_cursor(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LIST_SCAN_CAP entries read, a page stops: short or empty, partial,
    with a cursor; following the cursors finds exactly what one unbounded
    read would, newest first."""
    links = LinksStore(store)
    made = [await links.create(link(i, NOW + i), org_id=ORG, quota=None, idem=None)
            for i in range(35)]
    monkeypatch.setattr(links_store, "LIST_SCAN_CAP", 10)
    found: list[str] = []
    partials: list[bool] = []
    cursor = None
    while True:
        page = links.list(PROJECT, "test", limit=5, cursor=cursor, query="slug0000")
        found += [x.slug for x in page.links]
        partials.append(page.partial)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    # slug00000..slug00009 match; the newest 25 links hold none of them: two
    # pages of 10 read and nothing found, then two full pages of 5
    assert found == [f"slug{i:05d}" for i in range(9, -1, -1)]
    assert partials == [True, True, False, False]
    page = links.list(PROJECT, "test", limit=50)
    assert len(page.links) == 10 and page.partial and page.next_cursor is not None
    everything = links.list(PROJECT, "test", limit=3)
    assert not everything.partial and [x.id for x in everything.links] == [
        x.id for x in made[:-4:-1]]


# ASCII, İ and the Kelvin sign (lowercase to ASCII), a combining dot (İ's
# lowercase ends with one), cased letters (é/É, the Greek capital sigma and
# its two lowercase forms, ß), caseless ones (日, a digit), a tab
texts = st.text(alphabet="aAkKiI \u0130\u212a\u0307\u00e9\u00c9\u03a3\u03c3\u03c2\u00df"
                         "\u65e51\t-/", max_size=6)


@settings(max_examples=600, deadline=None)
@given(slug=st.text(alphabet="aAkKiI\u0130\u212a\u00e9\u65e5-", min_size=1, max_size=5),
       path=texts, title=st.none() | texts, campaign=st.none() | texts,
       tags=st.lists(texts, max_size=2), query=st.none() | texts.filter(bool),
       want_campaign=st.none() | texts, want_tag=st.none() | texts)
def test_a_record_skipped_from_its_bytes_never_matches(
        slug: str, path: str, title: str | None, campaign: str | None, tags: list[str],
        query: str | None, want_campaign: str | None, want_tag: str | None) -> None:
    """``_may_match`` says no only when ``_matches`` says no (İ and the Kelvin
    sign lowercase to ASCII; a search with a space may span two fields;
    cased non-ASCII letters are not looked for in the bytes)."""
    x = attrs.evolve(link(0, NOW), slug=slug, path=path, title=title, campaign=campaign,
                     tags=tags)
    q = query.lower() if query else None
    needles = [v.encode() for v in (want_campaign, None, want_tag) if v]
    if links_store._matches(x, want_campaign, None, want_tag, q):
        assert links_store._may_match(encode(x), needles, links_store._search_runs(q))


@pytest.mark.parametrize(("fields", "query"), [
    ({"slug": "ab", "path": "/cd"}, "ab /cd"),          # a search spanning two fields
    ({"slug": "x", "title": "\u212aelvin"}, "kelvin"),  # the Kelvin sign lowercases to k
    ({"slug": "x", "title": "\u0130stanbul"}, "i"),     # İ lowercases to i and a dot
    ({"slug": "x", "title": "\u0130\u65e5"}, "\u0307\u65e5"),  # ... the dot, then 日
    ({"slug": "x", "title": "CAF\u00c9 \u65e5\u672c"}, "caf\u00e9 \u65e5"),  # É is é
    ({"slug": "x", "title": "\u039f\u0394\u039f\u03a3"}, "\u03bf\u03b4\u03bf\u03c2"),  # ΟΔΟΣ
])
def test_the_searches_bytes_cannot_judge_are_decided_by_the_fields(
        fields: dict[str, str], query: str) -> None:
    x = attrs.evolve(link(0, NOW), **fields)  # type: ignore[arg-type]
    assert links_store._matches(x, None, None, None, query)
    assert links_store._may_match(encode(x), [], links_store._search_runs(query))


@pytest.mark.parametrize(("query", "runs"), [
    ("shoe", [b"shoe"]),
    ("summer sale", [b"summer", b"sale"]),            # each part lies in one field
    ("  a  b ", [b"a", b"b"]),
    ("caf\u00e9 bar", [b"caf", b"bar"]),                # é may be É in the record
    ("\u65e5\u672c 2026", ["\u65e5\u672c".encode(), b"2026"]),  # 日本 is 日本 there
    ("\u00e9\u00e9", []), ("", []), ("   ", []),
    ("a b a b a", [b"a", b"b"]),  # each looked for once: a long search repeats its words
])
def test_what_a_search_looks_for_in_the_bytes(query: str, runs: list[bytes]) -> None:
    assert links_store._search_runs(query) == runs


def test_a_kept_character_is_in_the_record_as_itself_over_all_of_unicode() -> None:
    """What :func:`links_store._search_runs` relies on, checked for every
    character there is: whatever lowercases to (or to text holding) a kept
    character is that character itself (ASCII: in either case), a single
    character, or one of ``_LOWER_TO_ASCII`` (which the bytes check looks for)."""
    odd = {c.decode() for c in links_store._LOWER_TO_ASCII}
    for code in range(0x110000):
        c = chr(code)
        low = c.lower()
        for x in low:
            if not links_store._kept(x) or c in odd:
                continue
            assert low == x, (hex(code), low)
            assert c == x or (c.isascii() and c.lower() == x), (hex(code), x)
