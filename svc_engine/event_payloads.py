"""``data`` of the webhook events whose payload SPEC.md leaves open.

Decisions (SPEC.md: "Data payloads of open, install, conversion and test
events ... not shown"):

- ``open``: linkId, url, platform, method (universal_link, app_link,
  landing_page or authenticated_handoff), isDeferred, installId, openedAt. A
  handoff claim produces an ``open`` with method ``authenticated_handoff``.
- ``install``: installId, platform, linkId (null when unattributed),
  confidence, method (null when unattributed), installedAt.
- ``conversion``: eventId, name, properties, linkId, installId, occurredAt,
  receivedAt.
- ``test``: message, endpointId, sentAt.

Install IDs are random per install and never tied to a person by the service;
no IP, user agent or referrer appears in any payload.
"""

from __future__ import annotations

from typing import Any

from svc_engine.links import iso_utc


def open_data(*, link_id: str, url: str, platform: str, method: str, is_deferred: bool,
              install_id: str, at_ms: int) -> dict[str, Any]:
    return {"linkId": link_id, "url": url, "platform": platform, "method": method,
            "isDeferred": is_deferred, "installId": install_id, "openedAt": iso_utc(at_ms)}


def install_data(*, install_id: str, platform: str, link_id: str | None, confidence: str,
                 method: str | None, at_ms: int) -> dict[str, Any]:
    return {"installId": install_id, "platform": platform, "linkId": link_id,
            "confidence": confidence, "method": method, "installedAt": iso_utc(at_ms)}


def conversion_data(*, event_id: str, name: str, properties: dict[str, Any],
                    link_id: str | None, install_id: str, occurred_at_ms: int,
                    received_at_ms: int) -> dict[str, Any]:
    return {"eventId": event_id, "name": name, "properties": properties, "linkId": link_id,
            "installId": install_id, "occurredAt": iso_utc(occurred_at_ms),
            "receivedAt": iso_utc(received_at_ms)}


TEST_MESSAGE = "This is a test event sent from svc."


def test_data(*, endpoint_id: str, at_ms: int) -> dict[str, Any]:
    return {"message": TEST_MESSAGE, "endpointId": endpoint_id, "sentAt": iso_utc(at_ms)}
