"""Single-use ``svc_token``: carried in the store install referrer (Android) and
in web fallback redirects (SPEC "Single-use token", "Handoff and token
lifecycle"). Random after a prefix of its issue time, used once, expires 7
days after issue, exactly.
"""

from __future__ import annotations

import base64
import enum
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import opt_str, req_bool, req_int, req_str
from svc_engine.keys import Mode

DAY_MS = 24 * 60 * 60_000
VIA_STORE_REFERRER = "store_referrer"
"""Issued for the Play Store's install referrer: only a first launch takes it."""
VIA_WEB_FALLBACK = "query"
"""Issued on a web fallback redirect: only ``POST /v1/handoffs`` takes it."""
TOKEN_TTL_MS = 7 * DAY_MS
_TIME_LIMIT_MS = 16 ** 12  # twelve hex digits of milliseconds: until the year 10889


class TokenState(enum.StrEnum):
    VALID = "valid"
    USED = "used"
    EXPIRED = "expired"
    MISSING = "missing"


@attrs.frozen
class Token:
    """A single-use ``svc_token`` (store install referrer, web fallback redirects)."""

    VERSION = 1
    token: str
    link_id: str
    mode: Mode
    issued_at_ms: int
    expires_at_ms: int
    used: bool = False
    via: str | None = None
    """Where the token was put (``VIA_*``); None for a token issued before
    session 33, which either flow takes."""

    @classmethod
    def issue(cls, random_bytes: bytes, *, link_id: str, mode: Mode, now_ms: int,
              via: str | None = None) -> Token:
        """A fresh token with a 7-day life: its issue time as 12 lowercase hex
        digits (milliseconds), then 16 to 32 random bytes as unpadded base64url.

        The time leads so that tokens sort by issue time: the store keys them
        by their text, so a token is written next to the ones issued just
        before it rather than on a random page of the tree. The random part
        alone makes the token unguessable; the time it reveals is the tap's,
        which whoever holds the token saw happen. Tokens issued before this
        format (the random part alone) are looked up the same way."""
        if len(random_bytes) < 16:
            raise ValueError("a token needs at least 16 random bytes")
        if not 0 <= now_ms < _TIME_LIMIT_MS:
            raise ValueError("a token's issue time is 0 to 16**12 - 1 milliseconds")
        text = (f"{now_ms:012x}"
                + base64.urlsafe_b64encode(random_bytes[:32]).rstrip(b"=").decode("ascii"))
        return cls(token=text, link_id=link_id, mode=mode, issued_at_ms=now_ms,
                   expires_at_ms=now_ms + TOKEN_TTL_MS, via=via)

    def taken_by(self, via: str) -> bool:
        """Whether the flow that reads tokens put ``via`` may use this one: a
        Play Store referrer's token is not a web fallback's, nor the reverse
        (a server that saw one could otherwise use up the other's link)."""
        return self.via is None or self.via == via

    def consumed(self) -> Token:
        return attrs.evolve(self, used=True)

    def to_map(self) -> dict[str, object]:
        m: dict[str, object] = {
            "v": self.VERSION, "token": self.token, "link_id": self.link_id,
            "mode": self.mode.value, "issued_at_ms": self.issued_at_ms,
            "expires_at_ms": self.expires_at_ms, "used": self.used}
        if self.via is not None:
            m["via"] = self.via
        return m

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Token:
        return cls(token=req_str(m, "token"), link_id=req_str(m, "link_id"),
                   mode=Mode(req_str(m, "mode")), issued_at_ms=req_int(m, "issued_at_ms"),
                   expires_at_ms=req_int(m, "expires_at_ms"), used=req_bool(m, "used"),
                   via=opt_str(m, "via"))


def token_state(token: Token | None, now_ms: int) -> TokenState:
    """Used wins over expired; a token expires at ``expires_at_ms`` exactly."""
    if token is None:
        return TokenState.MISSING
    if token.used:
        return TokenState.USED
    if now_ms >= token.expires_at_ms:
        return TokenState.EXPIRED
    return TokenState.VALID
