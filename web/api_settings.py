"""GET and PATCH /v1/deferred/settings (secret key).

The ProjectActor owns the settings; a PATCH is durable before it is answered
and applies to the next click. Both modes share one settings object.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from svc_engine.settings import DeferredSettings, apply_patch
from web.http import Request, Response, json_response
from web.idem import IdemSlot, json_render

if TYPE_CHECKING:
    from web.api import Api


def _json(settings: object) -> object:
    assert isinstance(settings, DeferredSettings)
    return settings.to_json()


def register(api: Api) -> None:
    services = api.services

    async def get_settings(req: Request) -> Response:
        ctx = api.server_auth(req)
        actor = await services.registry.get(ctx.project.id)
        return json_response(200, (await actor.get_settings()).to_json())

    async def patch_settings(req: Request) -> Response:
        ctx = api.server_auth(req)
        body = await req.body(api.max_body)
        if (replayed := api.idem.replay(req, ctx.scope, body)) is not None:
            return replayed  # a retry of a write that succeeded, before checks of the state
        patch = await req.json(api.max_body)
        # 400s before the key is looked up (a body refused on its own is never a 409);
        # again in the write, on the settings then
        apply_patch(await (await services.registry.get(ctx.project.id)).get_settings(), patch)

        async def run(slot: IdemSlot) -> Response:
            render = json_render(200)

            def answer(value: object) -> tuple[int, str, bytes]:
                return render(_json(value))

            actor = await services.registry.get(ctx.project.id)
            new = await actor.patch_settings(patch, slot.write(answer))
            return slot.respond(new, answer)

        return await api.idem.run(req, ctx.scope, body, run)

    api.router.add("GET", "/v1/deferred/settings", get_settings)
    api.router.add("PATCH", "/v1/deferred/settings", patch_settings)
