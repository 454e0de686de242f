"""Typed reads out of decoded maps (CBOR records, JSON bodies).

Named constructors (``from_map``) use these so a record with a missing or
mistyped field fails loudly with the field's name instead of deep inside.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class RecordError(ValueError):
    """A stored record does not have the shape its version promises."""


def req_str(m: Mapping[str, Any], key: str) -> str:
    v = m.get(key)
    if not isinstance(v, str):
        raise RecordError(f"{key}: expected str, got {type(v).__name__}")
    return v


def opt_str(m: Mapping[str, Any], key: str) -> str | None:
    v = m.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise RecordError(f"{key}: expected str or null, got {type(v).__name__}")
    return v


def req_int(m: Mapping[str, Any], key: str) -> int:
    v = m.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise RecordError(f"{key}: expected int, got {type(v).__name__}")
    return v


def opt_int(m: Mapping[str, Any], key: str) -> int | None:
    v = m.get(key)
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool):
        raise RecordError(f"{key}: expected int or null, got {type(v).__name__}")
    return v


def req_bool(m: Mapping[str, Any], key: str, default: bool | None = None) -> bool:
    v = m.get(key, default)
    if not isinstance(v, bool):
        raise RecordError(f"{key}: expected bool, got {type(v).__name__}")
    return v


def req_bytes(m: Mapping[str, Any], key: str) -> bytes:
    v = m.get(key)
    if not isinstance(v, bytes):
        raise RecordError(f"{key}: expected bytes, got {type(v).__name__}")
    return v


def opt_bytes(m: Mapping[str, Any], key: str) -> bytes | None:
    v = m.get(key)
    if v is None:
        return None
    if not isinstance(v, bytes):
        raise RecordError(f"{key}: expected bytes or null, got {type(v).__name__}")
    return v
