"""Dashboard sign-in, sessions, CSRF, the sign-in throttle and invitations,
in-process (real store and actors, requests over ASGI)."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from storage import accounts
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.errors import Forbidden
from svc_engine.plans import Plan
from svc_engine.records import Role
from svc_engine.sessions import ABSOLUTE_MS, IDLE_MS
from tests.conftest import App, running_app
from tests.dashboard_support import (
    OWNER_EMAIL,
    add_user,
    browser,
    csrf_of,
    dashboard_of,
    owner,
    password_of,
    signed_in,
)
from web import tenancy
from web.dashboard.context import PASSWORD_THREADS

HOUR = 3600


async def test_sign_in_page_sign_in_and_sign_out(app: App) -> None:
    async with browser(app) as c:
        page = await c.get("/dashboard")
        assert page.status_code == 200 and "Sign in to svc" in page.text
        assert page.headers["cache-control"] == "no-store"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]
        r = await c.post("/dashboard/sign-in", data={
            "csrf": csrf_of(page.text), "email": "Owner@Localhost", "password": password_of(app),
            "next": "/dashboard/settings/team"})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/settings/team"
        cookie = r.headers["set-cookie"]
        for attr in ("svc_session=", "HttpOnly", "Path=/dashboard", "SameSite=Lax"):
            assert attr in cookie
        assert "Secure" not in cookie  # served over plain http in this test
        token = c.cookies["svc_session"]
        stored = accounts.get_session(app.services.store, hashlib.sha256(token.encode()).digest())
        assert stored is not None and stored.user_id == owner(app).id
        with app.services.store.read() as txn:  # the cookie value itself is nowhere stored
            assert all(token.encode() not in bytes(v)
                       for _, v in txn.cursor(db=app.services.store.db(b"sessions")))
        team = await c.get("/dashboard/settings/team")
        assert team.status_code == 200 and OWNER_EMAIL in team.text
        home = await c.get("/dashboard")
        assert home.status_code == 303 and home.headers["location"] == "/dashboard/build/sdk"
        out = await c.post("/dashboard/sign-out", data={"csrf": csrf_of(team.text)})
        assert out.status_code == 303 and out.headers["location"] == "/dashboard?done=signed-out"
        assert accounts.get_session(app.services.store, stored.token_hash) is None
        assert "svc_session" not in c.cookies
        again = await c.get("/dashboard/settings/team")
        assert again.status_code == 303
        assert again.headers["location"] == "/dashboard?next=/dashboard/settings/team"


async def test_wrong_password_and_unknown_email_look_the_same(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Same answer, and the same work: an unknown e-mail's password is
    checked too (against a stand-in hash), so it takes as long."""
    from web import tenancy

    checked: list[str] = []
    real = tenancy.verify_password

    def counting(stored: str, password: str) -> bool:
        checked.append(password)
        return real(stored, password)

    monkeypatch.setattr(tenancy, "verify_password", counting)
    async with browser(app) as c:
        token = csrf_of((await c.get("/dashboard")).text)
        a = await c.post("/dashboard/sign-in", data={"csrf": token, "email": OWNER_EMAIL,
                                                      "password": "wrong-password"})
        b = await c.post("/dashboard/sign-in", data={"csrf": token, "email": "nobody@x.org",
                                                      "password": "wrong-password"})
        assert a.status_code == b.status_code == 400
        assert "don&#39;t match an account" in a.text and "don&#39;t match an account" in b.text
        assert "svc_session" not in c.cookies
    assert checked == ["wrong-password", "wrong-password"]


async def test_redirect_targets_stay_inside_the_dashboard(app: App) -> None:
    m = await signed_in(app, owner(app))
    # (a dot segment leaves the dashboard as the browser resolves it: /dashboard/../<slug>
    # is a short link, which may send anywhere)
    for target in ("https://evil.example/", "//evil.example", "/dashboard\\..", "/v1/x",
                   "/dashboard/../abc123", "/dashboard/%2e%2e/abc123", "/dashboard/.%2E/abc",
                   "/dashboard/settings/../../abc", "/dashboard/./../abc", "/dashboardx",
                   "/dashboard/..?next=/dashboard"):
        r = await m.post("/dashboard/mode", {"mode": "test", "next": target})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard", target
    for target in ("/dashboard", "/dashboard/links?q=..", "/dashboard/links/..x",
                   "/dashboard?next=/dashboard/../x"):
        r = await m.post("/dashboard/mode", {"mode": "test", "next": target})
        assert r.status_code == 303 and r.headers["location"] == target, target
    await m.aclose()


