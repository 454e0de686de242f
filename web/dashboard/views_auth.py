"""Signing in and out, and accepting a team invitation.

``GET /dashboard`` is the sign-in page when signed out (and goes to the first
page when signed in). Password hashes are argon2 (web/tenancy.py); checking
one takes tens of milliseconds of CPU, so it runs in a worker thread, and an
unknown e-mail is checked against a dummy hash so both cases take as long.
Failed attempts feed the sign-in throttle (throttle.py): past its limit the
page answers 429 with ``Retry-After``.

Each check or hash also holds 64 MiB for argon2 while it runs, so at most
``PASSWORD_THREADS`` (context.py) run at once; the others wait their turn,
and past ``PASSWORD_QUEUE`` waiting a sign-in is answered 503 at once (not
counted by the throttle). (With trio's default of 40 worker threads, 40
sign-ins sent at once held about 2 GiB.)
"""

from __future__ import annotations

import trio
from quart import Response, g, request, url_for
from quart.typing import ResponseReturnValue

from storage import accounts
from svc_engine.errors import CallerError, Gone, ValidationError
from svc_engine.ids import new_id
from svc_engine.invites import Invite, is_open
from svc_engine.records import User
from svc_engine.roles import Action
from svc_engine.sessions import new_session, token_hash
from web import tenancy
from web.dashboard.context import HOME, Dashboard, Viewer, safe_next, see_other

MIN_PASSWORD, MAX_PASSWORD = tenancy.MIN_PASSWORD, tenancy.MAX_PASSWORD


