"""Managing endpoints and deliveries: each operation runs inside the WebhookActor.

Every operation is one call in the actor's mailbox, is durable before it
returns (its write also records the Idempotency-Key response, ``idem``), and
looks endpoints and deliveries up within the caller's project and mode only
(anything else is 404).

Decisions where SPEC.md is silent:

* Send test, Retry and Resend on an endpoint that is Off are 409 ``conflict``
  (turn it on first); Retry and Resend of a delivery whose attempt is
  already under way are 409 too.
* Send test makes a ``test`` event (``data``: the endpoint's id and a
  message) with one delivery, to this endpoint only, sent at once; like every
  delivery it is retried on failure.
* Turning an endpoint off leaves its waiting deliveries waiting (they resume on
  turn on); turning on an endpoint that is not Off changes nothing.
"""

from __future__ import annotations

import attrs
import lmdb
import orjson

from actors.webhook_queue import MANUAL_WAITING
from actors.webhooks import WebhookActor
from svc_engine import signing
from svc_engine import webhook_delivery as deliveries
from svc_engine import webhook_records as records
from svc_engine.errors import Conflict, NotFound
from svc_engine.event_payloads import test_data
from svc_engine.keys import Mode
from svc_engine.outbox import EventType
from svc_engine.store import IdemWrite
from svc_engine.webhook_delivery import Delivery
from svc_engine.webhook_endpoint import EndpointFields
from svc_engine.webhook_envelope import envelope
from svc_engine.webhook_records import Endpoint, WebhookEvent


@attrs.frozen
class DeliveryView:
    """A delivery with what its full view shows."""

    delivery: Delivery
    endpoint: Endpoint | None
    event: WebhookEvent | None


@attrs.frozen
class Deleted:
    id: str
    deliveries_removed: int


def _owned(actor: WebhookActor, project_id: str, mode: Mode, endpoint_id: str) -> Endpoint:
    endpoint = actor.endpoint(endpoint_id)
    if endpoint is None or endpoint.project_id != project_id or endpoint.mode is not mode:
        raise NotFound(f"no webhook endpoint {endpoint_id} in this project and mode")
    return endpoint


def _new_secret(actor: WebhookActor) -> str:
    return signing.format_secret(actor.random(signing.SECRET_BYTES))


async def _save(actor: WebhookActor, endpoint: Endpoint, idem: IdemWrite | None) -> Endpoint:
    def op(txn: lmdb.Transaction) -> Endpoint:
        actor.tables.put_endpoint(txn, endpoint)
        actor.tables.store.record_response(txn, idem, endpoint)
        return endpoint

    await actor.write(op)
    actor.set_endpoint(endpoint)
    return endpoint


async def create_endpoint(actor: WebhookActor, project_id: str, mode: Mode,
                          fields: EndpointFields, idem: IdemWrite | None) -> Endpoint:
    async def do() -> Endpoint:
        endpoint = records.new_endpoint(actor.new_id(), project_id, mode, fields,
                                        _new_secret(actor), actor.now_ms())
        return await _save(actor, endpoint, idem)

    return await actor.call(do)  # type: ignore[no-any-return]


async def edit_endpoint(actor: WebhookActor, project_id: str, mode: Mode, endpoint_id: str,
                        body: object, idem: IdemWrite | None) -> Endpoint:
    async def do() -> Endpoint:
        endpoint = _owned(actor, project_id, mode, endpoint_id)
        return await _save(actor, records.apply_edit(endpoint, body, actor.now_ms(),
                                                     local=actor.local_receivers), idem)

    return await actor.call(do)  # type: ignore[no-any-return]


async def rotate_secret(actor: WebhookActor, project_id: str, mode: Mode, endpoint_id: str,
                        idem: IdemWrite | None) -> Endpoint:
    async def do() -> Endpoint:
        endpoint = _owned(actor, project_id, mode, endpoint_id)
        rotated = records.rotate_secret(endpoint, _new_secret(actor), actor.now_ms())
        return await _save(actor, rotated, idem)

    return await actor.call(do)  # type: ignore[no-any-return]


