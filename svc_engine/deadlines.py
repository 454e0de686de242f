"""Deadlines: every timed event of the service is one of these.

A deadline is persisted by the operation that creates it (in the same
transaction), loaded by the TimerActor at start, fired at ``due_ms`` (wall
clock), and removed by the handler of its kind. Handlers must be idempotent: a
crash after firing but before removal fires it again after restart.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import req_int, req_str


@attrs.frozen(order=True)
class Deadline:
    VERSION = 1
    due_ms: int
    kind: str
    ref: str  # what the kind's handler needs to find its target, e.g. "<project>/<token>"

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "due_ms": self.due_ms, "kind": self.kind, "ref": self.ref}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Deadline:
        return cls(due_ms=req_int(m, "due_ms"), kind=req_str(m, "kind"), ref=req_str(m, "ref"))
