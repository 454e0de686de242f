"""Decoded records cached by their stored bytes.

Hot reads (a link by slug, a project's settings and platforms) fetch the raw
value from LMDB, which costs about a microsecond, and look the bytes up here
before paying for CBOR decoding and the record's constructor (~20 us for a
link). Keying by the bytes themselves makes the cache always right: a changed
record has other bytes, whichever process wrote it.

Bounded by bytes, oldest dropped first. A count of entries was no bound on
memory: a link may be ~55 KB stored (50 params of 1,000 characters), and a
soak run found the cache filling at a few hundred entries a minute (every
link made and every edit of one is a new entry), ~1.9 KB each for an
ordinary link, uncounted: ~+27 MiB an hour with the same keys, ~36 MiB at its
old bound of 20,000 entries. An entry is charged :func:`entry_bytes`: what it holds,
as measured under tracemalloc, is the key's copy of the stored bytes and the
decoded record, about ``ENTRY_BYTES`` + twice the stored length for an
ordinary link (1,867 measured in a dict, plus ~70 for an OrderedDict's
node, against 1,945 charged) and for a 55 KB one
(114 KB against 108 KB); a link of many short params holds up to about three
times its charge (50 params of ~8 characters: 10.5 KB against 3.7 KB).

Reads in worker threads (``Services.off_loop``) share the cache: a hit is
one dict lookup; storing an entry and dropping old ones hold a lock.

The entries are an OrderedDict, which drops its oldest in O(1); a dict's
``next(iter())`` walks past every slot deleted before it: 4.5 µs an insert
and drop at 17,000 entries, against 0.46 (timeit). A hit costs ~20 ns more
(155-161 against 134-149 ns). actors/event_bodies.py keeps its bodies so
too.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, TypeVar

from storage.codec import Decodable, decode

T = TypeVar("T")

MAX_BYTES = 32 << 20
"""About 17,000 ordinary links (1.9 KB an entry): the working set of a
busy service (bench-scale taps 10,000 links), where a miss costs ~20 µs."""
ENTRY_BYTES = 1100
"""What an entry holds beside twice its stored length: the OrderedDict's slot
and node, the key's tuple and bytes headers, the record object and its
fields' headers."""


def entry_bytes(stored_len: int) -> int:
    """What one entry of ``stored_len`` stored bytes is charged (module docstring)."""
    return ENTRY_BYTES + 2 * stored_len


class DecodeCache:
    def __init__(self, max_bytes: int = MAX_BYTES) -> None:
        self._max_bytes = max_bytes
        self._items: OrderedDict[tuple[Any, bytes], Any] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = 0
        self.misses = 0

    @property
    def max_bytes(self) -> int:
        """The bound on :attr:`size_bytes`."""
        return self._max_bytes

    @property
    def size_bytes(self) -> int:
        """What the entries held are charged (``entry_bytes``), at most the bound."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def decode(self, cls: Decodable[T], raw: bytes) -> T:
        key = (cls, raw)
        found = self._items.get(key)
        if found is not None:
            self.hits += 1
            return found  # type: ignore[no-any-return]
        self.misses += 1
        value = decode(cls, raw)
        self._keep(key, value)
        return value

    def _keep(self, key: tuple[Any, bytes], value: object) -> None:
        cost = entry_bytes(len(key[1]))
        if cost > self._max_bytes:
            return  # larger than the whole cache: decoded each time
        with self._lock:
            if key in self._items:
                return  # stored meanwhile by another thread
            self._items[key] = value
            self._bytes += cost
            while self._bytes > self._max_bytes:
                oldest, _ = self._items.popitem(last=False)
                self._bytes -= entry_bytes(len(oldest[1]))
