"""API key formats, parsing and hashing.

Keys look like ``pk_test_<32 base62 chars>``. The prefix names the kind
(publishable ``pk`` or secret ``sk``) and the mode (``test`` or ``live``). Keys are
stored only as SHA-256 hashes: they carry 190 bits of randomness, so a fast hash
is safe (there is nothing to brute-force), and lookups stay O(1).
"""

from __future__ import annotations

import enum
import hashlib
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import opt_int, opt_str, req_bytes, req_int, req_str
from svc_engine.errors import InvalidApiKey, WrongKeyKind

_B62 = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
KEY_RANDOM_BYTES = 24
_BODY_LEN = 32


class KeyKind(enum.StrEnum):
    PUBLISHABLE = "pk"
    SECRET = "sk"  # noqa: S105 - a key kind's prefix, not a password


class Mode(enum.StrEnum):
    TEST = "test"
    LIVE = "live"


def base62(data: bytes, length: int) -> str:
    """Encode ``data`` as exactly ``length`` base62 characters (zero padded)."""
    n = int.from_bytes(data, "big")
    out = []
    for _ in range(length):
        n, r = divmod(n, 62)
        out.append(_B62[r])
    return "".join(reversed(out))


def new_key(kind: KeyKind, mode: Mode, random_bytes: bytes) -> str:
    if len(random_bytes) < KEY_RANDOM_BYTES:
        raise ValueError("a key needs 24 random bytes")
    return f"{kind.value}_{mode.value}_{base62(random_bytes[:KEY_RANDOM_BYTES], _BODY_LEN)}"


@attrs.frozen
class ParsedKey:
    kind: KeyKind
    mode: Mode
    raw: str


def parse_key(raw: str) -> ParsedKey | None:
    """Split a key into kind and mode; None when it is not shaped like a key."""
    parts = raw.split("_")
    if len(parts) != 3:
        return None
    kind_s, mode_s, body = parts
    if kind_s not in ("pk", "sk") or mode_s not in ("test", "live"):
        return None
    # isascii + isalnum is exactly the base62 alphabet, checked in C
    if len(body) != _BODY_LEN or not (body.isascii() and body.isalnum()):
        return None
    return ParsedKey(KeyKind(kind_s), Mode(mode_s), raw)


def parse_bearer(header: str | None) -> ParsedKey:
    """Parse ``Authorization: Bearer <key>``; a missing or malformed one is 401."""
    if not header:
        raise InvalidApiKey("missing Authorization: Bearer <key> header")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise InvalidApiKey("Authorization header must be 'Bearer <key>'")
    parsed = parse_key(token.strip())
    if parsed is None:
        raise InvalidApiKey("the API key is not a valid svc key")
    return parsed


def key_hash(raw: str) -> bytes:
    return hashlib.sha256(raw.encode("ascii")).digest()


def key_hint(raw: str) -> str:
    """What the dashboard shows of a key after creation: prefix and last 4."""
    kind, mode, body = raw.split("_")
    return f"{kind}_{mode}_…{body[-4:]}"


@attrs.frozen
class ApiKey:
    """A stored key: only its hash, never the key itself."""

    VERSION = 1
    id: str
    project_id: str
    kind: KeyKind
    mode: Mode
    hash: bytes
    hint: str
    name: str
    created_at_ms: int
    revoked_at_ms: int | None = None
    # Publishable keys are public by design (they ship inside apps), so their
    # value is kept to be shown again; secret keys exist only as their hash.
    public_value: str | None = None

    @property
    def active(self) -> bool:
        return self.revoked_at_ms is None

    def to_map(self) -> dict[str, object]:
        return {
            "v": self.VERSION,
            "id": self.id,
            "project_id": self.project_id,
            "kind": self.kind.value,
            "mode": self.mode.value,
            "hash": self.hash,
            "hint": self.hint,
            "name": self.name,
            "created_at_ms": self.created_at_ms,
            "revoked_at_ms": self.revoked_at_ms,
            "public_value": self.public_value,
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> ApiKey:
        return cls(
            id=req_str(m, "id"),
            project_id=req_str(m, "project_id"),
            kind=KeyKind(req_str(m, "kind")),
            mode=Mode(req_str(m, "mode")),
            hash=req_bytes(m, "hash"),
            hint=req_str(m, "hint"),
            name=opt_str(m, "name") or "",
            created_at_ms=req_int(m, "created_at_ms"),
            revoked_at_ms=opt_int(m, "revoked_at_ms"),
            public_value=opt_str(m, "public_value"),
        )

    def to_json(self) -> dict[str, object]:
        return {
            "id": self.id,
            "kind": "publishable" if self.kind is KeyKind.PUBLISHABLE else "secret",
            "mode": self.mode.value,
            "hint": self.hint,
            "name": self.name,
            "createdAtMs": self.created_at_ms,
            "revoked": not self.active,
            "value": self.public_value,
        }


def make_key(key_id: str, project_id: str, kind: KeyKind, mode: Mode, name: str,
             random_bytes: bytes, now_ms: int) -> tuple[str, ApiKey]:
    """A new key: its value (shown once for secret keys) and the record to store."""
    raw = new_key(kind, mode, random_bytes)
    record = ApiKey(id=key_id, project_id=project_id, kind=kind, mode=mode,
                    hash=key_hash(raw), hint=key_hint(raw), name=name, created_at_ms=now_ms,
                    public_value=raw if kind is KeyKind.PUBLISHABLE else None)
    return raw, record


def check_key_kind(stored: ApiKey | None, required: KeyKind) -> ApiKey:
    """The auth rule of SPEC.md: unknown or revoked 401, wrong kind 403."""
    if stored is None or not stored.active:
        raise InvalidApiKey("the API key is unknown or revoked")
    if stored.kind is not required:
        if required is KeyKind.PUBLISHABLE:
            raise WrongKeyKind(
                "SDK endpoints take a publishable key (pk_); never ship a secret key"
            )
        raise WrongKeyKind("server endpoints take a secret key (sk_test_ or sk_live_)")
    return stored
