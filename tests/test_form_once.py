"""The same dashboard form posted twice is done once (web/dashboard/form_once.py):
the rule in isolation, then through the dashboard's create forms."""

from __future__ import annotations

import re

import pytest
import trio
import trio.testing
from quart import Response

from svc_engine.webhook_delivery import DeliveryStatus
from tests.conftest import App
from tests.dashboard_support import Member, owner, signed_in
from tests.dashboard_webhook_support import actor, make_delivery, make_endpoint
from web.dashboard.form_once import CAPACITY, KEEP_MS, MAX_BYTES, FormOnce, fields_digest

KEY = "0123456789abcdef" * 2
FIELDS = fields_digest([("slug", "shoes"), ("path", "/p")])


class _Clock:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


class _Make:
    """A form's action: counts its runs; answers ``status`` after ``delay_s``."""

    def __init__(self, status: int = 303, delay_s: float = 0.0) -> None:
        self.runs = 0
        self.status = status
        self.delay_s = delay_s

    async def __call__(self) -> Response:
        self.runs += 1
        await trio.sleep(self.delay_s)
        return Response(f"run {self.runs}", status=self.status,
                        headers={"Location": f"/made/{self.runs}", "Set-Cookie": "a=1"})


def _once(clock: _Clock, **kw: int) -> FormOnce:
    return FormOnce(clock, lambda n: bytes(range(n)), **kw)


async def _text(r: Response) -> str:
    data = await r.get_data(as_text=True)
    assert isinstance(data, str)
    return data


async def test_the_same_form_again_gets_the_first_answer() -> None:
    once, make = _once(_Clock()), _Make()
    first = await once.run("session", KEY, FIELDS, make)
    again = await once.run("session", KEY, fields_digest([("path", "/p"), ("slug", "shoes"),
                                                          ("csrf", "other")]), make)
    assert make.runs == 1 and again.status_code == 303
    assert again.headers["Location"] == first.headers["Location"] == "/made/1"
    assert again.headers["Set-Cookie"] == "a=1" and await _text(again) == "run 1"


async def test_a_double_click_waits_for_the_first_post() -> None:
    once, make = _once(_Clock()), _Make(delay_s=1.0)
    got: list[str] = []

    async def post() -> None:
        got.append((await once.run("session", KEY, FIELDS, make)).headers["Location"])

    async with trio.open_nursery() as nursery:
        nursery.start_soon(post)
        nursery.start_soon(post)
    assert make.runs == 1 and got == ["/made/1", "/made/1"]


@pytest.mark.parametrize("second", [
    {"scope": "another session"},
    {"key": "f" * 32},
    {"fields": fields_digest([("slug", "boots"), ("path", "/p")])},
])
async def test_another_session_key_or_fields_is_done_again(second: dict[str, object]) -> None:
    once, make = _once(_Clock()), _Make()
    await once.run("session", KEY, FIELDS, make)
    args: dict[str, object] = {"scope": "session", "key": KEY, "fields": FIELDS, **second}
    r = await once.run(str(args["scope"]), str(args["key"]), args["fields"], make)  # type: ignore[arg-type]
    assert make.runs == 2 and r.headers["Location"] == "/made/2"


@pytest.mark.parametrize("key", [None, "", "abc", KEY.upper(), KEY + "0", "g" * 32])
async def test_without_a_well_formed_key_every_post_is_done(key: str | None) -> None:
    once, make = _once(_Clock()), _Make()
    for _ in range(2):
        await once.run("session", key, FIELDS, make)
    assert make.runs == 2 and len(once) == 0


async def test_refused_forms_are_not_kept() -> None:
    once, make = _once(_Clock()), _Make(status=400)
    for _ in range(2):
        assert (await once.run("session", KEY, FIELDS, make)).status_code == 400
    assert make.runs == 2 and len(once) == 0


async def test_an_answer_is_kept_ten_minutes() -> None:
    assert KEEP_MS == 10 * 60_000
    clock = _Clock()
    once, make = _once(clock), _Make()
    await once.run("session", KEY, FIELDS, make)
    clock.ms += KEEP_MS - 1
    await once.run("session", KEY, FIELDS, make)
    assert make.runs == 1
    clock.ms += 1
    await once.run("session", KEY, FIELDS, make)
    assert make.runs == 2


async def test_a_failing_action_leaves_nothing_behind() -> None:
    once = _once(_Clock())

    async def boom() -> Response:
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        await once.run("session", KEY, FIELDS, boom)
    make = _Make()
    await once.run("session", KEY, FIELDS, make)  # not stuck waiting for the failed one
    assert make.runs == 1


async def test_at_most_capacity_answers_oldest_out_first() -> None:
    assert CAPACITY == 10_000
    once, make = _once(_Clock(), capacity=2), _Make()
    keys = [c * 32 for c in "abc"]
    for key in keys:
        await once.run("session", key, FIELDS, make)
    assert len(once) == 2
    await once.run("session", keys[2], FIELDS, make)
    await once.run("session", keys[1], FIELDS, make)
    assert make.runs == 3
    await once.run("session", keys[0], FIELDS, make)
    assert make.runs == 4


