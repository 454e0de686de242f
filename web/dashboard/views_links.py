"""Links: the current project's links in the current mode. Everyone lists them
and sees their QR codes and analytics; everyone creates, edits and deletes
them too (svc_engine/roles.py: marketers make campaign links).

Links are validated by the links API's own parsers (via link_form.py) and
written through ``LinksStore``, so slugs, custom domains and the plan's link
quota follow the same rules as ``POST /v1/links``. A deleted link answers 404
and its slug stays reserved.

A link's page shows its QR code (``segno``; SVG and PNG, with the standard
four-module quiet zone and medium error correction) and its analytics over
the last 7, 30 or 90 days, read from the analytics counters: clicks by day,
the funnel, installs by method, top countries and referrer hosts.
"""

from __future__ import annotations

import io
from datetime import date, timedelta
from typing import Any

import segno
from quart import Response, current_app, request, url_for
from quart.typing import ResponseReturnValue

from storage import links_store
from storage.analytics_store import AnalyticsStore
from storage.dashboard_reads import link_click_totals
from svc_engine.analytics import DayRange, summary_funnel
from svc_engine.errors import CallerError, InvalidDomain, NotFound, ValidationError
from svc_engine.events import utc_day
from svc_engine.ids import is_uuid, new_id
from svc_engine.keys import Mode
from svc_engine.links import (
    Link,
    apply_link_patch,
    new_link,
    new_slug,
    parse_link_create,
    parse_link_update,
)
from svc_engine.plans import QUOTAS
from svc_engine.roles import Action
from web.dashboard import charts
from web.dashboard.context import Dashboard, Viewer, see_other
from web.dashboard.link_form import (
    EMPTY_PARAM_ROWS,
    LABELS,
    PARAM_TYPES,
    LinkForm,
    create_body,
    from_form,
    from_link,
    label_error,
    update_body,
)
from web.dashboard.nav import NavEntry

PAGE_SIZE = 25
RANGES = (7, 30, 90)
FILTERS = ("q", "campaign", "channel", "tag")
METHOD_NAMES = {
    "install_referrer": "Install referrer", "landing_page": "'Continue in app' page",
    "authenticated_handoff": "Authenticated handoff", "probabilistic_match": "Probabilistic",
    "universal_link": "Universal link", "app_link": "App link", "none": "Unattributed",
}
REFERRER_NAMES = {"direct": "Direct or none"}
COUNTRY_NAMES = {"unknown": "Unknown"}


