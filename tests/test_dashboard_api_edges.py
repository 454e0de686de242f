"""Edges of the dashboard, the API handlers, tenancy and housekeeping that the
rest of the suite left unexercised: an organization without a project yet
(every page and form of the dashboard answers, and says to make one), a
workspace switch by organization, signing in over a session, the base URL
without ``SVC_PUBLIC_URL``, a malformed session cookie, an internal error's
page; replays given before checks that read the time or the plan (PATCH of a
link, resend of a webhook delivery); a float beside a lone surrogate in an
events batch; the tenancy refusals (unknown organization, bad e-mail or
password, an interrupted or concurrent bootstrap); a stale or failing
housekeeping run; and a destination URL whose host cannot be read."""

from __future__ import annotations

import logging
import os
import re

import attrs
import orjson
import pytest
import trio
import trio.testing
from werkzeug.datastructures import MultiDict

from actors.clock import TrioWallClock
from storage import accounts
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.deadlines import Deadline
from svc_engine.destinations import LinkDestinations, blocked_field, destination_host
from svc_engine.errors import NotFound, SvcError, ValidationError
from svc_engine.keys import Mode
from svc_engine.links import iso_utc
from svc_engine.plans import Plan
from svc_engine.records import Membership, Role
from svc_engine.sessions import token_hash
from svc_engine.webhook_delivery import DeliveryStatus
from tests.conftest import App, running_app
from tests.dashboard_support import (
    Member,
    add_user,
    browser,
    owner,
    password_of,
    signed_in,
)
from tests.dashboard_webhook_support import make_delivery, make_endpoint
from tests.deferred_helpers import PLATFORMS, SDK
from tests.test_dashboard_links import api_link, form_with_params, post_form
from tests.test_events_api import Events, event
from web import tenancy
from web.dashboard.context import fmt_date, fmt_time
from web.dashboard.link_form import (
    EMPTY_PARAM_ROWS,
    MAX_PARAM_ROWS,
    LinkForm,
    ParamRow,
    from_form,
)
from web.housekeeping import ATTRIBUTION_SWEEP
from web.services import system_random

HOUR_MS = 3_600_000
WH = "/dashboard/settings/webhooks"


# -- svc_engine/destinations.py --------------------------------------------------------


@pytest.mark.parametrize("url", [
    "http://[::1",                      # urlsplit refuses it (ValueError)
    "http:///no-host",                  # no host at all
    "https://a\u00df\u200d.example/",   # not a valid internationalized name
])
def test_a_destination_whose_host_cannot_be_read_is_never_allowed(url: str) -> None:
    """Fail closed: with a non-empty list, a URL with no readable host is the
    blocked field, never let through as matching nothing to check."""
    assert destination_host(url) is None
    rules = LinkDestinations(sdk_allowed_hosts=("example.com",))
    assert blocked_field(rules, {"webFallbackUrl": url}) == "webFallbackUrl"


# -- web/tenancy.py ---------------------------------------------------------------------


async def test_tenancy_refuses_an_unknown_organization(store: LmdbStore) -> None:
    missing = "0190e1a2-0000-7000-8000-000000000001"
    with pytest.raises(NotFound):
        await tenancy.create_project(store, missing, "App", os.urandom, 1)
    with pytest.raises(NotFound):
        tenancy.check_room(store, missing, 1)
    user = await tenancy.create_user(store, "dev@example.com", "p" * 10, os.urandom, 1)
    with pytest.raises(NotFound):
        await tenancy.add_member(store, missing, user.id, Role.DEVELOPER, 1)
    assert store.list_projects(missing) == [] and store.members_of(missing) == []


@pytest.mark.parametrize(("email", "password", "field"), [
    ("no-at-sign.example.com", "p" * 10, "email"),
    ("x" * 250 + "@a.io", "p" * 10, "email"),
    ("dev@example.com", "p" * 9, "password"),
    ("dev@example.com", "p" * 1001, "password"),
])
async def test_a_user_needs_an_address_and_a_password_of_10_to_1000_characters(
        store: LmdbStore, email: str, password: str, field: str) -> None:
    with pytest.raises(ValidationError) as info:
        await tenancy.create_user(store, email, password, os.urandom, 1)
    assert info.value.field == field
    assert store.find_user(email) is None
    # the bounds themselves are accepted
    assert (await tenancy.create_user(store, "a@b.io", "p" * 1000, os.urandom, 1)).email
    longest = "x" * 249 + "@a.io"
    assert len(longest) == 254
    assert (await tenancy.create_user(store, longest, "p" * 10, os.urandom, 1)).email == longest


