"""Build > Debugger: why a tap went where it went and why an install was, or
was not, attributed. Everyone may use it; it never writes.

One page, driven by its query string (so a finding can be shared as a URL):

- ``?link=`` a slug, a short URL or a link ID: the link, what a tap on it
  does now from each kind of device, and its latest clicks (read in a worker
  thread: ``dashboard_reads.clicks_of_link`` may read 100,000 clicks);
- ``?click=<id>&at=<ms>`` one recorded click (from the recent clicks list):
  what was kept of it, whether it is still in the probabilistic window, and
  the redirect decision replayed with the current settings;
- ``?install=`` an install ID: the install record (platform, attribution,
  upgrade) and the flows its first launch tried, with each one's outcome
  (``AttributionStore.decision``), and the taps a launch would consider now;
- ``/dashboard/build/debugger/simulate?link=&device=&ios=``: 'simulate a
  tap', the redirector's decision for a device, with no token minted and no
  click recorded.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from quart import request
from quart.typing import ResponseReturnValue

from storage.dashboard_reads import clicks_of_link, find_click, in_click_window, recent_clicks
from svc_engine.attribution import Flow, Outcome
from svc_engine.clicks import Click
from svc_engine.ids import is_uuid
from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.platforms import Platforms
from svc_engine.redirect import Client, Platform, decide
from svc_engine.roles import Action
from svc_engine.settings import DeferredSettings
from web.dashboard import formats
from web.dashboard.context import Dashboard, Viewer
from web.dashboard.nav import NavEntry
from web.dashboard.simulation import DEFAULT_IOS, DEVICES, describe, simulate

RECENT_CLICKS = 20
LINK_CLICKS = 8
WINDOW_SHOWN = 50
FLOW_NAMES = {Flow.INSTALL_REFERRER: "Install referrer (Android)",
              Flow.LANDING_PAGE: "Continue in app page, opened before the launch",
              Flow.PROBABILISTIC_NETWORK: "Probabilistic, same network (iOS)",
              Flow.PROBABILISTIC_COHORT: "Probabilistic, iOS version and country"}
OUTCOME_BADGES = {Outcome.MATCHED: "success", Outcome.SKIPPED: "muted",
                  Outcome.REJECTED: "danger", Outcome.NO_CANDIDATES: "muted",
                  Outcome.CONFLICT: "warning"}
OUTCOME_NAMES = {Outcome.MATCHED: "Matched", Outcome.SKIPPED: "Skipped",
                 Outcome.REJECTED: "Rejected", Outcome.NO_CANDIDATES: "No candidates",
                 Outcome.CONFLICT: "Conflict"}


def register(dash: Dashboard) -> None:
    dash.nav.append(NavEntry("Debugger", "debugger", "Build", icon="bug", order=10))
    formats.install(dash.app.jinja_env)
    services = dash.services

    def find_link(viewer: Viewer, text: str) -> tuple[Link | None, str | None]:
        """The link a slug, short URL or link ID names, or why there is none."""
        assert viewer.project is not None
        text = text.strip()
        found: Link | None = None
        if is_uuid(text):
            found = services.links.get(text.lower())
        elif "/" in text:
            try:
                parts = urlsplit(text if "//" in text else "//" + text)
            except ValueError:  # "https://[" : no URL, so no link
                return None, f"No link of this project matches “{text}”."
            slug = parts.path.strip("/")
            if slug and "/" not in slug:
                found = services.link_at(parts.netloc, slug)
        else:
            for domain in (services.default_domain,
                           *services.links.domains_of(viewer.project.id)):
                found = services.links.by_slug(domain, text)
                if found is not None:
                    break
        if found is None or found.deleted or found.project_id != viewer.project.id:
            return None, f"No link of this project matches “{text}”."
        if found.mode is not viewer.mode:
            return None, (f"That link belongs to {found.mode.value} mode; switch to "
                          f"{found.mode.value.capitalize()} to debug it.")
        return found, None

    def link_of(viewer: Viewer, link_id: str, cache: dict[str, Link | None]) -> Link | None:
        assert viewer.project is not None
        if link_id not in cache:
            cache[link_id] = services.links.shown(link_id, viewer.project.id, viewer.mode)
        return cache[link_id]

    async def page(viewer: Viewer, *, status: int = 200, **extra: Any) -> ResponseReturnValue:
        ctx: dict[str, Any] = {"devices": DEVICES, "device_names": dict(DEVICES),
                               "default_ios": DEFAULT_IOS,
                               "flow_names": FLOW_NAMES, "outcome_badges": OUTCOME_BADGES,
                               "outcome_names": OUTCOME_NAMES, "recent": [],
                               "public_url": services.config.base_url,
                               "country_source": bool(services.config.country_header
                                                      or services.config.geoip_db),
                               **extra}
        project = viewer.project
        if project is not None:
            ctx["settings"] = dash.store.get_settings(project.id)
            ctx["platforms"] = services.links.platforms(project.id)
            cache: dict[str, Link | None] = {}
            ctx["recent"] = [(c, link_of(viewer, c.link_id, cache)) for c in
                             recent_clicks(dash.store, project.id, viewer.mode,
                                           limit=RECENT_CLICKS)]
        return await dash.render("debugger.html", viewer, status=status, **ctx)

    @dash.page("/dashboard/build/debugger", Action.DEBUGGER_VIEW, endpoint="debugger")
    async def debugger_page(viewer: Viewer) -> ResponseReturnValue:
        args = request.args
        if viewer.project is None:
            return await page(viewer)
        extra: dict[str, Any] = {}
        now = dash.now_ms()
        settings = dash.store.get_settings(viewer.project.id)
        platforms = services.links.platforms(viewer.project.id)
        if args.get("link", "").strip():
            link, problem = find_link(viewer, args["link"][:2048])
            extra.update(link_query=args["link"], link=link, link_problem=problem)
            if link is not None:
                extra["matrix"] = [simulate(link, device, DEFAULT_IOS, settings=settings,
                                            platforms=platforms, now_ms=now)
                                   for device, _ in DEVICES]
                project_id, mode, link_id = viewer.project.id, viewer.mode, link.id
                # in a worker thread: up to LINK_CLICK_SCAN clicks may be read
                extra["link_clicks"] = await services.off_loop(lambda: clicks_of_link(
                    dash.store, project_id, mode, link_id, LINK_CLICKS))
        if args.get("click"):
            extra.update(click_lookup(viewer, args.get("click", ""), args.get("at", ""),
                                      settings=settings, platforms=platforms, now_ms=now))
        if args.get("install", "").strip():
            extra.update(install_lookup(viewer, args["install"].strip()[:64], now_ms=now,
                                        settings=settings))
        return await page(viewer, **extra)

    def click_lookup(viewer: Viewer, click_id: str, at: str, *, settings: DeferredSettings,
                     platforms: Platforms, now_ms: int) -> dict[str, Any]:
        assert viewer.project is not None
        click: Click | None = None
        if is_uuid(click_id) and at.isascii() and at.isdigit() and len(at) <= 15:
            click = find_click(dash.store, viewer.project.id, viewer.mode, click_id.lower(),
                               int(at))
        if click is None:
            return {"click_problem": "No such click in this project and mode. Clicks are "
                                     "listed under Recent clicks."}
        link = services.links.shown(click.link_id, viewer.project.id, viewer.mode)
        client = Client(Platform(click.platform) if click.platform in set(Platform)
                        else Platform.DESKTOP, click.os_major)
        replay = None
        if link is not None:
            decision = decide(link, client, method="GET", settings=settings,
                              platforms=platforms, now_ms=now_ms)
            device = {"ios": "iphone", "android": "android"}.get(click.platform, "desktop")
            replay = describe(decision, device, link=link, client=client, settings=settings,
                              platforms=platforms, now_ms=now_ms)
        return {"click": click, "click_link": link, "replay": replay,
                "click_in_window": in_click_window(dash.store, click)}

    def install_lookup(viewer: Viewer, install_id: str, *, now_ms: int,
                       settings: DeferredSettings) -> dict[str, Any]:
        assert viewer.project is not None
        out: dict[str, Any] = {"install_query": install_id}
        if not is_uuid(install_id):
            out["install_problem"] = ("An install ID is a UUID: the app's Svc.installId, also "
                                      "sent as installId in POST /v1/sdk/init.")
            return out
        pid, iid = viewer.project.id, install_id.lower()
        install = services.attribution.get_install(pid, viewer.mode.value, iid)
        if install is None:
            other = Mode.LIVE if viewer.mode is Mode.TEST else Mode.TEST
            elsewhere = services.attribution.get_install(pid, other.value, iid) is not None
            out["install_problem"] = (
                f"That install is in {other.value} mode; switch to {other.value.capitalize()} "
                f"to see it." if elsewhere else
                f"No install {iid} in {viewer.mode.value} mode. An install is recorded by the "
                f"app's first launch report (POST /v1/sdk/init with isFirstLaunch).")
            return out
        decision = services.attribution.decision(pid, viewer.mode.value, iid)
        cache: dict[str, Link | None] = {}
        out.update(install=install, decision=decision,
                   install_link=link_of(viewer, install.attribution.link_id, cache)
                   if install.attribution else None,
                   decision_link=link_of(viewer, decision.link_id, cache)
                   if decision is not None and decision.link_id else None)
        if settings.probabilistic_matching:
            entries = services.attribution.newest_in_window(
                pid, viewer.mode.value, now_ms - settings.window_ms, WINDOW_SHOWN)
            out["window"] = [(e, link_of(viewer, e.link_id, cache)) for e in entries]
        return out

    @dash.page("/dashboard/build/debugger/simulate", Action.DEBUGGER_VIEW,
               endpoint="simulate_tap")
    async def simulate_tap(viewer: Viewer) -> ResponseReturnValue:
        args = request.args
        device = args.get("device", "iphone")
        if device not in dict(DEVICES):
            device = "iphone"
        ios_text = args.get("ios", "").strip()
        form = {"link": args.get("link", "")[:2048], "device": device, "ios": ios_text}
        if viewer.project is None:
            return await page(viewer, sim_form=form)
        if not form["link"].strip():
            return await page(viewer, status=400, sim_form=form,
                              sim_problem="Give the link to tap: a slug, short URL or link ID.")
        ios: int | None = DEFAULT_IOS
        if device == "iphone" and ios_text:
            ios = (int(ios_text) if ios_text.isascii() and ios_text.isdigit()
                   and len(ios_text) <= 2 and 1 <= int(ios_text) <= 99 else None)
            if ios is None:
                return await page(viewer, status=400, sim_form=form,
                                  sim_problem="The iOS version is a whole number such as 18.")
        link, problem = find_link(viewer, form["link"])
        if link is None:
            return await page(viewer, status=404, sim_form=form, sim_problem=problem)
        result = simulate(link, device, ios, settings=dash.store.get_settings(viewer.project.id),
                          platforms=services.links.platforms(viewer.project.id),
                          now_ms=dash.now_ms())
        return await page(viewer, sim_form=form, sim=result, sim_link=link)
