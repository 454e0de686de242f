"""Organizations, projects, users and memberships: the tenancy records."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import opt_str, req_bool, req_bytes, req_int, req_str
from svc_engine.plans import Plan


class Role(enum.StrEnum):
    OWNER = "owner"
    ADMIN = "admin"
    DEVELOPER = "developer"
    MARKETER = "marketer"


@attrs.frozen
class Organization:
    VERSION = 1
    id: str
    name: str
    plan: Plan
    created_at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "name": self.name, "plan": self.plan.value,
                "created_at_ms": self.created_at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Organization:
        return cls(id=req_str(m, "id"), name=req_str(m, "name"), plan=Plan(req_str(m, "plan")),
                   created_at_ms=req_int(m, "created_at_ms"))


@attrs.frozen
class Project:
    """A project. ``salt`` keys the user-ID hashes of handoffs (never shown)."""

    VERSION = 1
    id: str
    org_id: str
    name: str
    salt: bytes
    created_at_ms: int
    suspended: bool = False
    default_domain: str | None = None

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "org_id": self.org_id, "name": self.name,
                "salt": self.salt, "created_at_ms": self.created_at_ms,
                "suspended": self.suspended, "default_domain": self.default_domain}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Project:
        return cls(id=req_str(m, "id"), org_id=req_str(m, "org_id"), name=req_str(m, "name"),
                   salt=req_bytes(m, "salt"), created_at_ms=req_int(m, "created_at_ms"),
                   suspended=req_bool(m, "suspended", False),
                   default_domain=opt_str(m, "default_domain"))

    def to_json(self) -> dict[str, object]:
        return {"id": self.id, "organizationId": self.org_id, "name": self.name,
                "suspended": self.suspended}


@attrs.frozen
class User:
    VERSION = 1
    id: str
    email: str
    password_hash: str
    created_at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "email": self.email,
                "password_hash": self.password_hash, "created_at_ms": self.created_at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> User:
        return cls(id=req_str(m, "id"), email=req_str(m, "email"),
                   password_hash=req_str(m, "password_hash"),
                   created_at_ms=req_int(m, "created_at_ms"))


@attrs.frozen
class Membership:
    VERSION = 1
    org_id: str
    user_id: str
    role: Role
    created_at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "org_id": self.org_id, "user_id": self.user_id,
                "role": self.role.value, "created_at_ms": self.created_at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Membership:
        return cls(org_id=req_str(m, "org_id"), user_id=req_str(m, "user_id"),
                   role=Role(req_str(m, "role")), created_at_ms=req_int(m, "created_at_ms"))


def normalize_email(email: str) -> str:
    return email.strip().lower()
