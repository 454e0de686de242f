"""Team invitations: single-use links that make someone a member.

An owner or admin invites an e-mail address with a role. The service sends no
e-mail: the inviter gets a link ``/dashboard/invite/<token>`` to pass on. The
token is 32 random bytes in base64url; only its SHA-256 is stored (the
database key). Opening the link lets the invitee set a password (a new
account) or confirm theirs (an existing account); accepting deletes the
invitation in the same transaction that adds the membership, so a link works
once. An invitation lapses after 7 days; inviting the same address again
replaces the earlier invitation.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import req_bytes, req_int, req_str
from svc_engine.errors import ValidationError
from svc_engine.ids import new_id
from svc_engine.records import Role, normalize_email
from svc_engine.sessions import TOKEN_BYTES, encode_token, token_hash

INVITE_TTL_MS = 7 * 24 * 3600 * 1000
MAX_EMAIL = 254


@attrs.frozen
class Invite:
    VERSION = 1
    id: str
    token_hash: bytes
    org_id: str
    email: str
    role: Role
    invited_by: str     # user id of the inviter
    created_at_ms: int
    expires_at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "token_hash": self.token_hash,
                "org_id": self.org_id, "email": self.email, "role": self.role.value,
                "invited_by": self.invited_by, "created_at_ms": self.created_at_ms,
                "expires_at_ms": self.expires_at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Invite:
        return cls(id=req_str(m, "id"), token_hash=req_bytes(m, "token_hash"),
                   org_id=req_str(m, "org_id"), email=req_str(m, "email"),
                   role=Role(req_str(m, "role")), invited_by=req_str(m, "invited_by"),
                   created_at_ms=req_int(m, "created_at_ms"),
                   expires_at_ms=req_int(m, "expires_at_ms"))


def check_email(raw: str) -> str:
    """A normalized e-mail address, or ValidationError(field="email"). A domain
    without a dot is allowed (``owner@localhost``, intranet names)."""
    email = normalize_email(raw)
    local, at, domain = email.partition("@")
    if (not at or not local or not domain or domain.startswith(".")
            or domain.endswith(".") or len(email) > MAX_EMAIL
            or any(c.isspace() for c in email) or not email.isprintable() or "@" in domain):
        raise ValidationError("enter an e-mail address like name@example.com", field="email")
    return email


def parse_role(raw: str) -> Role:
    try:
        return Role(raw.strip().lower())
    except ValueError:
        raise ValidationError("role is one of owner, admin, developer, marketer",
                              field="role") from None


def new_invite(random48: bytes, org_id: str, email: str, role: Role, invited_by: str,
               now_ms: int) -> tuple[str, Invite]:
    """A fresh invitation from 48 random bytes: the link token and the record."""
    if len(random48) < TOKEN_BYTES + 16:
        raise ValueError("an invitation needs 48 random bytes")
    token = encode_token(random48[:TOKEN_BYTES])
    h = token_hash(token)
    assert h is not None
    invite = Invite(id=new_id(random48[TOKEN_BYTES:TOKEN_BYTES + 16]), token_hash=h,
                    org_id=org_id, email=check_email(email), role=role,
                    invited_by=invited_by, created_at_ms=now_ms,
                    expires_at_ms=now_ms + INVITE_TTL_MS)
    return token, invite


def is_open(invite: Invite, now_ms: int) -> bool:
    """True while the invitation can still be accepted."""
    return now_ms < invite.expires_at_ms
