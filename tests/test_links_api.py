"""Links, domains and platforms APIs, and the association files."""

from __future__ import annotations

import attrs
import pytest

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.plans import Plan
from tests.conftest import App, running_app
from tests.dashboard_support import owner, signed_in
from web.api_links import RANDOM_SLUG_DRAWS


async def test_sdk_create_link_random_slug_default_domain(app: App) -> None:
    async with app.client("pk_test") as c:
        r = await c.post("/v1/sdk/links", json={
            "path": "/product/42", "params": {"color": "red", "size": 2, "gift": True},
            "title": "Shoes", "campaign": "spring", "channel": "email", "tags": ["a", "b"]})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["domain"] == "svc.test" and body["url"] == f"http://svc.test/{body['slug']}"
    assert len(body["slug"]) >= 8 and body["params"] == {"color": "red", "size": 2, "gift": True}
    assert body["mode"] == "test" and body["createdAt"].endswith("Z")


async def test_an_expiry_past_year_9999_in_utc_is_refused_and_stores_nothing(
        app: App) -> None:
    """A year-9999 time with a negative offset is later than any ISO 8601 UTC
    time: 400, with or without an Idempotency-Key, and the listing still works."""
    late = {"path": "/p", "expiresAt": "9999-12-31T23:59:59-23:59"}
    async with app.client("sk_test") as c:
        for headers in ({}, {"idempotency-key": "k-late-expiry"}):
            r = await c.post("/v1/links", json=late, headers=headers)
            assert r.status_code == 400 and r.json()["error"]["field"] == "expiresAt", r.text
        last = await c.post("/v1/links", json={"path": "/p",
                                               "expiresAt": "9999-12-31T23:59:59.999Z"})
        assert last.status_code == 201 and last.json()["expiresAt"] == "9999-12-31T23:59:59.999Z"
        listed = await c.get("/v1/links")
    assert listed.status_code == 200 and [x["id"] for x in listed.json()["data"]] == [
        last.json()["id"]]


def test_a_stored_expiry_past_year_9999_reads_as_the_last_time() -> None:
    """Links stored before the bound (a negative offset let one past it) read
    back instead of failing every listing."""
    from svc_engine.links import LAST_MS, iso_utc
    assert iso_utc(LAST_MS + 86_400_000) == "9999-12-31T23:59:59.999Z"


