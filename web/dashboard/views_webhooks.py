"""Settings > Webhooks: the endpoints of the current project and mode (SPEC.md
rule 6: owners, admins and developers add, edit and test them; marketers see
a note naming whom to ask, and 403 on every action).

Pages and forms (each one declared with its Action, so the role matrix test
walks them all; every POST carries the CSRF field):

* the list: each endpoint's status in words (webhook_display.health_line),
  URL, description and events, and the newest deliveries;
* add: URL, description, the four event types (all ticked at first). The
  answer shows the ``whsec_`` signing secret once, with a way to verify it;
* one endpoint: edit, Send test (then that delivery's page), Turn off or on,
  Rotate secret (the new one shown once; the old one stops verifying at
  once; the form names the secret it was made for, so sending it again, as
  reloading the page that shows the new secret does, rotates nothing),
  Delete (a confirmation page first: it works without JavaScript, and the
  POST is refused without the confirmation's field).

The forms become the webhooks API's JSON bodies and go through the same
operations (actors/webhook_admin.py) and validation
(webhook_records.parse_create, apply_edit); errors come back on the form in
its words. The plan rule and the scoping are in webhook_access.py.
"""

from __future__ import annotations

import hashlib
import pathlib
from collections.abc import Awaitable

from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from actors import webhook_admin as admin
from svc_engine.errors import CallerError
from svc_engine.roles import Action
from svc_engine.webhook_delivery import DeliveryStatus
from svc_engine.webhook_endpoint import DESCRIPTION_MAX, SUBSCRIBABLE_EVENTS
from svc_engine.webhook_records import Endpoint, parse_create
from svc_engine.webhook_views import next_attempt_at_ms
from web.dashboard import formats
from web.dashboard.context import Dashboard, View, Viewer, see_other
from web.dashboard.nav import NavEntry
from web.dashboard.webhook_access import (
    actor_of,
    owned_endpoint,
    plan_allows,
    plan_page,
    tables_of,
)
from web.dashboard.webhook_display import (
    EVENT_HELP,
    IN_FLIGHT,
    STATUS_BADGES,
    EndpointForm,
    duration,
    endpoint_label,
    form_body,
    form_error,
    health_line,
    next_try,
    of_endpoint,
    paused,
    plural,
    read_form,
    secret_check,
)

BASE = "/dashboard/settings/webhooks"
ONE = BASE + "/<endpoint_id>"
LIST_DELIVERIES = 8         # the newest deliveries on the list page
ENDPOINT_DELIVERIES = 10    # and on an endpoint's page
COUNT_CAP = 1000            # deliveries counted for the delete confirmation
CONFIRM_FIELD, CONFIRM_VALUE = "confirm", "delete"
FIELD_WORDS = {"url": "URL", "description": "description", "events": "events"}


