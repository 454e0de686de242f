"""The dashboard's request plumbing: who is asking, the guard on every route,
and rendering.

Every route is declared through ``Dashboard.page`` (signed in, needing one
``Action`` of svc_engine.roles.MATRIX) or ``Dashboard.public``. The guard runs
before the view, in this order:

1. session: no live session means a redirect (303) to the sign-in page;
2. CSRF: a POST without the right ``csrf`` field is refused (403);
3. role: an action the role does not allow is refused (403); on pages with a
   contact note (API keys, Webhooks) the refusal shows who can help.

``Dashboard.routes`` records every declaration; the role-matrix test walks it,
so a route cannot be added without saying which action it needs.
"""

from __future__ import annotations

import hashlib
import logging
import pathlib
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import quote, unquote, urlencode

import attrs
import trio
from quart import Response, current_app, g, render_template, request
from quart.typing import ResponseReturnValue
from werkzeug.exceptions import HTTPException

from storage import accounts
from storage.lmdb_store import LmdbStore
from svc_engine import csrf
from svc_engine.errors import CallerError, StorageUnavailable, SvcError
from svc_engine.keys import Mode
from svc_engine.records import Organization, Project, Role, User
from svc_engine.roles import CONTACT_NOTE, Action, allows, who_may
from svc_engine.sessions import ABSOLUTE_MS, Session, encode_token, is_live, token_hash, touched
from web.client_facts import client_address
from web.dashboard.form_once import FormOnce, fields_digest
from web.dashboard.formats import utc
from web.dashboard.nav import DEFAULT_NAV, NavEntry, grouped
from web.dashboard.throttle import SignInThrottle
from web.logs import loggable
from web.services import Services

SESSION_COOKIE = "svc_session"
NONCE_COOKIE = "svc_csrf"
THEME_COOKIE = "svc_theme"
THEMES = ("light", "dark", "system")
COOKIE_PATH = "/dashboard"
HOME = "/dashboard"
PASSWORD_THREADS = 2
"""argon2 checks and hashes run at once (each holds 64 MiB while it runs)."""
PASSWORD_QUEUE = 64
"""Sign-ins waiting for a password check past which one is answered 503 at
once (each check takes ~50 ms: 64 waiting is about 1.6 s for the last)."""
View = Callable[..., Awaitable[ResponseReturnValue]]
log = logging.getLogger("svc.dashboard")


@attrs.frozen
class Workspace:
    org: Organization
    role: Role
    projects: tuple[Project, ...]


@attrs.frozen
class Viewer:
    """The signed-in person, their organizations and where they are now."""

    session: Session
    user: User
    workspaces: tuple[Workspace, ...]
    workspace: Workspace | None
    project: Project | None
    csrf: str

    @property
    def org(self) -> Organization | None:
        return self.workspace.org if self.workspace else None

    @property
    def role(self) -> Role | None:
        return self.workspace.role if self.workspace else None

    @property
    def mode(self) -> Mode:
        return self.session.mode

    def can(self, action: Action | str) -> bool:
        return allows(self.role, Action(action))


@attrs.frozen
class RouteInfo:
    rule: str
    methods: tuple[str, ...]
    endpoint: str
    action: Action | None  # None: public (signed out too)