def register(dash: Dashboard) -> None:
    dash.nav.append(NavEntry("Links", "links", None, icon="link", order=10))
    dash.notices.update({
        "link-created": "The link was created.",
        "link-saved": "The link was saved. Changes apply to the next tap.",
        "link-deleted": "The link was deleted. Its short URL now answers 404; the slug stays "
                        "reserved.",
    })
    analytics = AnalyticsStore(dash.store)
    links = dash.services.links

    def public_url() -> str:
        return dash.services.config.base_url

    def owned(viewer: Viewer, link_id: str) -> Link:
        """The link, when it is the current project's in the current mode."""
        link = links.get(link_id.lower()) if is_uuid(link_id) else None
        if link is None or link.deleted or viewer.project is None \
                or link.project_id != viewer.project.id:
            raise NotFound("There is no such link in this project.")
        if link.mode is not viewer.mode:
            raise NotFound(f"This link belongs to {link.mode.value} mode. Switch to "
                           f"{link.mode.value.capitalize()} to see it.")
        return link

    def domains(viewer: Viewer) -> list[str]:
        """The default domain (the form's empty choice), then the custom ones."""
        custom = links.domains_of(viewer.project.id) if viewer.project else []
        return [dash.services.default_domain, *custom]

    def quota(viewer: Viewer) -> tuple[int, int | None]:
        assert viewer.org is not None
        return links.org_link_count(viewer.org.id), QUOTAS[viewer.org.plan].links

    # -- list -------------------------------------------------------------------------

    @dash.page("/dashboard/links", Action.LINKS_VIEW, endpoint="links")
    async def links_page(viewer: Viewer) -> ResponseReturnValue:
        filters = {k: request.args.get(k, "").strip()[:100] for k in FILTERS}
        cursor = request.args.get("cursor") or None
        rows: list[Link] = []
        next_cursor = None
        partial = False
        if viewer.project is not None:
            try:
                project_id = viewer.project.id
                # in a worker thread: a filter may read LIST_SCAN_CAP (5,000) links
                page = await dash.services.off_loop(lambda: links.list(
                    project_id, viewer.mode.value, limit=PAGE_SIZE,
                    cursor=cursor, campaign=filters["campaign"] or None,
                    channel=filters["channel"] or None,
                    tag=filters["tag"] or None, query=filters["q"] or None))
            except ValueError:  # a cursor that is not hex, or not this project's
                raise ValidationError("That page of links no longer exists; start from the "
                                      "first page.", field="cursor") from None
            rows, next_cursor, partial = page.links, page.next_cursor, page.partial
        days = last_days(dash.now_ms(), 30)
        clicks = (link_click_totals(dash.store, viewer.project.id, viewer.mode,
                                    [r.id for r in rows], days.days())
                  if viewer.project is not None else {})
        filtering: dict[str, Any] = {k: v for k, v in filters.items() if v}
        used, limit = quota(viewer)
        return await dash.render(
            "links.html", viewer, links=rows, clicks=clicks, filters=filters, filtering=filtering,
            cursor=cursor, next_url=url_for("links", **filtering, cursor=next_cursor)
            if next_cursor else None, first_url=url_for("links", **filtering),
            partial=partial, searched=links_store.LIST_SCAN_CAP,
            used=used, limit=limit, public_url=public_url(), now_ms=dash.now_ms())

    # -- create -------------------------------------------------------------------------

    async def form_page(viewer: Viewer, form: LinkForm, *, link: Link | None = None,
                        status: int = 200, error: str | None = None,
                        error_field: str | None = None, extra_rows: int = EMPTY_PARAM_ROWS
                        ) -> Response:
        used, limit = quota(viewer)
        summary = error
        if error is not None and error_field is not None:
            summary = (f"The link was not {'saved' if link else 'created'}: check "
                       f"{LABELS[error_field]} below.")
        return await dash.render(
            "link_form.html", viewer, status=status, form=form, link=link, error=summary,
            error_field=error_field, field_message=error, rows=form.rows(extra_rows), labels=LABELS,
            param_types=PARAM_TYPES, domains=domains(viewer), used=used, limit=limit,
            public_url=public_url())

    @dash.page("/dashboard/links/new", Action.LINKS_MANAGE, endpoint="new_link")
    async def new_link_page(viewer: Viewer) -> ResponseReturnValue:
        return await form_page(viewer, LinkForm())

    @dash.page("/dashboard/links/new", Action.LINKS_MANAGE, methods=("POST",), once=True)
    async def create_link(viewer: Viewer) -> ResponseReturnValue:
        data = await request.form
        form = from_form(data)
        if data.get("more_params"):
            return await form_page(viewer, form, extra_rows=EMPTY_PARAM_ROWS + 3)
        try:
            if viewer.project is None or viewer.org is None:
                raise ValidationError("create a project first", field="project")
            now = dash.now_ms()
            draft = parse_link_create(create_body(form), allow_custom_slug=True, now_ms=now,
                                      default_domain=dash.services.default_domain)
            domain = dash.services.default_domain
            if draft.domain is not None and draft.domain != domain:
                if links.domain_owner(draft.domain) != viewer.project.id:
                    raise InvalidDomain(f"{draft.domain} is not a domain of this project")
                domain = draft.domain
            link = new_link(draft, link_id=new_id(dash.services.random(16)),
                            project_id=viewer.project.id, mode=viewer.mode, domain=domain,
                            slug=draft.slug or new_slug(dash.services.random(8)), now_ms=now)
            created = await links.create(link, org_id=viewer.org.id,
                                         quota=QUOTAS[viewer.org.plan].links, idem=None)
        except CallerError as e:
            field, message = label_error(e)
            if isinstance(e, InvalidDomain):
                field = "domain"
            return await form_page(viewer, form, status=e.status, error=message,
                                   error_field=field)
        return see_other(url_for("link_detail", link_id=created.id, done="link-created"))

    # -- one link -----------------------------------------------------------------------

    @dash.page("/dashboard/links/<link_id>", Action.LINKS_VIEW)
    async def link_detail(viewer: Viewer, link_id: str) -> ResponseReturnValue:
        link = owned(viewer, link_id)
        days = _int_arg("days", 30, RANGES)
        span = last_days(dash.now_ms(), days)
        assert viewer.project is not None
        project_id, mode = viewer.project.id, viewer.mode
        # A long tail of referrer hosts is 100,000s of counter rows: read and
        # chart them in a worker thread, never on the loop every tap waits on.
        stats = await dash.services.off_loop(
            lambda: link_analytics(analytics, project_id, mode, link.id, span))
        return await dash.render(
            "link_detail.html", viewer, link=link, short_url=link.url(public_url=public_url()),
            days=days, ranges=RANGES, span=span, stats=stats, now_ms=dash.now_ms())

    @dash.page("/dashboard/links/<link_id>/edit", Action.LINKS_MANAGE)
    async def edit_link(viewer: Viewer, link_id: str) -> ResponseReturnValue:
        link = owned(viewer, link_id)
        return await form_page(viewer, from_link(link), link=link)

    @dash.page("/dashboard/links/<link_id>/edit", Action.LINKS_MANAGE, methods=("POST",))
    async def update_link(viewer: Viewer, link_id: str) -> ResponseReturnValue:
        link = owned(viewer, link_id)
        assert viewer.project is not None
        data = await request.form
        form = from_form(data)
        if data.get("more_params"):
            return await form_page(viewer, form, link=link, extra_rows=EMPTY_PARAM_ROWS + 3)
        try:
            now = dash.now_ms()
            patch = parse_link_update(update_body(form, link), now_ms=now)
            await links.update(viewer.project.id, viewer.mode.value, link.id,
                               lambda old: apply_link_patch(old, patch, now_ms=now), None)
        except CallerError as e:
            field, message = label_error(e)
            return await form_page(viewer, form, link=link, status=e.status, error=message,
                                   error_field=field)
        return see_other(url_for("link_detail", link_id=link.id, done="link-saved"))

    @dash.page("/dashboard/links/<link_id>/delete", Action.LINKS_MANAGE, methods=("POST",),
               once=True)
    async def delete_link(viewer: Viewer, link_id: str) -> ResponseReturnValue:
        link = owned(viewer, link_id)
        assert viewer.project is not None and viewer.org is not None
        await links.delete(viewer.project.id, viewer.mode.value, link.id, viewer.org.id,
                           dash.now_ms(), None)
        return see_other(url_for("links", done="link-deleted"))

    # -- QR codes -------------------------------------------------------------------------

    @dash.page("/dashboard/links/<link_id>/qr.svg", Action.LINKS_VIEW)
    async def link_qr_svg(viewer: Viewer, link_id: str) -> ResponseReturnValue:
        link = owned(viewer, link_id)
        url = link.url(public_url=public_url())
        buf = io.BytesIO()
        qr_code(url).save(buf, kind="svg", scale=8, border=4, dark="#000", light="#fff",
                          xmldecl=False, title=f"QR code for {url}")
        return _file(buf.getvalue(), "image/svg+xml", f"{link.slug}-qr.svg")

    @dash.page("/dashboard/links/<link_id>/qr.png", Action.LINKS_VIEW)
    async def link_qr_png(viewer: Viewer, link_id: str) -> ResponseReturnValue:
        link = owned(viewer, link_id)
        buf = io.BytesIO()
        qr_code(link.url(public_url=public_url())).save(buf, kind="png", scale=12, border=4)
        return _file(buf.getvalue(), "image/png", f"{link.slug}-qr.png")


