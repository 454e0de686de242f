"""Identifiers. Randomness comes in as bytes; nothing here draws it."""

from __future__ import annotations

import uuid


def new_id(random16: bytes) -> str:
    """A UUID v4 string from 16 random bytes."""
    if len(random16) < 16:
        raise ValueError("an id needs 16 random bytes")
    b = bytearray(random16[:16])
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    return str(uuid.UUID(bytes=bytes(b)))


def is_uuid(value: object, *, v4: bool = False) -> bool:
    """True for a canonical (lowercase or uppercase, hyphenated) UUID string."""
    if not isinstance(value, str) or len(value) != 36:
        return False
    try:
        u = uuid.UUID(value)
    except ValueError:
        return False
    if str(u) != value.lower():
        return False
    return not v4 or u.version == 4
