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
