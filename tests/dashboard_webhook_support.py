"""Helpers for the Webhooks pages' tests: endpoints made through the same
operations the dashboard calls, and deliveries in a chosen state (written by
the WebhookActor, as its own records), for pages that need a Failed or a
Delivered one without waiting through a retry schedule."""

from __future__ import annotations

import os
from typing import Any

import lmdb
import orjson

from actors import webhook_admin as admin
from actors.webhooks import WebhookActor
from svc_engine import webhook_delivery as deliveries
from svc_engine.ids import new_id
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import Attempt, Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import validate_endpoint
from svc_engine.webhook_envelope import envelope
from svc_engine.webhook_records import Endpoint, WebhookEvent
from tests.conftest import App

UNREACHABLE = "https://localhost:9/hook"  # nothing listens on the discard port: refused


def actor(app: App) -> WebhookActor:
    assert app.services.webhooks is not None
    return app.services.webhooks


async def make_endpoint(app: App, url: str = UNREACHABLE, *, mode: Mode = Mode.TEST,
                        project_id: str | None = None, **fields: Any) -> Endpoint:
    return await admin.create_endpoint(actor(app), project_id or app.project_id, mode,
                                       validate_endpoint(url, **fields), None)


async def make_delivery(app: App, endpoint: Endpoint, status: DeliveryStatus, *,
                        attempts: int = 1, event_type: str = "click",
                        response_status: int | None = 500) -> Delivery:
    """A delivery of a new event to ``endpoint``, already in ``status``, with
    ``attempts`` past attempts (failed ones answer ``response_status``; the last
    one of a Delivered delivery answered 200)."""
    a = actor(app)
    now = app.services.clock.now_ms()
    event_id = new_id(os.urandom(16))
    body = orjson.dumps(envelope(event_id, event_type, now, endpoint.project_id,
                                 endpoint.mode.value, {"n": 1}))
    event = WebhookEvent(event_id, event_type, endpoint.project_id, endpoint.mode, now, body, 1)
    past = []
    for n in range(1, attempts + 1):
        ok = status is DeliveryStatus.DELIVERED and n == attempts
        code = 200 if ok else response_status
        past.append(Attempt(number=n, trigger=deliveries.SCHEDULED,
                            started_at_ms=now - (attempts - n) * 60_000, duration_ms=42,
                            status_code=code, kind="delivered" if ok else (
                                "http_status" if code else "connection_error"),
                            error=None if ok else (f"HTTP {code}" if code else
                                                   "connection refused"),
                            response_body="ok" if ok else ("nope" if code else "")))
    d = Delivery(id=new_id(os.urandom(16)), endpoint_id=endpoint.id, event_id=event_id,
                 event_type=event_type, mode=endpoint.mode, status=status,
                 created_at_ms=now - attempts * 60_000, attempts=tuple(past),
                 next_attempt_at_ms=now + 3_600_000 if status is DeliveryStatus.RETRYING
                 else None)

    async def write() -> None:
        def op(txn: lmdb.Transaction) -> None:
            a.tables.put_event(txn, event)
            a.tables.add_delivery(txn, endpoint.project_id, d)

        await a.write(op)

    await a.call(write)
    return d
