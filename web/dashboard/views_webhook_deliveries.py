"""Settings > Webhooks > Recent deliveries: the last 50 deliveries across the
current mode's endpoints (SPEC.md, Webhook event types rule 6), filtered by
endpoint and status like ``GET /v1/webhooks/deliveries``, and one delivery's
page: event, status, endpoint, every attempt (time, duration, status code,
error), the next try while Retrying, the request body that was signed and
sent (indented for reading) and the response (status and body, capped at
4 KiB), with Retry (Failed) and Resend (Delivered).

While a delivery is Queued or Sending its page refreshes itself a few times
(static/webhooks.js; without JavaScript it offers a refresh link), so after
Send test the result shows up without doing anything. Roles and the plan
rule are as on the endpoint pages (views_webhooks.py, webhook_access.py).
"""

from __future__ import annotations

from quart import request, url_for
from quart.typing import ResponseReturnValue

from actors import webhook_admin as admin
from svc_engine.errors import CallerError, ValidationError
from svc_engine.roles import Action
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_records import Endpoint
from web.dashboard.context import Dashboard, View, Viewer, see_other
from web.dashboard.webhook_access import (
    actor_of,
    owned_delivery,
    owned_endpoint,
    plan_allows,
    plan_page,
    tables_of,
)
from web.dashboard.webhook_display import IN_FLIGHT, endpoint_label, form_error, pretty_json

DELIVERIES = "/dashboard/settings/webhooks/deliveries"
ONE = DELIVERIES + "/<delivery_id>"
RECENT_LIMIT = 50       # SPEC.md: Recent deliveries lists the last 50
REFRESHES = 8           # self-refreshes of a page whose delivery is still in flight
REFRESH_MS = 1500
DONE = {"retry": "delivery-retried", "resend": "delivery-resent"}


def parse_status(value: str | None) -> DeliveryStatus | None:
    """A status filter, any case (as the API's ``status``); empty is any."""
    if not value:
        return None
    for status in DeliveryStatus:
        if status.value.lower() == value.lower():
            return status
    raise ValidationError(
        f"unknown status {value!r}; one of {', '.join(s.value for s in DeliveryStatus)}",
        field="status")


def register(dash: Dashboard) -> None:
    dash.notices.update({
        "webhook-test-sent": "Test event sent. It goes out at once; this page shows the "
                             "endpoint's answer.",
        "delivery-retried": "Sent again. The delivery keeps its webhook-id.",
        "delivery-resent": "Sent again. The delivery keeps its webhook-id, so a receiver "
                           "that deduplicates ignores it.",
    })

    @dash.page(DELIVERIES, Action.WEBHOOKS_VIEW, endpoint="webhook_deliveries")
    async def deliveries_page(viewer: Viewer) -> ResponseReturnValue:
        if not plan_allows(viewer):
            return await plan_page(dash, viewer)
        tables = tables_of(dash)
        endpoints: dict[str, Endpoint] = {}
        if viewer.project is not None:
            endpoints = {e.id: e for e in tables.endpoints(viewer.project.id, viewer.mode)}
        chosen = request.args.get("endpoint_id", "").strip() or None
        if chosen is not None:
            chosen = owned_endpoint(tables, viewer, chosen).id
        status = parse_status(request.args.get("status", "").strip())
        rows: list[Delivery] = []
        if viewer.project is not None:
            # in a worker thread: a rare status reads SCAN_CAP (20,000) deliveries
            rows = await tables.recent_off_loop(
                dash.services.reads, viewer.project.id, viewer.mode, limit=RECENT_LIMIT,
                endpoint_id=chosen, status=status, run=dash.services.reads.in_thread)
        filtering = bool(chosen or status)
        return await dash.render(
            "webhook_deliveries.html", viewer, rows=rows, by_id=endpoints,
            endpoints=list(endpoints.values()), chosen=chosen, chosen_status=status,
            statuses=list(DeliveryStatus), filtering=filtering, limit=RECENT_LIMIT,
            now_ms=dash.now_ms())

    async def delivery_page(viewer: Viewer, d: Delivery, endpoint: Endpoint, *,
                            status: int = 200, error: str | None = None) -> ResponseReturnValue:
        event = tables_of(dash).event(endpoint.project_id, d.mode, d.event_id)
        last = d.last_attempt
        wait = _int_arg("wait")
        refresh = None
        if d.status in IN_FLIGHT and not endpoint.is_off and wait < REFRESHES:
            refresh = url_for("webhook_delivery", delivery_id=d.id, wait=wait + 1)
        return await dash.render(
            "webhook_delivery.html", viewer, status=status, error=error, d=d,
            hook=endpoint, endpoint_name=endpoint_label(endpoint), event=event,
            request_body=pretty_json(event.body.decode("utf-8", errors="replace"))
            if event is not None else "",
            response=last if last is not None and last.status_code is not None else None,
            response_body=pretty_json(last.response_body) if last is not None else "",
            refresh=refresh, refresh_ms=REFRESH_MS, waited_out=wait >= REFRESHES,
            now_ms=dash.now_ms())

    @dash.page(ONE, Action.WEBHOOKS_VIEW, endpoint="webhook_delivery")
    async def delivery_view(viewer: Viewer, delivery_id: str) -> ResponseReturnValue:
        if not plan_allows(viewer):
            return await plan_page(dash, viewer)
        d, endpoint = owned_delivery(tables_of(dash), viewer, delivery_id)
        return await delivery_page(viewer, d, endpoint)

    def again(action: str) -> View:
        async def handler(viewer: Viewer, delivery_id: str) -> ResponseReturnValue:
            if not plan_allows(viewer):
                return await plan_page(dash, viewer)
            d, endpoint = owned_delivery(tables_of(dash), viewer, delivery_id)
            try:
                await admin.send_again(actor_of(dash), endpoint.project_id, d.mode, d.id,
                                       action, None)
            except CallerError as e:
                fresh, _ = owned_delivery(tables_of(dash), viewer, d.id)
                return await delivery_page(viewer, fresh, endpoint, status=e.status,
                                           error=form_error(e)[1])
            return see_other(url_for("webhook_delivery", delivery_id=d.id,
                                     done=DONE[action]))
        return handler

    dash.page(ONE + "/retry", Action.WEBHOOKS_MANAGE, methods=("POST",),
              endpoint="retry_delivery", once=True)(again("retry"))
    dash.page(ONE + "/resend", Action.WEBHOOKS_MANAGE, methods=("POST",),
              endpoint="resend_delivery", once=True)(again("resend"))


def _int_arg(name: str) -> int:
    try:
        return max(0, int(request.args.get(name, "0")))
    except ValueError:
        return 0
