"""The decoded-record cache (storage/decode_cache.py): bounded by memory, not entries."""

from __future__ import annotations

import gc
import tracemalloc

from storage import decode_cache
from storage.codec import encode
from storage.decode_cache import DecodeCache, entry_bytes
from svc_engine.keys import Mode
from svc_engine.links import Link

PROJECT = "00000000-0000-4000-8000-000000000001"


def link(n: int, *, params: int = 2, value_len: int = 4) -> bytearray:
    """A stored link (its bytes as read from LMDB), ``params`` params of ``value_len``."""
    record = Link(id=f"00000000-0000-4000-8000-{n:012d}", project_id=PROJECT, mode=Mode.LIVE,
                  domain="sho.rt", slug=f"s{n:07d}", path=f"/product/{n}", created_at_ms=1,
                  updated_at_ms=2, campaign="spring", channel="email",
                  params={f"k{i:03d}": f"{n:07d}".ljust(value_len, "v") for i in range(params)})
    return bytearray(encode(record))  # a fresh copy each read, as from the store


def test_a_cache_of_large_records_holds_about_its_bound() -> None:
    """Links of ~55 KB stored (the largest a link may be: 50 params of 1,000
    characters), more than the bound holds: a cache bounded by entries kept
    every one of them (300 held ~33 MiB); bounded by bytes, it holds about
    its bound."""
    cache = DecodeCache()
    count = decode_cache.MAX_BYTES // entry_bytes(len(link(0, params=50, value_len=1000))) + 50
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(count):
            cache.decode(Link, bytes(link(n, params=50, value_len=1000)))
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert cache.size_bytes <= decode_cache.MAX_BYTES
    assert held < decode_cache.MAX_BYTES * 1.25, held
    assert len(cache) < count


def test_the_oldest_entries_go_first_and_a_hit_is_the_same_record() -> None:
    raws = [bytes(link(n)) for n in range(10)]
    cache = DecodeCache(max_bytes=5 * entry_bytes(len(raws[0])))
    first = [cache.decode(Link, raw) for raw in raws[:5]]
    assert cache.decode(Link, bytes(link(0))) is first[0]  # by the bytes, not the object
    assert cache.size_bytes == 5 * entry_bytes(len(raws[0]))
    for raw in raws[5:8]:
        cache.decode(Link, raw)
    assert len(cache) == 5 and cache.size_bytes <= 5 * entry_bytes(len(raws[0]))
    assert cache.decode(Link, raws[0]) is not first[0]  # dropped, decoded again
    assert cache.decode(Link, raws[4]) is first[4]


def test_a_record_larger_than_the_cache_is_decoded_each_time() -> None:
    raw = bytes(link(1, params=20, value_len=200))
    cache = DecodeCache(max_bytes=entry_bytes(len(raw)) - 1)
    one = cache.decode(Link, raw)
    assert cache.decode(Link, raw) == one and cache.decode(Link, raw) is not one
    assert len(cache) == 0 and cache.size_bytes == 0


def test_entries_of_mixed_sizes_are_charged_and_refunded_each_its_own_size() -> None:
    """Dropping the oldest refunds what that entry was charged, not what the
    new one costs: with one size only the two are the same number."""
    big = [bytes(link(n, params=20, value_len=200)) for n in (1, 2)]
    small = [bytes(link(n)) for n in (11, 12, 13)]
    b, s = entry_bytes(len(big[0])), entry_bytes(len(small[0]))
    assert b > 2 * s
    cache = DecodeCache(max_bytes=b + 2 * s)
    kept = {raw: cache.decode(Link, raw) for raw in (big[0], small[0], small[1])}
    assert cache.size_bytes == b + 2 * s and len(cache) == 3  # exactly full, none dropped
    kept[small[2]] = cache.decode(Link, small[2])  # the big one goes: 3 small left
    assert cache.size_bytes == 3 * s and len(cache) == 3
    kept[big[1]] = cache.decode(Link, big[1])  # the oldest small one goes
    assert cache.size_bytes == b + 2 * s and len(cache) == 3
    hits = cache.hits
    for raw in (small[1], small[2], big[1]):
        assert cache.decode(Link, raw) is kept[raw]
    assert cache.hits == hits + 3
    assert cache.decode(Link, small[0]) is not kept[small[0]]  # dropped


def test_a_record_the_size_of_the_whole_cache_is_kept() -> None:
    raw = bytes(link(1, params=20, value_len=200))
    cache = DecodeCache(max_bytes=entry_bytes(len(raw)))
    one = cache.decode(Link, raw)
    assert cache.decode(Link, raw) is one
    assert len(cache) == 1 and cache.size_bytes == cache.max_bytes


def test_an_entry_is_charged_twice_its_stored_length_and_its_headers() -> None:
    assert entry_bytes(0) == decode_cache.ENTRY_BYTES
    assert entry_bytes(1000) == decode_cache.ENTRY_BYTES + 2000


def test_hits_and_misses_count_each_lookup_from_zero() -> None:
    cache = DecodeCache()
    assert (cache.hits, cache.misses) == (0, 0)
    raws = [bytes(link(n)) for n in (1, 2)]
    for raw in (raws[0], raws[0], raws[1], raws[0]):
        cache.decode(Link, raw)
    assert (cache.hits, cache.misses) == (2, 2)
