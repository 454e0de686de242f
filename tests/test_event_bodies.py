"""actors/event_bodies.py: bounded by what its entries hold, oldest dropped first."""

from __future__ import annotations

import tracemalloc
import uuid

import orjson

from actors.event_bodies import ENTRY_BYTES, RecentBodies, body_key


def test_oldest_bodies_go_first_when_over_the_bound() -> None:
    bodies = RecentBodies(max_bytes=2 * (4 + ENTRY_BYTES))
    bodies.remember("a", b"aaaa")
    bodies.remember("b", b"bbbb")
    assert (bodies.get("a"), bodies.get("b")) == (b"aaaa", b"bbbb")
    assert bodies.size_bytes == 2 * (4 + ENTRY_BYTES)
    bodies.remember("c", b"cccc")
    assert bodies.get("a") is None and bodies.get("b") == b"bbbb" and bodies.get("c") == b"cccc"
    assert bodies.size_bytes == 2 * (4 + ENTRY_BYTES) and len(bodies) == 2


def test_a_body_larger_than_the_bound_is_not_kept_and_keys_are_kept_once() -> None:
    bodies = RecentBodies(max_bytes=ENTRY_BYTES + 3)
    bodies.remember("big", b"xxxx")
    assert bodies.get("big") is None and bodies.size_bytes == 0
    bodies.remember("k", b"12")
    bodies.remember("k", b"12")
    assert bodies.size_bytes == 2 + ENTRY_BYTES and len(bodies) == 1


def test_the_bound_is_what_the_cache_holds_keys_included() -> None:
    """orjson's output is allocated 4 KiB at least, so kept bodies are
    right-sized copies; and an entry's key, slot and header count against the
    bound too (measured by tracemalloc, with the actor's keys, ``body_key``,
    and ~480-byte bodies as in a soak run)."""
    tracemalloc.start()
    try:
        project = str(uuid.uuid4())
        made = [(body_key(project, "test", str(uuid.UUID(bytes=i.to_bytes(16, "big"),
                                                         version=4))),
                 orjson.dumps({"type": "click", "n": i, "pad": "x" * 400}))
                for i in range(6000)]
        bodies = RecentBodies(max_bytes=1 << 20)
        for event_id, body in made:
            bodies.remember(event_id, body)
        kept = set(bodies._bodies)  # what the cache still refers to
        del made, event_id, body  # the cache's own copies and keys are all that is left
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert 1000 < len(kept) < 6000  # the bound dropped the oldest
    assert bodies.size_bytes <= 1 << 20
    assert held < 1.15 * bodies.size_bytes + len(kept) * 8 + 100_000, (held, bodies.size_bytes)
