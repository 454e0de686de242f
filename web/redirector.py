"""The edge redirector: ``GET /<slug>`` on a link domain.

Hot path: one LMDB read for the link (plus settings and platforms), a cached
user-agent classification, the pure ``decide``, and one op queued to the
writer for the click. The answer waits for the commit only when a token was
minted (a token handed out must exist when the app presents it); a plain click
is acknowledged to nobody, so the redirect does not wait for its flush.

A browser's prefetch or prerender of a tap that would count (``Sec-Purpose:
prefetch`` and older headers: ``web/client_facts.py`` ``is_prefetch``) is a
503 with nothing written (rule 9 of ``svc_engine/redirect.py``): the browser
drops it, and the real tap comes here afresh.
"""

from __future__ import annotations

import pathlib

import attrs
import jinja2

from svc_engine.attribution import ClickWindowEntry, Token
from svc_engine.clicks import Click
from svc_engine.errors import MethodNotAllowed, StorageUnavailable
from svc_engine.ids import new_id
from svc_engine.links import Link
from svc_engine.redirect import (
    LANDING_MARK,
    Client,
    Decision,
    GonePage,
    LandingPage,
    NotFoundPage,
    OgPage,
    Platform,
    PrefetchDeclined,
    PreviewPage,
    Redirect,
    app_store_url,
    decide,
    landing_open_url,
    landing_universal_link,
    page_meta,
    play_store_url,
)
from web.client_facts import ClientFacts, is_prefetch
from web.http import Request, Response, html_response
from web.services import Services

TEMPLATES = pathlib.Path(__file__).parent / "templates"
_NO_STORE = (b"cache-control", b"no-store")
_REFERRER = (b"referrer-policy", b"no-referrer")
_CSP = (b"content-security-policy",
        b"default-src 'none'; img-src https:; style-src 'unsafe-inline'; "
        b"base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


_LANDING_MARK = LANDING_MARK.encode()
# No Vary (on Sec-Purpose and the like): no cache stores this answer, nor any
# other of the redirector's (all no-store), and Vary only chooses among
# stored answers; on the redirects it would be bytes on every tap for nothing.
_DECLINED_BODY = b"Not prefetched: open the link to follow it.\n"
_DECLINED_HEADERS = ((b"content-type", b"text/plain; charset=utf-8"), _NO_STORE, _REFERRER)

class Redirector:
    def __init__(self, services: Services) -> None:
        self.services = services
        self.facts = ClientFacts(services.config, services.network_keys)
        self.env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)),
                                      autoescape=True, auto_reload=False)
        self.prefetches_declined = 0  # /metrics: these 503s are not failures

    async def handle(self, req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            raise MethodNotAllowed("short links answer GET and HEAD", allowed=("GET", "HEAD"))
        slug = req.path[1:]
        link = None
        if slug and "/" not in slug:
            link = self.services.link_at(req.header("host"), slug)
        services = self.services
        now = services.clock.now_ms()
        if link is None:
            return self._page(404, "notfound.html")
        settings = services.store.get_settings(link.project_id)
        platforms = services.links.platforms(link.project_id)
        facts = self.facts.of(req, want_net_hash=settings.probabilistic_ip_matching)
        client = Client(platform=Platform(facts.platform), os_major=facts.os_major,
                        is_bot=facts.is_bot, is_prefetch=is_prefetch(req))
        decision = decide(link, client, method="GET" if req.method == "GET" else "HEAD",
                          settings=settings, platforms=platforms, now_ms=now)
        if (decision.record_click and not decision.needs_token
                and _LANDING_MARK in req.query_string):
            # The 'Continue in app' page's own button (no custom scheme) or app
            # banner, which may just load the page again: the tap that showed
            # the page was counted, this is not another click.
            decision = attrs.evolve(decision, record_click=False, record_window_entry=False)
        token = None
        if isinstance(outcome := decision.outcome, Redirect) and decision.needs_token:
            token = Token.issue(services.random(24), link_id=link.id, mode=link.mode,
                                now_ms=now, via=outcome.token.value)
        if decision.record_click:
            try:
                await self._record(link, decision, facts.platform, facts.os_major,
                                   facts.country, facts.referrer_host, facts.net_hash, token,
                                   now)
            except StorageUnavailable:  # logged by the writer
                # The token is not stored, so none is handed out: the person
                # still reaches the store or the fallback, without a deferred link.
                token = None
        return self._render(link, decision, token)

    async def _record(self, link: Link, decision: Decision, platform: str,
                      os_major: int | None, country: str | None, referrer_host: str | None,
                      net_hash: bytes | None, token: Token | None, now: int) -> None:
        services = self.services
        click = Click(id=new_id(services.random(16)), link_id=link.id,
                      project_id=link.project_id, mode=link.mode, platform=platform,
                      os_major=os_major, country=country, referrer_host=referrer_host,
                      at_ms=now)
        window = None
        if decision.record_window_entry and os_major is not None:
            window = ClickWindowEntry(click_id=click.id, link_id=link.id, mode=link.mode,
                                      os_major=os_major, country=country, at_ms=now,
                                      net_hash=net_hash)
        op = services.attribution.click_op(click, link, window=window, token=token)
        # Without a token nobody waits for the click ("lazy" in storage/writer.py);
        # a token is asked for by the app later: durable before the answer.
        pending = await services.store.submit(op, lazy=token is None)
        if token is not None:
            await pending.wait()

    def _render(self, link: Link, decision: Decision, token: Token | None) -> Response:
        outcome = decision.outcome
        if isinstance(outcome, Redirect):
            location = outcome.location(token.token if token else None)
            return Response(302, b"", [(b"location", location.encode("utf-8")), _NO_STORE,
                                       _REFERRER])
        if isinstance(outcome, PrefetchDeclined):
            self.prefetches_declined += 1
            return Response(503, _DECLINED_BODY, _DECLINED_HEADERS)
        if isinstance(outcome, NotFoundPage):
            return self._page(404, "notfound.html")
        project = self.services.store.get_project(link.project_id)
        if isinstance(outcome, GonePage):  # "ask <the app> for a new link", not svc
            return self._page(410, "gone.html", site_name=project.name if project else "")
        name = project.name if project else "the app"
        short = link.url(public_url=self.services.config.base_url)
        meta = page_meta(link, short_url=short, site_name=name)
        if isinstance(outcome, LandingPage):
            return self._page(200, "landing.html", app_name=name, meta=meta,
                              app_store_id=outcome.app_store_id,
                              app_store_url=outcome.app_store_url,
                              open_url=landing_open_url(outcome.scheme, short, link.path),
                              banner_url=landing_universal_link(short))
        assert isinstance(outcome, PreviewPage | OgPage)
        platforms = self.services.links.platforms(link.project_id)
        stores = {}
        if isinstance(outcome, OgPage):
            if platforms.ios.app_store_id:
                stores["app_store_url"] = app_store_url(platforms.ios.app_store_id)
            if platforms.android.package_name:
                stores["play_store_url"] = play_store_url(platforms.android.package_name)
        return self._page(200, "og.html", meta=meta, **stores)

    def _page(self, status: int, template: str, **context: object) -> Response:
        html = self.env.get_template(template).render(**context)
        return html_response(status, html, [_NO_STORE, _REFERRER, _CSP])
