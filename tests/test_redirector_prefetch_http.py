"""A browser's prefetch of a short link over HTTP: declined with a 503 that no
cache keeps, nothing stored (no click, no window entry, no token), and the
real tap after it redirected and counted as ever. In process (ASGI, a real
LMDB in a temp dir) for every page and flow, and as the real service on a
real socket for the headers browsers send."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import attrs
import httpx
import pytest

from storage.lmdb_store import LmdbStore
from tests.conftest import App
from tests.server_process import ServerProcess
from tests.test_redirect import BARE
from tests.test_redirector_http import UA, configure, make_link

PREFETCH = {"sec-purpose": "prefetch"}
# What browsers send for a speculative fetch (web/client_facts.py is_prefetch).
PREFETCH_HEADERS = [
    ("Sec-Purpose", "prefetch"),                       # speculation rules, rel=prefetch
    ("Sec-Purpose", "prefetch;prerender"),             # speculation rules prerender
    ("Sec-Purpose", "prefetch;anonymous-client-ip"),   # Chrome's private prefetch proxy
    ("Purpose", "prefetch"),                           # Chrome before Sec-Purpose
    ("X-Moz", "prefetch"),                             # Firefox before Sec-Purpose
    ("X-Purpose", "preview"),                          # Safari
]


def assert_declined(r: httpx.Response) -> None:
    assert r.status_code == 503, (r.status_code, r.headers)
    assert r.headers["cache-control"] == "no-store"
    assert r.headers["referrer-policy"] == "no-referrer"
    assert r.headers["content-type"].startswith("text/plain")
    assert "location" not in r.headers and "svc_token" not in r.text
    assert len(r.content) < 100


def token_of(location: str) -> str:
    query = parse_qs(urlsplit(location).query)
    if "referrer" in query:  # the Play Store's install referrer
        query = parse_qs(query["referrer"][0])
    return query["svc_token"][0]


# -- in process ------------------------------------------------------------------------


async def stored(app: App) -> tuple[int, int, int]:
    """Clicks, window entries and tokens stored (everything queued committed)."""
    await app.flush()
    attr = app.services.attribution
    return (len(attr.recent_clicks(app.project_id, "live")),
            len(attr.window(app.project_id, "live", 0)),
            len(app.services.store.scan(b"tokens", b"")))


@pytest.mark.parametrize(("ua", "settings", "expect"), [
    ("android", {}, 302),                                        # Play Store + token
    ("desktop", {"tokens": True}, 302),                          # web fallback + token
    ("ios", {"prob": True}, 302),                                # App Store, window entry
    ("ios", {"prob": True, "landing": True}, 200),               # 'Continue in app' page
    ("desktop", {"platforms": BARE}, 200),                       # the plain OG page
], ids=["android-store-token", "web-fallback-token", "ios-app-store-window", "ios-landing",
        "og-page"])
async def test_a_prefetch_stores_nothing_and_the_tap_after_it_counts(
        app: App, ua: str, settings: dict[str, object], expect: int) -> None:
    await configure(app, **settings)  # type: ignore[arg-type]
    link = await make_link(app)
    async with app.client(**{"user-agent": UA[ua], **PREFETCH}) as c:
        assert_declined(await c.get(f"/{link['slug']}"))
    assert await stored(app) == (0, 0, 0)
    async with app.client(**{"user-agent": UA[ua]}) as c:
        r = await c.get(f"/{link['slug']}")
    assert r.status_code == expect
    tokens = 1 if "svc_token" in r.headers.get("location", "") else 0
    assert tokens == (1 if ua == "android" or settings.get("tokens") else 0)
    window = 1 if ua == "ios" else 0
    assert await stored(app) == (1, window, tokens)


async def test_only_what_a_tap_would_count_is_declined(app: App) -> None:
    """A person's prefetch is declined; what is never counted (a bot's
    preview, no link, HEAD, an expired link) is answered as without it."""
    await configure(app)
    link = await make_link(app, ogTitle="Summer sale")
    async with app.client(**{"user-agent": UA["android"], **PREFETCH}) as c:
        assert_declined(await c.get(f"/{link['slug']}"))
    async with app.client(**{"user-agent": UA["bot"], **PREFETCH}) as c:
        preview = await c.get(f"/{link['slug']}")
        missing = await c.get("/doesnotexist")
    assert preview.status_code == 200 and 'content="Summer sale"' in preview.text
    assert missing.status_code == 404
    async with app.client(**{"user-agent": UA["android"], **PREFETCH}) as c:
        head = await c.head(f"/{link['slug']}")
    assert head.status_code == 302 and "svc_token" not in head.headers["location"]
    gone = await make_link(app, expiresAt="2099-01-01T00:00:00Z",
                           androidFallbackUrl="https://example.com/sorry")
    await app.services.links.update(app.project_id, "live", str(gone["id"]),
                                    lambda x: attrs.evolve(x, expires_at_ms=1), None)
    async with app.client(**{"user-agent": UA["android"], **PREFETCH}) as c:
        expired = await c.get(f"/{gone['slug']}")
    assert expired.status_code == 302
    assert expired.headers["location"] == "https://example.com/sorry"
    assert await stored(app) == (0, 0, 0)


async def test_the_landing_page_s_own_reload_prefetched_is_declined(app: App) -> None:
    """The page's button without a custom scheme loads the short link marked
    ``svc_open=landing`` (not counted again): a prefetch of it stores nothing."""
    await configure(app, landing=True, prob=True)
    link = await make_link(app)
    async with app.client(**{"user-agent": UA["ios"], **PREFETCH}) as c:
        assert_declined(await c.get(f"/{link['slug']}?svc_open=landing"))
    async with app.client(**{"user-agent": UA["ios"]}) as c:
        assert (await c.get(f"/{link['slug']}?svc_open=landing")).status_code == 200
    assert await stored(app) == (0, 0, 0)


# -- the real service on a real socket -------------------------------------------------


@pytest.mark.e2e
def test_prefetches_over_a_real_socket(server_factory: type[ServerProcess]) -> None:
    srv = server_factory().start()
    with srv.client("sk_live") as c:
        assert c.patch("/v1/platforms", json={"android": {"packageName": "com.example.app"}}
                       ).status_code == 200
        link = c.post("/v1/links", json={"path": "/product/1"}).json()
    slug = link["slug"]

    def clicks() -> int:
        with srv.client("sk_live") as c:
            r = c.get(f"/v1/analytics/links/{link['id']}/funnel")
        assert r.status_code == 200, r.text
        return int(r.json()["clicks"])

    handed_out: list[str] = []
    with httpx.Client(base_url=srv.url, headers={"user-agent": UA["android"]},
                      follow_redirects=False, timeout=10) as browser:
        for name, value in PREFETCH_HEADERS:
            prefetched = browser.get(f"/{slug}", headers={name: value})
            assert_declined(prefetched)
            tapped = browser.get(f"/{slug}")  # the same request, tapped
            assert tapped.status_code == 302, (name, value)
            assert tapped.headers["cache-control"] == "no-store"
            assert tapped.headers["location"].startswith("https://play.google.com/")
            handed_out.append(token_of(tapped.headers["location"]))
            # The tap waited for its token's commit, after anything the
            # prefetch might have queued: the prefetch counted nothing.
            assert clicks() == len(handed_out), (name, value)
        for unrelated in ("prerender", "preview", "something-else;prefetch"):
            r = browser.get(f"/{slug}", headers={"sec-purpose": unrelated})
            assert r.status_code == 302, unrelated
            handed_out.append(token_of(r.headers["location"]))
            assert clicks() == len(handed_out), unrelated
    srv.stop()
    check_tokens(srv.data_dir, handed_out)


def check_tokens(data_dir: str, handed_out: list[str]) -> None:
    """Exactly the tokens the taps handed out are stored: none for a prefetch."""
    store = LmdbStore(data_dir, map_size=64 << 20, readonly=True)
    try:
        tokens = store.scan(b"tokens", b"")
        assert sorted(bytes(k).decode() for k, _ in tokens) == sorted(handed_out)
        assert len(set(handed_out)) == len(handed_out)
    finally:
        store.close()
