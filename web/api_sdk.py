"""The deferred deep linking APIs.

SDK (publishable key, ``X-Svc-Sdk: flutter/<version>``):
    POST /v1/sdk/init             launch report; a first launch runs the flows
    POST /v1/sdk/resolve          a link that opened the app (or the landing page's button)
    POST /v1/sdk/handoffs/claim   the newest pending handoff of a signed-in user
Server (secret key):
    POST /v1/handoffs             bind a link to a user ID (stored as a salted hash)

Every answer carries ``{"link": <resolved link> | null}`` (handoffs: the
created handoff). The attribution ops run in the project's order through its
ProjectActor and decide inside the write transaction (storage/attribution_store.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, TypeVar
from urllib.parse import unquote, urlsplit

from storage.attribution_store import ClaimResult, LaunchResult, OpenResult
from storage.writer import Op
from svc_engine.attribution import LaunchFacts
from svc_engine.errors import NotFound
from svc_engine.handoffs import Handoff, handoff_expiry, user_hash
from svc_engine.ids import new_id
from svc_engine.installs import Confidence, Install, Method
from svc_engine.links import Link, iso_utc, resolved_link_json, slug_in
from svc_engine.sdk_requests import (
    parse_claim,
    parse_handoff_create,
    parse_init,
    parse_resolve,
)
from svc_engine.settings import DeferredSettings
from web.auth import KeyContext
from web.client_facts import ClientFacts
from web.http import Request, Response
from web.idem import IdemSlot, json_render

if TYPE_CHECKING:
    from web.api import Api

T = TypeVar("T")


def register(api: Api) -> None:
    services = api.services
    base = services.config.base_url
    public_path = urlsplit(base).path  # links on the default domain are under it
    facts = ClientFacts(services.config, services.network_keys)
    ok = json_render(200)

    def resolved(link: Link | None, *, deferred: bool, confidence: str,
                 method: str | None) -> object:
        if link is None:
            return {"link": None}
        return {"link": resolved_link_json(link, public_url=base, is_deferred=deferred,
                                           confidence=confidence, method=method)}

    def launch_json(value: object) -> object:
        assert isinstance(value, LaunchResult)
        a = value.install.attribution
        if value.link is None or value.decision is None or a is None:
            return {"link": None}
        return resolved(value.link, deferred=True, confidence=a.confidence.value,
                        method=a.method.value)

    def open_json(value: object) -> object:
        assert isinstance(value, OpenResult)
        return resolved(value.link, deferred=value.is_deferred,
                        confidence=Confidence.DETERMINISTIC.value, method=value.method.value)

    def claim_json(value: object) -> object:
        assert isinstance(value, ClaimResult)
        return resolved(value.link, deferred=True, confidence=Confidence.DETERMINISTIC.value,
                        method=Method.AUTHENTICATED_HANDOFF.value)

    def answer_launch(value: object) -> tuple[int, str, bytes]:
        return ok(launch_json(value))

    def answer_open(value: object) -> tuple[int, str, bytes]:
        return ok(open_json(value))

    def answer_claim(value: object) -> tuple[int, str, bytes]:
        return ok(claim_json(value))

    async def submit_and_wait(ctx: KeyContext,
                              build: Callable[[DeferredSettings], Op[T]]) -> T:
        actor = await services.registry.get(ctx.project.id)
        pending = await actor.submit(build)
        return await pending.wait()

    async def init(req: Request) -> Response:
        ctx = api.sdk_auth(req)
        body = await req.body(api.max_body)
        report = parse_init(await req.json(api.max_body))
        now = services.clock.now_ms()
        launch = LaunchFacts.from_init(report, mode=ctx.mode, country=facts.country(req))
        # hashed once the settings are known: only with probabilisticIpMatching,
        # and under the previous epoch's key only when the window reaches it
        ip = (facts.client_ip(req) if report.platform == "ios" and report.is_first_launch
              else None)

        def nets(settings: DeferredSettings) -> tuple[bytes, ...]:
            if ip is None or not settings.probabilistic_ip_matching:
                return ()
            return services.network_keys.launch_hashes(
                ip, since_ms=now - settings.probabilistic_window_minutes * 60_000)

        install = Install(install_id=report.install_id, project_id=ctx.project.id,
                          mode=ctx.mode, platform=report.platform, created_at_ms=now,
                          first_idem_key=req.header("idempotency-key"))
        event_id = new_id(services.random(16))

        async def run(slot: IdemSlot) -> Response:
            idem = slot.write(answer_launch)
            result = await submit_and_wait(ctx, lambda settings: services.attribution
                                           .first_launch_op(
                project_id=ctx.project.id, mode=ctx.mode, install=install,
                is_first_launch=report.is_first_launch, launch=launch, settings=settings,
                net_hashes=nets(settings), now_ms=now, event_id=event_id, idem=idem))
            return slot.respond(result, answer_launch)

        # The SDK retries a failed first launch report on the next launch with
        # the same key (SPEC.md), whose body may differ (an app or OS update in
        # between changes sdkVersion or osVersion): not a 409, which would lose
        # the deferred link, but the op again, which answers a retry of the
        # install's first launch as it was answered (first_idem_key), as it
        # does once the stored answer is swept after 24 hours.
        return await api.idem.run(req, ctx.scope, body, run, rerun_other=True)

    def find_link(url: str, ctx: KeyContext) -> Link:
        try:
            parts = urlsplit(url)
        except ValueError:  # "https://[": no URL, so no link
            raise NotFound("no link for this URL") from None
        domain = services.url_link_domain(parts)
        under = public_path if domain == services.default_domain else ""
        try:  # decoded as the redirector decodes a request's path (web/connection.py):
            path = unquote(parts.path, errors="strict")  # /%70romo is /promo there
        except UnicodeDecodeError:
            raise NotFound("no link for this URL") from None
        slug = slug_in(path, under=under) if domain is not None else None
        link = services.links.by_slug(domain, slug) if domain and slug else None
        if (link is None or link.deleted or link.project_id != ctx.project.id
                or link.mode is not ctx.mode):
            raise NotFound("no link for this URL")
        if link.is_expired(services.clock.now_ms()):
            raise NotFound("the link has expired")
        return link

    async def resolve(req: Request) -> Response:
        ctx = api.sdk_auth(req)
        body = await req.body(api.max_body)
        if (replayed := api.idem.replay(req, ctx.scope, body)) is not None:
            return replayed  # before checks that read the time or the store
        data = await req.json(api.max_body)
        opened = parse_resolve(data)
        short = opened.short_url
        if short is None:
            raise NotFound("the URL is neither a short link nor carries svc_link")
        link = find_link(short, ctx)
        landing = opened.from_landing_page
        now = services.clock.now_ms()
        open_id = new_id(services.random(16))

        async def run(slot: IdemSlot) -> Response:
            idem = slot.write(answer_open)
            result = await submit_and_wait(ctx, lambda settings: services.attribution.open_op(
                project_id=ctx.project.id, mode=ctx.mode, link=link,
                install_id=opened.install_id, platform_hint=opened.platform, landing=landing,
                now_ms=now, open_id=open_id, idem=idem))
            return slot.respond(result, answer_open)

        return await api.idem.run(req, ctx.scope, body, run)

    async def claim(req: Request) -> Response:
        ctx = api.sdk_auth(req)
        body = await req.body(api.max_body)
        request = parse_claim(await req.json(api.max_body))
        hashed = user_hash(ctx.project.salt, request.user_id)
        now = services.clock.now_ms()
        open_id = new_id(services.random(16))

        async def run(slot: IdemSlot) -> Response:
            idem = slot.write(answer_claim)
            result = await submit_and_wait(ctx, lambda settings: services.attribution.claim_op(
                project_id=ctx.project.id, mode=ctx.mode, user_hash=hashed,
                install_id=request.install_id, now_ms=now, open_id=open_id, idem=idem))
            return slot.respond(result, answer_claim)

        return await api.idem.run(req, ctx.scope, body, run)

    def handoff_json(value: object) -> object:
        assert isinstance(value, Handoff)
        return {"id": value.id, "linkId": value.link_id, "expiresAt": iso_utc(value.expires_at_ms),
                "createdAt": iso_utc(value.created_at_ms)}

    created = json_render(201)

    def answer_handoff(value: object) -> tuple[int, str, bytes]:
        return created(handoff_json(value))

    async def create_handoff(req: Request) -> Response:
        ctx = api.server_auth(req)
        body = await req.body(api.max_body)
        if (replayed := api.idem.replay(req, ctx.scope, body)) is not None:
            return replayed  # before checks that read the time or the store
        settings = services.store.get_settings(ctx.project.id)
        request = parse_handoff_create(await req.json(api.max_body),
                                       web_fallback_tokens=settings.web_fallback_tokens)
        now = services.clock.now_ms()
        if request.link_id is not None:
            link = services.links.get(request.link_id)
            if (link is None or link.deleted or link.project_id != ctx.project.id
                    or link.mode is not ctx.mode):
                raise NotFound("no such link in this project and mode")
            if link.is_expired(now):  # as by its URL (find_link)
                raise NotFound("the link has expired")
            link_id = link.id
        elif request.url is not None:
            link_id = find_link(request.url, ctx).id
        else:
            link_id = "00000000-0000-4000-8000-000000000000"  # named by the token in the op
        handoff = Handoff(id=new_id(services.random(16)), link_id=link_id,
                          user_hash=user_hash(ctx.project.salt, request.user_id),
                          mode=ctx.mode, created_at_ms=now,
                          expires_at_ms=handoff_expiry(now, request.expires_in_seconds))

        async def run(slot: IdemSlot) -> Response:
            saved = await services.attribution.create_handoff(
                ctx.project.id, handoff, slot.write(answer_handoff), svc_token=request.svc_token)
            return slot.respond(saved, answer_handoff)

        return await api.idem.run(req, ctx.scope, body, run)

    r = api.router
    r.add("POST", "/v1/sdk/init", init)
    r.add("POST", "/v1/sdk/resolve", resolve)
    r.add("POST", "/v1/sdk/handoffs/claim", claim)
    r.add("POST", "/v1/handoffs", create_handoff)
