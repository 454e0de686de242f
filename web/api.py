"""The /v1 JSON API: one router, the shared guards, and the route modules."""

from __future__ import annotations

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
        from web import api_links, api_sdk, api_settings  # route modules register themselves

        api_settings.register(self)
        api_links.register(self)
        api_sdk.register(self)

    def sdk_auth(self, req: Request) -> KeyContext:
        return authenticate(req, self.services, KeyKind.PUBLISHABLE, self.limiter)

    def server_auth(self, req: Request) -> KeyContext:
        return authenticate(req, self.services, KeyKind.SECRET, self.limiter)

    async def handle(self, req: Request) -> Response:
        handler, params = self.router.route(req.method, req.path)
        req.params = params
        return await handler(req)