async def test_organization_and_project_names_have_1_to_100_characters(
        store: LmdbStore) -> None:
    """100 characters is a name, 101 is refused with nothing made; so are
    a blank one and one with a control character."""
    for bad in ("x" * 101, "   "):
        with pytest.raises(ValidationError) as info:
            await tenancy.create_org(store, bad, Plan.SCALE, os.urandom, 1)
        assert info.value.field == "name"
    assert list(store.all_orgs()) == []
    org = await tenancy.create_org(store, "o" * 100, Plan.SCALE, os.urandom, 1)
    assert org.name == "o" * 100
    for bad in ("x" * 101, "", "tab\there"):
        with pytest.raises(ValidationError) as info:
            await tenancy.create_project(store, org.id, bad, os.urandom, 1)
        assert info.value.field == "name"
    assert store.list_projects(org.id) == []
    project, keys = await tenancy.create_project(store, org.id, "p" * 100, os.urandom, 1)
    assert project.name == "p" * 100 and sorted(keys) == [
        "pk_live", "pk_test", "sk_live", "sk_test"]


async def test_a_bootstrap_beside_an_owner_without_its_record_is_refused(
        store: LmdbStore) -> None:
    """An older svc stopped during its first start left the owner without
    the bootstrap record: refused with what to do, and nothing made."""
    await tenancy.create_user(store, tenancy.OWNER_EMAIL, "p" * 12, os.urandom, 1)
    with pytest.raises(tenancy.BootstrapInterrupted) as info:
        await tenancy.bootstrap(store, "http://svc.test", system_random, 1)
    assert "svc user create" in info.value.message
    assert list(store.all_orgs()) == [] and store.meta("bootstrap") is None


async def test_two_bootstraps_at_once_make_one_organization(store: LmdbStore) -> None:
    """Both find an empty data dir (each hashes the owner's password in a
    thread meanwhile); the second to write reports what the first made."""
    results: list[dict[str, object]] = []

    async def one() -> None:
        results.append(await tenancy.bootstrap(store, "http://svc.test", system_random, 1))

    async with trio.open_nursery() as n:
        n.start_soon(one)
        n.start_soon(one)
    # which of the two answers first is up to the threads: order them by what they say
    second, first = sorted(results, key=lambda r: bool(r["created"]))
    assert (first["created"], second["created"]) == (True, False)
    assert second["projectId"] == first["projectId"]
    assert second["organizationId"] == first["organizationId"]
    assert "password" not in second["owner"]  # type: ignore[operator]
    assert [o.id for o in store.all_orgs()] == [first["organizationId"]]


async def test_the_start_finds_the_projects_with_probabilistic_matching(app: App) -> None:
    store = app.services.store
    assert tenancy.projects_with_probabilistic_matching(store) == []
    other, _ = await tenancy.create_project(store, app.org_id, "Other", os.urandom, 1)
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        r = await c.patch("/v1/deferred/settings", json={"probabilisticMatching": True})
        assert r.status_code == 200, r.text
    assert tenancy.projects_with_probabilistic_matching(store) == [app.project_id]
    assert other.id != app.project_id


# -- web/api_events.py, web/api_links.py, web/api_webhooks.py --------------------------


async def test_a_fraction_beside_a_lone_surrogate_is_kept_as_sent(app: App) -> None:
    """The batch holding a lone surrogate is decoded by the standard library;
    a number with a fraction in another event keeps its value there."""
    ev = await Events(app).start()
    cut = event(at=ev.at(), title="PROP")
    paid = event("paid", at=ev.at(), revenue="R", currency="EUR")
    body = orjson.dumps({"installId": ev.install, "events": [cut, paid]})
    body = body.replace(b"PROP", b"cut \\ud83d").replace(b'"R"', b"12.75")
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/events", content=body)
    assert r.status_code == 200, r.text
    assert r.json()["accepted"] == 1
    assert (await ev.summary())["conversions"]["revenue"] == {"EUR": "12.75"}


async def test_a_link_patch_retried_after_its_expiry_passed_gets_its_answer(
        store: LmdbStore, config: Config) -> None:
    """The retry of a PATCH that succeeded is answered as it was, even once
    the ``expiresAt`` it set is past (checked again, it would be a 400)."""
    clock = TrioWallClock()
    async with running_app(store, config, clock) as app:
        link = await api_link(app)
        soon = {"expiresAt": iso_utc(clock.now_ms() + HOUR_MS)}
        async with app.client("sk_test", **{"idempotency-key": "patch-1"}) as c:
            first = await c.patch(f"/v1/links/{link['id']}", json=soon)
            assert first.status_code == 200, first.text
            clock.offset_ms = 2 * HOUR_MS
            again = await c.patch(f"/v1/links/{link['id']}", json=soon)
        assert again.status_code == 200 and again.content == first.content
        assert again.headers["idempotent-replayed"] == "true"
        async with app.client("sk_test", **{"idempotency-key": "patch-2"}) as c:
            fresh = await c.patch(f"/v1/links/{link['id']}", json=soon)
        assert (fresh.status_code, fresh.json()["error"]["field"]) == (400, "expiresAt")


