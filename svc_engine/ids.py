"""Identifiers. Randomness comes in as bytes; nothing here draws it."""

from __future__ import annotations

import re

_UUID = re.compile(
    r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}", re.A)


def new_id(random16: bytes) -> str:
    """A UUID v4 string from 16 random bytes."""
    if len(random16) < 16:
        raise ValueError("an id needs 16 random bytes")
    b = bytearray(random16[:16])
    b[6] = (b[6] & 0x0F) | 0x40
    b[8] = (b[8] & 0x3F) | 0x80
    h = b.hex()  # str(uuid.UUID(bytes=b)), without building the UUID
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_uuid(value: object, *, v4: bool = False) -> bool:
    """True for a canonical (lowercase or uppercase, hyphenated) UUID string;
    with ``v4``, only an RFC 4122 version 4 UUID (version digit 4, variant 10xx).

    A regular expression rather than ``uuid.UUID`` (which also takes braces,
    URNs and unhyphenated forms, refused here anyway): every id of an events
    batch passes through here."""
    if not isinstance(value, str) or len(value) != 36 or _UUID.fullmatch(value) is None:
        return False
    return not v4 or (value[14] == "4" and value[19] in "89abAB")