class Dashboard:
    """Shared state of the dashboard app: services, throttle, nav and routes."""

    def __init__(self, app: Any, services: Services) -> None:
        self.app = app
        self.services = services
        self.throttle = SignInThrottle(services.server_secret)
        self.once = FormOnce(services.clock.now_ms, services.random)
        self.passwords = trio.CapacityLimiter(PASSWORD_THREADS)
        self.password_queue = PASSWORD_QUEUE
        """Password hashes and checks running at once (views_auth.py: argon2
        holds 64 MiB each while it runs)."""
        self.nav: list[NavEntry] = list(DEFAULT_NAV)
        self.routes: list[RouteInfo] = []
        self.notices: dict[str, str] = {}
        cfg = services.config
        self.secure_cookies = bool(cfg.certfile) or (cfg.public_url or "").startswith("https:")
        css = pathlib.Path(__file__).with_name("static") / "dashboard.css"
        self.asset_version = hashlib.sha256(css.read_bytes()).hexdigest()[:10]

    @property
    def store(self) -> LmdbStore:
        return self.services.store

    def now_ms(self) -> int:
        return self.services.clock.now_ms()

    def client_address(self) -> str | None:
        """The request's client, behind a proxy too (``SVC_CLIENT_IP_HEADER``),
        as the API's rate limits see it: the sign-in throttle's per-client key."""
        header = self.services.config.client_ip_header
        # The last of the header's lines, as the API reads it (web/http.py): a
        # proxy that adds a line of its own leaves the client's forged one first.
        lines = request.headers.getlist(header) if header else []
        return client_address(lines[-1] if lines else None, request.remote_addr)

    def base_url(self) -> str:
        """The public base URL: SVC_PUBLIC_URL, else the address this page came from."""
        if self.services.config.public_url:
            return self.services.config.public_url.rstrip("/")
        return str(request.host_url).rstrip("/")

    def dashboard_url(self) -> str:
        """Where the dashboard is: SVC_PUBLIC_URL's origin (not its path: the
        dashboard is at the root, ``Config.dashboard_url``), else this page's."""
        if self.services.config.public_url:
            return self.services.config.dashboard_url
        return str(request.host_url).rstrip("/") + "/dashboard"

    # -- route declarations ------------------------------------------------------

    def page(self, rule: str, action: Action, *, methods: tuple[str, ...] = ("GET",),
             endpoint: str | None = None, once: bool = False) -> Callable[[View], View]:
        """A signed-in route needing ``action``; the view gets the Viewer first.
        ``once``: a POST that creates or sends something; the same form posted
        again gets the first answer (web/dashboard/form_once.py)."""

        def deco(view: View) -> View:
            name = endpoint or view.__name__

            async def guarded(**kwargs: Any) -> ResponseReturnValue:
                viewer = await self.viewer()
                if viewer is None:
                    return await self.to_sign_in()
                if request.method == "POST" and not await self.csrf_ok(viewer):
                    return await self.csrf_refused(viewer)
                if (request.method == "POST" and action is not Action.SESSION
                        and (sent := (await request.form).get("ws")) is not None
                        and sent != form_workspace(viewer)):
                    return await self.workspace_changed(viewer)
                if not viewer.can(action):
                    if viewer.workspace is None:
                        return await self.render("no_org.html", viewer, status=403)
                    return await self.refused(viewer, action)
                if once and request.method == "POST":
                    form = await request.form

                    async def make() -> Response:
                        answer = await current_app.make_response(await view(viewer, **kwargs))
                        assert isinstance(answer, Response)
                        return answer

                    return await self.once.run(viewer.csrf, form.get("once"),
                                               fields_digest(list(form.items(multi=True))),
                                               make)
                return await view(viewer, **kwargs)

            self._add(rule, name, guarded, methods, action)
            return view

        return deco

    def public(self, rule: str, *, methods: tuple[str, ...] = ("GET",),
               endpoint: str | None = None) -> Callable[[View], View]:
        """A route open to everyone; the view gets the Viewer or None. POSTs still
        need the CSRF field (the anonymous token when signed out)."""

        def deco(view: View) -> View:
            name = endpoint or view.__name__

            async def guarded(**kwargs: Any) -> ResponseReturnValue:
                viewer = await self.viewer()
                if request.method == "POST" and not await self.csrf_ok(viewer, anonymous=True):
                    return await self.csrf_refused(viewer)
                return await view(viewer, **kwargs)

            self._add(rule, name, guarded, methods, None)
            return view

        return deco

    def _add(self, rule: str, name: str, func: View, methods: tuple[str, ...],
             action: Action | None) -> None:
        self.app.add_url_rule(rule, name, func, methods=list(methods))
        self.routes.append(RouteInfo(rule, methods, name, action))

    # -- who is asking ------------------------------------------------------------

    async def viewer(self) -> Viewer | None:
        """The signed-in person (once per request), or None. An ended session's
        cookie is cleared and the sign-in page says the session ended."""
        if "viewer" in g:
            cached: Viewer | None = g.viewer
            return cached
        g.viewer = viewer = await self._load_viewer()
        return viewer

    async def reload_viewer(self) -> Viewer:
        """The viewer again, after this request changed the session."""
        g.pop("viewer", None)
        viewer = await self.viewer()
        assert viewer is not None
        return viewer

    async def _load_viewer(self) -> Viewer | None:
        cookie = request.cookies.get(SESSION_COOKIE)
        h = token_hash(cookie)
        if h is None:
            if cookie is not None:
                g.clear_session = True
            return None
        now = self.now_ms()
        session = accounts.get_session(self.store, h)
        user = self.store.get_user(session.user_id) if session is not None else None
        if session is None or user is None or not is_live(session, now):
            if session is not None:
                await accounts.delete_session(self.store, h)
            g.clear_session = g.session_ended = True
            return None
        workspaces = self._workspaces(user.id)
        current = next((w for w in workspaces if w.org.id == session.org_id), None)
        current = current or (workspaces[0] if workspaces else None)
        project = None
        if current is not None:
            project = next((p for p in current.projects if p.id == session.project_id), None)
            project = project or (current.projects[0] if current.projects else None)
        fixed = attrs.evolve(session, org_id=current.org.id if current else None,
                             project_id=project.id if project else None)
        saved = touched(fixed, now) or (fixed if fixed != session else None)
        if saved is not None and not await accounts.save_session(self.store, saved):
            g.clear_session = g.session_ended = True
            return None
        return Viewer(session=saved or session, user=user, workspaces=workspaces,
                      workspace=current, project=project,
                      csrf=csrf.session_token(self.services.server_secret, session.id))

    def _workspaces(self, user_id: str) -> tuple[Workspace, ...]:
        out = []
        for m in self.store.memberships_of(user_id):
            org = self.store.get_org(m.org_id)
            if org is not None:
                out.append(Workspace(org, m.role, tuple(self.store.list_projects(org.id))))
        return tuple(sorted(out, key=lambda w: (w.org.name.casefold(), w.org.id)))

    async def switch(self, viewer: Viewer, **changes: Any) -> None:
        """Save a change of workspace or mode into the session."""
        await accounts.save_session(self.store, attrs.evolve(viewer.session, **changes))

    # -- CSRF -------------------------------------------------------------------------

    def anonymous_csrf(self) -> str:
        nonce = request.cookies.get(NONCE_COOKIE)
        if token_hash(nonce) is None:
            nonce = g.get("new_nonce") or encode_token(self.services.random(32))
            g.new_nonce = nonce
        assert nonce is not None
        return csrf.anonymous_token(self.services.server_secret, nonce)

    async def csrf_ok(self, viewer: Viewer | None, *, anonymous: bool = False) -> bool:
        """The form's ``csrf`` field is the session's token, or (``anonymous``: on
        public routes, say a sign-in form left open while signing in elsewhere)
        the token of the browser's nonce cookie."""
        submitted = (await request.form).get("csrf")
        if viewer is not None and csrf.matches(viewer.csrf, submitted):
            return True
        if viewer is not None and not anonymous:
            return False
        nonce = request.cookies.get(NONCE_COOKIE)
        if token_hash(nonce) is None:
            return False
        return csrf.matches(csrf.anonymous_token(self.services.server_secret, str(nonce)),
                            submitted)

    # -- responses ----------------------------------------------------------------------

    async def render(self, template: str, viewer: Viewer | None, *, status: int = 200,
                     headers: dict[str, str] | None = None, **context: Any) -> Response:
        done = request.args.get("done", "")
        theme = request.cookies.get(THEME_COOKIE, "system")
        body = await render_template(
            template, viewer=viewer, theme=theme if theme in THEMES else "system",
            nav=grouped(self.nav), endpoint=request.endpoint, here=_here(),
            csrf_token=viewer.csrf if viewer else self.anonymous_csrf(),
            form_workspace=form_workspace(viewer), once_key=self.once.new_key,
            notice=self.notices.get(done), asset_version=self.asset_version,
            Action=Action, **context)
        resp: Response = current_app.response_class(body, status=status, headers=headers or {})
        return resp

    async def error(self, viewer: Viewer | None, status: int, title: str, message: str,
                    **context: Any) -> Response:
        headers = {}
        retry = context.pop("retry_after", None)
        if retry:
            headers["Retry-After"] = str(retry)
        return await self.render("error.html", viewer, status=status, headers=headers,
                                 title=title, message=message, status_code=status, **context)

    async def svc_error(self, e: SvcError) -> Response:
        viewer = await self.viewer()
        if isinstance(e, StorageUnavailable):  # logged by the writer (storage/writer.py)
            return await self.error(viewer, 503, "Not saved",
                                    "The service could not store this change right now. "
                                    "Try again in a moment.", retry_after=e.retry_after)
        if not isinstance(e, CallerError):
            log.error("%s on %s %s: %s", type(e).__name__, request.method,
                      loggable(request.path), e)
        if isinstance(e, CallerError):
            return await self.error(viewer, e.status, _TITLES.get(e.status, "Not possible"),
                                    e.message, retry_after=getattr(e, "retry_after", None))
        return await self.error(viewer, 500, "Something went wrong",
                                "The service hit an internal error. Try again in a moment.")

    async def to_sign_in(self) -> Response:
        target = _here() if request.method == "GET" else HOME
        query = "?next=" + quote(target, safe="/") if target != HOME else ""
        if g.get("session_ended"):
            query += ("&" if query else "?") + "ended=1"
        return see_other(HOME + query)

    async def csrf_refused(self, viewer: Viewer | None) -> Response:
        return await self.error(
            viewer, 403, "This form has expired",
            "For your safety the form was not accepted: it did not carry a valid security "
            "token (CSRF). This happens when a page was open for a long time, after "
            "signing in elsewhere, or when a form was sent from another site. Go back, "
            "reload the page and try again.")

    async def workspace_changed(self, viewer: Viewer) -> Response:
        where = (f"{viewer.project.name} in {viewer.mode.value} mode" if viewer.project
                 else "an organization without a project")
        return await self.error(
            viewer, 409, "The project or mode changed",
            f"This form was made for another project or mode than the one this dashboard "
            f"is now in ({where}): it was switched in another tab. Nothing was changed. "
            f"Reload the page to work in the current project and mode.")

    async def refused(self, viewer: Viewer, action: Action) -> Response:
        allowed = who_may(action)
        if action in CONTACT_NOTE:
            contacts = self.contacts(viewer, allowed)
            return await self.render("note.html", viewer, status=403, action=action,
                                     allowed=allowed, contacts=contacts)
        names = roles_text(allowed)
        return await self.error(viewer, 403, "You don't have access",
                                f"Only {names} of this organization can do this.")

    def contacts(self, viewer: Viewer, allowed: list[Role]) -> list[tuple[str, Role]]:
        """E-mail and role of the members who can help with what ``viewer`` can't."""
        if viewer.org is None:
            return []
        out = []
        for m in self.store.members_of(viewer.org.id):
            user = self.store.get_user(m.user_id)
            if user is not None and m.role in allowed:
                out.append((user.email, m.role))
        return sorted(out, key=lambda c: (list(Role).index(c[1]), c[0]))

    # -- cookies --------------------------------------------------------------------------

    def set_session_cookie(self, resp: Response, token: str) -> None:
        resp.set_cookie(SESSION_COOKIE, token, max_age=ABSOLUTE_MS // 1000, path=COOKIE_PATH,
                        secure=self.secure_cookies, httponly=True, samesite="Lax")

    def finish(self, resp: Response) -> Response:
        """after_request: pending cookies and the security headers."""
        if g.get("clear_session"):
            resp.delete_cookie(SESSION_COOKIE, path=COOKIE_PATH, secure=self.secure_cookies,
                               httponly=True, samesite="Lax")
        nonce = g.get("new_nonce")
        if nonce:
            resp.set_cookie(NONCE_COOKIE, nonce, path=COOKIE_PATH, secure=self.secure_cookies,
                            httponly=True, samesite="Lax")
        h = resp.headers
        h.setdefault("Content-Security-Policy",
                     "default-src 'none'; style-src 'self'; img-src 'self' data:; "
                     "script-src 'self'; connect-src 'self'; form-action 'self'; "
                     "base-uri 'none'; frame-ancestors 'none'")
        h.setdefault("X-Content-Type-Options", "nosniff")
        h.setdefault("Referrer-Policy", "same-origin")
        h.setdefault("X-Frame-Options", "DENY")
        if not request.path.startswith("/dashboard/static/"):
            h["Cache-Control"] = "no-store"
        return resp


