"""Live events: the project's clicks, opens, installs and conversions in the
current mode as they happen (SPEC.md: "Live events (refreshes every 5
seconds)"). Everyone may watch.

The page is rendered on the server with the newest events. A small script
(static/live.js; the dashboard's CSP allows scripts from 'self' only) asks
``/dashboard/live/events`` every 5 seconds for what came since and puts the
new rows on top; without JavaScript the page says so and offers a refresh
link. The poll answers rendered rows (the same template as the page) in
JSON, so there is one way a row looks.

A poll reads back ``LAG_MS`` before the newest event the page has, because an
event's time is taken when it happens and it is committed a moment later;
the script drops rows it already shows. A poll answers at most
``POLL_EVENTS`` events, the newest (the page keeps the last 200). Installs
are read only when the project's install counter moved (``installs_marker``),
since reading them walks all of the project's installs
(storage/dashboard_reads.py).

Nothing shown identifies a person: platform, OS major version, country,
referrer host, install IDs; the service keeps no IP address or user agent.
"""

from __future__ import annotations

import hashlib
import pathlib
from typing import Any

import attrs
from quart import jsonify, render_template, request
from quart.typing import ResponseReturnValue

from storage.attribution_store import OpenRecord
from storage.dashboard_reads import (
    Conversion,
    installs_marker,
    recent_clicks,
    recent_conversions,
    recent_installs,
    recent_opens,
)
from svc_engine.clicks import Click
from svc_engine.installs import Install
from svc_engine.links import LAST_MS, Link
from svc_engine.roles import Action
from web.dashboard import formats
from web.dashboard.context import Dashboard, Viewer
from web.dashboard.nav import NavEntry

POLL_SECONDS = 5
PAGE_EVENTS = 50
POLL_EVENTS = 100
LAG_MS = 10_000
METHODS = {"install_referrer": "install referrer", "landing_page": "'Continue in app' page",
           "authenticated_handoff": "authenticated handoff",
           "probabilistic_match": "probabilistic match", "universal_link": "universal link",
           "app_link": "app link"}


@attrs.frozen
class LiveEvent:
    kind: str                 # click, open, install, conversion
    id: str
    at_ms: int
    link_id: str | None
    detail: str
    install_id: str | None = None
    click_at_ms: int | None = None  # for the debugger's click link

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.id}"


def click_event(c: Click) -> LiveEvent:
    parts = [formats.device(c.platform, c.os_major), c.country,
             f"from {c.referrer_host}" if c.referrer_host else "direct"]
    return LiveEvent("click", c.id, c.at_ms, c.link_id, " · ".join(p for p in parts if p),
                     click_at_ms=c.at_ms)


def open_event(o: OpenRecord) -> LiveEvent:
    method = METHODS.get(o.method, o.method)
    return LiveEvent("open", o.id, o.at_ms, o.link_id,
                     f"{formats.device(o.platform)} · {method}", o.install_id)


def install_event(i: Install) -> LiveEvent:
    a = i.attribution
    how = (f"{a.confidence.value} · {METHODS.get(a.method.value, a.method.value)}" if a
           else "unattributed")
    return LiveEvent("install", i.install_id, i.created_at_ms, a.link_id if a else None,
                     f"{formats.device(i.platform)} · {how}", i.install_id)


def conversion_event(c: Conversion) -> LiveEvent:
    detail = c.name
    if c.revenue is not None:
        detail += f" · {c.revenue[1]} {c.revenue[0]}"
    return LiveEvent("conversion", c.id, c.received_at_ms, c.link_id, detail, c.install_id)


def register(dash: Dashboard) -> None:
    dash.nav.append(NavEntry("Live events", "live", None, icon="activity", order=20))
    formats.install(dash.app.jinja_env)
    script = pathlib.Path(__file__).with_name("static") / "live.js"
    script_version = hashlib.sha256(script.read_bytes()).hexdigest()[:10]
    store = dash.store

    def feed(viewer: Viewer, since_ms: int, marker: str | None, limit: int
             ) -> tuple[list[LiveEvent], str | None]:
        if viewer.project is None:
            return [], None
        pid, mode = viewer.project.id, viewer.mode
        events = [click_event(c) for c in recent_clicks(store, pid, mode, since_ms=since_ms,
                                                        limit=limit)]
        events += [open_event(o) for o in recent_opens(store, pid, mode, since_ms=since_ms,
                                                       limit=limit)]
        now_marker = installs_marker(store, pid, mode, dash.now_ms())
        if now_marker != marker:
            events += [install_event(i) for i in recent_installs(store, pid, mode,
                                                                 since_ms=since_ms,
                                                                 limit=limit)]
        events += [conversion_event(c) for c in recent_conversions(store, pid, mode,
                                                                   since_ms=since_ms,
                                                                   limit=limit)]
        events.sort(key=lambda e: (e.at_ms, e.key), reverse=True)
        return events[:limit], now_marker

    def workspace_of(viewer: Viewer) -> str:
        """Which feed this is: a page whose workspace or mode changed elsewhere stops."""
        return f"{viewer.project.id if viewer.project else ''}:{viewer.mode.value}"

    def links_of(viewer: Viewer, events: list[LiveEvent]) -> dict[str, Link | None]:
        if viewer.project is None:  # an organization with no project yet: no events
            return {}
        pid, shown = viewer.project.id, dash.services.links.shown
        return {e.link_id: shown(e.link_id, pid, viewer.mode) for e in events if e.link_id}

    @dash.page("/dashboard/live", Action.LIVE_VIEW, endpoint="live")
    async def live_page(viewer: Viewer) -> ResponseReturnValue:
        events, marker = feed(viewer, 0, None, PAGE_EVENTS)
        newest = events[0].at_ms if events else dash.now_ms()
        return await dash.render("live.html", viewer, events=events, links=links_of(viewer, events),
                                 after=newest, marker=marker or "", poll_seconds=POLL_SECONDS,
                                 workspace=workspace_of(viewer),
                                 script_version=script_version, now_ms=dash.now_ms())

    @dash.page("/dashboard/live/events", Action.LIVE_VIEW, endpoint="live_events")
    async def live_events(viewer: Viewer) -> ResponseReturnValue:
        try:  # a time in ms: 0 to the last one the store can key (8 bytes)
            after = min(max(0, int(request.args.get("after", "0"))), LAST_MS)
        except ValueError:
            after = 0
        marker = request.args.get("im") or None
        events, new_marker = feed(viewer, max(0, after - LAG_MS), marker, POLL_EVENTS)
        body: dict[str, Any] = {
            "html": await render_template("live_rows.html", events=events,
                                          links=links_of(viewer, events), now_ms=dash.now_ms()),
            "keys": [e.key for e in events],
            "after": max([after, *(e.at_ms for e in events)]),
            "im": new_marker or "",
            "workspace": workspace_of(viewer),
        }
        return jsonify(body)
