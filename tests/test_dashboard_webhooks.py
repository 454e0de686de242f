"""Settings > Webhooks in the dashboard, in-process (ASGI) with a real HTTPS
receiver (trustme): the list, adding an endpoint (the secret shown once and
verifying real deliveries), edit, Send test, turn off and on, rotate, delete
with its confirmation step, recent deliveries with filters, one delivery with
Retry and Resend, the plan rule, roles and scoping; and the wording helpers
of web/dashboard/webhook_display.py."""

from __future__ import annotations

import html
import re
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import standardwebhooks
import trio
import trustme

from actors.clock import SystemClock
from storage.lmdb_store import LmdbStore
from storage.webhooks_store import WebhookStore
from svc_engine.config import Config
from svc_engine.endpoint_health import (
    OFF_AUTOMATIC,
    EndpointHealth,
    HealthState,
    record_failure,
    turn_off,
)
from svc_engine.errors import NotFound, ValidationError
from svc_engine.keys import Mode
from svc_engine.plans import Plan
from svc_engine.records import Role
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import validate_endpoint
from svc_engine.webhook_records import Endpoint, new_endpoint
from tests.conftest import App, running_app
from tests.dashboard_support import Member, add_user, owner, signed_in
from tests.dashboard_webhook_support import make_delivery, make_endpoint
from tests.webhook_receiver_fixture import (
    Hit,
    Receiver,
    emit,
    make_ca,
    running_receiver,
    status,
    webhook_config,
)
from web import tenancy
from web.dashboard.views_webhook_deliveries import parse_status
from web.dashboard.webhook_display import (
    EndpointForm,
    duration,
    endpoint_label,
    form_body,
    form_error,
    health_line,
    next_try,
    pretty_json,
    secret_check,
)
from web.services import system_random
from web.webhook_receiver import Received, Reply

WH = "/dashboard/settings/webhooks"
DL = WH + "/deliveries"
SECRET = re.compile(r'id="wh-secret"[^>]*value="(whsec_[^"]+)"')
DELIVERY_LINK = re.compile(r'href="/dashboard/settings/webhooks/deliveries/([0-9a-f-]{36})"')
T0 = 1_767_225_600_000  # 1 Jan 2026 00:00 UTC


@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    return make_ca(tmp_path)


@pytest.fixture
def config(data_dir: str, ca: tuple[trustme.CA, str]) -> Config:
    return webhook_config(data_dir, ca[1])  # overrides conftest's: trust the test CA


@pytest.fixture
async def app(store: LmdbStore, config: Config) -> AsyncIterator[App]:
    """The service on the real wall clock: receivers check signature timestamps."""
    async with running_app(store, config, SystemClock()) as a:
        yield a


@pytest.fixture
async def receiver(ca: tuple[trustme.CA, str], app: App) -> AsyncIterator[Receiver]:
    async with running_receiver(ca[0], app.services.clock) as r:
        yield r


@pytest.fixture
async def boss(app: App) -> AsyncIterator[Member]:
    m = await signed_in(app, owner(app))
    yield m
    await m.aclose()


def tables(app: App) -> WebhookStore:
    assert app.services.webhooks is not None
    return app.services.webhooks.tables


def only_endpoint(app: App, mode: Mode = Mode.TEST) -> Endpoint:
    found = tables(app).endpoints(app.project_id, mode)
    assert len(found) == 1, found
    return found[0]


def delivery(app: App, delivery_id: str) -> Delivery:
    d = tables(app).delivery(delivery_id)
    assert d is not None
    return d


