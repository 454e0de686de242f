"""The /v1 JSON API: one router, the shared guards, and the route modules."""

from __future__ import annotations

import orjson

from svc_engine.keys import KeyKind
from web.auth import KeyContext, RateLimiter, authenticate
from web.http import Request, Response
from web.idem import IdempotencyGuard
from web.router import Router
from web.services import Services


class Api:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.router = Router()
        self.limiter = RateLimiter(services.config.rate_limit_per_key)
        self.idem = IdempotencyGuard(services)
        self.max_body = services.config.max_body_bytes
        # Route modules register themselves (and their OpenAPI operations).
        from web import api_events, api_links, api_sdk, api_settings, api_webhooks, openapi

        self.event_statistics = api_events.EventStatistics()  # read by /metrics
        for module in (api_settings, api_links, api_sdk, api_events, api_webhooks):
            module.register(self)
        doc = orjson.dumps(openapi.document(services.config.base_url))

        async def openapi_json(req: Request) -> Response:
            return Response(200, doc, [(b"content-type", b"application/json")])

        self.router.add("GET", "/v1/openapi.json", openapi_json)

    def sdk_auth(self, req: Request) -> KeyContext:
        # No per-key limit: every install of the app shares its publishable
        # key, so one would cap the whole app's SDK traffic (100 requests a
        # second by default); each client address is limited by the front.
        return authenticate(req, self.services, KeyKind.PUBLISHABLE)

    def server_auth(self, req: Request) -> KeyContext:
        return authenticate(req, self.services, KeyKind.SECRET, self.limiter)

    async def handle(self, req: Request) -> Response:
        handler, params = self.router.route(req.method, req.path)
        req.params = params
        return await handler(req)
