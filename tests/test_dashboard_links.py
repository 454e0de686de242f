"""Links in the dashboard, in-process: the list with search, filters and
pages; create and edit with every field; delete; QR codes; a link's
analytics charts; and the form translation of web/dashboard/link_form.py."""

from __future__ import annotations

import io
import logging
import re
import threading
import uuid
from datetime import date
from html.parser import HTMLParser
from typing import Any

import attrs
import cbor2
import pytest
import segno
from werkzeug.datastructures import MultiDict

from actors.clock import TrioWallClock
from storage import layout, links_store
from storage.analytics_store import AnalyticsStore
from storage.codec import encode
from svc_engine.errors import DestinationBlocked, ValidationError
from svc_engine.ids import new_id
from svc_engine.keys import Mode
from svc_engine.link_input import parse_link_update
from svc_engine.links import apply_link_patch, iso_utc, new_link, parse_link_create
from svc_engine.plans import Plan
from svc_engine.records import Role
from tests.conftest import App
from tests.dashboard_support import Member, add_user, owner, signed_in
from tests.deferred_helpers import (
    ANDROID_UA,
    IOS_UA,
    PLATFORMS,
    SDK,
    init_body,
    new_install,
    referrer_from_location,
)
from web.dashboard import views_links
from web.dashboard.link_form import (
    EMPTY_PARAM_ROWS,
    PARAM_TYPES,
    LinkForm,
    ParamRow,
    create_body,
    expiry_text,
    from_form,
    from_link,
    label_error,
    params_of,
    update_body,
)

HOUR_MS = 3_600_000


async def api_link(app: App, **fields: Any) -> dict[str, Any]:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={"path": "/p", **fields})
    assert r.status_code == 201, r.text
    return r.json()  # type: ignore[no-any-return]


async def api_get(app: App, link_id: str) -> tuple[int, dict[str, Any]]:
    async with app.client("sk_test") as c:
        r = await c.get(f"/v1/links/{link_id}")
    return r.status_code, r.json()


def link_id_from(location: str) -> str:
    m = re.fullmatch(r"/dashboard/links/([0-9a-f-]{36})\?done=link-(created|saved)", location)
    assert m, location
    return m.group(1)


FULL_FORM = {
    "path": "/product/42", "title": "Red shoes", "campaign": "spring", "channel": "mail",
    "tags": "shoes, q2 ,, shoes", "slug": "red-shoes", "domain": "svc.test",
    "iosFallbackUrl": "https://example.com/ios", "androidFallbackUrl": "https://example.com/a",
    "webFallbackUrl": "https://example.com/w", "ogTitle": "Shoes!", "ogDescription": "20% off",
    "ogImageUrl": "https://cdn.example.com/s.png", "expiresAt": "2099-01-31T12:30",
}


def form_with_params(fields: dict[str, str], rows: list[tuple[str, str, str]]) -> list[
        tuple[str, str]]:
    out = list(fields.items())
    for key, kind, value in rows:
        out += [("param_key", key), ("param_type", kind), ("param_value", value)]
    return out


async def post_form(m: Member, path: str, items: list[tuple[str, str]]) -> Any:
    """A form with repeated fields (the parameter rows), as a browser sends it."""
    data: dict[str, list[str]] = {"csrf": [m.csrf]}
    for key, value in items:
        data.setdefault(key, []).append(value)
    return await m.client.post(path, data=data)


# -- create, see, edit, delete ------------------------------------------------------------


async def test_create_with_every_field_matches_the_api(app: App) -> None:
    m = await signed_in(app, owner(app))
    form = form_with_params(FULL_FORM, [("ref", "text", "mail"), ("discount", "number", "20"),
                                        ("ratio", "number", "0.5"), ("vip", "true", ""),
                                        ("", "text", "")])
    r = await post_form(m, "/dashboard/links/new", form)
    assert r.status_code == 303
    link_id = link_id_from(r.headers["location"])
    status, body = await api_get(app, link_id)
    assert status == 200
    assert body == {
        "id": link_id, "url": "http://svc.test/red-shoes", "domain": "svc.test",
        "slug": "red-shoes", "path": "/product/42",
        "params": {"ref": "mail", "discount": 20, "ratio": 0.5, "vip": True},
        "title": "Red shoes", "campaign": "spring", "channel": "mail", "tags": ["shoes", "q2"],
        "iosFallbackUrl": "https://example.com/ios", "androidFallbackUrl": "https://example.com/a",
        "webFallbackUrl": "https://example.com/w", "ogTitle": "Shoes!",
        "ogDescription": "20% off", "ogImageUrl": "https://cdn.example.com/s.png",
        "expiresAt": "2099-01-31T12:30:00.000Z", "createdAt": body["createdAt"], "mode": "test"}
    page = await m.get(r.headers["location"])
    assert page.status_code == 200 and "The link was created." in page.text
    for text in ("http://svc.test/red-shoes", "/product/42", "spring", "https://example.com/ios",
                 "31 Jan 2099, 12:30 UTC", f"/dashboard/links/{link_id}/qr.svg"):
        assert text in page.text
    # the edit form shows every value again, the params as typed rows
    edit = await m.get(f"/dashboard/links/{link_id}/edit")
    for text in ('value="/product/42"', 'value="shoes, q2"', 'value="2099-01-31T12:30"',
                 'value="discount"', 'value="0.5"', '<option value="true" selected>'):
        assert text in edit.text
    await m.aclose()


