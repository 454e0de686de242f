"""Recently dispatched event bodies, kept in memory for the attempts that follow.

A delivery's first attempt usually starts moments after its event was fanned
out; keeping the body spares reading and decoding the event back from the
store. Bounded by bytes, oldest dropped first; a miss is not an error (the
caller reads the store). Bodies never change once written, so a kept body is
always the stored one.

A body is kept as a copy of its own size: ``orjson.dumps`` (3.13) returns
bytes whose allocation is at least 4 KiB whatever their length, so keeping
its output would hold about ten times the bound for the usual ~500-byte
event (a soak run measured ~200 MiB held against the 16 MiB counted).

The bound counts what an entry holds, not only its body: ``ENTRY_BYTES`` for
its dict slot, its key and the body's object header. A key is one string
(:func:`body_key`: project, mode and event id), not a tuple that would keep
each event's three strings alive: a soak run under tracemalloc found such
keys holding ~370 bytes an entry beside a ~480-byte body, so the cache
filled to about twice its bound. The project and mode are part of it: a
conversion's event id is the one the app sent, which another project (or
the other mode) may send too.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable

MAX_BYTES = 16 << 20
ENTRY_BYTES = 360
"""What an entry holds beside its body's length, as tracemalloc measures it
(tests/test_event_bodies.py): an OrderedDict's slot and node with its tables'
slack (~200 bytes), its key (a string of ~80 characters: ~130) and the bytes
object's header (33)."""


def body_key(project_id: str, mode: str, event_id: str) -> str:
    """An event body's key: event ids are unique within a project and mode only."""
    return f"{project_id}|{mode}|{event_id}"


class RecentBodies:
    def __init__(self, max_bytes: int | None = None) -> None:
        self._max_bytes = MAX_BYTES if max_bytes is None else max_bytes
        # oldest first, dropped in O(1): a full cache's drop was 6.7 µs a
        # dispatched event with a dict's next(iter()), 1.35 with this (timeit;
        # storage/decode_cache.py says why)
        self._bodies: OrderedDict[Hashable, bytes] = OrderedDict()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    def remember(self, key: Hashable, body: bytes) -> None:
        if key in self._bodies:
            return
        self._bodies[key] = body = bytes(memoryview(body))  # right-sized (docstring)
        self._bytes += len(body) + ENTRY_BYTES
        while self._bytes > self._max_bytes:
            self._bytes -= len(self._bodies.popitem(last=False)[1]) + ENTRY_BYTES

    def get(self, key: Hashable) -> bytes | None:
        return self._bodies.get(key)

    def __len__(self) -> int:
        return len(self._bodies)