def qr_code(url: str) -> Any:
    """A QR code (not Micro QR) with medium error correction: survives some dirt
    or a small logo, and keeps short URLs at version 2 or 3."""
    return segno.make(url, error="m", micro=False)


def last_days(now_ms: int, days: int) -> DayRange:
    last = date.fromisoformat(utc_day(now_ms))
    return DayRange((last - timedelta(days=days - 1)).isoformat(), last.isoformat())


def link_analytics(analytics: AnalyticsStore, project_id: str, mode: Mode, link_id: str,
                   span: DayRange) -> dict[str, Any]:
    """A link page's charts over ``span``: one summary read (the funnel is its
    totals, not a second read), its breakdowns left unsorted (``bar_rows``
    ranks the few it shows). Blocking: the page runs it off the loop."""
    summary = analytics.summary(project_id, mode, span, link_id, ranked=False)
    return link_stats(summary, summary_funnel(summary))


def link_stats(summary: dict[str, Any], funnel: dict[str, int]) -> dict[str, Any]:
    """What the link page draws: the charts and their tables."""
    clicks = summary["clicks"]
    return {
        "funnel": funnel,
        "by_day": charts.column_chart(list(clicks["byDay"].items())),
        "steps": charts.funnel_steps([("Clicks", funnel["clicks"]),
                                      ("Installs", funnel["installs"]),
                                      ("Opens", funnel["opens"]),
                                      ("Conversions", funnel["conversions"])]),
        "methods": charts.bar_rows(summary["installs"]["byMethod"], names=METHOD_NAMES),
        "countries": charts.bar_rows(clicks["byCountry"], names=COUNTRY_NAMES),
        "referrers": charts.bar_rows(clicks["byReferrer"], names=REFERRER_NAMES),
    }


def _int_arg(name: str, default: int, allowed: tuple[int, ...]) -> int:
    try:
        value = int(request.args.get(name, default))
    except ValueError:
        return default
    return value if value in allowed else default


def _file(body: bytes, mimetype: str, filename: str) -> Response:
    resp: Response = current_app.response_class(body, mimetype=mimetype)
    if request.args.get("download"):
        resp.headers["Content-Disposition"] = f'attachment; filename="{filename}"'
    return resp