async def test_at_most_max_bytes_of_answers_oldest_out_first() -> None:
    once, make = _once(_Clock(), max_bytes=12), _Make()  # each body is "run N": 5 bytes
    keys = [c * 32 for c in "abcd"]
    for key in keys[:3]:
        await once.run("session", key, FIELDS, make)
    assert len(once) == 2  # 15 bytes would not fit: "a" went
    await once.run("session", keys[0], FIELDS, make)
    assert make.runs == 4 and len(once) == 2
    big = FormOnce(_Clock(), lambda n: bytes(range(n)), max_bytes=4)
    for _ in range(2):  # an answer larger than the whole budget is not kept
        await big.run("session", KEY, FIELDS, make)
    assert len(big) == 0 and make.runs == 6


async def test_answers_fill_the_byte_budget_exactly() -> None:
    """Two 5-byte answers fit a budget of 10, and one of 5 a budget of 5; the
    default budget is 8 MiB."""
    assert MAX_BYTES == 8 << 20
    make = _Make()
    once = _once(_Clock(), max_bytes=10)
    for key in ("a" * 32, "b" * 32):
        await once.run("session", key, FIELDS, make)
    assert len(once) == 2
    exact = _once(_Clock(), max_bytes=5)
    await exact.run("session", KEY, FIELDS, make)
    await exact.run("session", KEY, FIELDS, make)
    assert len(exact) == 1 and make.runs == 3


def test_new_keys_are_well_formed_and_fresh() -> None:
    once = FormOnce(_Clock(), __import__("os").urandom)
    keys = {once.new_key() for _ in range(100)}
    assert len(keys) == 100 and all(re.fullmatch(r"[0-9a-f]{32}", k) for k in keys)


# -- through the dashboard --------------------------------------------------------------------

ONCE_FIELD = re.compile(r'name="once" value="([0-9a-f]{32})"')
SECRET_VALUE = re.compile(r'id="new-key" class="mono reveal-value" type="text" value="([^"]+)"')


async def once_key(m: Member, path: str) -> str:
    """The ``once`` field of the form on the page at ``path``."""
    page = await m.get(path)
    found = ONCE_FIELD.search(page.text)
    assert page.status_code == 200 and found is not None, path
    return found.group(1)


async def test_a_link_form_posted_twice_makes_one_link(app: App) -> None:
    m = await signed_in(app, owner(app))
    key = await once_key(m, "/dashboard/links/new")
    form = {"path": "/product/42", "slug": "twice", "once": key}
    first = await m.post("/dashboard/links/new", form)
    again = await m.post("/dashboard/links/new", form)
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    async with app.client("sk_test") as c:
        listed = (await c.get("/v1/links")).json()
    assert [link["slug"] for link in listed["data"]] == ["twice"]
    # A fresh form (a new key) makes another link; the new page has a new key.
    fresh = await once_key(m, "/dashboard/links/new")
    assert fresh != key
    other = await m.post("/dashboard/links/new", {**form, "slug": "third", "once": fresh})
    assert other.status_code == 303 and other.headers["location"] != first.headers["location"]
    await m.aclose()


async def test_a_key_form_posted_twice_makes_one_key_and_shows_it_both_times(app: App) -> None:
    m = await signed_in(app, owner(app))
    form = {"kind": "secret", "name": "CI", "once": await once_key(m, "/dashboard/settings/keys")}
    first = await m.post("/dashboard/settings/keys", form)
    again = await m.post("/dashboard/settings/keys", form)
    shown = [SECRET_VALUE.search(r.text) for r in (first, again)]
    assert shown[0] is not None and shown[1] is not None
    assert shown[0].group(1) == shown[1].group(1)  # the browser shows the second answer
    assert [k.name for k in app.services.store.list_keys(app.project_id)].count("CI") == 1
    other = await signed_in(app, owner(app))  # another session's same key is its own
    r = await other.post("/dashboard/settings/keys", form)
    assert r.status_code == 200
    assert [k.name for k in app.services.store.list_keys(app.project_id)].count("CI") == 2
    await m.aclose()
    await other.aclose()


@pytest.mark.parametrize("path", ["/dashboard/links/new", "/dashboard/settings/keys",
                                  "/dashboard/settings/team", "/dashboard/orgs/new",
                                  "/dashboard/projects/new", "/dashboard/settings/webhooks/new"])
async def test_every_create_form_carries_a_once_key(app: App, path: str) -> None:
    m = await signed_in(app, owner(app))
    await once_key(m, path)
    await m.aclose()