async def wait(check: Callable[[], bool], timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not check():
            await trio.sleep(0.01)


def text(r: Any) -> str:
    """The page with entities decoded and tags gone, spaces collapsed."""
    flat = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", r.text)).split())
    return re.sub(r" ([,.:;)?])", r"\1", flat).replace("( ", "(")


def verify(hit: Hit, secret: str) -> dict[str, Any]:
    headers = {k: v for k, v in hit.headers.items() if k.startswith("webhook-")}
    payload: dict[str, Any] = standardwebhooks.Webhook(secret).verify(hit.request.body, headers)
    return payload


async def add(m: Member, url: str, **fields: Any) -> tuple[Any, str]:
    form: dict[str, Any] = {"url": url, "description": "", "events": ["click", "open",
                                                                    "install", "conversion"]}
    form.update(fields)
    r = await m.client.post(WH + "/new", data={**form, "csrf": m.csrf})
    found = SECRET.search(r.text)
    return r, found.group(1) if found else ""


async def send_test(m: Member, endpoint_id: str) -> str:
    r = await m.post(f"{WH}/{endpoint_id}/test")
    assert r.status_code == 303, r.text
    found = re.fullmatch(r"/dashboard/settings/webhooks/deliveries/([0-9a-f-]{36})"
                         r"\?done=webhook-test-sent", r.headers["location"])
    assert found, r.headers["location"]
    return found.group(1)


# -- the list and adding an endpoint ------------------------------------------------------

async def test_empty_list_and_the_nav_entry(app: App, boss: Member) -> None:
    r = await boss.get(WH)
    assert r.status_code == 200
    assert re.search(r'href="/dashboard/settings/webhooks" aria-current="page">.*Webhooks',
                     r.text)
    page = text(r)
    assert "No endpoints in test mode yet" in page and "No deliveries in test mode yet" in page
    assert "Add endpoint" in page and "deduplicate on webhook-id" in page


async def test_add_form_has_all_four_events_ticked(boss: Member) -> None:
    r = await boss.get(WH + "/new")
    assert r.status_code == 200
    boxes = re.findall(r'<input type="checkbox" name="events" value="(\w+)"( checked)?', r.text)
    assert boxes == [(e, " checked") for e in ("click", "open", "install", "conversion")]
    assert "Plain http only for localhost, 127.0.0.1 and [::1]" in text(r)
    assert 'maxlength="200"' in r.text


async def test_added_endpoint_shows_its_secret_once(app: App, boss: Member) -> None:
    r, secret = await add(boss, "https://hooks.example.com/svc", description="Orders service",
                          events=["install", "click"])
    assert r.status_code == 200
    stored = only_endpoint(app)
    assert secret == stored.secret and secret.startswith("whsec_")
    page = text(r)
    assert "Endpoint added: copy its signing secret" in page
    assert "The dashboard shows it only this once" in page
    assert "from standardwebhooks import Webhook" in page
    assert f"svc webhooks listen --secret {secret} --port 9000" in page
    assert stored.url == "https://hooks.example.com/svc"
    assert stored.description == "Orders service" and stored.events == ("click", "install")
    for path in (WH, f"{WH}/{stored.id}", f"{WH}/{stored.id}/edit"):
        again = await boss.get(path)
        assert again.status_code == 200 and secret not in again.text, path
    listed = text(await boss.get(WH))
    assert "Orders service" in listed and "https://hooks.example.com/svc" in listed
    assert "Active No deliveries yet" in listed and "1 endpoint in test mode" in listed
    detail = text(await boss.get(f"{WH}/{stored.id}"))
    assert "whsec_••••" in detail and "How to verify deliveries" in detail


@pytest.mark.parametrize(("fields", "field", "message"), [
    ({"url": "http://hooks.example.com/x"}, "url",
     "The URL must use https (plain http only for localhost, 127.0.0.1 and [::1])"),
    ({"url": "ftp://hooks.example.com/x"}, "url", "URL scheme must be https or http"),
    ({"url": ""}, "url", "URL is empty"),
    ({"url": "https://user:pw@hooks.example.com/"}, "url",
     "URL must not contain user information"),
    ({"description": "d" * 201}, "description",
     "The description must be at most 200 characters"),
    ({"events": []}, "events", "Choose at least one event"),
    ({"events": ["click", "purchase"]}, "events", "Unknown event 'purchase'"),
])
async def test_add_refuses_what_the_api_refuses(app: App, boss: Member, fields: dict[str, Any],
                                                 field: str, message: str) -> None:
    form = {"url": "https://hooks.example.com/x", "description": "kept", **fields}
    r, secret = await add(boss, **form)
    assert r.status_code == 400 and secret == ""
    page = text(r)
    word = "URL" if field == "url" else field
    assert f"The endpoint was not added: check the {word} below." in page
    assert message in page
    assert re.search(rf'<div class="field has-error">\s*<label for="wh-{field}"', r.text) or (
        field == "events" and 'wh-events-field has-error' in r.text)
    if field != "description":
        assert 'value="kept"' in r.text                   # what was typed stays
    assert tables(app).endpoints(app.project_id, Mode.TEST) == []


@pytest.mark.parametrize("url", ["http://localhost:9000/h", "http://127.0.0.1/h",
                                 "http://[::1]:8080/h", "  https://hooks.example.com/trim  "])
async def test_plain_http_only_for_local_hosts(app: App, boss: Member, url: str) -> None:
    r, secret = await add(boss, url)
    assert r.status_code == 200 and secret
    assert only_endpoint(app).url == url.strip()


async def test_a_server_with_local_receivers_off_refuses_them_on_the_forms(
        app: App, boss: Member) -> None:
    endpoint = await make_endpoint(app, description="old")
    app.services.config = attrs.evolve(app.services.config, webhook_local_receivers=False)
    assert app.services.webhooks is not None
    app.services.webhooks.local_receivers = False
    r, secret = await add(boss, "http://localhost:9000/h")
    assert r.status_code == 400 and secret == ""
    assert "The endpoint was not added: check the URL below." in text(r)
    assert "turned off on this server" in text(r)
    bad = await boss.client.post(f"{WH}/{endpoint.id}/edit", data={
        "csrf": boss.csrf, "url": "https://127.0.0.1/h", "events": ["click"]})
    assert bad.status_code == 400 and "turned off on this server" in text(bad)
    assert only_endpoint(app) == endpoint


# -- Send test, the delivery page, Retry and Resend --------------------------------------

async def test_send_test_shows_the_delivery_signed_with_the_shown_secret(
        app: App, boss: Member, receiver: Receiver) -> None:
    _, secret = await add(boss, receiver.url, description="Local receiver")
    endpoint = only_endpoint(app)
    delivery_id = await send_test(boss, endpoint.id)
    hit = (await receiver.wait_for(1))[0]
    payload = verify(hit, secret)                   # the secret shown once signs it
    assert payload["type"] == "test" and hit.webhook_id == delivery_id
    await wait(lambda: delivery(app, delivery_id).status is DeliveryStatus.DELIVERED)
    r = await boss.get(f"{DL}/{delivery_id}?done=webhook-test-sent")
    assert r.status_code == 200
    page = text(r)
    assert "Test event sent." in page
    assert "Test event Delivered" in page and "To Local receiver" in page
    assert "HTTP 200" in page and "1 attempt" in page and "Automatic" in page
    assert '"type": "test"' in r.text.replace("&#34;", '"')    # indented for reading
    assert f"webhook-id: {delivery_id}" in page
    assert "Resend" in page and "Retry" not in page.replace("Retry or resend", "")
    assert "data-refresh-url" not in r.text                        # nothing in flight
    listed = text(await boss.get(WH))
    assert "Active Last success" in listed and "test" in listed
    mine = await boss.get(f"{WH}/{endpoint.id}")
    assert DELIVERY_LINK.findall(mine.text) == [delivery_id]


async def test_a_delivery_in_flight_refreshes_itself_a_bounded_number_of_times(
        app: App, boss: Member, receiver: Receiver) -> None:
    release = trio.Event()

    async def slow(req: Received, n: int) -> Reply:
        await release.wait()
        return 204, [], b""

    receiver.respond = slow
    endpoint = await make_endpoint(app, receiver.url)
    delivery_id = await send_test(boss, endpoint.id)
    await receiver.wait_for(1)
    await wait(lambda: delivery(app, delivery_id).status is DeliveryStatus.SENDING)
    r = await boss.get(f"{DL}/{delivery_id}")
    assert "Sending now." in text(r)
    assert f'data-refresh-url="{DL}/{delivery_id}?wait=1"' in r.text
    assert f'data-refresh-url="{DL}/{delivery_id}?wait=3"' in (
        await boss.get(f"{DL}/{delivery_id}?wait=2")).text
    last = await boss.get(f"{DL}/{delivery_id}?wait=8")
    assert "data-refresh-url" not in last.text and "Still sending." in text(last)
    release.set()
    await wait(lambda: delivery(app, delivery_id).status is DeliveryStatus.DELIVERED)
    assert "Sending now." not in text(await boss.get(f"{DL}/{delivery_id}?wait=1"))


async def test_resend_a_delivered_one_then_retry_it_when_it_failed(
        app: App, boss: Member, receiver: Receiver) -> None:
    endpoint = await make_endpoint(app, receiver.url)
    delivery_id = await send_test(boss, endpoint.id)
    await wait(lambda: delivery(app, delivery_id).status is DeliveryStatus.DELIVERED)
    assert (await boss.post(f"{DL}/{delivery_id}/retry")).status_code == 409

    receiver.respond = status(500, b'{"error": "database down"}')
    r = await boss.post(f"{DL}/{delivery_id}/resend")
    assert r.status_code == 303
    assert r.headers["location"] == f"{DL}/{delivery_id}?done=delivery-resent"
    await wait(lambda: delivery(app, delivery_id).status is DeliveryStatus.FAILED)
    failed = await boss.get(f"{DL}/{delivery_id}")
    page = text(failed)
    assert "Test event Failed" in page and "HTTP 500" in page and "2 attempts" in page
    assert '"error": "database down"' in failed.text.replace("&#34;", '"')
    assert "Retry or resend" in page and "Retry" in page and "Resend" not in page.replace(
        "Retry or resend", "")
    assert "Failing 1 failed attempt in a row since" in text(await boss.get(WH))

    receiver.respond = status(200, b"ok")
    r = await boss.post(f"{DL}/{delivery_id}/retry")
    assert r.headers["location"] == f"{DL}/{delivery_id}?done=delivery-retried"
    await wait(lambda: delivery(app, delivery_id).status is DeliveryStatus.DELIVERED)
    hits = await receiver.wait_for(3)
    assert {h.webhook_id for h in hits} == {delivery_id}          # the same webhook-id
    done = text(await boss.get(f"{DL}/{delivery_id}?done=delivery-retried"))
    assert "Sent again. The delivery keeps its webhook-id." in done and "3 attempts" in done
    assert "Active Last success" in text(await boss.get(WH))


async def test_retry_and_resend_refusals_show_on_the_page(app: App, boss: Member) -> None:
    endpoint = await make_endpoint(app)
    retrying = await make_delivery(app, endpoint, DeliveryStatus.RETRYING, attempts=2)
    r = await boss.post(f"{DL}/{retrying.id}/retry")
    assert r.status_code == 409
    assert "Only a Failed delivery can be retried; this one is Retrying" in text(r)
    page = text(await boss.get(f"{DL}/{retrying.id}"))
    assert "Attempt 2 failed. Next try" in page and "(attempt 3 of 7)" in page
    failed = await make_delivery(app, endpoint, DeliveryStatus.FAILED, attempts=7,
                                 response_status=None)
    assert (await boss.post(f"{WH}/{endpoint.id}/disable")).status_code == 303
    r = await boss.post(f"{DL}/{failed.id}/retry")
    assert r.status_code == 409 and "turn it on first" in text(r)
    page = text(await boss.get(f"{DL}/{failed.id}"))
    assert "The endpoint is off: turn it on to retry this delivery." in page
    assert "No response: connection refused." in page and "7 attempts" in page
    missing = "9b9c8d7e-0000-4000-8000-000000000000"
    assert (await boss.get(f"{DL}/{missing}")).status_code == 404
    assert (await boss.post(f"{DL}/{missing}/retry")).status_code == 404
    assert (await boss.get(f"{DL}/not-a-uuid")).status_code == 404


# -- one endpoint: edit, off and on, rotate, delete --------------------------------------

async def test_edit_saves_through_the_api_rules(app: App, boss: Member) -> None:
    endpoint = await make_endpoint(app, description="old")
    form = await boss.get(f"{WH}/{endpoint.id}/edit")
    assert 'value="old"' in form.text and form.text.count("checked") == 4
    r = await boss.client.post(f"{WH}/{endpoint.id}/edit", data={
        "csrf": boss.csrf, "url": "https://other.example.com/h", "description": "",
        "events": ["conversion"]})
    assert r.status_code == 303
    assert r.headers["location"] == f"{WH}/{endpoint.id}?done=webhook-saved"
    saved = only_endpoint(app)
    assert (saved.url, saved.description, saved.events) == (
        "https://other.example.com/h", None, ("conversion",))
    assert saved.secret == endpoint.secret
    bad = await boss.client.post(f"{WH}/{endpoint.id}/edit", data={
        "csrf": boss.csrf, "url": "http://other.example.com/h", "events": ["click"]})
    assert bad.status_code == 400
    assert "The endpoint was not saved: check the URL below." in text(bad)
    assert only_endpoint(app) == saved


async def test_turn_off_shows_the_reason_and_turn_on_resets(app: App, boss: Member) -> None:
    endpoint = await make_endpoint(app)
    r = await boss.post(f"{WH}/{endpoint.id}/disable")
    assert r.headers["location"] == f"{WH}/{endpoint.id}?done=webhook-off"
    page = text(await boss.get(r.headers["location"]))
    assert "The endpoint is off." in page and "This endpoint is off." in page
    assert "Turned off by owner@localhost on" in page  # who turned it off, and when
    assert "Send test" not in page and "Turn on" in page
    assert "Off Turned off by owner@localhost on" in text(await boss.get(WH))
    refused = await boss.post(f"{WH}/{endpoint.id}/test")
    assert refused.status_code == 409 and "turn it on to send a test event" in text(refused)
    r = await boss.post(f"{WH}/{endpoint.id}/enable")
    assert r.headers["location"] == f"{WH}/{endpoint.id}?done=webhook-on"
    assert only_endpoint(app).health.state is HealthState.ACTIVE
    page = text(await boss.get(r.headers["location"]))
    assert "Send test" in page and "Turn off" in page and "This endpoint is off" not in page


async def test_rotate_shows_the_new_secret_once_and_the_old_stops(
        app: App, boss: Member, receiver: Receiver) -> None:
    endpoint = await make_endpoint(app, receiver.url)
    page = await boss.get(f"{WH}/{endpoint.id}")
    check = re.search(r'name="secret_check" value="([0-9a-f]{16})"', page.text)
    assert check and check.group(1) == secret_check(endpoint)
    r = await boss.post(f"{WH}/{endpoint.id}/rotate", {"secret_check": check.group(1)})
    assert r.status_code == 200
    new = SECRET.search(r.text)
    assert new and new.group(1) != endpoint.secret and new.group(1) == only_endpoint(app).secret
    assert "The old secret stopped verifying just now." in text(r)
    assert new.group(1) not in (await boss.get(f"{WH}/{endpoint.id}")).text
    again = await boss.post(f"{WH}/{endpoint.id}/rotate", {"secret_check": check.group(1)})
    assert again.status_code == 409 and "Nothing was rotated" in text(again)
    assert only_endpoint(app).secret == new.group(1) and new.group(1) not in again.text
    assert (await boss.post(f"{WH}/{endpoint.id}/rotate")).status_code == 409
    await send_test(boss, endpoint.id)
    hit = (await receiver.wait_for(1))[0]
    assert verify(hit, new.group(1))["type"] == "test"
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        verify(hit, endpoint.secret)


async def test_delete_asks_first_and_removes_the_history(app: App, boss: Member) -> None:
    endpoint = await make_endpoint(app, description="Doomed")
    kept = await make_endpoint(app, "https://kept.example.com/")
    gone = [await make_delivery(app, endpoint, DeliveryStatus.DELIVERED),
            await make_delivery(app, endpoint, DeliveryStatus.RETRYING, attempts=2)]
    other = await make_delivery(app, kept, DeliveryStatus.DELIVERED)
    detail = await boss.get(f"{WH}/{endpoint.id}")
    assert f'href="{WH}/{endpoint.id}/delete"' in detail.text       # a link, not a script
    confirm = await boss.get(f"{WH}/{endpoint.id}/delete")
    page = text(confirm)
    assert "Delete this endpoint?" in page and "Events stop at once." in page
    assert "including 1 delivery still waiting to be sent" in page
    assert "Its delivery history is removed: 2 deliveries from the last 30 days" in page
    assert "turn the endpoint off instead" in page
    unconfirmed = await boss.post(f"{WH}/{endpoint.id}/delete")
    assert unconfirmed.status_code == 303
    assert unconfirmed.headers["location"] == f"{WH}/{endpoint.id}/delete"
    assert len(tables(app).endpoints(app.project_id, Mode.TEST)) == 2
    r = await boss.post(f"{WH}/{endpoint.id}/delete", {"confirm": "delete"})
    assert r.headers["location"] == f"{WH}?done=webhook-deleted"
    assert "deleted with its delivery history" in text(await boss.get(r.headers["location"]))
    assert [e.id for e in tables(app).endpoints(app.project_id, Mode.TEST)] == [kept.id]
    assert all(tables(app).delivery(d.id) is None for d in gone)
    assert tables(app).delivery(other.id) is not None
    assert (await boss.get(f"{WH}/{endpoint.id}")).status_code == 404
    assert (await boss.get(f"{DL}/{gone[0].id}")).status_code == 404


# -- recent deliveries ---------------------------------------------------------------------

async def test_recent_deliveries_last_50_with_filters(app: App, boss: Member,
                                                      receiver: Receiver) -> None:
    a = await make_endpoint(app, receiver.url, description="A clicks", events=["click"])
    b = await make_endpoint(app, receiver.url + "?b", description="B installs",
                            events=["install"])

    async def respond(req: Received, n: int) -> Reply:
        return (500 if "?b" in req.target else 204), [], b""

    receiver.respond = respond
    for _ in range(48):
        await emit(app, "click")
    for _ in range(3):
        await emit(app, "install")
    await receiver.wait_for(51)
    await wait(lambda: len(tables(app).recent(app.project_id, Mode.TEST, limit=100)) == 51
               and len(tables(app).recent(app.project_id, Mode.TEST, endpoint_id=b.id,
                                          status=DeliveryStatus.RETRYING)) == 3)
    r = await boss.get(DL)
    assert r.status_code == 200
    shown = DELIVERY_LINK.findall(r.text)
    assert len(shown) == 50 and "50 deliveries (the newest 50)" in text(r)
    newest = [d.id for d in tables(app).recent(app.project_id, Mode.TEST, limit=50)]
    assert shown == newest
    only_b = await boss.get(f"{DL}?endpoint_id={b.id}")
    assert len(DELIVERY_LINK.findall(only_b.text)) == 3
    assert f'<option value="{b.id}" selected>B installs</option>' in only_b.text
    page = text(only_b)
    assert "Retrying" in page and "HTTP 500" in page and "Matching deliveries" in page
    delivered = await boss.get(f"{DL}?endpoint_id={a.id}&status=Delivered")
    assert len(DELIVERY_LINK.findall(delivered.text)) == 48
    assert '<option value="delivered" selected>' in delivered.text
    none = await boss.get(f"{DL}?endpoint_id={b.id}&status=delivered")
    assert "No recent delivery matches these filters." in text(none)
    assert (await boss.get(f"{DL}?status=lost")).status_code == 400
    unknown = await boss.get(f"{DL}?endpoint_id=9b9c8d7e-0000-4000-8000-000000000000")
    assert unknown.status_code == 404
    listed = await boss.get(WH)
    assert len(DELIVERY_LINK.findall(listed.text)) == 8          # the newest, on the list


# -- plan, roles, scoping ---------------------------------------------------------------

async def test_below_growth_explains_the_plan_and_links_only_the_kept_endpoints(
        app: App, boss: Member) -> None:
    """No list (no status, events or deliveries): each endpoint kept from
    before is linked to its page, where it can still be edited, turned off
    or deleted (SPEC.md)."""
    endpoint = await make_endpoint(app, "https://secret-host.example.com/hook")
    d = await make_delivery(app, endpoint, DeliveryStatus.DELIVERED)
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    for path in (WH, DL, f"{DL}/{d.id}", WH + "/new"):
        r = await boss.get(path)
        assert r.status_code == 403, path
        page = text(r)
        assert "Webhooks need the Growth plan" in page and "on the Starter plan" in page
        assert "Upgrade on the Billing page" in page and 'href="/dashboard/settings/billing"' \
            in r.text
        assert "This project has 1 endpoint in test mode from before. It is kept" in page
        assert "You can still edit, turn off or delete it" in page
        assert f'href="{WH}/{endpoint.id}">https://secret-host.example.com/hook</a>' in r.text
        assert "Send test" not in page and "Delivered" not in page and "All events" not in page
    for path, data in ((WH + "/new", {"url": "https://a.example.com/", "events": "click"}),
                       (f"{WH}/{endpoint.id}/test", {}), (f"{DL}/{d.id}/resend", {})):
        r = await boss.post(path, data)
        assert r.status_code == 403 and "Webhooks need the Growth plan" in text(r), path
    assert len(tables(app).endpoints(app.project_id, Mode.TEST)) == 1
    assert delivery(app, d.id).status is DeliveryStatus.DELIVERED
    # One endpoint's page, editing, turning off and deleting stay possible.
    page = text(await boss.get(f"{WH}/{endpoint.id}"))
    assert "nothing is sent until the plan returns" in page and "Send test" not in page
    assert (await boss.post(f"{WH}/{endpoint.id}/disable")).status_code == 303
    assert (await boss.post(f"{WH}/{endpoint.id}/rotate",
                            {"secret_check": secret_check(endpoint)})).status_code == 200
    assert (await boss.post(f"{WH}/{endpoint.id}/delete", {"confirm": "delete"})
            ).status_code == 303
    dev = await signed_in(app, await add_user(app, "dev@example.com", Role.DEVELOPER))
    r = await dev.get(WH)
    assert r.status_code == 403 and "Only owners change the plan." in text(r)
    assert "See the plans" in text(r) and "This project has" not in text(r)
    await dev.aclose()


async def test_marketers_get_the_note_and_403_on_every_action(app: App) -> None:
    dev = await add_user(app, "dev@example.com", Role.DEVELOPER)
    endpoint = await make_endpoint(app, description="Private hook")
    d = await make_delivery(app, endpoint, DeliveryStatus.FAILED)
    mkt = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    r = await mkt.get(WH)
    assert r.status_code == 403
    page = text(r)
    assert "Webhooks are managed by owners, admins and developers" in page
    assert "owner@localhost" in page and dev.email in page and "Private hook" not in page
    for path in (f"{WH}/{endpoint.id}", DL, f"{DL}/{d.id}"):
        r = await mkt.get(path)
        assert r.status_code == 403 and "Webhooks are managed by" in text(r), path
        assert "Private hook" not in r.text and endpoint.url not in r.text
    for path, data in ((WH + "/new", {"url": "https://m.example.com/", "events": "click"}),
                       (f"{WH}/{endpoint.id}/test", {}), (f"{WH}/{endpoint.id}/disable", {}),
                       (f"{WH}/{endpoint.id}/rotate", {}),
                       (f"{WH}/{endpoint.id}/delete", {"confirm": "delete"}),
                       (f"{DL}/{d.id}/retry", {})):
        r = await mkt.post(path, data)
        assert r.status_code == 403 and "You don't have access" in text(r), path
        assert endpoint.secret not in r.text
    assert only_endpoint(app) == endpoint
    assert delivery(app, d.id).status is DeliveryStatus.FAILED
    await mkt.aclose()


async def test_endpoints_and_deliveries_of_another_mode_or_project_are_404(
        app: App, boss: Member) -> None:
    live = await make_endpoint(app, mode=Mode.LIVE)
    live_d = await make_delivery(app, live, DeliveryStatus.DELIVERED)
    r = await boss.get(f"{WH}/{live.id}")
    assert r.status_code == 404 and "belongs to live mode. Switch to Live" in text(r)
    r = await boss.get(f"{DL}/{live_d.id}")
    assert r.status_code == 404 and "belongs to live mode" in text(r)
    assert (await boss.post(f"{WH}/{live.id}/disable")).status_code == 404
    assert (await boss.post(f"{DL}/{live_d.id}/resend")).status_code == 404
    assert str(live.id) not in (await boss.get(WH)).text
    assert (await boss.post("/dashboard/mode", {"mode": "live", "next": WH})).status_code == 303
    assert live.id in (await boss.get(WH)).text
    other, _ = await tenancy.create_project(app.services.store, app.org_id, "Other app",
                                            system_random, app.services.clock.now_ms())
    theirs = await make_endpoint(app, project_id=other.id)
    their_d = await make_delivery(app, theirs, DeliveryStatus.DELIVERED)
    unknown = "0190e1a2-0000-7000-8000-000000000000"
    for mode in ("test", "live"):
        await boss.post("/dashboard/mode", {"mode": mode, "next": WH})
        assert (await boss.get(f"{WH}/{theirs.id}")).status_code == 404
        # the same page as for no delivery: a shorter one told that it exists
        seen, none = await boss.get(f"{DL}/{their_d.id}"), await boss.get(f"{DL}/{unknown}")
        assert seen.status_code == none.status_code == 404 and text(seen) == text(none)
        seen = await boss.post(f"{DL}/{their_d.id}/resend")
        none = await boss.post(f"{DL}/{unknown}/resend")
        assert seen.status_code == none.status_code == 404 and text(seen) == text(none)
    assert (await boss.get(f"{WH}/not-a-uuid")).status_code == 404


# -- wording -------------------------------------------------------------------------------

def _endpoint(health: EndpointHealth) -> Endpoint:
    return Endpoint(id="e", project_id="p", mode=Mode.TEST, url="https://x.example.com/",
                    description=None, events=("click",), secret="whsec_x",
                    created_at_ms=T0, updated_at_ms=T0, accepting_since_ms=T0, health=health)


def _failures(n: int, first: int, step: int) -> EndpointHealth:
    h = EndpointHealth()
    for i in range(n):
        h = record_failure(h, first + i * step)
    return h


@pytest.mark.parametrize(("health", "state", "badge", "words"), [
    (EndpointHealth(), "Active", "success", "No deliveries yet"),
    (EndpointHealth(last_success_at_ms=T0 + 90_000), "Active", "success",
     "Last success 1 Jan 2026, 00:01 UTC"),
    (_failures(1, T0, 0), "Failing", "warning", "1 failed attempt in a row since "
     "1 Jan 2026, 00:00 UTC"),
    (_failures(3, T0, 60_000), "Failing", "warning", "3 failed attempts in a row since "
     "1 Jan 2026, 00:00 UTC"),
    (turn_off(EndpointHealth(), T0 + 3_600_000), "Off", "muted",
     "Turned off by a team member on 1 Jan 2026, 01:00 UTC"),
    (turn_off(EndpointHealth(), T0, "Turned off by ana@example.com"), "Off", "muted",
     "Turned off by ana@example.com on 1 Jan 2026, 00:00 UTC"),
    (turn_off(_failures(3, T0, 60_000), T0 + 3_600_000), "Off", "muted",  # failing, then a person
     "Turned off by a team member on 1 Jan 2026, 01:00 UTC"),
    (_failures(20, T0, 5_000_000), "Off", "muted",
     "Turned off automatically on 2 Jan 2026, 02:23 UTC after 20 failed attempts in a row "
     "since 1 Jan 2026, 00:00 UTC"),
])
def test_health_line(health: EndpointHealth, state: str, badge: str, words: str) -> None:
    line = health_line(_endpoint(health))
    assert (line.state, line.badge, line.text) == (state, badge, words)


def test_automatic_turn_off_is_the_rule_of_endpoint_health() -> None:
    h = _failures(20, T0, 5_000_000)
    assert h.off_reason == OFF_AUTOMATIC and h.state is HealthState.OFF


def test_form_body_is_the_api_body() -> None:
    assert form_body(EndpointForm("https://a.example.com", "", ())) == {
        "url": "https://a.example.com", "description": "", "events": []}
    assert form_body(EndpointForm()) == {"url": "", "description": "",
                                         "events": ["click", "open", "install", "conversion"]}


@pytest.mark.parametrize(("error", "field", "message"), [
    (ValidationError("url must use https", field="url"), "url", "The URL must use https"),
    (ValidationError("description must be at most 200 characters", field="description"),
     "description", "The description must be at most 200 characters"),
    (ValidationError("choose at least one event", field="events"), "events",
     "Choose at least one event"),
    (ValidationError("unknown field 'x'", field="x"), None, "Unknown field 'x'"),
    (NotFound("There is no such thing"), None, "There is no such thing"),
])
def test_form_error(error: ValidationError, field: str | None, message: str) -> None:
    assert form_error(error) == (field, message)


def test_pretty_json_duration_and_status_filter() -> None:
    assert pretty_json('{"a":1,"b":[true]}') == '{\n  "a": 1,\n  "b": [\n    true\n  ]\n}'
    assert pretty_json("not json <b>") == "not json <b>" and pretty_json(None) == ""
    assert pretty_json('{"é":"ü"}') == '{\n  "é": "ü"\n}'
    assert [duration(v) for v in (None, 0, 999, 1000, 10_049, 100_000)] == [
        "", "0 ms", "999 ms", "1.0 s", "10.0 s", "100.0 s"]
    assert parse_status("") is None and parse_status("fAiLeD") is DeliveryStatus.FAILED
    with pytest.raises(ValidationError):
        parse_status("Lost")


def test_an_endpoint_is_named_by_its_description_else_its_url_in_60_characters() -> None:
    plain = _endpoint(EndpointHealth())
    assert endpoint_label(plain) == "https://x.example.com/"
    assert endpoint_label(None) == "Deleted endpoint"
    for size, shown in ((60, "d" * 60), (61, "d" * 59 + "…")):
        label = endpoint_label(attrs.evolve(plain, description="d" * size))
        assert label == shown and len(label) == 60


def test_next_try_counts_scheduled_attempts() -> None:
    d = Delivery(id="d", endpoint_id="e", event_id="v", event_type="click", mode=Mode.TEST,
                 status=DeliveryStatus.RETRYING, created_at_ms=T0, next_attempt_at_ms=T0)
    on = new_endpoint("e", "p", Mode.TEST, validate_endpoint("https://a.example.com/"),
                      "whsec_x", T0)
    assert next_try(d, on) == "1 Jan 2026, 00:00:00 UTC (attempt 1 of 7)"
    assert next_try(attrs.evolve(d, status=DeliveryStatus.FAILED), on) is None