@pytest.mark.parametrize(("body", "code", "field"), [
    ({"path": "no-slash"}, "validation_error", "path"),
    ({"params": {"x": [1]}}, "validation_error", None),
    ({"params": {"x": {"a": 1}}}, "validation_error", None),
    ({"iosFallbackUrl": "javascript:alert(1)"}, "destination_blocked", None),
    ({"webFallbackUrl": "ftp://example.com/x"}, "destination_blocked", None),
    ({"slug": "mine"}, "validation_error", None),  # no custom slugs from the SDK
    ({"unknownField": 1}, "validation_error", None),
])
async def test_sdk_create_link_rejections(app: App, body: dict[str, object], code: str,
                                          field: str | None) -> None:
    async with app.client("pk_test") as c:
        r = await c.post("/v1/sdk/links", json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == code
    if field:
        assert r.json()["error"]["field"] == field


async def test_secret_key_refused_on_sdk_and_publishable_on_server(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/sdk/links", json={"path": "/"})
    assert r.status_code == 403 and r.json()["error"]["code"] == "wrong_key_kind"
    async with app.client("pk_test") as c:
        r = await c.get("/v1/links")
    assert r.status_code == 403 and r.json()["error"]["code"] == "wrong_key_kind"


async def test_idempotent_link_creation_creates_one_link(app: App) -> None:
    async with app.client("pk_live", **{"idempotency-key": "create-1"}) as c:
        a = await c.post("/v1/sdk/links", json={"path": "/x"})
        b = await c.post("/v1/sdk/links", json={"path": "/x"})
    assert a.status_code == b.status_code == 201 and a.content == b.content
    async with app.client("sk_live") as c:
        listed = (await c.get("/v1/links")).json()["data"]
    assert len(listed) == 1


async def test_custom_slug_crud_and_listing(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={"slug": "spring-sale", "path": "/sale",
                                            "campaign": "spring", "tags": ["promo"]})
        assert r.status_code == 201
        link = r.json()
        dup = await c.post("/v1/links", json={"slug": "spring-sale"})
        assert dup.status_code == 400 and dup.json()["error"]["field"] == "slug"
        reserved = await c.post("/v1/links", json={"slug": "v1"})
        assert reserved.status_code == 400
        for i in range(5):
            await c.post("/v1/links", json={"path": f"/p/{i}", "channel": "sms"})
        got = await c.get(f"/v1/links/{link['id']}")
        assert got.json() == link
        page1 = (await c.get("/v1/links", params={"limit": 4})).json()
        assert len(page1["data"]) == 4 and page1["nextCursor"]
        page2 = (await c.get("/v1/links", params={"limit": 4,
                                                  "cursor": page1["nextCursor"]})).json()
        assert len(page2["data"]) == 2 and page2["nextCursor"] is None
        ids = [x["id"] for x in page1["data"] + page2["data"]]
        assert len(set(ids)) == 6 and ids[-1] == link["id"]  # newest first
        assert [x["id"] for x in (await c.get("/v1/links", params={"campaign": "spring"})
                                  ).json()["data"]] == [link["id"]]
        assert len((await c.get("/v1/links", params={"channel": "sms"})).json()["data"]) == 5
        assert len((await c.get("/v1/links", params={"tag": "promo"})).json()["data"]) == 1
        assert len((await c.get("/v1/links", params={"q": "sale"})).json()["data"]) == 1
        bad = await c.get("/v1/links", params={"cursor": "zz"})
        assert bad.status_code == 400
        for limit in ("0", "101", "-1", "abc", "1.5", " 5", "+5", "5_0", "\uff11", "0005"):
            bad = await c.get("/v1/links", params={"limit": limit})
            assert bad.status_code == 400 and bad.json()["error"]["field"] == "limit", limit
        assert (await c.get("/v1/links", params={"limit": "100"})).status_code == 200
        patched = await c.patch(f"/v1/links/{link['id']}", json={"title": "New", "campaign": None})
        assert patched.status_code == 200
        assert patched.json()["title"] == "New" and patched.json()["campaign"] is None
        assert patched.json()["slug"] == "spring-sale"
        no_slug_change = await c.patch(f"/v1/links/{link['id']}", json={"slug": "other"})
        assert no_slug_change.status_code == 400
        assert (await c.delete(f"/v1/links/{link['id']}")).status_code == 200
        assert (await c.get(f"/v1/links/{link['id']}")).status_code == 404
        assert (await c.delete(f"/v1/links/{link['id']}")).status_code == 404
        # a deleted link's slug stays reserved
        assert (await c.post("/v1/links", json={"slug": "spring-sale"})).status_code == 400
    async with app.client("sk_live") as c:  # modes are separate
        assert (await c.get("/v1/links")).json()["data"] == []
        r = await c.get(f"/v1/links/{ids[0]}")
        assert r.status_code == 404


async def test_link_quota_per_plan(app: App) -> None:
    await app.services.store.set_plan(app.org_id, Plan.STARTER)
    store = app.services.store
    # Fill the quota quickly through the store's counter, then cross it over HTTP.
    import cbor2

    from storage import layout
    await store.write(lambda txn: txn.put(b"org_links:" + layout.uid(app.org_id),
                                          cbor2.dumps(999), db=store.db(b"meta")))
    async with app.client("pk_test") as c:
        assert (await c.post("/v1/sdk/links", json={})).status_code == 201
        r = await c.post("/v1/sdk/links", json={})
    assert r.status_code == 429 and r.json()["error"]["code"] == "link_quota_exceeded"
    assert r.headers["retry-after"] == "1"  # short: the SDK waits at least this long
    async with app.client("sk_test") as c:
        listed = (await c.get("/v1/links")).json()["data"]
        await c.delete(f"/v1/links/{listed[0]['id']}")
    async with app.client("pk_test") as c:  # deleting frees a place
        assert (await c.post("/v1/sdk/links", json={})).status_code == 201


PLATFORMS = {
    "ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
            "teamId": "ABCDE12345", "scheme": "exampleshop"},
    "android": {"packageName": "com.example.shop",
                "sha256CertFingerprints": [":".join(["AB"] * 32)], "scheme": "exampleshop"},
    "web": {"fallbackUrl": "https://example.com/"},
}


async def test_platforms_drive_association_files(app: App) -> None:
    async with app.client() as c:
        empty = await c.get("/.well-known/apple-app-site-association")
        assert empty.status_code == 200 and empty.json() == {"applinks": {"details": []}}
        assert (await c.get("/.well-known/assetlinks.json")).json() == []
    async with app.client("sk_test") as c:
        r = await c.patch("/v1/platforms", json=PLATFORMS)
        assert r.status_code == 200, r.text
        assert (await c.get("/v1/platforms")).json()["ios"]["teamId"] == "ABCDE12345"
        bad = await c.patch("/v1/platforms", json={"ios": {"teamId": "short"}})
        assert bad.status_code == 400
        unknown = await c.patch("/v1/platforms", json={"windows": {}})
        assert unknown.status_code == 400
    async with app.client() as c:
        aasa = await c.get("/.well-known/apple-app-site-association")
        links = await c.get("/.well-known/assetlinks.json")
    assert aasa.status_code == 200 and aasa.headers["content-type"] == "application/json"
    details = aasa.json()["applinks"]["details"]
    assert details[0]["appIDs"] == ["ABCDE12345.com.example.shop"]
    assert {"/": "/*", "comment": "every short link opens the app"} in details[0]["components"]
    assert links.headers["content-type"] == "application/json"
    assert links.json() == [{
        "relation": ["delegate_permission/common.handle_all_urls"],
        "target": {"namespace": "android_app", "package_name": "com.example.shop",
                   "sha256_cert_fingerprints": [":".join(["AB"] * 32)]}}]


async def test_association_files_answer_head_and_only_reads(app: App) -> None:
    """A HEAD (what a CDN or a checker may send first) gets the GET's status and
    headers with no body; any other method finds no such file."""
    async with app.client() as c:
        for path in ("/.well-known/apple-app-site-association", "/.well-known/assetlinks.json"):
            got = await c.get(path)
            head = await c.head(path)
            assert head.status_code == 200 and head.content == b""
            assert head.headers["content-type"] == got.headers["content-type"] == "application/json"
            assert head.headers["cache-control"] == "public, max-age=300"
            assert (await c.post(path, content=b"{}")).status_code == 404
        assert (await c.head("/.well-known/other.json")).status_code == 404


async def test_custom_domain_serves_only_its_project(app: App) -> None:
    from web import tenancy
    await app.services.store.set_plan(app.org_id, Plan.SCALE)
    other, keys = await tenancy.create_project(app.services.store, app.org_id, "Other",
                                               app.services.random, 1)
    async with app.client(keys["sk_test"]) as c:
        await c.patch("/v1/platforms", json={"ios": {"bundleId": "com.other.app",
                                                     "teamId": "ZZZZZ99999"}})
        assert (await c.post("/v1/domains", json={"domain": "other.example"})).status_code == 201
    async with app.client("sk_test") as c:
        await c.patch("/v1/platforms", json=PLATFORMS)
    async with app.client(**{"host": "other.example"}) as c:
        mine = (await c.get("/.well-known/apple-app-site-association")).json()
    async with app.client() as c:
        shared = (await c.get("/.well-known/apple-app-site-association")).json()
    assert [d["appIDs"] for d in mine["applinks"]["details"]] == [["ZZZZZ99999.com.other.app"]]
    [both] = shared["applinks"]["details"]  # one entry: every app's links match alike
    assert sorted(both["appIDs"]) == ["ABCDE12345.com.example.shop", "ZZZZZ99999.com.other.app"]
    assert other.id


async def test_the_default_domain_as_listed_with_its_port_can_be_named(
        store: LmdbStore, config: Config) -> None:
    """What ``GET /v1/domains`` lists as ``default`` (``host:port`` behind a
    public URL with a port) is accepted back as a link's ``domain``, by the API
    and the dashboard's form; it was 400 invalid_domain (``:`` refused)."""
    config = attrs.evolve(config, public_url="http://localhost:8080")
    async with running_app(store, config, TrioWallClock()) as a, a.client("sk_test") as c:
        default = (await c.get("/v1/domains")).json()["default"]
        assert default == "localhost:8080"
        r = await c.post("/v1/links", json={"path": "/p", "domain": default, "slug": "port"})
        assert r.status_code == 201, r.text
        assert r.json()["url"] == "http://localhost:8080/port"
        assert r.json()["domain"] == default
        m = await signed_in(a, owner(a))
        r = await m.client.post("/dashboard/links/new", data={
            "csrf": m.csrf, "path": "/q", "slug": "form", "domain": default})
        await m.aclose()
        assert r.status_code == 303, r.text
        assert a.services.links.by_slug(default, "form") is not None


@pytest.mark.parametrize(("public_url", "claims"), [
    ("http://bücher.example", ("xn--bcher-kva.example", "bücher.example", "BÜCHER.example.")),
    ("http://go.example.com.", ("go.example.com", "go.example.com.")),
])
async def test_the_service_s_own_domain_however_written_cannot_be_claimed(
        store: LmdbStore, config: Config, public_url: str, claims: tuple[str, ...]) -> None:
    """``SVC_PUBLIC_URL`` in Unicode or with a trailing dot named a default
    domain no claim, Host header or resolved URL was compared in: any project
    could claim it and serve its links and association files there, and a
    link's URL as browsers send it did not resolve. It is kept as browsers
    send it (IDNA, no trailing dot)."""
    from web import tenancy
    config = attrs.evolve(config, public_url=public_url)
    async with running_app(store, config, TrioWallClock()) as a:
        await a.services.store.set_plan(a.org_id, Plan.SCALE)
        _, keys = await tenancy.create_project(a.services.store, a.org_id, "Other",
                                               a.services.random, 1)
        served = a.services.default_domain
        assert served == claims[0]
        async with a.client(keys["sk_test"]) as c:
            for claim in claims:
                r = await c.post("/v1/domains", json={"domain": claim})
                assert r.status_code == 400, (claim, r.text)
                assert r.json()["error"]["code"] == "invalid_domain"
                assert "own domain" in r.json()["error"]["message"]
        async with a.client("sk_test") as c:
            made = (await c.post("/v1/links", json={"path": "/p"})).json()
        assert made["url"] == f"http://{served}/{made['slug']}"
        async with a.client(**{"host": served, "user-agent": "Mozilla/5.0"}) as c:
            assert (await c.get(f"/{made['slug']}")).status_code in (200, 302)
        async with a.client("pk_test", **{"x-svc-sdk": "flutter/0.2.0"}) as c:
            r = await c.post("/v1/sdk/resolve", json={
                "url": f"https://{served}/{made['slug']}",
                "installId": "6f1e2d3c-4b5a-4978-8a9b-0c1d2e3f4a5b"})
        assert r.status_code == 200, r.text


async def test_domain_writes_honour_the_idempotency_key(app: App) -> None:
    """A retry whose first answer was lost gets that answer again, not
    "already in use" (add) or 404 (remove); the key with another body is 409."""
    await app.services.store.set_plan(app.org_id, Plan.SCALE)
    async with app.client("sk_test") as c:
        first = await c.post("/v1/domains", json={"domain": "go.example.net"},
                             headers={"idempotency-key": "dom-1"})
        again = await c.post("/v1/domains", json={"domain": "go.example.net"},
                             headers={"idempotency-key": "dom-1"})
        other = await c.post("/v1/domains", json={"domain": "b.example.net"},
                             headers={"idempotency-key": "dom-1"})
        assert first.status_code == 201 and first.json()["custom"] == ["go.example.net"]
        assert (again.status_code, again.content) == (201, first.content)
        assert again.headers["idempotent-replayed"] == "true"
        assert other.status_code == 409
        gone = await c.delete("/v1/domains/go.example.net", headers={"idempotency-key": "dom-2"})
        gone_again = await c.delete("/v1/domains/go.example.net",
                                    headers={"idempotency-key": "dom-2"})
        assert gone.status_code == 200 and gone.json()["custom"] == []
        assert (gone_again.status_code, gone_again.content) == (200, gone.content)
        assert (await c.get("/v1/domains")).json()["custom"] == []


async def test_platform_patches_sent_together_all_land(app: App) -> None:
    """Each PATCH is applied to the platforms as stored inside its write: three
    at once, each to another section, all keep their change."""
    import trio

    patches = [{"android": {"packageName": "com.example.a"}},
               {"web": {"fallbackUrl": "https://example.com/w"}},
               {"ios": {"bundleId": "com.example.i"}}]
    async with app.client("sk_test") as c:
        async with trio.open_nursery() as n:
            for body in patches:
                n.start_soon(lambda body=body: c.patch("/v1/platforms", json=body))
        now = (await c.get("/v1/platforms")).json()
    assert now["android"]["packageName"] == "com.example.a"
    assert now["web"]["fallbackUrl"] == "https://example.com/w"
    assert now["ios"]["bundleId"] == "com.example.i"


async def test_a_random_slug_already_taken_or_reserved_is_drawn_again(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """The caller chose no slug, so a random one that is taken on the domain
    (or is "dashboard", a path of the service's own) is drawn again rather
    than refused with a 400 naming a field the caller never sent; a slug the
    caller chose and that is taken stays a 400."""
    async with app.client("sk_test") as c:
        taken = (await c.post("/v1/links", json={"path": "/a", "slug": "AbCdEfGh1"})).json()
        draws = iter([taken["slug"], "dashboard", "ZyXwVuT98"])
        monkeypatch.setattr("web.api_links.new_slug", lambda _: next(draws))
        r = await c.post("/v1/links", json={"path": "/b"})
        assert r.status_code == 201 and r.json()["slug"] == "ZyXwVuT98", r.text
        assert next(draws, None) is None
        again = await c.post("/v1/links", json={"path": "/c", "slug": "AbCdEfGh1"})
        assert again.status_code == 400 and again.json()["error"]["field"] == "slug"
        stuck_draws: list[int] = []

        def always_taken(_: bytes) -> str:
            stuck_draws.append(1)
            return str(taken["slug"])

        monkeypatch.setattr("web.api_links.new_slug", always_taken)
        stuck = await c.post("/v1/links", json={"path": "/d"})
        assert stuck.status_code == 400  # three draws, all taken: not a loop
        assert len(stuck_draws) == RANDOM_SLUG_DRAWS == 3
        listed = (await c.get("/v1/links")).json()
    assert len(listed["data"]) == 2


async def test_a_listing_ends_with_no_cursor_beside_the_other_mode_s_links(app: App) -> None:
    """README: follow ``nextCursor`` until it is null. The last page of a
    mode's links is followed in the store by the other mode's (or another
    project's): it still says there is no more, a cursor of another mode's
    listing is refused, and a campaign filter matches the whole campaign."""
    async with app.client("sk_live") as c:
        for n in range(2):
            assert (await c.post("/v1/links", json={"path": f"/live{n}"})).status_code == 201
        live_page = (await c.get("/v1/links", params={"limit": 1})).json()
        assert live_page["nextCursor"]
    async with app.client("sk_test") as c:
        for campaign in ("summer", "summer2026"):
            assert (await c.post("/v1/links", json={"path": "/t", "campaign": campaign})
                    ).status_code == 201
        whole = (await c.get("/v1/links", params={"limit": 2})).json()
        assert len(whole["data"]) == 2 and whole["nextCursor"] is None
        first = (await c.get("/v1/links", params={"limit": 1})).json()
        last = (await c.get("/v1/links", params={"limit": 1, "cursor": first["nextCursor"]})
                ).json()
        assert len(last["data"]) == 1 and last["nextCursor"] is None
        other = await c.get("/v1/links", params={"cursor": live_page["nextCursor"]})
        assert other.status_code == 400 and other.json()["error"]["field"] == "cursor"
        exact = (await c.get("/v1/links", params={"campaign": "summer"})).json()
        assert [ln["campaign"] for ln in exact["data"]] == ["summer"]


async def test_an_empty_filter_lists_every_link(app: App) -> None:
    """``?campaign=`` (a form left blank) matched no link: an empty text is
    stored as none. An empty filter is no filter, as ``?q=`` already was."""
    async with app.client("sk_test") as c:
        for n in range(3):
            assert (await c.post("/v1/links", json={"path": f"/{n}", "campaign": "spring"})
                    ).status_code == 201
        for blank in ("campaign", "channel", "tag", "q"):
            listed = (await c.get("/v1/links", params={blank: ""})).json()
            assert len(listed["data"]) == 3, blank
        assert len((await c.get("/v1/links", params={"campaign": "autumn"})).json()["data"]) == 0


async def test_a_listing_filter_longer_than_any_stored_text_is_refused(app: App) -> None:
    """A search looks for every word of ``q`` in each record it reads (up to
    5,000): a 16 KiB ``q`` of one-letter words held a read thread for
    seconds. 200 characters is a title's; longer is 400 naming the filter."""
    async with app.client("sk_test") as c:
        await c.post("/v1/links", json={"path": "/p", "title": "t" * 200})
        ok = await c.get("/v1/links", params={"q": "t" * 200})
        assert ok.status_code == 200 and len(ok.json()["data"]) == 1
        for name in ("q", "campaign", "channel", "tag"):
            r = await c.get("/v1/links", params={name: "a " * 100 + "b"})
            assert r.status_code == 400, r.text
            assert r.json()["error"]["field"] == name
