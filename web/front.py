"""The ASGI front: one application that dispatches every request.

``/v1/...`` goes to the JSON API, ``/healthz`` and ``/metrics`` (web/metrics.py)
answer here, ``/dashboard`` and everything under ``/dashboard/`` (its static
files too) go to the Quart-Trio dashboard app, and every other path on a link
domain goes to the redirector. Every answered request is counted for
``/metrics`` and logged (``_log``). An admission limit caps the requests in flight:
past it a request gets an immediate 503 with ``Retry-After`` instead of a long
queue. Unexpected exceptions are logged (without client data) and answered
with 500 ``internal_error``; they never take the process down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from svc_engine.errors import (
    MethodNotAllowed,
    NotFound,
    Overloaded,
    PayloadTooLarge,
    StorageUnavailable,
    SvcError,
    Unauthenticated,
)
from svc_engine.ratelimit import client_key
from web import logs
from web.api import Api
from web.auth import RateLimiter
from web.client_facts import ClientFacts
from web.http import Receive, Request, Response, Scope, Send, error_response, json_response
from web.metrics import CONTENT_TYPE, Metrics, family_of, process_metrics, token_matches
from web.metrics_sources import (
    events_metrics,
    front_metrics,
    redirect_metrics,
    store_metrics,
    timer_metrics,
    webhook_metrics,
)
from web.redirector import Redirector
from web.services import Services
from web.wellknown import WellKnown

log = logging.getLogger("svc.web")
AsgiApp = Callable[[Scope, Receive, Send], Awaitable[None]]


class Front:
    def __init__(self, services: Services, *, dashboard: AsgiApp | None = None) -> None:
        self.services = services
        self.api = Api(services)
        self.dashboard = dashboard
        self.redirector = Redirector(services)
        self.wellknown = WellKnown(services)
        self.in_flight = 0
        self.max_in_flight = services.config.max_in_flight
        self.access_log = services.config.access_log
        Request.body_timeout_s = float(services.config.body_timeout_s)
        self.client_limiter = RateLimiter(services.config.rate_limit_per_client)
        self.client_ip = ClientFacts(services.config, services.network_keys).client_ip
        self.tls = bool(services.config.certfile)
        self.metrics_token = services.config.metrics_token
        self.metrics = Metrics()
        for collect in (front_metrics(lambda: self.in_flight), store_metrics(services.store),
                        webhook_metrics(lambda: services.webhooks), timer_metrics(services.timer),
                        events_metrics(self.api.event_statistics),
                        redirect_metrics(lambda: self.redirector.prefetches_declined),
                        process_metrics(services.clock.now_ms() / 1000)):
            self.metrics.add(collect)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "http":
            await self._http(scope, receive, send)
        elif kind == "lifespan":
            await _lifespan(receive, send)

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = time.perf_counter()
        path: str = scope["path"]
        if self.dashboard is not None and path == "/dashboard/":
            # the home page is /dashboard: a typed or bookmarked trailing slash finds it
            query = scope.get("query_string", b"")
            where = b"/dashboard" + (b"?" + query if query else b"")
            await Response(308, b"", [(b"location", where)]).send(send)
            self._log(scope, 308, start)
            return
        if self.dashboard is not None and (path == "/dashboard" or path.startswith("/dashboard/")):
            await self._dashboard(scope, receive, send, start)
            return
        req = Request(scope, receive if scope["method"] in _NO_BODY
                      else self._receive_aside(receive))
        if self.in_flight >= self.max_in_flight and path != "/healthz":
            resp = error_response(Overloaded("the service is at capacity; retry shortly"))
        else:
            self.in_flight += 1
            try:
                resp = await self._dispatch(req)
            finally:
                self.in_flight -= 1
        try:
            await resp.send(send, head=req.method == "HEAD")
        finally:  # also an answer cut short (client gone, or ended by the send watch)
            self._log(scope, resp.status, start)

    def _receive_aside(self, receive: Receive) -> Receive:
        """``receive`` for a request handled under the in-flight cap: while it
        waits for body bytes from its client, it is not counted (the cap
        bounds the work the service does at once; a client sending its body
        slowly is bounded by SVC_BODY_TIMEOUT and the connection cap), so
        slow bodies cannot fill the cap and turn every request away."""

        body_done = False

        async def aside() -> dict[str, Any]:
            nonlocal body_done
            if body_done:  # e.g. Quart waiting for the disconnect while it works
                return await receive()
            self.in_flight -= 1
            try:
                message = await receive()
            finally:
                self.in_flight += 1
            if message.get("type") != "http.request" or not message.get("more_body", False):
                body_done = True
            return message

        return aside

    async def _dashboard(self, scope: Scope, receive: Receive, send: Send, start: float) -> None:
        """The Quart-Trio dashboard, under the same admission limit, with its
        status in the access log and HSTS when served over TLS."""
        assert self.dashboard is not None
        if self.in_flight >= self.max_in_flight:
            await error_response(Overloaded("the service is at capacity; retry shortly")
                                 ).send(send)
            self._log(scope, 503, start)
            return
        status = 0
        aside = self._receive_aside(receive)
        if any(name == b"range" for name, _ in scope["headers"]):
            # Quart fails on a suffix range (bytes=-5: a 500); the dashboard has
            # nothing worth a part of, so a range is ignored (RFC 9110 14.2)
            scope = {**scope, "headers": [(k, v) for k, v in scope["headers"]
                                          if k not in _RANGE_HEADERS]}

        async def reading() -> dict[str, Any]:
            # A body the connection refuses (its chunk framing: web/connection.py)
            # is answered 413 there, and Quart answers nothing: log that 413.
            nonlocal status
            try:
                return await aside()
            except PayloadTooLarge as e:
                status = e.status
                raise

        async def watched(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                if self.tls:
                    message = {**message, "headers": [*message.get("headers", []), HSTS]}
            await send(message)

        self.in_flight += 1
        try:
            await self.dashboard(scope, reading, watched)
        finally:
            self.in_flight -= 1
            self._log(scope, status, start)

    async def _dispatch(self, req: Request) -> Response:
        try:
            if req.path.startswith("/v1/") or req.path == "/v1":
                who = self.client_ip(req)
                if who is not None:
                    self.client_limiter.check(client_key(who), self.services.clock.now_ms())
                return await self.api.handle(req)
            if req.path == "/healthz":
                _only_get(req)
                return json_response(200, {"status": "ok"})
            if req.path == "/metrics":
                return self._metrics(req)
            if req.path.startswith("/.well-known/"):
                return await self.wellknown.handle(req)
            return await self.redirector.handle(req)
        except SvcError as e:
            # Overloaded is expected under load; StorageUnavailable is logged by
            # the writer, once a burst (storage/writer.py), not once a request.
            if e.status >= 500 and not isinstance(e, Overloaded | StorageUnavailable):
                log.error("%s on %s %s: %s", type(e).__name__, req.method,
                          logs.loggable(req.path), e)
            return error_response(e)
        except Exception:
            log.exception("unhandled error on %s %s", req.method, logs.loggable(req.path))
            return error_response(SvcError("internal error"))

    def _metrics(self, req: Request) -> Response:
        if self.metrics_token is None:
            raise NotFound("metrics are off (set SVC_METRICS_TOKEN to serve them)")
        _only_get(req)
        if not token_matches(req.header("authorization"), self.metrics_token):
            raise Unauthenticated("send the metrics token as a bearer token")
        return Response(200, self.metrics.render(), [(b"content-type", CONTENT_TYPE),
                                                      (b"cache-control", b"no-store")])

    def _log(self, scope: Scope, status: int, start: float) -> None:
        """The request is answered: count it (web/metrics.py) and log it."""
        seconds = time.perf_counter() - start
        path = scope["path"]
        self.metrics.observe(family_of(path), status, seconds)
        if self.access_log:
            logs.access_line(scope["method"], path, status, seconds * 1000)


def _only_get(req: Request) -> None:
    """/healthz and /metrics are read-only: any other method is the router's
    405 ``method_not_allowed`` (JSON body, ``Allow: GET, HEAD``)."""
    if req.method not in _READ:
        raise MethodNotAllowed("only GET and HEAD are allowed here", allowed=_READ)


_READ = ("GET", "HEAD")
_RANGE_HEADERS = (b"range", b"if-range")
_NO_BODY = frozenset(_READ)  # a tap: nothing to wait for, no wrapper to make
HSTS = (b"strict-transport-security", b"max-age=31536000; includeSubDomains")


async def _lifespan(receive: Receive, send: Send) -> None:
    while True:
        message: dict[str, Any] = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