async def test_csrf_refusals(app: App) -> None:
    m = await signed_in(app, owner(app))
    before = len(app.services.store.list_keys(app.project_id))
    for token in (None, "", "forged", (await signed_in(app, owner(app))).csrf):
        r = await m.post("/dashboard/settings/keys", {"kind": "secret", "name": "x"},
                         csrf_token=token)
        assert r.status_code == 403 and "This form has expired" in r.text
    assert len(app.services.store.list_keys(app.project_id)) == before
    ok = await m.post("/dashboard/settings/keys", {"kind": "secret", "name": "x"})
    assert ok.status_code == 200
    assert len(app.services.store.list_keys(app.project_id)) == before + 1
    await m.aclose()
    async with browser(app) as c:  # signed out: the anonymous token needs its cookie
        token = csrf_of((await c.get("/dashboard")).text)
        good = {"csrf": token, "email": OWNER_EMAIL, "password": password_of(app)}
        assert (await c.post("/dashboard/sign-in", data={**good, "csrf": "x"})).status_code == 403
        c.cookies.clear()
        assert (await c.post("/dashboard/sign-in", data=good)).status_code == 403
        assert "svc_session" not in c.cookies


async def test_session_idle_expiry(app: App, autojump_clock: trio.testing.MockClock) -> None:
    m = await signed_in(app, owner(app))
    await trio.sleep(IDLE_MS / 1000 - HOUR)
    assert (await m.get("/dashboard/settings/team")).status_code == 200  # refreshes last seen
    await trio.sleep(IDLE_MS / 1000 - HOUR)
    assert (await m.get("/dashboard/settings/team")).status_code == 200
    await trio.sleep(IDLE_MS / 1000 + 1)
    r = await m.get("/dashboard/settings/team")
    assert r.status_code == 303
    assert r.headers["location"] == "/dashboard?next=/dashboard/settings/team&ended=1"
    assert 'svc_session=""' in r.headers["set-cookie"] or "Max-Age=0" in r.headers["set-cookie"]
    assert accounts.get_session(app.services.store, m.session.token_hash) is None
    page = await m.client.get(r.headers["location"])
    assert "Your session ended" in page.text
    await m.aclose()


async def test_session_absolute_expiry(app: App, autojump_clock: trio.testing.MockClock) -> None:
    m = await signed_in(app, owner(app))
    elapsed = 0
    while elapsed + 6 * HOUR < ABSOLUTE_MS / 1000:
        await trio.sleep(6 * HOUR)
        elapsed += 6 * HOUR
        assert (await m.get("/dashboard/settings/billing")).status_code == 200, elapsed
    await trio.sleep(ABSOLUTE_MS / 1000 - elapsed)
    assert (await m.get("/dashboard/settings/billing")).status_code == 303
    await m.aclose()


async def test_sign_in_throttle_per_email_and_per_client(app: App) -> None:
    async with browser(app) as c:
        token = csrf_of((await c.get("/dashboard")).text)

        async def attempt(email: str, password: str = "wrong-password") -> int:
            r = await c.post("/dashboard/sign-in", data={"csrf": token, "email": email,
                                                          "password": password})
            if r.status_code == 429:
                assert 1 <= int(r.headers["retry-after"]) <= 900
                assert "Too many failed sign-ins" in r.text
            return r.status_code

        assert [await attempt(OWNER_EMAIL) for _ in range(5)] == [400] * 5
        assert await attempt(OWNER_EMAIL, password_of(app)) == 429  # even the right password
        assert await attempt("Owner@LOCALHOST") == 429             # same address
        for n in range(3):                                        # 5 + 15 = 20 per client
            assert [await attempt(f"u{n}@example.com") for _ in range(5)] == [400] * 5
        assert await attempt("fresh@example.com") == 429
        assert "svc_session" not in c.cookies
    throttle = dashboard_of(app).throttle
    assert throttle.statistics() == {"emails": 4, "clients": 1}
    now = app.services.clock.now_ms()
    assert throttle.retry_after("other@example.com", "10.0.0.9", now) == 0  # other client
    assert throttle.retry_after(OWNER_EMAIL, "10.0.0.9", now + 15 * 60_000) == 0


