"""actors/event_bodies.py: bounded by bytes, oldest dropped first."""

from __future__ import annotations

from actors.event_bodies import RecentBodies


def test_oldest_bodies_go_first_when_over_the_byte_cap() -> None:
    bodies = RecentBodies(max_bytes=10)
    bodies.remember("a", b"aaaa")
    bodies.remember("b", b"bbbb")
    assert (bodies.get("a"), bodies.get("b"), bodies.size_bytes) == (b"aaaa", b"bbbb", 8)
    bodies.remember("c", b"cccc")
    assert bodies.get("a") is None and bodies.get("b") == b"bbbb" and bodies.get("c") == b"cccc"
    assert bodies.size_bytes == 8 and len(bodies) == 2


def test_a_body_larger_than_the_cap_is_not_kept_and_keys_are_kept_once() -> None:
    bodies = RecentBodies(max_bytes=3)
    bodies.remember("big", b"xxxx")
    assert bodies.get("big") is None and bodies.size_bytes == 0
    bodies.remember("k", b"12")
    bodies.remember("k", b"12")
    assert bodies.size_bytes == 2 and len(bodies) == 1


def test_kept_bodies_hold_about_their_length_not_orjson_buffers() -> None:
    """orjson's output is allocated 4 KiB at least; the cache's byte bound
    counts lengths, so it keeps right-sized copies (measured by tracemalloc)."""
    import tracemalloc

    import orjson

    tracemalloc.start()
    try:
        made = [orjson.dumps({"type": "click", "n": i, "pad": "x" * 400}) for i in range(2000)]
        bodies = RecentBodies()
        for i, body in enumerate(made):
            bodies.remember(i, body)
        del made  # the cache's own copies are all that is left of them
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert bodies.size_bytes < 1_000_000
    assert held < 2 * bodies.size_bytes + 200_000  # not the ~8 MiB of 2000 orjson buffers