async def test_a_resend_retried_after_the_plan_went_down_gets_its_answer(app: App) -> None:
    endpoint = await make_endpoint(app)
    delivered = await make_delivery(app, endpoint, DeliveryStatus.DELIVERED)
    path = f"/v1/webhooks/deliveries/{delivered.id}/resend"
    async with app.client("sk_test", **{"idempotency-key": "resend-1"}) as c:
        first = await c.post(path)
        assert first.status_code == 200, first.text
        await app.services.store.set_plan(app.org_id, Plan.STARTER)
        again = await c.post(path)
    assert again.status_code == 200 and again.content == first.content
    assert again.headers["idempotent-replayed"] == "true"
    async with app.client("sk_test", **{"idempotency-key": "resend-2"}) as c:
        assert (await c.post(path)).status_code == 403


# -- web/housekeeping.py ----------------------------------------------------------------


async def test_a_stale_persisted_sweep_deadline_runs_nothing(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Two deadlines of one sweep in the store (a run planned twice): the
    earliest is the planned run; the other fires and is ignored, so the sweep
    keeps one schedule, every 10 minutes, not two."""
    clock = TrioWallClock()
    start = clock.now_ms()
    await store.add_deadlines([Deadline(start + 60_000, ATTRIBUTION_SWEEP, "all"),
                               Deadline(start + 120_000, ATTRIBUTION_SWEEP, "all")])
    async with running_app(store, config, clock) as app:
        sweeps: list[int] = []
        real = app.services.attribution.sweep

        async def counted(now: int, limit: int, latest: int | None = None) -> dict[str, int]:
            sweeps.append(now)
            return await real(now, limit, latest)

        monkeypatch.setattr(app.services.attribution, "sweep", counted)
        await trio.sleep(3600)
    assert [s - start for s in sweeps] == [60_000 + k * 600_000 for k in range(6)]


async def test_a_sweep_that_fails_unexpectedly_runs_again_at_its_time(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    sweeps: list[int] = []
    real = app.services.attribution.sweep

    async def broken_once(now: int, limit: int, latest: int | None = None) -> dict[str, int]:
        sweeps.append(now)
        if len(sweeps) == 1:
            raise RuntimeError("simulated: a bug in the sweep")
        return await real(now, limit, latest)

    monkeypatch.setattr(app.services.attribution, "sweep", broken_once)
    with caplog.at_level(logging.ERROR, logger="svc.housekeeping"):
        await trio.sleep(3600 + 60)
    assert len(sweeps) == 6  # every 10 minutes, the failed first one included
    failed = [r for r in caplog.records if r.name == "svc.housekeeping"]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "attribution_sweep failed" in failed[0].getMessage()
    async with app.client("sk_test") as c:  # the service still answers
        assert (await c.get("/v1/links")).status_code == 200


# -- the dashboard: an organization without a project -------------------------------------


async def empty_org_member(app: App) -> tuple[Member, str]:
    """The owner, signed in to a Growth organization that has no project yet."""
    store, now = app.services.store, app.services.clock.now_ms()
    org = await tenancy.create_org(store, "Empty Co", Plan.GROWTH, os.urandom, now)
    await store.set_member(Membership(org_id=org.id, user_id=owner(app).id, role=Role.OWNER,
                                      created_at_ms=now))
    return await signed_in(app, owner(app), org_id=org.id), org.id


async def test_every_page_of_an_organization_without_a_project_answers(app: App) -> None:
    """Pages show their empty state; a form that would make something in the
    project says to create one first, and nothing is made anywhere."""
    m, _ = await empty_org_member(app)
    keys_before = len(app.services.store.list_keys(app.project_id))
    for path in ("/dashboard/build/debugger", "/dashboard/build/debugger/simulate?link=abc",
                 "/dashboard/settings/keys", WH):
        r = await m.get(path)
        assert r.status_code == 200, (path, r.status_code)
    assert "sk_test_" not in (await m.get("/dashboard/settings/keys")).text
    refused = {
        "/dashboard/build/domains": ({"domain": "go.example.com"}, 404),
        "/dashboard/build/domains/go.example.com/remove": ({}, 404),
        "/dashboard/settings/keys": ({"kind": "secret", "name": "k"}, 400),
        "/dashboard/links/new": ({"path": "/x"}, 400),
        "/dashboard/build/platforms": ({"iosBundleId": "com.example.app"}, 400),
        "/dashboard/build/platforms/destinations": ({"sdkAllowedHosts": "example.com"}, 400),
        WH + "/new": ({"url": "https://example.com/hook"}, 400),
    }
    for path, (form, status) in refused.items():
        r = await m.post(path, form)
        assert r.status_code == status, (path, r.status_code)
        said = "no such domain" if path.endswith("/remove") else "create a project first"
        assert said in r.text.lower(), path
    assert len(app.services.store.list_keys(app.project_id)) == keys_before
    assert app.services.links.domains_of(app.project_id) == []
    assert app.services.links.list(app.project_id, "test").links == []
    assert app.services.webhooks is not None
    assert app.services.webhooks.tables.endpoints(app.project_id, Mode.TEST) == []
    await m.aclose()


async def test_switching_by_organization_opens_its_first_project_or_none(app: App) -> None:
    store, now = app.services.store, app.services.clock.now_ms()
    m = await signed_in(app, owner(app))
    empty = await tenancy.create_org(store, "Empty Co", Plan.GROWTH, os.urandom, now)
    full = await tenancy.create_org(store, "Full Co", Plan.GROWTH, os.urandom, now)
    project, _ = await tenancy.create_project(store, full.id, "Their app", os.urandom, now)
    for org in (empty, full):
        await store.set_member(Membership(org_id=org.id, user_id=owner(app).id,
                                          role=Role.DEVELOPER, created_at_ms=now))
    for org_id, project_id in ((empty.id, None), (full.id, project.id)):
        r = await m.post("/dashboard/workspace", {"org_id": org_id,
                                                  "next": "/dashboard/settings/team"})
        assert (r.status_code, r.headers["location"]) == (303, "/dashboard/settings/team")
        session = accounts.get_session(store, m.session.token_hash)
        assert session is not None
        assert (session.org_id, session.project_id) == (org_id, project_id)
    await m.aclose()


# -- the dashboard: sessions, base URL, errors --------------------------------------------


async def test_signing_in_over_a_session_ends_that_session(app: App) -> None:
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/sign-in", {"email": owner(app).email,
                                            "password": password_of(app)})
    assert r.status_code == 303, r.text
    assert accounts.get_session(app.services.store, m.session.token_hash) is None
    assert (await m.get("/dashboard/settings/team")).status_code == 200  # the new one
    await m.aclose()


async def test_a_malformed_session_cookie_is_cleared(app: App) -> None:
    async with browser(app) as c:
        c.cookies.set("svc_session", "not-a-token", domain="svc.test", path="/dashboard")
        r = await c.get("/dashboard/settings/team")
        assert r.status_code == 303
        cleared = r.headers.get("set-cookie", "")
        assert cleared.startswith("svc_session=") and "Max-Age=0" in cleared
        assert "svc_session" not in c.cookies
        again = await c.get("/dashboard/settings/team")
        assert "svc_session" not in again.headers.get("set-cookie", "")


async def test_without_a_public_url_the_dashboard_uses_the_address_it_was_reached_at(
        store: LmdbStore, config: Config) -> None:
    async with running_app(store, attrs.evolve(config, public_url=None),
                           TrioWallClock()) as app:
        m = await signed_in(app, owner(app))
        sdk = (await m.get("/dashboard/build/sdk")).text
        assert 'value="http://svc.test"' in sdk
        invited = await m.post("/dashboard/settings/team/invite",
                               {"email": "new@example.com", "role": "developer"})
        assert invited.status_code == 200
        # the token is URL-safe base64 of 32 bytes: it may begin with "-" or "_"
        shown = re.search(r"http://svc\.test/dashboard/invite/([\w-]{43})(?![\w-])",
                          invited.text, re.ASCII)
        assert shown is not None
        stored = accounts.list_invites(app.services.store, app.org_id,
                                        app.services.clock.now_ms())
        assert [i.token_hash for i in stored] == [token_hash(shown.group(1))]
        await m.aclose()


async def test_an_internal_error_shows_a_500_page_and_is_logged(
        app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    async def failing(*args: object) -> None:
        raise SvcError("simulated internal detail")

    monkeypatch.setattr(app.services.links, "add_domain", failing)
    m = await signed_in(app, owner(app))
    with caplog.at_level(logging.ERROR):
        r = await m.post("/dashboard/build/domains", {"domain": "go.example.com"})
    assert r.status_code == 500
    assert "Something went wrong" in r.text and "simulated internal detail" not in r.text
    assert any("SvcError on POST /dashboard/build/domains" in x.getMessage()
               for x in caplog.records)
    await m.aclose()


def test_an_absent_time_is_shown_blank() -> None:
    assert fmt_time(None) == "" and fmt_date(None) == ""
    assert fmt_time(0) == "1 Jan 1970, 00:00 UTC" and fmt_date(0) == "1 Jan 1970"


# -- the dashboard: links, team, deliveries -------------------------------------------------


def test_a_link_form_shows_at_most_50_parameter_rows() -> None:
    """Blank rows are added up to 50 rows in all, never past them; a form
    sent back keeps at most 50 rows and its blank ones."""
    assert MAX_PARAM_ROWS == 50
    for filled, shown in ((0, EMPTY_PARAM_ROWS), (48, 50), (49, 50), (50, 50)):
        form = LinkForm({}, tuple(ParamRow(f"k{i}", "text", "v") for i in range(filled)))
        assert len(form.rows()) == shown, filled
    sent = MultiDict([*(("param_key", f"k{i}") for i in range(60)),
                      *(("param_value", f"v{i}") for i in range(10))])  # no types, few values
    rows = from_form(sent).params
    assert len(rows) == MAX_PARAM_ROWS + EMPTY_PARAM_ROWS
    assert rows[9] == ParamRow("k9", "text", "v9") and rows[10] == ParamRow("k10", "text", "")


async def test_more_rows_on_the_edit_form_saves_nothing(app: App) -> None:
    link = await api_link(app)
    m = await signed_in(app, owner(app))
    r = await post_form(m, f"/dashboard/links/{link['id']}/edit", form_with_params(
        {"path": "/changed", "more_params": "1"}, [("keep", "text", "me")]))
    assert r.status_code == 200
    assert r.text.count('name="param_key"') == 1 + EMPTY_PARAM_ROWS + 3
    assert 'value="/changed"' in r.text
    stored = app.services.links.get(link["id"])
    assert stored is not None and stored.path == "/p" and dict(stored.params) == {}
    await m.aclose()


async def test_a_link_page_with_a_days_that_is_not_a_number_shows_30_days(app: App) -> None:
    link = await api_link(app)
    m = await signed_in(app, owner(app))
    for days, shown in (("abc", 30), ("7", 7), ("12", 30)):
        r = await m.get(f"/dashboard/links/{link['id']}?days={days}")
        assert r.status_code == 200
        assert re.findall(r'aria-current="page">(\d+) days<', r.text) == [str(shown)], days
    await m.aclose()


async def test_an_expiry_typed_with_seconds_is_read_as_utc(app: App) -> None:
    """The form's ``datetime-local`` field sends seconds when a browser's
    step asks for them (or a fraction): UTC too, as the minutes are."""
    m = await signed_in(app, owner(app))
    for typed, stored in (("2031-01-02T03:04:05", "2031-01-02T03:04:05.000Z"),
                          ("2031-01-02T03:04:05.5", "2031-01-02T03:04:05.500Z")):
        r = await m.post("/dashboard/links/new", {"path": "/x", "expiresAt": typed})
        assert r.status_code == 303, r.text
        link = app.services.links.list(app.project_id, "test", limit=1).links[0]
        assert link.expires_at_ms is not None
        assert iso_utc(link.expires_at_ms) == stored
    await m.aclose()


async def test_a_member_who_removes_themselves_goes_to_the_dashboard_s_home(app: App) -> None:
    admin = await add_user(app, "admin@example.com", Role.ADMIN)
    m = await signed_in(app, admin)
    r = await m.post(f"/dashboard/settings/team/members/{admin.id}/remove")
    assert (r.status_code, r.headers["location"]) == (303, "/dashboard")
    assert all(x.user_id != admin.id for x in app.services.store.members_of(app.org_id))
    await m.aclose()


async def test_a_delivery_page_with_a_wait_that_is_not_a_number_counts_from_zero(
        app: App) -> None:
    endpoint = await make_endpoint(app)
    queued = await make_delivery(app, endpoint, DeliveryStatus.QUEUED, attempts=0)
    m = await signed_in(app, owner(app))
    for wait in ("abc", "-3", ""):
        r = await m.get(f"{WH}/deliveries/{queued.id}?wait={wait}")
        assert r.status_code == 200
        assert f'data-refresh-url="{WH}/deliveries/{queued.id}?wait=1"' in r.text, wait
    await m.aclose()