async def test_right_passwords_under_any_spelling_of_the_address_are_never_throttled(
        app: App) -> None:
    """Each attempt counts until its password is checked; a right one takes
    the e-mail's count back under the address, however it was typed (the
    count is kept under the address in its one form)."""
    spelled = OWNER_EMAIL.upper()
    for _ in range(7):
        async with browser(app) as c:
            token = csrf_of((await c.get("/dashboard")).text)
            r = await c.post("/dashboard/sign-in", data={"csrf": token, "email": spelled,
                                                          "password": password_of(app)})
            assert r.status_code == 303, r.status_code
    now = app.services.clock.now_ms()
    assert dashboard_of(app).throttle.retry_after(OWNER_EMAIL, "10.0.0.9", now) == 0


async def test_attempts_sent_together_are_all_counted(app: App) -> None:
    """Each password check takes a while (in a thread): attempts sent at once
    used to pass the throttle together before any failure was counted. Of 12
    wrong guesses at once, 5 are checked; a right password after a wrong one
    takes its own count back."""
    async with browser(app) as c:
        token = csrf_of((await c.get("/dashboard")).text)
        codes: list[int] = []

        async def guess(n: int) -> None:
            r = await c.post("/dashboard/sign-in", data={"csrf": token, "email": OWNER_EMAIL,
                                                          "password": f"wrong-{n}"})
            codes.append(r.status_code)

        async with trio.open_nursery() as nursery:
            for n in range(12):
                nursery.start_soon(guess, n)
    assert sorted(codes) == [400] * 5 + [429] * 7, codes
    throttle = dashboard_of(app).throttle
    now = app.services.clock.now_ms()
    assert throttle.attempt("someone@example.com", "10.0.0.1", now) == 0
    throttle.succeeded("someone@example.com", "10.0.0.1", now)  # right: no count kept
    for n in range(20):
        assert throttle.attempt(f"u{n}@example.com", "10.0.0.1", now + 1) == 0
    assert throttle.retry_after("other@example.com", "10.0.0.1", now + 1) > 0


async def test_behind_a_proxy_the_throttle_counts_per_forwarded_client(
        store: LmdbStore, config: Config) -> None:
    """With SVC_CLIENT_IP_HEADER the per-client limit is per forwarded client,
    not one limit for the proxy's address: 20 failures from one client do
    not lock out another. The client is the entry the proxy appended (the
    last): what a client writes before it (a fresh address each try) is
    no new client."""
    proxied = attrs.evolve(config, client_ip_header="X-Forwarded-For")
    async with running_app(store, proxied, TrioWallClock()) as app, browser(app) as c:
        token = csrf_of((await c.get("/dashboard")).text)
        tries = iter(range(1000))

        async def attempt(email: str, password: str, client: str) -> int:
            made_up = f"10.9.0.{next(tries)}"  # a new "client" each try, before the proxy's
            r = await c.post("/dashboard/sign-in",
                             data={"csrf": token, "email": email, "password": password},
                             headers={"x-forwarded-for": f"{made_up}, {client}"})
            return r.status_code

        for n in range(20):
            assert await attempt(f"u{n}@example.com", "wrong-password", "203.0.113.7") == 400
        assert await attempt("x@example.com", "wrong-password", "203.0.113.7") == 429
        assert await attempt(OWNER_EMAIL, password_of(app), "198.51.100.20") == 303

        async def two_lines(email: str, client: str) -> int:
            # A proxy that adds a line of its own (HAProxy's forwardfor): the
            # client's forged line comes first, and the dashboard read it.
            r = await c.post("/dashboard/sign-in",
                             data={"csrf": token, "email": email, "password": "wrong"},
                             headers=[("x-forwarded-for", f"10.8.0.{next(tries)}"),
                                      ("x-forwarded-for", client)])
            return r.status_code

        for n in range(20):
            assert await two_lines(f"v{n}@example.com", "203.0.113.8") == 400
        assert await two_lines("y@example.com", "203.0.113.8") == 429

        # an IPv6 client is its /64: a new address of it each try is no new client
        for n in range(20):
            assert await attempt(f"w{n}@example.com", "wrong", f"2001:db8:5:6::{n + 1:x}") == 400
        assert await attempt("z@example.com", "wrong", "2001:db8:5:6:ffff::1") == 429
        assert await attempt("z@example.com", "wrong", "2001:db8:5:7::1") == 400


