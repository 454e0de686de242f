"""``/.well-known`` association files, per link domain, built from the
Platforms settings: ``apple-app-site-association`` (Apple's current applinks
format) and ``assetlinks.json`` (Digital Asset Links). Served as
``application/json`` straight from the requested host, never redirected. A
custom domain serves its project's apps; the shared default domain serves every
project's apps (its links belong to all projects)."""

from __future__ import annotations

from urllib.parse import urlsplit

from svc_engine.errors import NotFound
from svc_engine.platforms import Platforms, apple_app_site_association, assetlinks
from web.http import Request, Response, json_response
from web.services import Services, bare_host

AASA = "/.well-known/apple-app-site-association"
ASSETLINKS = "/.well-known/assetlinks.json"
PATHS = (AASA, ASSETLINKS)


class WellKnown:
    def __init__(self, services: Services) -> None:
        self.services = services

    def _platforms(self, host: str | None) -> tuple[list[Platforms], str]:
        """The platforms the host's file lists, and the path its links are
        under (a custom domain's at its root; the default domain's under the
        public URL's path)."""
        s = self.services
        owner = s.links.domain_owner(bare_host(host)) if host else None
        if owner is not None:
            return [s.links.platforms(owner)], ""
        projects = [p for org in s.store.all_orgs() for p in s.store.list_projects(org.id)]
        return [s.links.platforms(p.id) for p in projects], urlsplit(s.config.base_url).path

    async def handle(self, req: Request) -> Response:
        if req.method not in ("GET", "HEAD"):
            raise NotFound("no such file")
        every, base_path = self._platforms(req.header("host"))
        if req.path == AASA:
            body: object = apple_app_site_association(every, base_path=base_path)
        elif req.path == ASSETLINKS:
            body = [stmt for p in every for stmt in assetlinks(p)]
        else:
            raise NotFound("no such file")
        return json_response(200, body, [(b"cache-control", b"public, max-age=300")])
