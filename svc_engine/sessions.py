"""Dashboard sessions: tokens, the stored record and when a session ends.

Theory of operation: signing in draws 32 random bytes; their base64url text is
the ``svc_session`` cookie and only its SHA-256 is stored (the database key), so
a copy of the data directory cannot be replayed as a cookie. A session ends at
whichever comes first:

* idle expiry: 12 hours without a request (``IDLE_MS``);
* absolute expiry: 7 days after sign-in (``ABSOLUTE_MS``), however active;
* sign-out, which deletes the record.

Refreshing ``last_seen_ms`` on every request would be a write per page view,
so it is refreshed at most every ``TOUCH_MS`` (5 minutes): the idle limit is
thus 12 hours give or take 5 minutes. The session also carries the person's
current workspace (organization and project) and mode (test or live): the
mode switch is per session.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import opt_str, req_bytes, req_int, req_str
from svc_engine.ids import new_id
from svc_engine.keys import Mode

IDLE_MS = 12 * 3600 * 1000
ABSOLUTE_MS = 7 * 24 * 3600 * 1000
TOUCH_MS = 5 * 60 * 1000
TOKEN_BYTES = 32
_TOKEN_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
TOKEN_LENGTH = 43  # base64url of 32 bytes, unpadded


def encode_token(random32: bytes) -> str:
    """The cookie (or link) text of a token made from 32 random bytes."""
    if len(random32) < TOKEN_BYTES:
        raise ValueError("a token needs 32 random bytes")
    return base64.urlsafe_b64encode(random32[:TOKEN_BYTES]).rstrip(b"=").decode("ascii")


def token_hash(token: str | None) -> bytes | None:
    """The stored form of a token; None when the text is not shaped like one."""
    if token is None or len(token) != TOKEN_LENGTH or not set(token) <= _TOKEN_CHARS:
        return None
    return hashlib.sha256(token.encode("ascii")).digest()


@attrs.frozen
class Session:
    VERSION = 1
    id: str                 # public identifier: keys the CSRF token, never the cookie
    token_hash: bytes       # sha256 of the cookie value; the database key
    user_id: str
    created_at_ms: int
    last_seen_ms: int
    org_id: str | None = None
    project_id: str | None = None
    mode: Mode = Mode.TEST

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "token_hash": self.token_hash,
                "user_id": self.user_id, "created_at_ms": self.created_at_ms,
                "last_seen_ms": self.last_seen_ms, "org_id": self.org_id,
                "project_id": self.project_id, "mode": self.mode.value}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Session:
        return cls(id=req_str(m, "id"), token_hash=req_bytes(m, "token_hash"),
                   user_id=req_str(m, "user_id"), created_at_ms=req_int(m, "created_at_ms"),
                   last_seen_ms=req_int(m, "last_seen_ms"), org_id=opt_str(m, "org_id"),
                   project_id=opt_str(m, "project_id"), mode=Mode(req_str(m, "mode")))


def new_session(random48: bytes, user_id: str, now_ms: int, *, org_id: str | None = None,
                project_id: str | None = None) -> tuple[str, Session]:
    """A fresh session from 48 random bytes (32 for the token, 16 for the id):
    returns the cookie value and the record to store. Sessions start in test mode."""
    if len(random48) < TOKEN_BYTES + 16:
        raise ValueError("a session needs 48 random bytes")
    token = encode_token(random48[:TOKEN_BYTES])
    h = token_hash(token)
    assert h is not None
    session = Session(id=new_id(random48[TOKEN_BYTES:TOKEN_BYTES + 16]), token_hash=h,
                      user_id=user_id, created_at_ms=now_ms, last_seen_ms=now_ms,
                      org_id=org_id, project_id=project_id)
    return token, session


def expires_at_ms(session: Session) -> int:
    return min(session.last_seen_ms + IDLE_MS, session.created_at_ms + ABSOLUTE_MS)


def is_live(session: Session, now_ms: int) -> bool:
    return now_ms < expires_at_ms(session)


def touched(session: Session, now_ms: int) -> Session | None:
    """The session with ``last_seen_ms`` moved to now, or None when the stored one is
    recent enough (saves a write per page view)."""
    if now_ms - session.last_seen_ms < TOUCH_MS:
        return None
    return attrs.evolve(session, last_seen_ms=now_ms)