async def test_invitation_for_a_new_account(app: App) -> None:
    m = await signed_in(app, owner(app))
    page = await m.post("/dashboard/settings/team/invite",
                        {"email": "New.Dev@Example.com", "role": "developer"})
    assert page.status_code == 200 and "svc sends no e-mail" in page.text
    assert "It works once, expires in 7 days" in page.text  # INVITE_TTL_MS
    link = page.text.split('id="invite-link" class="mono reveal-value" type="text" value="')[1]
    link = link.split('"')[0]
    assert link.startswith("http://svc.test/dashboard/invite/")
    path = link.removeprefix("http://svc.test")
    again = await m.get("/dashboard/settings/team")
    assert path not in again.text and "new.dev@example.com" in again.text  # shown once
    async with browser(app) as c:
        form = await c.get(path)
        assert form.status_code == 200 and "Choose a password" in form.text
        token = csrf_of(form.text)
        short = await c.post(path, data={"csrf": token, "password": "short", "confirm": "short"})
        assert short.status_code == 400 and "at least 10" in short.text
        differ = await c.post(path, data={"csrf": token, "password": "long-enough-1",
                                          "confirm": "long-enough-2"})
        assert differ.status_code == 400
        ok = await c.post(path, data={"csrf": token, "password": "long-enough-1",
                                      "confirm": "long-enough-1"})
        assert ok.status_code == 303 and ok.headers["location"].startswith("/dashboard/build/sdk")
        welcome = await c.get(ok.headers["location"])
        assert "You have joined" in welcome.text and "new.dev@example.com" in welcome.text
        reuse = await c.get(path)
        assert reuse.status_code == 410
    user = app.services.store.find_user("new.dev@example.com")
    assert user is not None and user.password_hash.startswith("$argon2")
    roles = {mb.user_id: mb.role for mb in app.services.store.members_of(app.org_id)}
    assert roles[user.id] is Role.DEVELOPER
    await m.aclose()


async def test_invitation_for_an_existing_account_needs_its_password(app: App) -> None:
    store = app.services.store
    elsewhere = await add_user(app, "pat@example.com", password="pat-password-1")
    m = await signed_in(app, owner(app))
    page = await m.post("/dashboard/settings/team/invite",
                        {"email": "pat@example.com", "role": "marketer"})
    path = "/dashboard/invite/" + page.text.split("/dashboard/invite/")[1].split('"')[0]
    async with browser(app) as c:
        form = await c.get(path)
        assert "Your password" in form.text and "Choose a password" not in form.text
        token = csrf_of(form.text)
        bad = await c.post(path, data={"csrf": token, "password": "not-it-at-all"})
        assert bad.status_code == 400 and "svc_session" not in c.cookies
        good = await c.post(path, data={"csrf": token, "password": "pat-password-1"})
        assert good.status_code == 303 and "svc_session" in c.cookies
    roles = {mb.user_id: mb.role for mb in store.members_of(app.org_id)}
    assert roles[elsewhere.id] is Role.MARKETER
    await m.aclose()


async def test_only_an_owner_is_offered_the_owner_role(app: App) -> None:
    """The team page's role choices (inviting, changing a role) are the roles
    its viewer may give: an admin cannot make an owner."""
    admin = await add_user(app, "ada@example.com", Role.ADMIN)
    for who, offered in ((owner(app), True), (admin, False)):
        m = await signed_in(app, who)
        page = await m.get("/dashboard/settings/team")
        assert page.status_code == 200
        assert ('<option value="owner"' in page.text) is offered, who
        assert '<option value="admin"' in page.text and '<option value="marketer"' in page.text
        await m.aclose()


async def test_invitations_are_replaced_withdrawn_and_checked(app: App) -> None:
    m = await signed_in(app, owner(app))
    first = await m.post("/dashboard/settings/team/invite", {"email": "a@example.com",
                                                             "role": "developer"})
    path1 = "/dashboard/invite/" + first.text.split("/dashboard/invite/")[1].split('"')[0]
    await m.post("/dashboard/settings/team/invite", {"email": "a@example.com", "role": "admin"})
    assert (await m.get(path1)).status_code == 410     # replaced by the second invitation
    invites = accounts.list_invites(app.services.store, app.org_id, app.services.clock.now_ms())
    assert [(i.email, i.role) for i in invites] == [("a@example.com", Role.ADMIN)]
    member = await m.post("/dashboard/settings/team/invite", {"email": OWNER_EMAIL,
                                                              "role": "admin"})
    assert member.status_code == 409 and "already a member" in member.text
    bad = await m.post("/dashboard/settings/team/invite", {"email": "nope", "role": "admin"})
    assert bad.status_code == 400  # shown again as sent: the role chosen, not Developer
    assert '<option value="admin" selected>' in bad.text and 'value="nope"' in bad.text
    assert '<option value="developer" selected>' not in bad.text
    r = await m.post(f"/dashboard/settings/team/invites/{invites[0].id}/revoke")
    assert r.status_code == 303
    assert accounts.list_invites(app.services.store, app.org_id,
                                 app.services.clock.now_ms()) == []
    assert (await m.post(f"/dashboard/settings/team/invites/{invites[0].id}/revoke")
            ).status_code == 404
    assert (await m.get("/dashboard/invite/" + "A" * 43)).status_code == 410
    assert (await m.get("/dashboard/invite/bogus")).status_code == 410
    await m.aclose()


