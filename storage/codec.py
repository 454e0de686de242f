"""CBOR encoding of records. Every record map carries its version under "v"."""

from __future__ import annotations

from typing import Any, Protocol, TypeVar

import cbor2

T = TypeVar("T", covariant=True)


class Decodable(Protocol[T]):
    VERSION: int

    def from_map(self, m: Any, /) -> T: ...


class Encodable(Protocol):
    def to_map(self) -> dict[str, object]: ...


def encode(record: Encodable) -> bytes:
    return cbor2.dumps(record.to_map())


def decode(cls: Decodable[T], raw: bytes) -> T:
    return decode_map(cls, cbor2.loads(raw))


def decode_map(cls: Decodable[T], m: Any) -> T:
    """A record from its decoded map (one nested in another record, too)."""
    if not isinstance(m, dict):
        raise ValueError("stored record is not a map")
    version = m.get("v")
    if not isinstance(version, int) or version > cls.VERSION:
        raise ValueError(f"stored record version {version!r} is newer than this code knows")
    return cls.from_map(m)
