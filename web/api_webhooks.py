"""The webhooks API (secret key; the dashboard uses the same operations).

    POST   /v1/webhooks/endpoints                      add (201, with its secret)
    GET    /v1/webhooks/endpoints                      list (no secrets)
    GET    /v1/webhooks/endpoints/{id}                 one (with its secret)
    PATCH  /v1/webhooks/endpoints/{id}                 edit url, description, events
    DELETE /v1/webhooks/endpoints/{id}                 delete, with its delivery history
    POST   /v1/webhooks/endpoints/{id}/test            send a test event (201, the delivery)
    POST   /v1/webhooks/endpoints/{id}/disable         turn off
    POST   /v1/webhooks/endpoints/{id}/enable          turn on
    POST   /v1/webhooks/endpoints/{id}/rotate-secret   new secret (the old one stops)
    GET    /v1/webhooks/deliveries[?endpointId=&status=]  the last 50 of this mode
    GET    /v1/webhooks/deliveries/{id}                one, with request and response
    POST   /v1/webhooks/deliveries/{id}/retry          a Failed one, sent at once
    POST   /v1/webhooks/deliveries/{id}/resend         a Delivered one, sent at once

An endpoint belongs to the project and mode of the key that created it, and
is visible only with a key of that project and mode.

Plans (SPEC.md: webhooks need Growth or higher): below Growth, listing
endpoints or deliveries, reading a delivery, adding an endpoint, and anything
that sends (test, retry, resend) is 403 ``forbidden`` with a message naming
the Growth plan. Reading one endpoint, editing, turning off or on, rotating
and deleting stay possible; nothing is sent until the plan returns.

Writes honour ``Idempotency-Key`` like every write of the API.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from actors import webhook_admin as admin
from actors.webhook_admin import Deleted, DeliveryView
from actors.webhooks import WebhookActor
from svc_engine.errors import Forbidden, NotFound, ValidationError
from svc_engine.ids import is_uuid
from svc_engine.plans import QUOTAS
from svc_engine.store import IdemWrite
from svc_engine.webhook_delivery import DeliveryStatus
from svc_engine.webhook_records import Endpoint, edit_changes, parse_create
from svc_engine.webhook_views import delivery_json, delivery_summary_json, endpoint_json
from web.auth import KeyContext
from web.http import Request, Response, json_response
from web.idem import IdemSlot, json_render

if TYPE_CHECKING:
    from web.api import Api

ENDPOINTS = "/v1/webhooks/endpoints"
DELIVERIES = "/v1/webhooks/deliveries"
RECENT_LIMIT = 50


def _need_plan(ctx: KeyContext) -> None:
    if not QUOTAS[ctx.org.plan].webhooks:
        raise Forbidden(f"webhooks need the Growth plan or higher; this organization is on "
                        f"{ctx.org.plan.value.capitalize()}")


def _id(req: Request, what: str) -> str:
    value = req.params["id"]
    if not is_uuid(value):
        raise NotFound(f"no webhook {what} {value}")
    return value.lower()


def _endpoint_out(value: object) -> object:
    assert isinstance(value, Endpoint)
    return endpoint_json(value, with_secret=True)


def _delivery_out(value: object) -> object:
    assert isinstance(value, DeliveryView)
    return delivery_json(value.delivery, value.endpoint, value.event)


def _deleted_out(value: object) -> object:
    assert isinstance(value, Deleted)
    return {"id": value.id, "deleted": True, "deliveriesRemoved": value.deliveries_removed}


def register(api: Api) -> None:
    from web import openapi_webhooks  # noqa: F401 - documents these routes

    services = api.services

    def actor() -> WebhookActor:
        assert services.webhooks is not None, "web/assembly.py starts the webhooks"
        return services.webhooks

    async def write(req: Request, ctx: KeyContext, status: int,
                    out: Callable[[object], object],
                    effect: Callable[[IdemWrite | None], Awaitable[object]]) -> Response:
        body = await req.body(api.max_body)

        async def run(slot: IdemSlot) -> Response:
            render = json_render(status)

            def answer(value: object) -> tuple[int, str, bytes]:
                return render(out(value))

            result = await effect(slot.write(answer))
            return slot.respond(result, answer)

        return await api.idem.run(req, ctx.scope, body, run)

    async def planned(req: Request, ctx: KeyContext) -> Response | None:
        """For a write the plan must include: the stored answer to a retry of
        one that succeeded, given before the plan is checked again (a plan
        changed since does not turn it into a 403), as every route gives it
        before its checks; else None once the plan is checked."""
        answer = api.idem.replay(req, ctx.scope, await req.body(api.max_body))
        if answer is None:
            _need_plan(ctx)
        return answer

    async def create(req: Request) -> Response:
        ctx = api.server_auth(req)
        if (answer := await planned(req, ctx)) is not None:
            return answer
        fields = parse_create(await req.json(api.max_body),
                              local=services.config.webhook_local_receivers)
        return await write(req, ctx, 201, _endpoint_out, lambda idem: admin.create_endpoint(
            actor(), ctx.project.id, ctx.mode, fields, idem))

    async def list_endpoints(req: Request) -> Response:
        ctx = api.server_auth(req)
        _need_plan(ctx)
        found = actor().tables.endpoints(ctx.project.id, ctx.mode)
        return json_response(200, {"data": [endpoint_json(e, with_secret=False)
                                             for e in found]})

    async def get_endpoint(req: Request) -> Response:
        ctx = api.server_auth(req)
        endpoint_id = _id(req, "endpoint")
        endpoint = actor().tables.endpoint(ctx.project.id, ctx.mode, endpoint_id)
        if endpoint is None:
            raise NotFound(f"no webhook endpoint {endpoint_id} in this project and mode")
        return json_response(200, endpoint_json(endpoint, with_secret=True))

    async def edit(req: Request) -> Response:
        ctx = api.server_auth(req)
        endpoint_id = _id(req, "endpoint")
        patch = await req.json(api.max_body)
        # 400s before the key is looked up (and again in the write)
        edit_changes(patch, local=services.config.webhook_local_receivers)
        return await write(req, ctx, 200, _endpoint_out, lambda idem: admin.edit_endpoint(
            actor(), ctx.project.id, ctx.mode, endpoint_id, patch, idem))

    async def delete(req: Request) -> Response:
        ctx = api.server_auth(req)
        endpoint_id = _id(req, "endpoint")
        return await write(req, ctx, 200, _deleted_out, lambda idem: admin.delete_endpoint(
            actor(), ctx.project.id, ctx.mode, endpoint_id, idem))

    async def test(req: Request) -> Response:
        ctx = api.server_auth(req)
        if (answer := await planned(req, ctx)) is not None:
            return answer
        endpoint_id = _id(req, "endpoint")
        return await write(req, ctx, 201, _delivery_out, lambda idem: admin.send_test(
            actor(), ctx.project.id, ctx.mode, endpoint_id, idem))

    def switch(on: bool) -> Callable[[Request], Awaitable[Response]]:
        async def handler(req: Request) -> Response:
            ctx = api.server_auth(req)
            endpoint_id = _id(req, "endpoint")
            return await write(req, ctx, 200, _endpoint_out, lambda idem: admin.set_enabled(
                actor(), ctx.project.id, ctx.mode, endpoint_id, on, idem))

        return handler

    async def rotate(req: Request) -> Response:
        ctx = api.server_auth(req)
        endpoint_id = _id(req, "endpoint")
        return await write(req, ctx, 200, _endpoint_out, lambda idem: admin.rotate_secret(
            actor(), ctx.project.id, ctx.mode, endpoint_id, idem))

    async def list_deliveries(req: Request) -> Response:
        ctx = api.server_auth(req)
        _need_plan(ctx)
        query = req.query()
        unknown = sorted(set(query) - {"endpointId", "status"})
        if unknown:
            raise ValidationError(f"unknown filter {unknown[0]!r}; use endpointId or status",
                                  field=unknown[0])
        endpoint_id = query.get("endpointId") or None
        if endpoint_id is not None and (
                not is_uuid(endpoint_id)
                or actor().tables.endpoint(ctx.project.id, ctx.mode, endpoint_id.lower())
                is None):
            raise NotFound(f"no webhook endpoint {endpoint_id} in this project and mode")
        status = _status(query.get("status") or None)
        # in a worker thread: a rare status reads SCAN_CAP (20,000) deliveries
        found = await actor().tables.recent_off_loop(
            services.reads, ctx.project.id, ctx.mode, limit=RECENT_LIMIT,
            endpoint_id=endpoint_id.lower() if endpoint_id else None, status=status,
            run=services.reads.in_thread)
        by_id = {e.id: e for e in actor().tables.endpoints(ctx.project.id, ctx.mode)}
        return json_response(200, {"data": [delivery_summary_json(d, by_id.get(d.endpoint_id))
                                            for d in found]})

    async def get_delivery(req: Request) -> Response:
        ctx = api.server_auth(req)
        _need_plan(ctx)
        delivery_id = _id(req, "delivery")
        tables = actor().tables
        d = tables.delivery(delivery_id)
        endpoint = (tables.endpoint(ctx.project.id, ctx.mode, d.endpoint_id)
                    if d is not None else None)
        if d is None or endpoint is None or d.mode is not ctx.mode:
            raise NotFound(f"no webhook delivery {delivery_id} in this project and mode")
        event = tables.event(ctx.project.id, ctx.mode, d.event_id)
        return json_response(200, delivery_json(d, endpoint, event))

    def again(action: str) -> Callable[[Request], Awaitable[Response]]:
        async def handler(req: Request) -> Response:
            ctx = api.server_auth(req)
            if (answer := await planned(req, ctx)) is not None:
                return answer
            delivery_id = _id(req, "delivery")
            return await write(req, ctx, 200, _delivery_out, lambda idem: admin.send_again(
                actor(), ctx.project.id, ctx.mode, delivery_id, action, idem))

        return handler

    add = api.router.add
    add("POST", ENDPOINTS, create)
    add("GET", ENDPOINTS, list_endpoints)
    add("GET", ENDPOINTS + "/{id}", get_endpoint)
    add("PATCH", ENDPOINTS + "/{id}", edit)
    add("DELETE", ENDPOINTS + "/{id}", delete)
    add("POST", ENDPOINTS + "/{id}/test", test)
    add("POST", ENDPOINTS + "/{id}/disable", switch(False))
    add("POST", ENDPOINTS + "/{id}/enable", switch(True))
    add("POST", ENDPOINTS + "/{id}/rotate-secret", rotate)
    add("GET", DELIVERIES, list_deliveries)
    add("GET", DELIVERIES + "/{id}", get_delivery)
    add("POST", DELIVERIES + "/{id}/retry", again("retry"))
    add("POST", DELIVERIES + "/{id}/resend", again("resend"))


def _status(value: str | None) -> DeliveryStatus | None:
    if value is None:
        return None
    for status in DeliveryStatus:
        if status.value.lower() == value.lower():
            return status
    raise ValidationError(
        f"unknown status {value!r}; one of {', '.join(s.value for s in DeliveryStatus)}",
        field="status")
