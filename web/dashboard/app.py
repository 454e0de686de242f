"""The dashboard app: ``create_dashboard(services)`` builds the Quart-Trio app
the ASGI front mounts under ``/dashboard``.

Pages are rendered on the server and work without JavaScript. The app holds
no state of its own beyond the ``Dashboard`` object (context.py); each area
of the dashboard is a view module with a ``register(dash)`` function listed in
``VIEW_MODULES``. A later page is one more module here plus its ``NavEntry``
(nav.py).
"""

from __future__ import annotations

import logging
from types import ModuleType
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio
from werkzeug.exceptions import HTTPException

from svc_engine.errors import SvcError
from svc_engine.roles import who_may
from web.dashboard import (
    views_auth,
    views_billing,
    views_debugger,
    views_domains,
    views_keys,
    views_links,
    views_live,
    views_platforms,
    views_sdk,
    views_team,
    views_webhook_deliveries,
    views_webhooks,
    views_workspace,
)
from web.dashboard.context import Dashboard, fmt_date, fmt_time, roles_text
from web.logs import loggable
from web.services import Services

log = logging.getLogger("svc.dashboard")

VIEW_MODULES: tuple[ModuleType, ...] = (
    views_auth, views_workspace, views_sdk, views_keys, views_team, views_billing,
    views_links, views_live, views_debugger, views_platforms, views_domains,
    views_webhooks, views_webhook_deliveries,
)
MAX_FORM_BYTES = 64 * 1024


def create_dashboard(services: Services) -> Any:
    """The dashboard as an ASGI app (a ``QuartTrio``); see web/front.py."""
    app = QuartTrio(__name__, static_folder="static", static_url_path="/dashboard/static",
                    template_folder="templates")
    # BODY_TIMEOUT: SVC_BODY_TIMEOUT, as for the API (Quart's own is 60 s: a
    # sign-in body dripped in held its connection twice as long as the setting)
    app.config.update(MAX_CONTENT_LENGTH=MAX_FORM_BYTES, MAX_FORM_MEMORY_SIZE=MAX_FORM_BYTES,
                      SEND_FILE_MAX_AGE_DEFAULT=86_400, TEMPLATES_AUTO_RELOAD=False,
                      BODY_TIMEOUT=services.config.body_timeout_s)
    env = app.jinja_env
    env.trim_blocks = env.lstrip_blocks = True
    env.filters.update(time=fmt_time, date=fmt_date)
    env.globals.update(roles_text=roles_text, who_may=who_may)
    dash = Dashboard(app, services)
    app.extensions["svc.dashboard"] = dash
    for module in VIEW_MODULES:
        module.register(dash)

    @app.after_request
    async def finish(resp: Response) -> Response:
        return dash.finish(resp)

    @app.errorhandler(SvcError)
    async def svc_error(e: SvcError) -> Response:
        return await dash.svc_error(e)

    @app.errorhandler(HTTPException)
    async def http_error(e: HTTPException) -> Response:
        code = e.code or 500
        title = {404: "Page not found", 405: "Not allowed here",
                 413: "That form is too large"}.get(code, "Something went wrong")
        message = {404: "There is no dashboard page at this address."}.get(
            code, e.description or "")
        resp = await dash.error(await dash.viewer(), code, title, message)
        if code == 405 and getattr(e, "valid_methods", None):
            resp.headers["Allow"] = ", ".join(e.valid_methods)  # type: ignore[attr-defined]
        return resp

    @app.errorhandler(Exception)
    async def unexpected(e: Exception) -> Response:
        # Quart's own handler logs the raw path: an invitation's token, or a
        # decoded %0a forging a log line. The path as the access log has it.
        log.error("%s on %s %s", type(e).__name__, request.method, loggable(request.path),
                  exc_info=e)
        return await dash.error(await dash.viewer(), 500, "Something went wrong",
                                "The service hit an internal error. Try again in a moment.")

    return app
