"""Idempotency-Key rules (DESIGN.md "API conventions").

A write that carries ``Idempotency-Key`` is recorded together with the response
it produced, in the same transaction as its effect. A retry with the same key
and the same request (method, path and body) gets the stored response back byte
for byte; the same key with another request is 409 ``idempotency_key_reused``.
Errors are not recorded: a retry of a refused request is judged again, which
gives the same 4xx for the same input. Records live at least 24 hours.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import req_bytes, req_int, req_str
from svc_engine.errors import IdempotencyKeyReused, ValidationError

RETENTION_MS = 24 * 3600 * 1000
MAX_KEY_LENGTH = 255


def check_key(raw: str | None) -> str | None:
    """Validate the header value: 1 to 255 visible ASCII characters."""
    if raw is None:
        return None
    # Visible ASCII (33-126): ASCII, no control character (not printable), no space.
    # Three C calls, where a generator over the characters cost ~2 µs a request.
    if not (1 <= len(raw) <= MAX_KEY_LENGTH and raw.isascii() and raw.isprintable()
            and " " not in raw):
        raise ValidationError(
            "Idempotency-Key must be 1 to 255 visible ASCII characters", field="Idempotency-Key"
        )
    return raw


def fingerprint(method: str, path: str, body: bytes) -> bytes:
    h = hashlib.sha256()
    h.update(method.encode("ascii"))
    h.update(b"\x00")
    h.update(path.encode("utf-8", "surrogateescape"))
    h.update(b"\x00")
    h.update(body)
    return h.digest()


@attrs.frozen
class StoredResponse:
    VERSION = 1
    fingerprint: bytes
    status: int
    content_type: str
    body: bytes
    created_at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "fp": self.fingerprint, "status": self.status,
                "ct": self.content_type, "body": self.body, "at": self.created_at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> StoredResponse:
        return cls(fingerprint=req_bytes(m, "fp"), status=req_int(m, "status"),
                   content_type=req_str(m, "ct"), body=req_bytes(m, "body"),
                   created_at_ms=req_int(m, "at"))


def replay_or_conflict(stored: StoredResponse | None, fp: bytes, *,
                       rerun_other: bool = False) -> StoredResponse | None:
    """The stored response to replay, None to proceed, or 409 on another request.

    ``rerun_other``: another request under a stored key proceeds instead (None),
    for a write whose own op tells a retry under the same key from a new
    request (the launch report: see ``web/api_sdk.py``)."""
    if stored is None:
        return None
    if stored.fingerprint != fp:
        if rerun_other:
            return None
        raise IdempotencyKeyReused(
            "this Idempotency-Key was already used with a different request"
        )
    return stored
