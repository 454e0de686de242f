"""Internal events waiting to become webhook deliveries (the outbox).

Whatever records a click, open, install or conversion also appends an
``OutboxEvent`` in the same transaction. The webhook dispatcher reads the
outbox, turns each event into deliveries for the matching endpoints and removes
it, in one transaction. So an acknowledged event is never lost between being
recorded and being queued for delivery, even across a crash.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import req_int, req_str


class EventType(enum.StrEnum):
    CLICK = "click"
    OPEN = "open"
    INSTALL = "install"
    CONVERSION = "conversion"
    TEST = "test"


@attrs.frozen
class OutboxEvent:
    VERSION = 1
    id: str  # identifies the underlying click or app event (the envelope's id)
    type: EventType
    project_id: str
    mode: str  # "test" or "live"
    created_at_ms: int
    data: Mapping[str, Any]

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "type": self.type.value,
                "project_id": self.project_id, "mode": self.mode,
                "created_at_ms": self.created_at_ms, "data": dict(self.data)}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> OutboxEvent:
        data = m.get("data")
        return cls(id=req_str(m, "id"), type=EventType(req_str(m, "type")),
                   project_id=req_str(m, "project_id"), mode=req_str(m, "mode"),
                   created_at_ms=req_int(m, "created_at_ms"),
                   data=data if isinstance(data, dict) else {})