async def set_enabled(actor: WebhookActor, project_id: str, mode: Mode, endpoint_id: str,
                      on: bool, idem: IdemWrite | None, *, by: str = "") -> Endpoint:
    """Turn on or off; ``by`` names who turned it off (shown with the Off state)."""

    async def do() -> Endpoint:
        endpoint = _owned(actor, project_id, mode, endpoint_id)
        now = actor.now_ms()
        detail = f"Turned off by {by}" if by else ""
        changed = (records.turn_on(endpoint, now) if on
                   else records.turn_off(endpoint, now, detail))
        saved = await _save(actor, changed, idem)
        if on and endpoint.is_off:
            await actor.rearm_or_later(saved)
        if not on:
            actor.drop_ready(endpoint.id)
        return saved

    return await actor.call(do)  # type: ignore[no-any-return]


async def delete_endpoint(actor: WebhookActor, project_id: str, mode: Mode, endpoint_id: str,
                          idem: IdemWrite | None) -> Deleted:
    async def do() -> Deleted:
        endpoint = _owned(actor, project_id, mode, endpoint_id)
        actor.drop_ready(endpoint.id)

        def op(txn: lmdb.Transaction) -> Deleted:
            result = Deleted(endpoint.id, actor.tables.delete_endpoint(txn, endpoint))
            actor.tables.store.record_response(txn, idem, result)
            return result

        result: Deleted = await actor.write(op)
        actor.forget_endpoint(endpoint.id)
        return result

    return await actor.call(do)  # type: ignore[no-any-return]


async def send_test(actor: WebhookActor, project_id: str, mode: Mode, endpoint_id: str,
                    idem: IdemWrite | None) -> DeliveryView:
    async def do() -> DeliveryView:
        endpoint = _owned(actor, project_id, mode, endpoint_id)
        if endpoint.is_off:
            raise Conflict("this endpoint is Off; turn it on to send a test event")
        _room_for_manual(actor, endpoint.id)
        now = actor.now_ms()
        event_id = actor.new_id()
        data = test_data(endpoint_id=endpoint.id, at_ms=now)
        body = orjson.dumps(envelope(event_id, EventType.TEST.value, now, project_id,
                                     mode.value, data))
        event = WebhookEvent(event_id, EventType.TEST.value, project_id, mode, now, body, 1)
        d = deliveries.new_delivery(actor.new_delivery_id(), endpoint.id, event_id,
                                    EventType.TEST.value, mode, now)
        view = DeliveryView(d, endpoint, event)

        def op(txn: lmdb.Transaction) -> DeliveryView:
            actor.tables.put_event(txn, event)
            actor.tables.add_delivery(txn, project_id, d)
            actor.tables.store.record_response(txn, idem, view)
            return view

        await actor.write(op)
        actor.send_now(d)
        return view

    return await actor.call(do)  # type: ignore[no-any-return]


def _room_for_manual(actor: WebhookActor, endpoint_id: str) -> None:
    """409 when ``MANUAL_WAITING`` manual attempts of the endpoint wait to
    start already (its receiver is slow or hung: more would only queue)."""
    if actor.manual_waiting(endpoint_id) >= MANUAL_WAITING:
        raise Conflict(f"{MANUAL_WAITING} test or manual attempts of this endpoint are "
                       "waiting to be sent already; try again once they are")


async def send_again(actor: WebhookActor, project_id: str, mode: Mode, delivery_id: str,
                     action: str, idem: IdemWrite | None) -> DeliveryView:
    """Retry (a Failed delivery) or Resend (a Delivered one): sent again at once."""

    async def do() -> DeliveryView:
        await actor.settle()  # read after this actor's own writes
        d = actor.tables.delivery(delivery_id)
        endpoint = actor.endpoint(d.endpoint_id) if d is not None else None
        if (d is None or endpoint is None or endpoint.project_id != project_id
                or endpoint.mode is not mode):
            # one answer whether the delivery is another project's or none:
            # naming its endpoint told that it exists, and whose endpoint
            raise NotFound(f"no webhook delivery {delivery_id} in this project and mode")
        if endpoint.is_off:
            raise Conflict("this delivery's endpoint is Off; turn it on first")
        if actor.is_busy(d.id):
            raise Conflict("an attempt of this delivery is already under way")
        _room_for_manual(actor, endpoint.id)
        again = deliveries.retry(d) if action == "retry" else deliveries.resend(d)
        event = actor.tables.event(project_id, mode, d.event_id)
        view = DeliveryView(again, endpoint, event)

        def op(txn: lmdb.Transaction) -> DeliveryView:
            actor.tables.save_delivery(txn, d, again)
            actor.tables.store.record_response(txn, idem, view)
            return view

        await actor.write(op)
        actor.send_now(again)
        return view

    return await actor.call(do)  # type: ignore[no-any-return]