async def test_send_test_clicked_twice_sends_one_test_event(app: App) -> None:
    endpoint = await make_endpoint(app)
    m = await signed_in(app, owner(app))
    key = await once_key(m, f"/dashboard/settings/webhooks/{endpoint.id}")
    path = f"/dashboard/settings/webhooks/{endpoint.id}/test"
    first = await m.post(path, {"once": key})
    again = await m.post(path, {"once": key})
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    async with app.client("sk_test") as c:
        listed = (await c.get(f"/v1/webhooks/deliveries?endpointId={endpoint.id}")).json()
    assert len(listed["data"]) == 1
    await m.aclose()


async def test_retry_clicked_twice_retries_once(app: App) -> None:
    endpoint = await make_endpoint(app)
    failed = await make_delivery(app, endpoint, DeliveryStatus.FAILED, attempts=7,
                                 response_status=None)
    m = await signed_in(app, owner(app))
    page = f"/dashboard/settings/webhooks/deliveries/{failed.id}"
    key = await once_key(m, page)
    first = await m.post(page + "/retry", {"once": key})
    again = await m.post(page + "/retry", {"once": key})
    assert first.status_code == again.status_code == 303
    assert again.headers["location"] == f"{page}?done=delivery-retried"
    # Done twice, the second would be refused while the first attempt runs, or
    # make a ninth attempt once it failed (nothing listens on the endpoint's port).
    webhooks = actor(app)
    with trio.fail_after(10):  # the real attempt: a refused connection
        while webhooks.is_busy(failed.id) or (
                (d := webhooks.tables.delivery(failed.id)) is None
                or d.status is not DeliveryStatus.FAILED):
            await trio.sleep(0.01)
    assert len(d.attempts) == 8
    await m.aclose()


async def test_rotate_clicked_twice_shows_the_new_secret_both_times(app: App) -> None:
    """The second POST of a double click was refused (409: the form's secret
    was rotated by the first), and the browser showed that: the new secret,
    which the old one had already stopped verifying, was never seen."""
    endpoint = await make_endpoint(app)
    m = await signed_in(app, owner(app))
    page = f"/dashboard/settings/webhooks/{endpoint.id}"
    got = await m.get(page)
    check = re.search(r'name="secret_check" value="([0-9a-f]{16})"', got.text)
    found = ONCE_FIELD.search(got.text)
    assert check is not None and found is not None
    form = {"secret_check": check.group(1), "once": found.group(1)}
    first = await m.post(page + "/rotate", form)
    again = await m.post(page + "/rotate", form)
    assert first.status_code == again.status_code == 200
    secret = actor(app).tables.endpoint(app.project_id, endpoint.mode, endpoint.id)
    assert secret is not None and secret.secret != endpoint.secret
    assert secret.secret in first.text and secret.secret in again.text
    await m.aclose()


async def test_a_delete_clicked_twice_answers_as_the_first(app: App) -> None:
    """The second POST found nothing left and showed "no such link" (or a
    404), though the delete was done: it gets the first answer now."""
    async with app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/doomed"})).json()
    m = await signed_in(app, owner(app))
    page = f"/dashboard/links/{link['id']}"
    form = {"once": await once_key(m, page)}
    first = await m.post(page + "/delete", form)
    again = await m.post(page + "/delete", form)
    assert first.status_code == again.status_code == 303
    assert first.headers["location"] == again.headers["location"]
    await m.aclose()


@pytest.mark.parametrize("what", ["link", "webhook delete", "webhook rotate", "domain",
                                  "invitation"])
async def test_every_delete_and_rotate_form_carries_a_once_key(app: App, what: str) -> None:
    from svc_engine.plans import Plan
    await app.services.store.set_plan(app.org_id, Plan.SCALE)
    m = await signed_in(app, owner(app))
    if what == "link":
        async with app.client("sk_test") as c:
            link = (await c.post("/v1/links", json={"path": "/x"})).json()
        path = f"/dashboard/links/{link['id']}"
    elif what.startswith("webhook"):
        endpoint = await make_endpoint(app)
        path = f"/dashboard/settings/webhooks/{endpoint.id}"
        path += "/delete" if what == "webhook delete" else ""
    elif what == "domain":
        async with app.client("sk_test") as c:
            assert (await c.post("/v1/domains", json={"domain": "go.example.net"})
                    ).status_code == 201
        path = "/dashboard/build/domains"
    else:
        r = await m.post("/dashboard/settings/team/invite", {
            "email": "new@example.com", "role": "developer",
            "once": await once_key(m, "/dashboard/settings/team")})
        assert r.status_code == 200
        path = "/dashboard/settings/team"
    page = (await m.get(path)).text
    action = {"link": "/delete", "webhook delete": "/delete", "webhook rotate": "/rotate",
              "domain": "/remove", "invitation": "/revoke"}[what]
    start = re.search(rf'<form method="post" action="[^"]*{action}"', page)
    assert start is not None, what
    form = page[start.start():]
    form = form[:form.index("</form>")]
    assert ONCE_FIELD.search(form), what
    await m.aclose()
