"""Decoded records cached by their stored bytes.

Hot reads (a link by slug, a project's settings and platforms) fetch the raw
value from LMDB, which costs about a microsecond, and look the bytes up here
before paying for CBOR decoding and the record's constructor. Keying by the
bytes themselves makes the cache always right: a changed record has other
bytes, whichever process wrote it. Bounded: cleared when full.
"""

from __future__ import annotations

from typing import Any, TypeVar

from storage.codec import Decodable, decode

T = TypeVar("T")


class DecodeCache:
    def __init__(self, max_entries: int = 20_000) -> None:
        self._max = max_entries
        self._items: dict[tuple[Any, bytes], Any] = {}
        self.hits = 0
        self.misses = 0

    def decode(self, cls: Decodable[T], raw: bytes) -> T:
        key = (cls, raw)
        found = self._items.get(key)
        if found is not None:
            self.hits += 1
            return found  # type: ignore[no-any-return]
        self.misses += 1
        value = decode(cls, raw)
        if len(self._items) >= self._max:
            self._items.clear()
        self._items[key] = value
        return value
