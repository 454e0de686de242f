"""Where the person works: organization and project, test or live mode, theme,
and creating organizations (anyone) and projects (owners and admins).

The workspace and the mode belong to the session (two tabs of one session
share them). The theme is a cookie: ``light``, ``dark`` or ``system`` (follows
the device's ``prefers-color-scheme``), and works signed out too. A new
organization starts on the Starter plan with its creator as owner; a new
project gets its four keys, and the page that follows shows the secret ones
this once.
"""

from __future__ import annotations

from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from svc_engine.errors import NotFound, ValidationError
from svc_engine.keys import Mode
from svc_engine.plans import QUOTAS, Plan
from svc_engine.records import Role
from svc_engine.roles import Action
from web import tenancy
from web.dashboard.context import (
    COOKIE_PATH,
    THEME_COOKIE,
    THEMES,
    Dashboard,
    Viewer,
    next_in_other_scope,
    safe_next,
    see_other,
)

THEME_MAX_AGE_S = 365 * 24 * 3600


def register(dash: Dashboard) -> None:
    dash.notices.update({"org-created": "Your organization is ready. Now create its first "
                                        "project."})

    @dash.page("/dashboard/workspace", Action.SESSION, methods=("POST",))
    async def switch_workspace(viewer: Viewer) -> ResponseReturnValue:
        form = await request.form
        project_id, org_id = form.get("project_id", ""), form.get("org_id", "")
        for ws in viewer.workspaces:
            for p in ws.projects:
                if p.id == project_id:
                    await dash.switch(viewer, org_id=ws.org.id, project_id=p.id)
                    return see_other(next_in_other_scope(form.get("next")))
            if ws.org.id == org_id:
                first = ws.projects[0].id if ws.projects else None
                await dash.switch(viewer, org_id=ws.org.id, project_id=first)
                return see_other(next_in_other_scope(form.get("next")))
        raise NotFound("There is no such project in your organizations.")

    @dash.page("/dashboard/mode", Action.SESSION, methods=("POST",))
    async def switch_mode(viewer: Viewer) -> ResponseReturnValue:
        form = await request.form
        try:
            mode = Mode(form.get("mode", ""))
        except ValueError:
            raise ValidationError("mode is test or live", field="mode") from None
        await dash.switch(viewer, mode=mode)
        return see_other(next_in_other_scope(form.get("next")))

    @dash.public("/dashboard/theme", methods=("POST",))
    async def set_theme(viewer: Viewer | None) -> ResponseReturnValue:
        form = await request.form
        theme = form.get("theme", "")
        if theme not in THEMES:
            raise ValidationError("theme is light, dark or system", field="theme")
        resp = see_other(safe_next(form.get("next")))
        resp.set_cookie(THEME_COOKIE, theme, max_age=THEME_MAX_AGE_S, path=COOKIE_PATH,
                        secure=dash.secure_cookies, httponly=True, samesite="Lax")
        return resp

    async def new_org_page(viewer: Viewer, *, status: int = 200, error: str | None = None,
                           name: str = "") -> Response:
        return await dash.render("new_org.html", viewer, status=status, error=error,
                                 name=name)

    @dash.page("/dashboard/orgs/new", Action.ORG_CREATE)
    async def new_org(viewer: Viewer) -> ResponseReturnValue:
        return await new_org_page(viewer)

    @dash.page("/dashboard/orgs/new", Action.ORG_CREATE, methods=("POST",),
               endpoint="create_org", once=True)
    async def create_org(viewer: Viewer) -> ResponseReturnValue:
        name = (await request.form).get("name", "")
        now = dash.now_ms()
        try:
            org = await tenancy.create_org(dash.store, name, Plan.STARTER, dash.services.random,
                                           now)
        except ValidationError as e:
            return await new_org_page(viewer, status=400, error=e.message, name=name)
        await tenancy.add_member(dash.store, org.id, viewer.user.id, Role.OWNER, now)
        await dash.switch(viewer, org_id=org.id, project_id=None)
        return see_other(url_for("new_project", done="org-created"))

    async def new_project_page(viewer: Viewer, *, status: int = 200, error: str | None = None,
                               name: str = "") -> Response:
        assert viewer.workspace is not None
        return await dash.render("new_project.html", viewer, status=status, error=error,
                                 name=name, used=len(viewer.workspace.projects),
                                 limit=QUOTAS[viewer.workspace.org.plan].projects)

    @dash.page("/dashboard/projects/new", Action.PROJECT_CREATE)
    async def new_project(viewer: Viewer) -> ResponseReturnValue:
        return await new_project_page(viewer)

    @dash.page("/dashboard/projects/new", Action.PROJECT_CREATE, methods=("POST",),
               endpoint="create_project", once=True)
    async def create_project(viewer: Viewer) -> ResponseReturnValue:
        assert viewer.org is not None
        name = (await request.form).get("name", "")
        try:
            project, keys = await tenancy.create_project(dash.store, viewer.org.id, name,
                                                         dash.services.random, dash.now_ms())
        except ValidationError as e:
            return await new_project_page(viewer, status=400, error=e.message, name=name)
        await dash.switch(viewer, org_id=viewer.org.id, project_id=project.id)
        viewer = await dash.reload_viewer()
        return await dash.render("project_created.html", viewer, project=project, keys=keys,
                                 base_url=dash.base_url())