def register(dash: Dashboard) -> None:
    dash.notices.update({"signed-out": "You are signed out.",
                         "joined": "Welcome! You have joined the organization."})
    dummy: list[str] = []
    passwords = dash.passwords  # argon2's memory (docstring)

    async def check_password(user: User | None, password: str) -> bool:
        if user is None:
            if not dummy:
                dummy.append(await trio.to_thread.run_sync(
                    tenancy.hash_password, "not-a-password", limiter=passwords))
            await trio.to_thread.run_sync(tenancy.verify_password, dummy[0], password,
                                          limiter=passwords)
            return False
        return await trio.to_thread.run_sync(tenancy.verify_password, user.password_hash,
                                             password, limiter=passwords)

    async def start_session(viewer: Viewer | None, user_id: str, org_id: str | None,
                            target: str) -> Response:
        if viewer is not None:
            await accounts.delete_session(dash.store, viewer.session.token_hash)
        token, session = new_session(dash.services.random(48), user_id, dash.now_ms(),
                                     org_id=org_id)
        await accounts.create_session(dash.store, session)
        g.clear_session = False
        resp = see_other(target)
        dash.set_session_cookie(resp, token)
        return resp

    async def sign_in_page(*, status: int = 200, error: str | None = None, email: str = "",
                           retry_after: int | None = None, target: str | None = None
                           ) -> Response:
        headers = {"Retry-After": str(retry_after)} if retry_after else None
        return await dash.render("sign_in.html", None, status=status, headers=headers,
                                 error=error, email=email,
                                 next=target or safe_next(request.args.get("next")),
                                 ended=request.args.get("ended") == "1")

    @dash.public(HOME)
    async def home(viewer: Viewer | None) -> ResponseReturnValue:
        if viewer is not None:
            return see_other(url_for("sdk" if viewer.workspace else "new_org"))
        return await sign_in_page()

    @dash.public("/dashboard/sign-in", methods=("POST",))
    async def sign_in(viewer: Viewer | None) -> ResponseReturnValue:
        form = await request.form
        email = form.get("email", "").strip()[:254]
        password = form.get("password", "")[:MAX_PASSWORD]
        target = safe_next(form.get("next"))
        now = dash.now_ms()
        client = dash.client_address()
        if dash.passwords.statistics().tasks_waiting >= dash.password_queue:
            # A flood of sign-ins: refused before the throttle counts it as a guess.
            return await sign_in_page(
                status=503, email=email, retry_after=1, target=target,
                error="The service is busy checking other sign-ins. Try again in a moment.")
        wait = dash.throttle.attempt(email, client, now)
        if wait:
            minutes = max(1, round(wait / 60))
            return await sign_in_page(
                status=429, email=email, retry_after=wait, target=target,
                error=f"Too many failed sign-ins. Try again in {minutes} minute"
                      f"{'s' if minutes != 1 else ''}.")
        user = dash.store.find_user(email) if email else None
        if not email or not password or not await check_password(user, password):
            return await sign_in_page(status=400, email=email, target=target,
                                      error="That e-mail and password don't match an account.")
        assert user is not None
        dash.throttle.succeeded(email, client, now)
        return await start_session(viewer, user.id, None, target)

    @dash.page("/dashboard/sign-out", Action.SESSION, methods=("POST",))
    async def sign_out(viewer: Viewer) -> ResponseReturnValue:
        await accounts.delete_session(dash.store, viewer.session.token_hash)
        g.clear_session = True
        return see_other(HOME + "?done=signed-out")

    def open_invite(token: str) -> Invite:
        h = token_hash(token)
        invite = accounts.find_invite(dash.store, h) if h is not None else None
        if invite is None or not is_open(invite, dash.now_ms()):
            raise Gone("This invitation link was used already, was withdrawn or has expired. "
                       "Ask the person who invited you for a new one.")
        return invite

    async def invite_page(viewer: Viewer | None, invite: Invite, *, status: int = 200,
                          error: str | None = None) -> Response:
        org = dash.store.get_org(invite.org_id)
        inviter = dash.store.get_user(invite.invited_by)
        return await dash.render(
            "invite.html", None, status=status, invite=invite, error=error,
            org_name=org.name if org else "an organization",
            inviter=inviter.email if inviter else None,
            existing=dash.store.find_user(invite.email) is not None,
            signed_in_as=viewer.user.email if viewer else None)

    @dash.public("/dashboard/invite/<token>")
    async def invite(viewer: Viewer | None, token: str) -> ResponseReturnValue:
        return await invite_page(viewer, open_invite(token))

    @dash.public("/dashboard/invite/<token>", methods=("POST",), endpoint="accept_invite")
    async def accept_invite(viewer: Viewer | None, token: str) -> ResponseReturnValue:
        invite = open_invite(token)
        h = token_hash(token)
        assert h is not None
        form = await request.form
        password = form.get("password", "")[:MAX_PASSWORD]
        now = dash.now_ms()
        existing = dash.store.find_user(invite.email)
        try:
            if existing is not None:
                client = dash.client_address()
                wait = dash.throttle.attempt(invite.email, client, now)
                if wait:
                    return await invite_page(viewer, invite, status=429,
                                             error="Too many failed attempts. Try again later.")
                if not await check_password(existing, password):
                    return await invite_page(viewer, invite, status=400,
                                             error="That password is not right for this "
                                                   "account.")
                dash.throttle.succeeded(invite.email, client, now)
                await accounts.accept_invite(dash.store, h, now, existing_user_id=existing.id)
                user_id = existing.id
            else:
                check_new_password(password, form.get("confirm", ""))
                pw_hash = await trio.to_thread.run_sync(tenancy.hash_password, password,
                                                         limiter=passwords)
                user = User(id=new_id(dash.services.random(16)), email=invite.email,
                            password_hash=pw_hash, created_at_ms=now)
                await accounts.accept_invite(dash.store, h, now, new_user=user)
                user_id = user.id
        except Gone:
            raise
        except CallerError as e:
            return await invite_page(viewer, invite, status=e.status, error=e.message)
        return await start_session(viewer, user_id, invite.org_id, url_for("sdk", done="joined"))


def check_new_password(password: str, confirm: str) -> None:
    if len(password) < MIN_PASSWORD:
        raise ValidationError(f"Choose a password of at least {MIN_PASSWORD} characters.",
                              field="password")
    if password != confirm:
        raise ValidationError("The two passwords are not the same.", field="confirm")
