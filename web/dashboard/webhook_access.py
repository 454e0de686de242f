"""Which endpoints and deliveries a Webhooks page may touch, and the plan rule.

Every lookup is scoped like the webhooks API's: the current project and mode
only, anything else is 404 (one that exists in the other mode says so, as the
Links pages do). The management operations themselves run in the
WebhookActor (actors/webhook_admin.py), which checks the scope again.

Plan (SPEC.md Limits: Growth or higher; "the Starter plan cannot list
endpoints"), mirroring web/api_webhooks.py: below Growth the pages that list
(endpoints, recent deliveries), a delivery's view, adding an endpoint and
everything that sends (Send test, Retry, Resend) show the plan note
instead (403). One endpoint's page, editing, turning off or on, rotating the
secret and deleting stay possible (SPEC: "editing, turning off and deleting
stay possible"); nothing is sent until the plan returns.
"""

from __future__ import annotations

from quart import Response

from actors.webhooks import WebhookActor
from storage.webhooks_store import WebhookStore
from svc_engine.errors import NotFound
from svc_engine.ids import is_uuid
from svc_engine.keys import Mode
from svc_engine.plans import QUOTAS, Plan
from svc_engine.webhook_delivery import Delivery
from svc_engine.webhook_records import Endpoint
from web.dashboard.context import Dashboard, Viewer

GROWTH = Plan.GROWTH


def actor_of(dash: Dashboard) -> WebhookActor:
    actor = dash.services.webhooks
    assert actor is not None, "web/assembly.py starts the webhooks"
    return actor


def tables_of(dash: Dashboard) -> WebhookStore:
    return actor_of(dash).tables


def plan_allows(viewer: Viewer) -> bool:
    return viewer.org is not None and QUOTAS[viewer.org.plan].webhooks


def _other(mode: Mode) -> Mode:
    return Mode.LIVE if mode is Mode.TEST else Mode.TEST


def _wrong_mode(what: str, mode: Mode) -> NotFound:
    return NotFound(f"This {what} belongs to {mode.value} mode. Switch to "
                    f"{mode.value.capitalize()} to see it.")


def owned_endpoint(tables: WebhookStore, viewer: Viewer, endpoint_id: str) -> Endpoint:
    """The endpoint, when it is the current project's in the current mode."""
    if viewer.project is None or not is_uuid(endpoint_id):
        raise NotFound("There is no such webhook endpoint in this project.")
    endpoint_id = endpoint_id.lower()
    endpoint = tables.endpoint(viewer.project.id, viewer.mode, endpoint_id)
    if endpoint is not None:
        return endpoint
    if tables.endpoint(viewer.project.id, _other(viewer.mode), endpoint_id) is not None:
        raise _wrong_mode("endpoint", _other(viewer.mode))
    raise NotFound("There is no such webhook endpoint in this project. It may have been "
                   "deleted.")


def owned_delivery(tables: WebhookStore, viewer: Viewer, delivery_id: str
                   ) -> tuple[Delivery, Endpoint]:
    """The delivery and its endpoint, when both are the current project's and mode's."""
    d = tables.delivery(delivery_id.lower()) if is_uuid(delivery_id) else None
    endpoint = (tables.endpoint(viewer.project.id, d.mode, d.endpoint_id)
                if d is not None and viewer.project is not None else None)
    if d is None or endpoint is None:  # one page whether another project's or none
        raise NotFound("There is no such webhook delivery in this project. Deliveries are "
                       "kept 30 days, and deleting an endpoint removes its deliveries.")
    if d.mode is not viewer.mode:
        raise _wrong_mode("delivery", d.mode)
    return d, endpoint


async def plan_page(dash: Dashboard, viewer: Viewer) -> Response:
    """The note shown instead of a page the plan does not include (403).

    It names the endpoints kept from before, each linked to its own page:
    SPEC.md keeps editing, turning off and deleting them possible below
    Growth, and without a way to reach them that would be only in name. It
    is no endpoints list (SPEC.md: Starter cannot list endpoints): no
    status, events or deliveries, only what reaching each one needs."""
    kept = []
    if viewer.project is not None:
        kept = tables_of(dash).endpoints(viewer.project.id, viewer.mode)
    return await dash.render("webhook_plan.html", viewer, status=403, kept=len(kept),
                             kept_endpoints=kept, needed=GROWTH)
