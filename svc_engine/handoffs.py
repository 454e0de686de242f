"""Authenticated handoffs: a link bound by the integrator's server to a user ID.

Theory of operation
-------------------
``POST /v1/handoffs`` creates a pending :class:`Handoff` for a user of one
project and mode; the user ID itself is never stored, only
:func:`user_hash`, an HMAC-SHA256 of the trimmed ID keyed with the project's
salt. A handoff expires ``expiresInSeconds`` (1 s to 7 days, default 7 days)
after creation; it is expired from ``expires_at_ms`` on, exactly.

Creation order is :func:`creation_order`: ``created_at_ms``, then ``seq``,
which numbers a user's handoffs of one millisecond in the order the store's
writer committed them (:func:`next_seq`, given the ones already stored for
that millisecond), then the id (only handoffs stored before ``seq`` existed
share a ``seq``, 0). So a server that creates two handoffs for a user in one
millisecond gets the second one claimed, not whichever has the larger random
id.

``Svc.claimHandoff`` asks for the user's pending handoffs and
:func:`pick_handoff` decides: the newest one that has not expired wins (last
in creation order, the same on every replay), and every pending handoff of
the user is cleared, the winner, the older ones and the expired ones alike.
When none is unexpired there is no winner, and the expired ones are cleared
all the same. The caller passes one user's handoffs in one mode.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from svc_engine.decode import opt_int, req_bytes, req_int, req_str
from svc_engine.keys import Mode
from svc_engine.sdk_requests import check_expires_in_seconds, trimmed_user_id

HANDOFF_TTL_MS = 7 * 24 * 3600 * 1000


@attrs.frozen
class Handoff:
    VERSION = 1
    id: str
    link_id: str
    user_hash: bytes
    mode: Mode
    created_at_ms: int
    expires_at_ms: int
    seq: int = 0
    """Its place among the user's handoffs of the same ``created_at_ms``
    (:func:`next_seq`); 0 in records stored before it existed."""

    def expired(self, now_ms: int) -> bool:
        return now_ms >= self.expires_at_ms

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "link_id": self.link_id,
                "user_hash": self.user_hash, "mode": self.mode.value,
                "created_at_ms": self.created_at_ms, "expires_at_ms": self.expires_at_ms,
                "seq": self.seq}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Handoff:
        return cls(id=req_str(m, "id"), link_id=req_str(m, "link_id"),
                   user_hash=req_bytes(m, "user_hash"), mode=Mode(req_str(m, "mode")),
                   created_at_ms=req_int(m, "created_at_ms"),
                   expires_at_ms=req_int(m, "expires_at_ms"),
                   seq=opt_int(m, "seq") or 0)


def handoff_expiry(now_ms: int, expires_in_s: int | None) -> int:
    """When a handoff created at ``now_ms`` expires. ``expires_in_s`` must be
    1 to 7 days in seconds (``ValidationError`` on ``expiresInSeconds`` otherwise);
    None gives the 7-day default."""
    if expires_in_s is None:
        return now_ms + HANDOFF_TTL_MS
    return now_ms + check_expires_in_seconds(expires_in_s) * 1000


def user_hash(salt: bytes, user_id: str) -> bytes:
    """HMAC-SHA256 of the trimmed user ID under the project's salt.

    Raises ``ValidationError`` (field ``userId``) when the trimmed ID is not 1
    to 256 characters."""
    return hmac.new(salt, trimmed_user_id(user_id).encode("utf-8"), hashlib.sha256).digest()


def creation_order(h: Handoff) -> tuple[int, int, str]:
    """Sort key of handoffs, oldest first: creation time, then ``seq``, then id."""
    return h.created_at_ms, h.seq, h.id


def next_seq(same_ms: Sequence[Handoff]) -> int:
    """The ``seq`` of a new handoff, given the user's handoffs stored with
    the same ``created_at_ms`` (in one mode): one past the highest, 0 for the
    first."""
    return max((h.seq for h in same_ms), default=-1) + 1


def pick_handoff(pending: Sequence[Handoff], now_ms: int) -> tuple[Handoff | None, tuple[str, ...]]:
    """The handoff a claim delivers (or None): the unexpired one last in
    :func:`creation_order`; and the ids of all to clear (sorted)."""
    live = [h for h in pending if not h.expired(now_ms)]
    winner = max(live, key=creation_order, default=None)
    return winner, tuple(sorted({h.id for h in pending}))