_TITLES = {400: "Please check the form", 403: "You don't have access", 404: "Not found",
           409: "Not possible right now", 410: "This link no longer works",
           413: "Too large", 429: "Too many attempts"}


def see_other(location: str) -> Response:
    """A 303 redirect: after a form, the browser GETs ``location``."""
    resp: Response = current_app.response_class("", status=303, headers={"Location": location})
    return resp


def _here() -> str:
    """This page's path and query, without a one-off ``done`` notice. A
    page a form's POST rendered (a refused invitation, a rotated secret)
    has no GET at its path: the nearest page above it that has one (the
    mode switch and the theme went back there: 405)."""
    if request.method != "GET":
        return page_to_get(request.path)
    query = urlencode([(k, v) for k, v in request.args.items(multi=True) if k != "done"])
    return f"{request.path}?{query}" if query else request.path


def page_to_get(path: str) -> str:
    """``path`` if a dashboard page answers GET there, else the nearest path
    above it that one does (``HOME`` at worst)."""
    adapter = current_app.url_map.bind("")
    while path.startswith(HOME + "/"):
        try:
            adapter.match(path, method="GET")
            return path
        except HTTPException:
            path = path.rsplit("/", 1)[0]
    return HOME


_ONE_OBJECT = re.compile(r"/[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}"
                         r"-[0-9a-fA-F]{12}(?:/|$)")