async def test_member_quota_counts_open_invitations(app: App) -> None:
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    m = await signed_in(app, owner(app))
    for n in range(2):
        r = await m.post("/dashboard/settings/team/invite", {"email": f"q{n}@example.com",
                                                             "role": "developer"})
        assert r.status_code == 200
    full = await m.get("/dashboard/settings/team")
    assert "places are taken" in full.text
    r = await m.post("/dashboard/settings/team/invite", {"email": "q9@example.com",
                                                         "role": "developer"})
    assert r.status_code == 403 and "3 team members" in r.text
    await m.aclose()


async def test_a_trailing_slash_after_dashboard_leads_home(app: App) -> None:
    async with browser(app) as c:
        r = await c.get("/dashboard/?from=bookmark")
        assert r.status_code == 308 and r.headers["location"] == "/dashboard?from=bookmark"
        assert (await c.get("/dashboard/")).headers["location"] == "/dashboard"


@attrs.define
class _Held:
    client: Any
    token: str
    codes: list[int] = attrs.Factory(list)
    active: int = 0
    peak: int = 0


@asynccontextmanager
async def _sign_ins_held_at_their_check(app: App, monkeypatch: Any, n: int
                                        ) -> AsyncIterator[_Held]:
    """``n`` wrong sign-ins sent at once, whose password checks (a stand-in
    for argon2 counting how many run at once) wait until the block ends;
    each one's status is in ``codes`` after it."""
    lock, gate = threading.Lock(), threading.Event()
    async with browser(app) as c:
        held = _Held(c, csrf_of((await c.get("/dashboard")).text))

        def slow_check(password_hash: str, password: str) -> bool:
            with lock:
                held.active += 1
                held.peak = max(held.peak, held.active)
            gate.wait(10)
            with lock:
                held.active -= 1
            return False

        monkeypatch.setattr(tenancy, "verify_password", slow_check)

        async def guess(i: int) -> None:
            r = await c.post("/dashboard/sign-in", data={
                "csrf": held.token, "email": f"u{i}@example.com", "password": "wrong-password"})
            held.codes.append(r.status_code)

        async with trio.open_nursery() as nursery:
            for i in range(n):
                nursery.start_soon(guess, i)
            try:
                yield held
            finally:
                gate.set()


async def _until(check: Callable[[], bool]) -> None:
    with trio.fail_after(10):
        while not check():
            await trio.sleep(0.01)


async def test_password_checks_run_two_at_a_time(app: App, monkeypatch: Any) -> None:
    """argon2 holds 64 MiB a check: sign-ins sent at once are checked at most
    PASSWORD_THREADS at a time (trio's 40 worker threads let 40 sign-ins hold
    about 2 GiB), the others waiting their turn, and all are answered."""
    limiter = dashboard_of(app).passwords
    async with _sign_ins_held_at_their_check(app, monkeypatch, 6) as held:
        # until every guess reached its check
        await _until(lambda: held.active + limiter.statistics().tasks_waiting == 6)
        assert held.active == PASSWORD_THREADS and held.peak == PASSWORD_THREADS
    assert held.codes == [400] * 6


async def test_past_the_password_queue_a_sign_in_is_turned_away_at_once(
        app: App, monkeypatch: Any) -> None:
    """With PASSWORD_THREADS checks running and ``password_queue`` waiting, one
    more sign-in is answered 503 with Retry-After at once, and the throttle
    does not count it as a guess; the waiting ones are all answered."""
    dash = dashboard_of(app)
    dash.password_queue = 3
    async with _sign_ins_held_at_their_check(app, monkeypatch, PASSWORD_THREADS + 3) as held:
        await _until(lambda: dash.passwords.statistics().tasks_waiting == 3)
        r = await held.client.post("/dashboard/sign-in", data={
            "csrf": held.token, "email": "late@example.com", "password": "wrong-password"})
        assert r.status_code == 503 and r.headers["retry-after"] == "1"
        assert "busy" in r.text
    assert held.codes == [400] * (PASSWORD_THREADS + 3)
    assert dash.throttle.statistics()["emails"] == PASSWORD_THREADS + 3  # the late one not counted


