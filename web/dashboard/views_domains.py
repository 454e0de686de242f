"""Build > Domains: the default link domain and the project's custom domains.
Everyone sees them; owners, admins and developers add and remove custom
domains (svc_engine/roles.py).

Adding and removing go through ``LinksStore.add_domain`` and
``remove_domain`` with the names checked by ``normalize_domain``, as
``POST /v1/domains`` does: a domain belongs to one project of the service,
and the service's own domain cannot be added. A removed domain's links stop
resolving (their URLs name it) until it is added again, which the page says
before removing.
"""

from __future__ import annotations

import ipaddress

from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from storage.dashboard_reads import slugs_on_domain
from svc_engine.errors import CallerError, NotFound
from svc_engine.links import normalize_domain
from svc_engine.roles import Action
from web.dashboard.context import Dashboard, Viewer, see_other
from web.dashboard.nav import NavEntry
from web.wellknown import AASA


def register(dash: Dashboard) -> None:
    dash.nav.append(NavEntry("Domains", "domains", "Build", icon="globe", order=30))
    dash.notices.update({
        "domain-added": "The domain was added. Links created on it are served as soon as "
                        "its DNS points here.",
        "domain-removed": "The domain was removed. Its links no longer resolve.",
    })
    services = dash.services

    def own_host() -> str:
        return services.default_domain.rsplit(":", 1)[0]

    def dns_record() -> str:
        """The DNS record a custom domain needs: a CNAME to the service's host
        name, or an A/AAAA record when the service is reached by address."""
        host = own_host().strip("[]")
        try:
            kind = "A" if ipaddress.ip_address(host).version == 4 else "AAAA"
        except ValueError:
            kind = "CNAME"
        return f"{kind} go.example.com → {host}"

    async def domains_page(viewer: Viewer, *, status: int = 200, error: str | None = None,
                           typed: str = "") -> Response:
        custom = services.links.domains_of(viewer.project.id) if viewer.project else []
        rows = [(d, slugs_on_domain(dash.store, d)) for d in custom]
        return await dash.render(
            "domains.html", viewer, status=status, error=error, typed=typed, rows=rows,
            default=services.default_domain, public_url=services.config.base_url.rstrip("/"),
            dns_record=dns_record(), aasa_path=AASA)

    @dash.page("/dashboard/build/domains", Action.DOMAINS_VIEW, endpoint="domains")
    async def domains_view(viewer: Viewer) -> ResponseReturnValue:
        return await domains_page(viewer)

    @dash.page("/dashboard/build/domains", Action.DOMAINS_MANAGE, methods=("POST",),
               endpoint="add_domain")
    async def add_domain(viewer: Viewer) -> ResponseReturnValue:
        typed = (await request.form).get("domain", "")[:300]
        try:
            if viewer.project is None:
                raise NotFound("create a project first")
            domain = normalize_domain(typed)
            await services.links.add_domain(viewer.project.id, domain,
                                            {own_host(), services.default_domain})
        except CallerError as e:
            return await domains_page(viewer, status=e.status, error=_sentence(e.message),
                                      typed=typed)
        return see_other(url_for("domains", done="domain-added"))

    @dash.page("/dashboard/build/domains/<domain>/remove", Action.DOMAINS_MANAGE,
               methods=("POST",), endpoint="remove_domain", once=True)
    async def remove_domain(viewer: Viewer, domain: str) -> ResponseReturnValue:
        if viewer.project is None:
            raise NotFound("no such domain in this project")
        try:
            name = normalize_domain(domain)
        except CallerError:
            raise NotFound("no such domain in this project") from None
        await services.links.remove_domain(viewer.project.id, name)
        return see_other(url_for("domains", done="domain-removed"))


def _sentence(message: str) -> str:
    """A message as a sentence; a leading domain name keeps its case."""
    first = message.split(" ", 1)[0]
    text = message if "." in first else message[:1].upper() + message[1:]
    return text if text.endswith((".", "!", "?")) else text + "."
