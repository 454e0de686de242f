"""Helpers for the in-process dashboard tests: clients with a session, CSRF
tokens out of pages, members of each role."""

from __future__ import annotations

import os
import re
from typing import Any

import httpx

from storage import accounts
from svc_engine import csrf
from svc_engine.ids import new_id
from svc_engine.records import Membership, Role, User
from svc_engine.sessions import Session, new_session
from tests.conftest import App
from web import tenancy
from web.dashboard.context import Dashboard

BASE = "http://svc.test"
OWNER_EMAIL = "owner@localhost"
CSRF_FIELD = re.compile(r'name="csrf" value="([^"]+)"')


def dashboard_of(app: App) -> Dashboard:
    d: Dashboard = app.front.dashboard.extensions["svc.dashboard"]  # type: ignore[union-attr]
    return d


def browser(app: App) -> httpx.AsyncClient:
    """A client that behaves like a browser: keeps cookies, no JSON headers."""
    # Front's ASGI signature uses dict where httpx's protocol says MutableMapping.
    transport = httpx.ASGITransport(app=app.front)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url=BASE)


def csrf_of(html: str) -> str:
    m = CSRF_FIELD.search(html)
    assert m, "no CSRF field in the page"
    return m.group(1)


class Member:
    """A signed-in member: a client holding a session cookie, and its CSRF token."""

    def __init__(self, app: App, user: User, session: Session, token: str) -> None:
        self.app, self.user, self.session = app, user, session
        self.client = browser(app)
        self.client.cookies.set("svc_session", token, domain="svc.test", path="/dashboard")
        self.csrf = csrf.session_token(app.services.server_secret, session.id)

    async def get(self, path: str) -> httpx.Response:
        return await self.client.get(path)

    async def post(self, path: str, data: dict[str, str] | None = None, *,
                   csrf_token: str | None = "auto") -> httpx.Response:
        form = dict(data or {})
        if csrf_token == "auto":
            form["csrf"] = self.csrf
        elif csrf_token is not None:
            form["csrf"] = csrf_token
        return await self.client.post(path, data=form)

    async def aclose(self) -> None:
        await self.client.aclose()


async def add_user(app: App, email: str, role: Role | None = None,
                   org_id: str | None = None, password: str | None = None) -> User:
    """A user (with a real argon2 hash only when a password is given) and, with a
    role, a membership of ``org_id`` (default: the bootstrap organization)."""
    now = app.services.clock.now_ms()
    if password is not None:
        user = await tenancy.create_user(app.services.store, email, password, os.urandom, now)
    else:
        user = User(id=new_id(os.urandom(16)), email=email, password_hash="unusable",
                    created_at_ms=now)
        await app.services.store.create_user(user)
    if role is not None:
        await app.services.store.set_member(Membership(org_id=org_id or app.org_id,
                                                       user_id=user.id, role=role,
                                                       created_at_ms=now))
    return user


async def signed_in(app: App, user: User, org_id: str | None = None) -> Member:
    """A fresh session for ``user``, made directly (no password check)."""
    token, session = new_session(os.urandom(48), user.id, app.services.clock.now_ms(),
                                 org_id=org_id or app.org_id)
    await accounts.create_session(app.services.store, session)
    return Member(app, user, session, token)


def owner(app: App) -> User:
    user = app.services.store.find_user(OWNER_EMAIL)
    assert user is not None
    return user


def password_of(app: App) -> str:
    info: dict[str, Any] = app.info
    return str(info["owner"]["password"])