async def test_a_store_that_cannot_write_shows_not_saved_with_retry_after(
        app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The store's flush fails (a full or failing disk; injected on the real
    store's writer): the form's answer is 503 "Not saved" with Retry-After,
    and the request logs no error line of its own (the writer logs the burst)."""
    import lmdb

    def failing() -> None:
        raise lmdb.Error("mdb_env_sync: Input/output error")

    m = await signed_in(app, owner(app))
    monkeypatch.setattr(app.services.store.writer, "_sync", failing)
    caplog.set_level(logging.INFO)
    r = await post_form(m, "/dashboard/links/new", [("path", "/p/1"), ("slug", "not-saved")])
    assert r.status_code == 503
    assert r.headers["retry-after"] == "5"
    assert "Not saved" in r.text and "could not store this change" in r.text
    errors = [rec.getMessage() for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].startswith("a commit failed, so the store takes")
    await m.aclose()


async def test_edit_clears_and_changes_fields(app: App) -> None:
    ln = await api_link(app, campaign="old", channel="x", tags=["a"], params={"k": "v"},
                        webFallbackUrl="https://example.com/")
    m = await signed_in(app, owner(app))
    r = await post_form(m, f"/dashboard/links/{ln['id']}/edit", form_with_params(
        {"path": "/new", "title": "Renamed", "campaign": "", "channel": "y", "tags": "b, c",
         "webFallbackUrl": "", "expiresAt": ""}, [("n", "number", "7")]))
    assert r.status_code == 303 and r.headers["location"].endswith("done=link-saved")
    _, body = await api_get(app, ln["id"])
    assert (body["path"], body["title"], body["campaign"], body["channel"]) == (
        "/new", "Renamed", None, "y")
    assert body["tags"] == ["b", "c"] and body["params"] == {"n": 7}
    assert body["webFallbackUrl"] is None and body["slug"] == ln["slug"]
    await m.aclose()


async def test_an_expired_link_stays_editable(app: App) -> None:
    now = app.services.clock.now_ms()
    draft = parse_link_create({"path": "/old"}, allow_custom_slug=False, now_ms=now)
    link = new_link(draft, link_id=new_id(uuid.uuid4().bytes), project_id=app.project_id,
                    mode=Mode.TEST, domain=app.services.default_domain, slug="expired1",
                    now_ms=now - 2 * HOUR_MS)
    link = attrs.evolve(link, expires_at_ms=now - HOUR_MS)
    await app.services.links.create(link, org_id=app.org_id, quota=None, idem=None)
    m = await signed_in(app, owner(app))
    listing = await m.get("/dashboard/links")
    assert "Expired" in listing.text
    r = await post_form(m, f"/dashboard/links/{link.id}/edit", [
        ("path", "/renamed"), ("expiresAt", expiry_text(link.expires_at_ms))])
    assert r.status_code == 303
    saved = app.services.links.get(link.id)
    assert saved is not None and saved.path == "/renamed"
    assert saved.expires_at_ms == link.expires_at_ms
    await m.aclose()


@pytest.mark.parametrize(("changes", "field", "message"), [
    ({"iosFallbackUrl": "ftp://example.com"}, "iosFallbackUrl",
     "iOS fallback URL must be an absolute http or https URL"),
    ({"path": "no-slash"}, "path", "In-app path must start with &#39;/&#39;"),
    ({"slug": "dashboard"}, "slug", "is reserved by the service"),
    ({"slug": "bad slug!"}, "slug", "Slug must be 1 to 64 characters"),
    ({"expiresAt": "2001-01-01T00:00"}, "expiresAt", "Expires at must be in the future"),
    ({"domain": "go.other.com"}, "domain", "go.other.com is not a domain of this project"),
    ({"tags": ",".join(f"t{i}" for i in range(21))}, "tags", "at most 20 tags"),
])
async def test_form_errors_keep_the_input_and_mark_the_field(
        app: App, changes: dict[str, str], field: str, message: str) -> None:
    m = await signed_in(app, owner(app))
    fields = {"path": "/kept", "title": "Kept title", **changes}
    r = await post_form(m, "/dashboard/links/new", list(fields.items()))
    assert r.status_code == 400
    assert message in r.text
    assert "The link was not created: check" in r.text
    assert f'id="f-{field}"' in r.text and 'aria-invalid="true"' in r.text
    assert f'aria-describedby="f-{field}-error' in r.text
    assert 'value="Kept title"' in r.text
    assert app.services.links.list(app.project_id, "test").links == []
    await m.aclose()


async def test_a_refused_edit_keeps_what_was_typed_and_saves_nothing(app: App) -> None:
    ln = await api_link(app, title="Old title", campaign="old")
    m = await signed_in(app, owner(app))
    r = await post_form(m, f"/dashboard/links/{ln['id']}/edit", [
        ("path", "/typed"), ("title", "Typed title"), ("campaign", "typed"),
        ("iosFallbackUrl", "ftp://example.com")])
    assert r.status_code == 400
    assert "iOS fallback URL must be an absolute http or https URL" in r.text
    for typed in ('value="/typed"', 'value="Typed title"', 'value="typed"',
                  'value="ftp://example.com"'):
        assert typed in r.text
    assert 'value="Old title"' not in r.text
    _, body = await api_get(app, ln["id"])
    assert (body["path"], body["title"], body["campaign"]) == ("/p", "Old title", "old")
    await m.aclose()


@pytest.mark.parametrize(("rows", "message"), [
    ([("a", "number", "ten")], "the parameter &#39;a&#39; is not a number"),
    ([("a", "text", "1"), ("a", "text", "2")], "the parameter &#39;a&#39; is given twice"),
    ([("", "text", "orphan")], "needs a name"),
])
async def test_bad_parameters_are_refused(app: App, rows: list[tuple[str, str, str]],
                                          message: str) -> None:
    m = await signed_in(app, owner(app))
    r = await post_form(m, "/dashboard/links/new", form_with_params({"path": "/x"}, rows))
    assert r.status_code == 400 and message in r.text.replace("The parameter", "the parameter")
    assert 'id="f-params-error"' in r.text
    await m.aclose()


async def test_a_parameter_type_the_form_does_not_offer_is_a_field_error(app: App) -> None:
    """A tampered or stale form (a ``param_type`` its select has no option
    for) is refused on the parameters with the form shown again as typed, on
    create and on edit; nothing is saved (it was stored as text)."""
    m = await signed_in(app, owner(app))
    rows = [("kept", "text", "v"), ("odd", "json", "{\"a\": 1}")]
    r = await post_form(m, "/dashboard/links/new", form_with_params(
        {"path": "/x", "title": "Kept title"}, rows))
    assert r.status_code == 400
    assert ("The parameter &#39;odd&#39; has a type this form does not offer (&#39;json&#39;):"
            " choose Text, Number, true or false") in r.text
    assert 'id="f-params-error"' in r.text and "The link was not created: check" in r.text
    assert 'value="kept"' in r.text and 'value="odd"' in r.text
    assert 'value="Kept title"' in r.text
    assert app.services.links.list(app.project_id, "test").links == []

    ln = await api_link(app, params={"k": "v"})
    edit = await post_form(m, f"/dashboard/links/{ln['id']}/edit", form_with_params(
        {"path": "/p"}, [("k", "<script>", "w")]))
    assert edit.status_code == 400 and 'id="f-params-error"' in edit.text
    assert "(&#39;&lt;script&gt;&#39;)" in edit.text and "('<script>')" not in edit.text
    assert (await api_get(app, ln["id"]))[1]["params"] == {"k": "v"}
    await m.aclose()


class TypeSelects(HTMLParser):
    """The ``(value, label, selected)`` options of each parameter row's type select."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.selects: list[list[tuple[str, str, bool]]] = []
        self._in: str | None = None  # "select" inside a param_type select, "option" in its option
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "select" and a.get("name") == "param_type":
            self.selects.append([])
            self._in = "select"
        elif tag == "option" and self._in is not None:
            self.selects[-1].append((a.get("value") or "", "", "selected" in a))
            self._in = "option"

    def handle_data(self, data: str) -> None:
        if self._in == "option":
            value, label, selected = self.selects[-1][-1]
            self.selects[-1][-1] = (value, label + data, selected)

    def handle_endtag(self, tag: str) -> None:
        if tag == "option" and self._in == "option":
            self._in = "select"
        elif tag == "select":
            self._in = None


async def test_every_parameter_type_is_an_option_of_each_row(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rows' type selects offer PARAM_TYPES, in order with their labels,
    a row's own type selected; the template takes them from the code (a type
    added there is offered without touching the template)."""
    m = await signed_in(app, owner(app))
    offered = list(PARAM_TYPES.items())
    assert [value for value, _ in offered] == ["text", "number", "true", "false"]
    blank = TypeSelects((await m.get("/dashboard/links/new")).text).selects
    assert len(blank) == EMPTY_PARAM_ROWS
    for options in blank:
        assert [(v, label) for v, label, _ in options] == offered
        assert [v for v, _, chosen in options if chosen] == ["text"]
    ln = await api_link(app, params={"a": "x", "b": 2, "c": True, "d": False})
    edit = TypeSelects((await m.get(f"/dashboard/links/{ln['id']}/edit")).text).selects
    assert [[v for v, _, chosen in options if chosen] for options in edit[:4]] == [
        ["text"], ["number"], ["true"], ["false"]]
    assert all([(v, label) for v, label, _ in options] == offered for options in edit)

    monkeypatch.setattr(views_links, "PARAM_TYPES", {**PARAM_TYPES, "list": "List"})
    extended = TypeSelects((await m.get("/dashboard/links/new")).text).selects
    assert all(options[-1][:2] == ("list", "List") for options in extended), extended
    await m.aclose()


async def test_more_rows_adds_blank_parameter_rows_without_saving(app: App) -> None:
    m = await signed_in(app, owner(app))
    r = await post_form(m, "/dashboard/links/new", form_with_params(
        {"path": "/x", "more_params": "1"}, [("keep", "text", "me")]))
    assert r.status_code == 200
    assert r.text.count('name="param_key"') == 7 and 'value="keep"' in r.text
    assert app.services.links.list(app.project_id, "test").links == []
    await m.aclose()


async def test_taken_slug_and_quota(app: App) -> None:
    await api_link(app, slug="taken")
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/links/new", {"path": "/x", "slug": "taken"})
    assert r.status_code == 400 and "is taken on svc.test" in r.text
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    assert app.services.links.org_link_count(app.org_id) == 1
    await app.services.store.write(lambda txn: txn.put(        # as if 1000 links existed
        b"org_links:" + layout.uid(app.org_id), cbor2.dumps(1000),
        db=app.services.store.db(b"meta")))
    full = await m.post("/dashboard/links/new", {"path": "/x"})
    assert full.status_code == 429 and "The plan allows 1000 links" in full.text
    await m.aclose()


async def test_delete_answers_404_afterwards_and_needs_csrf(app: App) -> None:
    ln = await api_link(app, title="Doomed")
    m = await signed_in(app, owner(app))
    forged = await m.post(f"/dashboard/links/{ln['id']}/delete", csrf_token=None)
    assert forged.status_code == 403 and "This form has expired" in forged.text
    assert (await api_get(app, ln["id"]))[0] == 200
    r = await m.post(f"/dashboard/links/{ln['id']}/delete")
    assert r.status_code == 303 and r.headers["location"] == "/dashboard/links?done=link-deleted"
    listing = await m.get(r.headers["location"])
    assert "The link was deleted." in listing.text and "Doomed" not in listing.text
    assert (await api_get(app, ln["id"]))[0] == 404
    async with app.client() as c:
        assert (await c.get(f"/{ln['slug']}")).status_code == 404
    assert (await m.get(f"/dashboard/links/{ln['id']}")).status_code == 404
    await m.aclose()


async def test_create_and_edit_need_csrf(app: App) -> None:
    ln = await api_link(app, title="Kept")
    m = await signed_in(app, owner(app))
    assert (await m.post("/dashboard/links/new", {"path": "/x"}, csrf_token="nope")
            ).status_code == 403
    assert (await m.post(f"/dashboard/links/{ln['id']}/edit", {"path": "/y"}, csrf_token=None)
            ).status_code == 403
    assert (await api_get(app, ln["id"]))[1]["path"] == "/p"
    assert len(app.services.links.list(app.project_id, "test").links) == 1
    await m.aclose()


async def test_marketers_make_links(app: App) -> None:
    mkt = await signed_in(app, await add_user(app, "mkt@example.com", Role.MARKETER))
    form = await mkt.get("/dashboard/links/new")
    assert '<option value="">svc.test</option>' in form.text       # the default domain
    r = await mkt.post("/dashboard/links/new", {"path": "/campaign", "campaign": "launch",
                                                "domain": ""})
    assert r.status_code == 303
    _, body = await api_get(app, link_id_from(r.headers["location"]))
    assert (body["campaign"], body["domain"]) == ("launch", "svc.test")
    await mkt.aclose()


async def test_links_of_another_mode_or_project_are_not_found(app: App) -> None:
    async with app.client("sk_live") as c:
        live = (await c.post("/v1/links", json={"path": "/live"})).json()
    m = await signed_in(app, owner(app))
    r = await m.get(f"/dashboard/links/{live['id']}")
    assert r.status_code == 404 and "This link belongs to live mode" in r.text
    for bad in (str(uuid.uuid4()), "not-a-uuid"):
        assert (await m.get(f"/dashboard/links/{bad}")).status_code == 404
        assert (await m.get(f"/dashboard/links/{bad}/qr.png")).status_code == 404
    await m.aclose()


# -- the list ------------------------------------------------------------------------------


async def test_list_filters_search_and_pages(app: App) -> None:
    for i in range(30):
        await api_link(app, path=f"/item/{i}", title=f"Item {i}",
                       campaign="even" if i % 2 == 0 else "odd",
                       channel="mail" if i < 10 else "ads", tags=["t3"] if i % 3 == 0 else [])
    m = await signed_in(app, owner(app))
    first = await m.get("/dashboard/links")
    assert first.text.count('class="row-link strong"') == 25
    assert "Item 29" in first.text and "Item 4<" not in first.text      # newest first
    next_url = re.search(r'href="(/dashboard/links\?cursor=[0-9a-f]+)" rel="next"', first.text)
    assert next_url is not None
    second = await m.get(next_url.group(1).replace("&amp;", "&"))
    assert second.text.count('class="row-link strong"') == 5 and "Item 0<" in second.text
    assert 'rel="next"' not in second.text and "First page" in second.text

    async def count(query: str) -> int:
        r = await m.get("/dashboard/links?" + query)
        assert r.status_code == 200
        return r.text.count('class="row-link strong"')

    assert await count("campaign=odd") == 15
    assert await count("campaign=odd&channel=mail") == 5
    assert await count("tag=t3") == 10
    assert await count("q=item%2F2") == 11          # /item/2 and /item/20../29
    assert await count("q=ITEM 7") == 1             # case-insensitive, title
    none = await m.get("/dashboard/links?campaign=nope")
    assert "No links match these filters." in none.text
    # a filtered second page keeps the filters
    paged = await m.get("/dashboard/links?channel=ads")
    assert paged.text.count('class="row-link strong"') == 20
    bad = await m.get("/dashboard/links?cursor=zz")
    assert bad.status_code == 400 and "start from the first page" in bad.text
    await m.aclose()


async def test_a_search_that_reads_its_whole_page_offers_older_links(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(8):
        await api_link(app, path=f"/item/{i}", title="Old one" if i == 0 else f"Item {i}")
    monkeypatch.setattr(links_store, "LIST_SCAN_CAP", 3)
    m = await signed_in(app, owner(app))
    first = await m.get("/dashboard/links?q=old")
    assert "No match among the newest 3 links." in first.text
    assert "No links match these filters." not in first.text
    older = re.search(r'href="(/dashboard/links\?[^"]*cursor=[0-9a-f]+)" rel="next"', first.text)
    assert older is not None and "Search older links" in first.text
    second = await m.get(older.group(1).replace("&amp;", "&"))
    assert "No match among the next 3 links." in second.text
    third_url = re.search(r'href="(/dashboard/links\?[^"]*cursor=[0-9a-f]+)" rel="next"',
                          second.text)
    assert third_url is not None
    third = await m.get(third_url.group(1).replace("&amp;", "&"))
    assert third.text.count('class="row-link strong"') == 1 and "Old one" in third.text
    assert 'rel="next"' not in third.text
    await m.aclose()


async def test_empty_list_invites_to_create(app: App) -> None:
    m = await signed_in(app, owner(app))
    r = await m.get("/dashboard/links")
    assert "No links in test mode yet" in r.text and 'href="/dashboard/links/new"' in r.text
    assert "0 of 100,000 links on the growth plan" in r.text
    await m.aclose()


# -- QR codes ------------------------------------------------------------------------------


async def test_qr_codes_encode_the_short_url(app: App) -> None:
    ln = await api_link(app, slug="qr-me")
    m = await signed_in(app, owner(app))
    svg = await m.get(f"/dashboard/links/{ln['id']}/qr.svg")
    assert svg.status_code == 200 and svg.headers["content-type"].startswith("image/svg+xml")
    assert svg.text.startswith("<svg") and "<title>QR code for http://svc.test/qr-me</title>" \
        in svg.text and "content-disposition" not in svg.headers
    expected = io.BytesIO()
    segno.make("http://svc.test/qr-me", error="m", micro=False).save(
        expected, kind="png", scale=12, border=4)
    png = await m.get(f"/dashboard/links/{ln['id']}/qr.png?download=1")
    assert png.headers["content-type"] == "image/png"
    assert png.content == expected.getvalue() and png.content[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.headers["content-disposition"] == 'attachment; filename="qr-me-qr.png"'
    dl = await m.get(f"/dashboard/links/{ln['id']}/qr.svg?download=1")
    assert dl.headers["content-disposition"] == 'attachment; filename="qr-me-qr.svg"'
    await m.aclose()


# -- analytics -----------------------------------------------------------------------------


async def test_link_page_charts_clicks_funnel_methods_countries_referrers(app: App) -> None:
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
    ln = await api_link(app, title="Charted")
    other = await api_link(app, title="Quiet")
    taps = [(IOS_UA, "US", "https://news.example.com/a"), (IOS_UA, "US", None),
            (ANDROID_UA, "DE", "https://t.co/x"), (ANDROID_UA, "US", None)]
    locations = []
    for ua, country, referer in taps:
        headers = {"user-agent": ua, "cf-ipcountry": country}
        if referer:
            headers["referer"] = referer
        async with app.client(**headers) as c:
            locations.append((await c.get(f"/{ln['slug']}")).headers["location"])
    install = new_install()
    async with app.client("pk_test", **SDK) as c:
        r = await c.post("/v1/sdk/init", json=init_body(
            install, "android", referrer=referrer_from_location(locations[2])))
        assert r.json()["link"]["linkId"] == ln["id"]
        assert (await c.post("/v1/sdk/resolve", json={"url": ln["url"], "installId": install})
                ).status_code == 200
        r = await c.post("/v1/sdk/events", json={"installId": install, "events": [
            {"id": str(uuid.uuid4()), "name": "purchase", "linkId": ln["id"],
             "occurredAt": iso_utc(app.services.clock.now_ms())}]})
        assert r.status_code == 200, r.text
    await app.flush()
    m = await signed_in(app, owner(app))
    page = (await m.get(f"/dashboard/links/{ln['id']}")).text
    tiles = re.findall(r'<span class="stat-label">(\w+)</span><span class="stat-value">(\d+)',
                       page)
    assert tiles == [("Clicks", "4"), ("Installs", "1"), ("Opens", "1"), ("Conversions", "1")]
    # every chart is an accessible SVG with its data as a table
    for chart in ("chart-days", "chart-funnel", "chart-methods", "chart-countries",
                  "chart-referrers"):
        assert f'role="img" aria-labelledby="{chart}-t {chart}-d"' in page
        assert f'<title id="{chart}-t">' in page
    assert page.count("Show the data") == 5
    assert "<td>US</td><td class=\"num\">3</td><td class=\"num\">75.0%</td>" in page
    assert "<td>DE</td><td class=\"num\">1</td>" in page
    assert "<td>Direct or none</td><td class=\"num\">2</td>" in page
    assert "<td>news.example.com</td><td class=\"num\">1</td>" in page
    assert "<td>Install referrer</td><td class=\"num\">1</td>" in page
    assert "<td>Installs</td><td class=\"num\">1</td><td class=\"num\">25.0%</td>" in page
    assert re.search(r'<rect class="chart-col" [^>]*><title>[^<]*: 4 clicks</title>', page)
    assert "4 clicks from" in page                                  # the day chart's desc
    quiet = (await m.get(f"/dashboard/links/{other['id']}?days=7")).text
    assert "No clicks in the last 7 days." in quiet and 'aria-current="page">7 days' in quiet
    assert "No installs attributed to this link in this period." in quiet
    listing = (await m.get("/dashboard/links")).text
    row = listing[listing.index("Charted"):]
    assert re.search(r'class="num cell-clicks">4<', row)
    await m.aclose()


async def test_each_span_counts_exactly_its_days(app: App) -> None:
    """"7 days" is today and the 6 days before; "Clicks 30 d" in the list and
    the link page's 30 and 90 days count that many days, to the day."""
    ln = await api_link(app, title="Dated")
    clock = app.services.clock
    assert isinstance(clock, TrioWallClock)
    day = 24 * HOUR_MS
    for days_ago in (0, 6, 7, 29, 30, 89, 90):
        clock.offset_ms = -days_ago * day
        async with app.client(**{"user-agent": ANDROID_UA}) as c:
            assert (await c.get(f"/{ln['slug']}")).status_code == 200  # counted: a person
    clock.offset_ms = 0
    await app.flush()
    m = await signed_in(app, owner(app))
    for days, clicks in ((7, 2), (30, 4), (90, 6)):
        page = (await m.get(f"/dashboard/links/{ln['id']}?days={days}")).text
        tiles = re.findall(r'<span class="stat-label">Clicks</span>'
                           r'<span class="stat-value">(\d+)', page)
        assert tiles == [str(clicks)], days
    listing = (await m.get("/dashboard/links")).text
    assert re.search(r'class="num cell-clicks">4<', listing[listing.index("Dated"):])
    await m.aclose()
    span = views_links.last_days(clock.now_ms(), 30)
    assert (date.fromisoformat(span.last) - date.fromisoformat(span.first)).days == 29


async def test_link_page_reads_its_analytics_in_a_worker_thread(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """A long tail of referrer hosts is 100,000s of counter rows: the page
    reads them off the event loop (``Services.off_loop``), once (its funnel
    is the summary's totals, not a second scan)."""
    loop_thread = threading.get_ident()
    threads: list[int] = []
    real_summary = AnalyticsStore.summary

    def summary(self: AnalyticsStore, *args: Any, **kwargs: Any) -> dict[str, Any]:
        threads.append(threading.get_ident())
        return real_summary(self, *args, **kwargs)

    def funnel(self: AnalyticsStore, *args: Any, **kwargs: Any) -> dict[str, Any]:
        raise AssertionError("the page takes its funnel from the summary's totals")

    monkeypatch.setattr(AnalyticsStore, "summary", summary)
    monkeypatch.setattr(AnalyticsStore, "funnel", funnel)
    ln = await api_link(app, title="Threaded")
    async with app.client(**{"user-agent": IOS_UA, "referer": "https://news.example.com/"}) as c:
        await c.get(f"/{ln['slug']}")
    await app.flush()
    m = await signed_in(app, owner(app))
    page = await m.get(f"/dashboard/links/{ln['id']}?days=90")
    assert page.status_code == 200
    assert len(threads) == 1 and threads[0] != loop_thread
    tiles = re.findall(r'<span class="stat-label">(\w+)</span><span class="stat-value">(\d+)',
                       page.text)
    assert tiles == [("Clicks", "1"), ("Installs", "0"), ("Opens", "0"), ("Conversions", "0")]
    assert "<td>news.example.com</td><td class=\"num\">1</td>" in page.text
    await m.aclose()


# -- the form translation (pure) ---------------------------------------------------------


def test_params_keep_their_types() -> None:
    rows = (ParamRow("s", "text", " 42 "), ParamRow("i", "number", "-7"),
            ParamRow("f", "number", "1e3"), ParamRow("t", "true", "ignored"),
            ParamRow("n", "false", ""))
    assert params_of(rows) == {"s": " 42 ", "i": -7, "f": 1000.0, "t": True, "n": False}
    for bad in ("inf", "nan", "", "1,5"):
        with pytest.raises(ValidationError):
            params_of((ParamRow("x", "number", bad),))
    for kind in ("json", "", "Text", "TRUE", "x" * 1000):
        with pytest.raises(ValidationError, match="a type this form does not offer") as e:
            params_of((ParamRow("x", kind, "1"),))
        assert e.value.field == "params" and len(str(e.value)) < 150


def test_form_round_trip_of_a_link() -> None:
    now = 1_700_000_000_000
    draft = parse_link_create({"path": "/a", "params": {"b": False, "n": 2.5},
                               "tags": ["x", "y"], "expiresAt": "2099-05-06T07:08:00Z"},
                              allow_custom_slug=False, now_ms=now)
    link = new_link(draft, link_id=str(uuid.uuid4()), project_id=str(uuid.uuid4()),
                    mode=Mode.TEST, domain="d.test", slug="s", now_ms=now)
    form = from_link(link)
    assert form.get("expiresAt") == "2099-05-06T07:08" and form.get("tags") == "x, y"
    body = update_body(form, link)
    assert "expiresAt" not in body and "tags" not in body  # unchanged: not sent
    assert body["params"] == {"b": False, "n": 2.5} and body["title"] is None
    submitted = MultiDict([("path", "/a"), ("expiresAt", "2099-05-06T07:09"),
                           ("param_key", "k"), ("param_type", "text"), ("param_value", "v"),
                           ("param_key", ""), ("param_type", "text"), ("param_value", "")])
    changed = update_body(from_form(submitted), link)
    assert changed["expiresAt"] == "2099-05-06T07:09:00Z" and changed["params"] == {"k": "v"}
    assert create_body(LinkForm({"path": " "})) == {"path": "/"}


def test_saving_an_edit_form_unchanged_changes_no_field() -> None:
    """The edit form carries every field of the link: saved as shown, the
    PATCH it makes leaves the link as it was (a field the form forgot would
    go out empty, as null, and wipe the stored value)."""
    now = 1_700_000_000_000
    body = {k: v for k, v in FULL_FORM.items() if k not in ("tags", "slug", "domain")}
    draft = parse_link_create({**body, "tags": ["shoes", "q2"], "params": {"k": 1, "b": True},
                               "expiresAt": "2099-01-31T12:30:00Z"},
                              allow_custom_slug=False, now_ms=now)
    link = new_link(draft, link_id=str(uuid.uuid4()), project_id=str(uuid.uuid4()),
                    mode=Mode.TEST, domain="d.test", slug="s", now_ms=now)
    patch = update_body(from_link(link), link)
    saved = apply_link_patch(link, parse_link_update(patch, now_ms=now + 1), now_ms=now + 1)
    assert attrs.evolve(saved, updated_at_ms=link.updated_at_ms) == link
    assert all(getattr(link, f.name) not in (None, (), {}) for f in attrs.fields(type(link))
               if f.name not in ("deleted",))  # every field was set: none could hide


def test_saving_an_edit_form_unchanged_keeps_a_tag_with_a_comma() -> None:
    """The API takes a tag "a,b"; the form shows tags in one comma-separated
    field, so a save that did not touch them must not send them back split."""
    now = 1_800_000_000_000
    draft = parse_link_create({"path": "/p", "tags": ["a,b", "c"]}, allow_custom_slug=False,
                              now_ms=now)
    link = new_link(draft, link_id=str(uuid.uuid4()), project_id=str(uuid.uuid4()),
                    mode=Mode.TEST, domain="d.test", slug="s", now_ms=now)
    assert link.tags == ("a,b", "c")
    assert "tags" not in update_body(from_link(link), link)
    edited = from_link(link)
    edited = LinkForm({**edited.values, "tags": "a,b, c, d"}, edited.params)
    assert update_body(edited, link)["tags"] == ["a", "b", "c", "d"]  # edited: as typed


def test_saving_an_edit_form_unchanged_keeps_a_parameter_key_as_it_is() -> None:
    """The API keeps " k " (spaces around it) apart from "k"; the form cut
    them, so an unchanged Save renamed the parameter."""
    now = 1_800_000_000_000
    draft = parse_link_create({"path": "/p", "params": {" k ": "v"}}, allow_custom_slug=False,
                              now_ms=now)
    link = new_link(draft, link_id=str(uuid.uuid4()), project_id=str(uuid.uuid4()),
                    mode=Mode.TEST, domain="d.test", slug="s", now_ms=now)
    shown = from_link(link)
    submitted = MultiDict([("path", "/p")] + [
        pair for row in shown.params
        for pair in (("param_key", row.key), ("param_type", row.type), ("param_value", row.value))])
    body = update_body(from_form(submitted), link)
    assert body.get("params", link.params) == {" k ": "v"}


def test_a_number_too_long_to_convert_is_a_form_error() -> None:
    """int() converts at most 4,300 digits; past that the field is refused
    (it was a 500)."""
    huge = LinkForm({"path": "/p"}, [ParamRow("n", "number", "9" * 5000)])
    with pytest.raises(ValidationError, match="too large a number"):
        create_body(huge)


def test_errors_are_told_in_the_form_words() -> None:
    assert label_error(ValidationError("ogTitle must be at most 200 characters",
                                       field="ogTitle")) == (
        "ogTitle", "Preview title must be at most 200 characters")
    assert label_error(DestinationBlocked("webFallbackUrl must not carry a user name")) == (
        "webFallbackUrl", "Web fallback URL must not carry a user name")
    assert label_error(ValidationError("params.size must be a finite number",
                                       field="params.size")) == (
        "params", "Parameter 'size' must be a finite number")
    assert label_error(ValidationError("the body must be a JSON object")) == (
        None, "The body must be a JSON object")


async def test_a_link_stored_with_an_expiry_past_year_9999_still_shows(app: App) -> None:
    """Input is bounded now, but a link stored before (a year-9999 time with a
    negative offset) must open, list and edit: its expiry reads as the last
    time there is, on every page, as in the API."""
    from svc_engine.links import LAST_MS

    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={"path": "/late", "expiresAt": "2099-01-01T00:00:00Z"})
    link_id = r.json()["id"]
    store = app.services.store
    links = links_store.LinksStore(store)
    stored = links.get(link_id)
    assert stored is not None
    late = attrs.evolve(stored, expires_at_ms=LAST_MS + 86_400_000)
    await store.write(lambda txn: txn.put(layout.uid(link_id), encode(late),
                                          db=store.db(b"links")))
    m = await signed_in(app, owner(app))
    for path in (f"/dashboard/links/{link_id}", f"/dashboard/links/{link_id}/edit",
                 "/dashboard/links"):
        page = await m.get(path)
        assert page.status_code == 200, (path, page.status_code)
    assert "31 Dec 9999, 23:59 UTC" in (await m.get(f"/dashboard/links/{link_id}")).text
    assert 'value="9999-12-31T23:59"' in (await m.get(f"/dashboard/links/{link_id}/edit")).text
    async with app.client("sk_test") as c:
        assert (await c.get(f"/v1/links/{link_id}")).json()["expiresAt"] == (
            "9999-12-31T23:59:59.999Z")
    await m.aclose()


async def test_a_refused_new_link_focuses_the_field_in_error(app: App) -> None:
    """The path field kept its autofocus beside the bad field's, and the
    browser focused the first: the path."""
    m = await signed_in(app, owner(app))
    r = await m.post("/dashboard/links/new", {"path": "/p", "slug": "bad slug!"})
    assert r.status_code == 400
    focused = re.findall(r'<(?:input|select|textarea)[^>]*\bid="([^"]+)"[^>]*\bautofocus', r.text)
    assert focused == ["f-slug"]
    await m.aclose()