async def test_an_unexpected_error_logs_the_path_without_an_invitation_token(
        app: App, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    """Quart's own handler logged ``Exception on request GET /dashboard/invite/
    <the token>``: a token that opens an account, in the log. Now the path is
    logged as the access log has it, and the page is the dashboard's 500."""
    def broken(store: object, token_hash: bytes) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(accounts, "find_invite", broken)
    import base64

    secret = base64.urlsafe_b64encode(bytes(range(32))).decode().rstrip("=")
    async with browser(app) as b:
        r = await b.get(f"/dashboard/invite/{secret}")
    assert r.status_code == 500 and "Something went wrong" in r.text
    logged = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "/dashboard/invite/<token>" in logged and secret not in logged
    assert "simulated bug" in caplog.text  # the traceback is kept


async def test_an_invitation_goes_with_its_sender_s_right_to_send_it(app: App) -> None:
    """An admin invites an address as admin, then is removed: the link went on
    granting the admin role for its whole life. Now it is refused (410) once
    its sender may no longer send it, and nothing is created."""
    store = app.services.store
    admin = await add_user(app, "ada@example.com", Role.ADMIN)
    a = await signed_in(app, admin)
    page = await a.post("/dashboard/settings/team/invite",
                        {"email": "eve@example.com", "role": "admin"})
    path = "/dashboard/invite/" + page.text.split("/dashboard/invite/")[1].split('"')[0]
    await a.aclose()
    await accounts.remove_member(store, app.org_id, Role.OWNER, admin.id)
    async with browser(app) as c:
        form = await c.get(path)
        refused = await c.post(path, data={"csrf": csrf_of(form.text),
                                           "password": "eve-password-123",
                                           "confirm": "eve-password-123"})
    assert refused.status_code == 410 and "withdrawn" in refused.text
    assert store.find_user("eve@example.com") is None
    assert all(mb.user_id != admin.id for mb in store.members_of(app.org_id))


async def test_a_team_change_is_judged_on_the_actor_s_role_at_the_write(app: App) -> None:
    """The role was read when the request began: an admin's change sent while
    an owner demoted that admin still went through. Now the acting member's
    role is read in the write that makes the change."""
    store = app.services.store
    admin = await add_user(app, "ada@example.com", Role.ADMIN)
    dev = await add_user(app, "dev@example.com", Role.DEVELOPER)
    await accounts.change_role(store, app.org_id, Role.OWNER, admin.id, Role.MARKETER)
    with pytest.raises(Forbidden):  # stale: the request had read "admin"
        await accounts.change_role(store, app.org_id, Role.ADMIN, dev.id, Role.ADMIN,
                                   actor_id=admin.id)
    with pytest.raises(Forbidden):
        await accounts.remove_member(store, app.org_id, Role.ADMIN, dev.id, actor_id=admin.id)
    roles = {mb.user_id: mb.role for mb in store.members_of(app.org_id)}
    assert roles[dev.id] is Role.DEVELOPER


async def test_a_dashboard_body_gets_svc_body_timeout_not_quart_s(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock) -> None:
    """SVC_BODY_TIMEOUT applied to the API only: a dashboard form whose body
    stopped half way held its request for Quart's own 60 seconds."""
    quick = attrs.evolve(config, body_timeout_s=1)
    async with running_app(store, quick, TrioWallClock()) as app:
        sent: list[dict[str, Any]] = []
        parts = iter([{"type": "http.request", "body": b"csrf=x&email=", "more_body": True}])

        async def receive() -> dict[str, Any]:
            part = next(parts, None)
            if part is None:
                await trio.sleep_forever()  # the rest never comes
            assert part is not None
            return part

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
                 "method": "POST", "scheme": "http", "path": "/dashboard/sign-in",
                 "raw_path": b"/dashboard/sign-in", "query_string": b"", "root_path": "",
                 "headers": [(b"host", b"svc.test"), (b"content-length", b"100"),
                             (b"content-type", b"application/x-www-form-urlencoded")],
                 "client": ("127.0.0.1", 5000), "server": ("svc.test", 80)}
        start = trio.current_time()
        with trio.move_on_after(30):
            await app.front(scope, receive, send)
        took = trio.current_time() - start
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    assert status == 408 and took < 5, (status, took)
