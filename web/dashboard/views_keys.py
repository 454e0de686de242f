"""Settings > API keys: list, create and revoke the current project's keys in the
current mode (owners, admins and developers; marketers get a note naming whom
to ask, with status 403).

A new key's value is in the response to the create form only: a secret key
is stored as its SHA-256 and can never be shown again; a publishable key is
public by design and stays visible. Revoking is immediate: requests with the
key get 401 ``invalid_api_key``.
"""

from __future__ import annotations

import attrs
from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from svc_engine.errors import NotFound, ValidationError
from svc_engine.ids import is_uuid
from svc_engine.keys import ApiKey, KeyKind
from svc_engine.roles import Action
from web import tenancy
from web.dashboard.context import Dashboard, Viewer, see_other

MAX_NAME = 100


@attrs.frozen
class CreatedKey:
    id: str
    value: str
    kind: KeyKind
    name: str


def register(dash: Dashboard) -> None:
    dash.notices.update({"key-revoked": "The key was revoked. Requests that use it are now "
                                        "refused with 401 invalid_api_key."})

    def project_keys(viewer: Viewer) -> list[ApiKey]:
        if viewer.project is None:
            return []
        mine = [k for k in dash.store.list_keys(viewer.project.id) if k.mode is viewer.mode]
        return sorted(mine, key=lambda k: (not k.active, k.kind.value, -k.created_at_ms))

    async def keys_page(viewer: Viewer, *, status: int = 200, error: str | None = None,
                        created: CreatedKey | None = None) -> Response:
        return await dash.render("keys.html", viewer, status=status, error=error,
                                 keys=project_keys(viewer), created=created)

    @dash.page("/dashboard/settings/keys", Action.KEYS_VIEW)
    async def keys(viewer: Viewer) -> ResponseReturnValue:
        return await keys_page(viewer)

    @dash.page("/dashboard/settings/keys", Action.KEYS_MANAGE, methods=("POST",),
               endpoint="create_key", once=True)
    async def create_key(viewer: Viewer) -> ResponseReturnValue:
        form = await request.form
        try:
            if viewer.project is None:
                raise ValidationError("create a project first", field="project")
            kind = {"publishable": KeyKind.PUBLISHABLE,
                    "secret": KeyKind.SECRET}.get(form.get("kind", ""))
            if kind is None:
                raise ValidationError("choose a publishable or a secret key", field="kind")
            name = " ".join(form.get("name", "").split())
            if len(name) > MAX_NAME or not name.isprintable():
                raise ValidationError(f"a key name has at most {MAX_NAME} characters and no "
                                      "control characters", field="name")
            name = name or f"{'Publishable' if kind is KeyKind.PUBLISHABLE else 'Secret'} key"
        except ValidationError as e:
            return await keys_page(viewer, status=400, error=e.message)
        key_id, value = await tenancy.create_key(dash.store, viewer.project.id, kind,
                                                 viewer.mode, name, dash.services.random,
                                                 dash.now_ms())
        return await keys_page(viewer, created=CreatedKey(key_id, value, kind, name))

    @dash.page("/dashboard/settings/keys/<key_id>/revoke", Action.KEYS_MANAGE,
               methods=("POST",))
    async def revoke_key(viewer: Viewer, key_id: str) -> ResponseReturnValue:
        if viewer.project is None or not is_uuid(key_id):
            raise NotFound("no such key in this project")
        await dash.store.revoke_key(viewer.project.id, key_id, dash.now_ms(), mode=viewer.mode)
        return see_other(url_for("keys", done="key-revoked"))
