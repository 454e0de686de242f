"""Links, domains and platforms APIs.

SDK (publishable key):
    POST   /v1/sdk/links                 create a link (random slug, default domain)
Server (secret key):
    POST   /v1/links                     create (optional custom ``slug`` and ``domain``)
    GET    /v1/links                     list: ?limit=1..100&cursor=&campaign=&channel=&tag=&q=
    GET    /v1/links/{id}                one link
    PATCH  /v1/links/{id}                update (slug and domain are fixed)
    DELETE /v1/links/{id}                delete (the slug stays reserved)
    GET    /v1/domains                   the default and custom domains
    POST   /v1/domains                   add a custom domain {"domain": "go.example.com"}
    DELETE /v1/domains/{domain}          remove a custom domain
    GET    /v1/platforms                 iOS, Android and web settings
    PATCH  /v1/platforms                 change them (drives the association files)
    GET    /v1/link-destinations         hosts links made with the publishable key may
                                         point at ({"sdkAllowedHosts": [...]})
    PATCH  /v1/link-destinations         change them (svc_engine/destinations.py)

A link made with the publishable key is checked against the project's
``sdkAllowedHosts`` before anything is stored; one made with a secret key is
not (the team is trusted).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from svc_engine.destinations import (
    LinkDestinations,
    apply_destinations_patch,
    check_sdk_link,
)
from svc_engine.errors import InvalidDomain, SlugTaken, ValidationError
from svc_engine.ids import is_uuid, new_id
from svc_engine.link_input import FILTER_MAX
from svc_engine.links import (
    Link,
    apply_link_patch,
    is_reserved_slug,
    new_link,
    new_slug,
    normalize_domain,
    parse_link_create,
    parse_link_update,
)
from svc_engine.plans import QUOTAS
from svc_engine.platforms import Platforms, apply_platforms_patch
from svc_engine.store import IdemWrite
from web.auth import KeyContext
from web.http import Request, Response, json_response
from web.idem import IdemSlot, Render, json_render
from web.router import Handler

if TYPE_CHECKING:
    from web.api import Api

MAX_PAGE = 100
RANDOM_SLUG_DRAWS = 3
Setting = TypeVar("Setting", Platforms, LinkDestinations)  # a project's settings record

FILTERS = ("campaign", "channel", "tag", "q")


def register(api: Api) -> None:
    services = api.services
    base = services.config.base_url

    def link_json(value: object) -> object:
        assert isinstance(value, Link)
        return value.to_json(public_url=base)

    async def create(req: Request, ctx: KeyContext, *, custom: bool) -> Response:
        body = await req.body(api.max_body)
        if (replayed := api.idem.replay(req, ctx.scope, body)) is not None:
            return replayed  # before checks that read the time or the store
        data = await req.json(api.max_body)
        now = services.clock.now_ms()
        draft = parse_link_create(data, allow_custom_slug=custom, now_ms=now,
                                  default_domain=services.default_domain)
        if not custom:  # the publishable key: anyone holding the app holds it
            check_sdk_link(services.links.link_destinations(ctx.project.id), draft)
        domain = services.default_domain
        if draft.domain is not None and draft.domain != domain:
            if services.links.domain_owner(draft.domain) != ctx.project.id:
                raise InvalidDomain(f"{draft.domain} is not a domain of this project")
            domain = draft.domain
        link_id = new_id(services.random(16))
        render = json_render(201)

        def answer(v: object) -> tuple[int, str, bytes]:
            return render(link_json(v))

        def random_slug() -> str:
            while is_reserved_slug(slug := new_slug(services.random(8))):
                pass  # "dashboard": one chance in 10**16
            return slug

        async def run(slot: IdemSlot) -> Response:
            # A random slug already taken on the domain (one chance in 10**16
            # per link there) is drawn again, not refused: the caller chose none.
            for draws_left in range(RANDOM_SLUG_DRAWS - 1, -1, -1):
                link = new_link(draft, link_id=link_id, project_id=ctx.project.id,
                                mode=ctx.mode, domain=domain,
                                slug=draft.slug or random_slug(), now_ms=now)
                try:
                    created = await services.links.create(
                        link, org_id=ctx.org.id, quota=QUOTAS[ctx.org.plan].links,
                        idem=slot.write(answer))
                except SlugTaken:
                    if draft.slug is not None or not draws_left:
                        raise
                    continue
                return slot.respond(created, answer)
            raise AssertionError("unreachable: the last draw returns or raises")

        return await api.idem.run(req, ctx.scope, body, run)

    async def sdk_create(req: Request) -> Response:
        return await create(req, api.sdk_auth(req), custom=False)

    async def server_create(req: Request) -> Response:
        return await create(req, api.server_auth(req), custom=True)

    async def list_links(req: Request) -> Response:
        ctx = api.server_auth(req)
        q = req.query()
        for name in FILTERS:  # no stored text is longer; a search's work grows with it
            if len(q.get(name) or "") > FILTER_MAX:
                raise ValidationError(f"{name} is at most {FILTER_MAX} characters", field=name)
        text = q.get("limit", "50")
        # ASCII digits only: int() also took " 5", "+5", "5_0" (50) and full-width digits
        if not (text.isascii() and text.isdigit()) or len(text) > 3:
            raise ValidationError(f"limit must be a whole number, 1 to {MAX_PAGE}",
                                  field="limit")
        limit = int(text)
        if not 1 <= limit <= MAX_PAGE:
            raise ValidationError(f"limit must be 1 to {MAX_PAGE}", field="limit")
        try:
            # in a worker thread: a filter may read LIST_SCAN_CAP (5,000) links
            page = await services.off_loop(lambda: services.links.list(
                ctx.project.id, ctx.mode.value, limit=limit,
                # an empty filter is no filter (an empty text is stored as none:
                # ``?campaign=`` matched no link at all)
                cursor=q.get("cursor") or None, campaign=q.get("campaign") or None,
                channel=q.get("channel") or None, tag=q.get("tag") or None,
                query=q.get("q") or None))
        except ValueError as e:
            if isinstance(e, ValidationError):
                raise
            raise ValidationError("invalid cursor", field="cursor") from None
        return json_response(200, {"data": [link_json(x) for x in page.links],
                                   "nextCursor": page.next_cursor})

    def link_id(req: Request) -> str:
        lid = req.params["id"]
        if not is_uuid(lid):
            raise ValidationError("a link id is a UUID", field="id")
        return lid.lower()

    async def get_link(req: Request) -> Response:
        ctx = api.server_auth(req)
        link = services.links.get(link_id(req))
        if (link is None or link.deleted or link.project_id != ctx.project.id
                or link.mode is not ctx.mode):
            from svc_engine.errors import NotFound
            raise NotFound("no such link")
        return json_response(200, link_json(link))

    async def patch_link(req: Request) -> Response:
        ctx = api.server_auth(req)
        lid = link_id(req)
        body = await req.body(api.max_body)
        if (replayed := api.idem.replay(req, ctx.scope, body)) is not None:
            return replayed  # before checks that read the time or the store
        patch = parse_link_update(await req.json(api.max_body), now_ms=services.clock.now_ms())
        render = json_render(200)

        def answer(v: object) -> tuple[int, str, bytes]:
            return render(link_json(v))

        async def run(slot: IdemSlot) -> Response:
            now = services.clock.now_ms()
            updated = await services.links.update(
                ctx.project.id, ctx.mode.value, lid,
                lambda old: apply_link_patch(old, patch, now_ms=now), slot.write(answer))
            return slot.respond(updated, answer)

        return await api.idem.run(req, ctx.scope, body, run)

    async def delete_link(req: Request) -> Response:
        ctx = api.server_auth(req)
        lid = link_id(req)
        body = await req.body(api.max_body)
        render = json_render(200)

        def gone(v: object) -> object:
            assert isinstance(v, Link)
            return {"id": v.id, "deleted": True}

        def answer(v: object) -> tuple[int, str, bytes]:
            return render(gone(v))

        async def run(slot: IdemSlot) -> Response:
            deleted = await services.links.delete(ctx.project.id, ctx.mode.value, lid,
                                                  ctx.org.id, services.clock.now_ms(),
                                                  slot.write(answer))
            return slot.respond(deleted, answer)

        return await api.idem.run(req, ctx.scope, body, run)

    # -- domains -------------------------------------------------------------------

    def domains_json(project_id: str) -> dict[str, object]:
        return {"default": services.default_domain,
                "custom": services.links.domains_of(project_id)}

    async def list_domains(req: Request) -> Response:
        ctx = api.server_auth(req)
        return json_response(200, domains_json(ctx.project.id))

    def domains_render(status: int) -> Render:
        render = json_render(status)
        return lambda custom: render({"default": services.default_domain, "custom": custom})

    async def add_domain(req: Request) -> Response:
        ctx = api.server_auth(req)
        body = await req.body(api.max_body)
        data = await req.json(api.max_body)
        if not isinstance(data, dict) or set(data) != {"domain"}:
            raise ValidationError('send {"domain": "go.example.com"}', field="domain")
        domain = normalize_domain(data["domain"])
        own = services.default_domain.rsplit(":", 1)[0]
        answer = domains_render(201)

        async def run(slot: IdemSlot) -> Response:
            custom = await services.links.add_domain(
                ctx.project.id, domain, {own, services.default_domain}, slot.write(answer))
            return slot.respond(custom, answer)

        return await api.idem.run(req, ctx.scope, body, run)

    async def remove_domain(req: Request) -> Response:
        ctx = api.server_auth(req)
        body = await req.body(api.max_body)
        domain = normalize_domain(req.params["domain"])
        answer = domains_render(200)

        async def run(slot: IdemSlot) -> Response:
            custom = await services.links.remove_domain(ctx.project.id, domain,
                                                        slot.write(answer))
            return slot.respond(custom, answer)

        return await api.idem.run(req, ctx.scope, body, run)

    # -- project settings: platforms, link destinations -------------------------------

    def setting_routes(read: Callable[[str], Setting], apply: Callable[[Setting, object], Setting],
                       save: Callable[[str, Callable[[Setting], Setting], IdemWrite | None],
                                      Awaitable[Setting]],
                       ) -> tuple[Handler, Handler]:
        """GET and PATCH of a project's settings record: ``read`` it, ``apply``
        a body to it (400s before the Idempotency-Key is used; again inside
        the write, on what is stored then) and ``save`` it."""
        render = json_render(200)

        def answer(v: object) -> tuple[int, str, bytes]:
            assert isinstance(v, Platforms | LinkDestinations)
            return render(v.to_json())

        async def get(req: Request) -> Response:
            ctx = api.server_auth(req)
            return json_response(200, read(ctx.project.id).to_json())

        async def patch(req: Request) -> Response:
            ctx = api.server_auth(req)
            body = await req.body(api.max_body)
            data = await req.json(api.max_body)
            apply(read(ctx.project.id), data)  # 400s before

            async def run(slot: IdemSlot) -> Response:
                saved = await save(ctx.project.id, lambda now: apply(now, data),
                                   slot.write(answer))
                return slot.respond(saved, answer)

            return await api.idem.run(req, ctx.scope, body, run)

        return get, patch

    get_platforms, patch_platforms = setting_routes(
        services.links.platforms, apply_platforms_patch, services.links.patch_platforms)
    get_destinations, patch_destinations = setting_routes(
        services.links.link_destinations, apply_destinations_patch,
        services.links.patch_link_destinations)

    r = api.router
    r.add("POST", "/v1/sdk/links", sdk_create)
    r.add("POST", "/v1/links", server_create)
    r.add("GET", "/v1/links", list_links)
    r.add("GET", "/v1/links/{id}", get_link)
    r.add("PATCH", "/v1/links/{id}", patch_link)
    r.add("DELETE", "/v1/links/{id}", delete_link)
    r.add("GET", "/v1/domains", list_domains)
    r.add("POST", "/v1/domains", add_domain)
    r.add("DELETE", "/v1/domains/{domain}", remove_domain)
    r.add("GET", "/v1/platforms", get_platforms)
    r.add("PATCH", "/v1/platforms", patch_platforms)
    r.add("GET", "/v1/link-destinations", get_destinations)
    r.add("PATCH", "/v1/link-destinations", patch_destinations)