def register(dash: Dashboard) -> None:
    dash.nav.append(NavEntry("Webhooks", "webhooks", "Settings", icon="webhook", order=20))
    dash.notices.update({
        "webhook-saved": "Saved. The next deliveries use the new settings.",
        "webhook-off": "The endpoint is off. New events are not queued for it; deliveries "
                       "already waiting resume when you turn it on.",
        "webhook-on": "The endpoint is on again. Events from now on are sent; events that "
                      "happened while it was off are not.",
        "webhook-deleted": "The endpoint was deleted with its delivery history. No more "
                           "events are sent to it.",
    })
    formats.install(dash.app.jinja_env)
    script = pathlib.Path(__file__).with_name("static") / "webhooks.js"
    dash.app.jinja_env.globals["webhooks_js_version"] = hashlib.sha256(
        script.read_bytes()).hexdigest()[:10]
    dash.app.jinja_env.globals.update(
        webhook_health=health_line, webhook_label=endpoint_label, delivery_badges=STATUS_BADGES,
        delivery_duration=duration, delivery_next_try=next_try,
        delivery_paused=paused, delivery_next_at=next_attempt_at_ms, plural=plural,
        event_help=EVENT_HELP, delivery_in_flight=IN_FLIGHT, webhook_secret_check=secret_check)

    def endpoint_map(viewer: Viewer) -> dict[str, Endpoint]:
        if viewer.project is None:
            return {}
        return {e.id: e for e in tables_of(dash).endpoints(viewer.project.id, viewer.mode)}

    # -- the list -------------------------------------------------------------------

    @dash.page(BASE, Action.WEBHOOKS_VIEW, endpoint="webhooks")
    async def webhooks_page(viewer: Viewer) -> ResponseReturnValue:
        if not plan_allows(viewer):
            return await plan_page(dash, viewer)
        endpoints = endpoint_map(viewer)
        recent = (tables_of(dash).recent(viewer.project.id, viewer.mode, limit=LIST_DELIVERIES)
                  if viewer.project is not None else [])
        return await dash.render("webhooks.html", viewer, endpoints=list(endpoints.values()),
                                 by_id=endpoints, recent=recent, now_ms=dash.now_ms())

    # -- add --------------------------------------------------------------------------

    async def form_page(viewer: Viewer, form: EndpointForm, *, endpoint: Endpoint | None = None,
                        status: int = 200, error: CallerError | None = None) -> Response:
        field, message = form_error(error) if error is not None else (None, None)
        summary = message
        if field is not None:
            verb = "saved" if endpoint else "added"
            summary = f"The endpoint was not {verb}: check the {FIELD_WORDS[field]} below."
        return await dash.render(
            "webhook_form.html", viewer, status=status, form=form, hook=endpoint,
            error=summary, error_field=field, field_message=message,
            all_events=SUBSCRIBABLE_EVENTS, description_max=DESCRIPTION_MAX)

    @dash.page(BASE + "/new", Action.WEBHOOKS_MANAGE, endpoint="new_webhook")
    async def new_webhook(viewer: Viewer) -> ResponseReturnValue:
        if not plan_allows(viewer):
            return await plan_page(dash, viewer)
        return await form_page(viewer, EndpointForm())

    @dash.page(BASE + "/new", Action.WEBHOOKS_MANAGE, methods=("POST",),
               endpoint="create_webhook", once=True)
    async def create_webhook(viewer: Viewer) -> ResponseReturnValue:
        if not plan_allows(viewer):
            return await plan_page(dash, viewer)
        form = read_form(await request.form)
        if viewer.project is None:
            return await dash.error(viewer, 400, "Create a project first",
                                    "Webhook endpoints belong to a project.")
        try:
            fields = parse_create(form_body(form),
                                  local=dash.services.config.webhook_local_receivers)
        except CallerError as e:
            return await form_page(viewer, form, status=e.status, error=e)
        endpoint = await admin.create_endpoint(actor_of(dash), viewer.project.id, viewer.mode,
                                               fields, None)
        return await detail_page(viewer, endpoint, revealed="created")

    # -- one endpoint -----------------------------------------------------------------

    async def detail_page(viewer: Viewer, endpoint: Endpoint, *, status: int = 200,
                          error: str | None = None, revealed: str | None = None) -> Response:
        plan_ok = plan_allows(viewer)
        recent = (tables_of(dash).recent(endpoint.project_id, endpoint.mode,
                                         endpoint_id=endpoint.id, limit=ENDPOINT_DELIVERIES)
                  if plan_ok else [])
        return await dash.render(
            "webhook_detail.html", viewer, status=status, error=error, hook=endpoint,
            health=health_line(endpoint), recent=recent, plan_ok=plan_ok, revealed=revealed,
            by_id={endpoint.id: endpoint}, now_ms=dash.now_ms())

    @dash.page(ONE, Action.WEBHOOKS_VIEW, endpoint="webhook")
    async def webhook_page(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        return await detail_page(viewer, owned_endpoint(tables_of(dash), viewer, endpoint_id))

    @dash.page(ONE + "/edit", Action.WEBHOOKS_MANAGE, endpoint="edit_webhook")
    async def edit_webhook(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
        return await form_page(viewer, of_endpoint(endpoint), endpoint=endpoint)

    @dash.page(ONE + "/edit", Action.WEBHOOKS_MANAGE, methods=("POST",),
               endpoint="update_webhook")
    async def update_webhook(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
        form = read_form(await request.form)
        body = form_body(form)
        try:
            await admin.edit_endpoint(actor_of(dash), endpoint.project_id, endpoint.mode,
                                      endpoint.id, body, None)
        except CallerError as e:
            return await form_page(viewer, form, endpoint=endpoint, status=e.status, error=e)
        return see_other(url_for("webhook", endpoint_id=endpoint.id, done="webhook-saved"))

    async def act(viewer: Viewer, endpoint: Endpoint, run: Awaitable[object]
                  ) -> Response | None:
        """Run a management operation; a refusal (409 and the like) shows on the page."""
        try:
            await run
        except CallerError as e:
            return await detail_page(viewer, endpoint, status=e.status,
                                     error=form_error(e)[1])
        return None

    @dash.page(ONE + "/test", Action.WEBHOOKS_MANAGE, methods=("POST",),
               endpoint="test_webhook", once=True)
    async def test_webhook(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        if not plan_allows(viewer):
            return await plan_page(dash, viewer)
        endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
        try:
            view = await admin.send_test(actor_of(dash), endpoint.project_id, endpoint.mode,
                                         endpoint.id, None)
        except CallerError as e:
            return await detail_page(viewer, endpoint, status=e.status, error=form_error(e)[1])
        return see_other(url_for("webhook_delivery", delivery_id=view.delivery.id,
                                 done="webhook-test-sent"))

    def switch(on: bool) -> View:
        async def handler(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
            endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
            refused = await act(viewer, endpoint, admin.set_enabled(
                actor_of(dash), endpoint.project_id, endpoint.mode, endpoint.id, on, None,
                by=viewer.user.email))
            return refused or see_other(url_for("webhook", endpoint_id=endpoint.id,
                                                done="webhook-on" if on else "webhook-off"))
        return handler

    dash.page(ONE + "/disable", Action.WEBHOOKS_MANAGE, methods=("POST",),
              endpoint="disable_webhook")(switch(False))
    dash.page(ONE + "/enable", Action.WEBHOOKS_MANAGE, methods=("POST",),
              endpoint="enable_webhook")(switch(True))

    @dash.page(ONE + "/rotate", Action.WEBHOOKS_MANAGE, methods=("POST",),
               endpoint="rotate_webhook_secret", once=True)
    async def rotate_secret(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
        if (await request.form).get("secret_check") != secret_check(endpoint):
            return await detail_page(viewer, endpoint, status=409, error=(
                "Nothing was rotated: this form was made for a secret that has been rotated "
                "since (was the page reloaded?). The secret shown after that rotation is the "
                "current one."))
        rotated = await admin.rotate_secret(actor_of(dash), endpoint.project_id, endpoint.mode,
                                            endpoint.id, None)
        return await detail_page(viewer, rotated, revealed="rotated")

    # -- delete -------------------------------------------------------------------------

    @dash.page(ONE + "/delete", Action.WEBHOOKS_MANAGE, endpoint="confirm_delete_webhook")
    async def confirm_delete(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
        history = tables_of(dash).recent(endpoint.project_id, endpoint.mode,
                                         endpoint_id=endpoint.id, limit=COUNT_CAP + 1)
        waiting = sum(1 for d in history if d.status is not DeliveryStatus.DELIVERED
                      and d.status is not DeliveryStatus.FAILED)
        return await dash.render("webhook_delete.html", viewer, hook=endpoint,
                                 history=len(history), capped=len(history) > COUNT_CAP,
                                 waiting=waiting, confirm_field=CONFIRM_FIELD,
                                 confirm_value=CONFIRM_VALUE)

    @dash.page(ONE + "/delete", Action.WEBHOOKS_MANAGE, methods=("POST",),
               endpoint="delete_webhook", once=True)
    async def delete_webhook(viewer: Viewer, endpoint_id: str) -> ResponseReturnValue:
        endpoint = owned_endpoint(tables_of(dash), viewer, endpoint_id)
        if (await request.form).get(CONFIRM_FIELD) != CONFIRM_VALUE:
            return see_other(url_for("confirm_delete_webhook", endpoint_id=endpoint.id))
        await admin.delete_endpoint(actor_of(dash), endpoint.project_id, endpoint.mode,
                                    endpoint.id, None)
        return see_other(url_for("webhooks", done="webhook-deleted"))