def next_in_other_scope(value: str | None) -> str:
    """Where a switch of project or mode goes: ``next`` (``safe_next``) less
    what names the old scope's things, which the new one has not: a page
    of one object (a link, an endpoint, a delivery: its section's list) and
    a list's ``cursor`` (the links list's second page was "invalid cursor")."""
    path, _, query = safe_next(value).partition("?")
    one = _ONE_OBJECT.search(path)
    if one is not None:
        path, query = path[:one.start()], ""
    kept = "&".join(part for part in query.split("&")  # the rest as it was written
                    if part and part.split("=", 1)[0] not in ("cursor", "done"))
    path = page_to_get(path)
    return f"{path}?{kept}" if kept else path


def roles_text(allowed: list[Role]) -> str:
    """"owners, admins and developers"."""
    names = [f"{r.value}s" for r in allowed]
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def safe_next(value: str | None) -> str:
    """A redirect target from a form: only a path inside the dashboard, as the
    browser resolves it. So no dot segment, also percent-encoded (``%2e``):
    ``/dashboard/../<slug>`` is a short link, which may send anywhere."""
    if (not value or "\\" in value or "//" in value
            or any(ord(c) < 33 for c in value)):
        return HOME
    path = value.split("#", 1)[0].split("?", 1)[0]
    if path != HOME and not path.startswith(HOME + "/"):
        return HOME
    if any(segment in (".", "..") for segment in unquote(path).split("/")):
        return HOME
    return value


def fmt_time(ms: int | None) -> str:
    if ms is None:
        return ""
    t = utc(ms)
    return f"{t.day} {t:%b %Y, %H:%M} UTC"


def fmt_date(ms: int | None) -> str:
    if ms is None:
        return ""
    t = utc(ms)
    return f"{t.day} {t:%b %Y}"


def form_workspace(viewer: Viewer | None) -> str:
    """The project and mode a form is made for (its ``ws`` field, beside the
    CSRF token): a form posted after the dashboard switched project or mode
    in another tab is refused, not applied to the new one (a webhook endpoint
    or key made in live mode from a page that said test)."""
    if viewer is None or viewer.project is None:
        return ""
    return f"{viewer.project.id}:{viewer.mode.value}"
