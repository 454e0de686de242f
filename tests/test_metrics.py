"""GET /metrics (web/metrics.py): off without a token, 401 without the right
one, Prometheus text that Prometheus' own parser reads, requests counted by
fixed families only, and nothing about users in it."""

from __future__ import annotations

import resource
from collections.abc import AsyncIterator
from typing import Any

import attrs
import httpx
import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config, load
from svc_engine.errors import ValidationError
from tests.conftest import App, running_app
from web.metrics import BOUNDS, Metrics, counter, family_of, gauge, token_matches

TOKEN = "scrape-token-0123456789"
UA = ("Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
      "Chrome/142.0.0.0 Safari/537.36")


def parse(text: str) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(text)}


def value(families: dict[str, Any], sample_name: str, **labels: str) -> float:
    for family in families.values():
        for s in family.samples:
            if s.name == sample_name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    raise KeyError((sample_name, labels))


# -- pure parts ------------------------------------------------------------------


@pytest.mark.parametrize(("path", "family"), [
    ("/v1/sdk/init", "sdk"), ("/v1/sdk/events", "sdk"), ("/v1/links", "api"),
    ("/v1/webhooks/endpoints/x", "api"), ("/dashboard", "dashboard"),
    ("/dashboard/static/app.js", "dashboard"), ("/.well-known/assetlinks.json", "wellknown"),
    ("/healthz", "ops"), ("/metrics", "ops"), ("/summer-sale", "redirect"), ("/", "redirect"),
    ("/v1", "api"), ("/v1sale", "redirect"), ("/dashboardx", "redirect"),
])
def test_every_path_falls_in_a_fixed_family(path: str, family: str) -> None:
    assert family_of(path) == family


def test_histogram_buckets_are_cumulative_and_parse() -> None:
    m = Metrics()
    for seconds in (0.0001, 0.0003, 0.0004, 0.003, 20.0):
        m.observe("redirect", 302, seconds)
    m.observe("sdk", 200, 0.0015)
    m.observe("sdk", 429, 0.0002)
    m.observe("api", 0, 0.001)  # an answer that never started
    fams = parse(m.render().decode())
    assert value(fams, "svc_http_requests_total", family="redirect", code="3xx") == 5
    assert value(fams, "svc_http_requests_total", family="sdk", code="2xx") == 1
    assert value(fams, "svc_http_requests_total", family="sdk", code="4xx") == 1
    assert value(fams, "svc_http_requests_total", family="api", code="other") == 1
    bucket = "svc_http_request_duration_seconds_bucket"
    assert value(fams, bucket, family="redirect", le="0.00025") == 1
    assert value(fams, bucket, family="redirect", le="0.0005") == 3
    assert value(fams, bucket, family="redirect", le="0.005") == 4
    assert value(fams, bucket, family="redirect", le="10.0") == 4
    assert value(fams, bucket, family="redirect", le="+Inf") == 5
    assert value(fams, "svc_http_request_duration_seconds_count", family="redirect") == 5
    assert value(fams, "svc_http_request_duration_seconds_sum",
                 family="redirect") == pytest.approx(20.0038)
    assert fams["svc_http_request_duration_seconds"].type == "histogram"
    assert len([s for s in fams["svc_http_request_duration_seconds"].samples
                if s.labels["family"] == "sdk"]) == len(BOUNDS) + 3


def test_an_observation_on_a_bound_counts_in_that_bucket() -> None:
    m = Metrics()
    m.observe("redirect", 302, 0.001)
    fams = parse(m.render().decode())
    bucket = "svc_http_request_duration_seconds_bucket"
    assert value(fams, bucket, family="redirect", le="0.0005") == 0
    assert value(fams, bucket, family="redirect", le="0.001") == 1


def test_collected_metrics_render_with_escaped_labels() -> None:
    m = Metrics()
    m.add(lambda: [gauge("svc_x", "A gauge.", 2.5, (("v", 'a"b\\c\nd'),)),
                   counter("svc_y_total", "A counter.", 7),
                   gauge("svc_z", "A whole float.", 3.0)])
    text = m.render().decode()
    assert "\nsvc_z 3\n" in text  # a whole number has no ".0", float or not
    assert 'svc_x{v="a\\"b\\\\c\\nd"} 2.5' in text
    fams = parse(text)
    assert value(fams, "svc_x", v='a"b\\c\nd') == 2.5
    assert fams["svc_y"].type == "counter" and value(fams, "svc_y_total") == 7


@pytest.mark.parametrize(("header", "ok"), [
    (f"Bearer {TOKEN}", True), (f"bearer  {TOKEN} ", True), (None, False), ("", False),
    (f"Basic {TOKEN}", False), (f"Bearer {TOKEN}x", False), ("Bearer", False),
    (TOKEN, False),
])
def test_token_matches_only_the_bearer_token(header: str | None, ok: bool) -> None:
    assert token_matches(header, TOKEN) is ok


def test_a_short_or_spaced_token_is_refused_at_start() -> None:
    assert load({"SVC_METRICS_TOKEN": TOKEN}, {}).metrics_token == TOKEN
    assert load({"SVC_METRICS_TOKEN": ""}, {}).metrics_token is None
    for bad in ("short", "x" * 15, "sixteen chars ok but spaced"):  # README: 16+ characters
        with pytest.raises(ValidationError, match="SVC_METRICS_TOKEN"):
            load({"SVC_METRICS_TOKEN": bad}, {})
    assert load({"SVC_METRICS_TOKEN": "x" * 16}, {}).metrics_token == "x" * 16
    assert TOKEN not in repr(load({"SVC_METRICS_TOKEN": TOKEN}, {}))


# -- in process --------------------------------------------------------------------


@pytest.fixture
async def metered(store: LmdbStore, config: Config) -> AsyncIterator[App]:
    async with running_app(store, attrs.evolve(config, metrics_token=TOKEN),
                           TrioWallClock()) as app:
        yield app


async def test_metrics_are_off_without_a_token(app: App) -> None:
    async with app.client() as c:
        r = await c.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found"


async def test_metrics_need_the_token(metered: App) -> None:
    async with metered.client() as c:
        for headers in ({}, {"authorization": "Bearer wrong-token-0123456789"},
                        {"authorization": f"Bearer {metered.keys['sk_live']}"}):
            r = await c.get("/metrics", headers=headers)
            assert r.status_code == 401, headers
            assert r.json()["error"]["code"] == "unauthenticated"
            assert r.headers["www-authenticate"].startswith("Bearer")
        r = await c.post("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 405 and r.headers["allow"] == "GET, HEAD"


async def test_requests_are_counted_by_family_and_parts_report(metered: App) -> None:
    async with metered.client("sk_live") as c:
        r = await c.post("/v1/links", json={"path": "/p/1", "slug": "spring-sale",
                                            "webFallbackUrl": "https://example.com/web"})
        assert r.status_code == 201, r.text
        await c.get("/spring-sale", headers={"user-agent": UA, "cf-ipcountry": "DE"})
        await c.get("/no-such-link")
        prefetch = await c.get("/spring-sale", headers={"user-agent": UA,
                                                        "sec-purpose": "prefetch"})
        assert prefetch.status_code == 503
        await c.get("/healthz")
        before = resource.getrusage(resource.RUSAGE_SELF)
        r = await c.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
    assert r.status_code == 200
    assert r.headers["content-type"] == "text/plain; version=0.0.4; charset=utf-8"
    fams = parse(r.text)
    assert value(fams, "svc_http_requests_total", family="api", code="2xx") == 1
    assert value(fams, "svc_http_requests_total", family="redirect", code="3xx") == 1
    assert value(fams, "svc_http_requests_total", family="redirect", code="4xx") == 1
    assert value(fams, "svc_http_requests_total", family="redirect", code="5xx") == 1
    assert value(fams, "svc_redirect_prefetches_declined_total") == 1
    assert value(fams, "svc_http_requests_total", family="ops", code="2xx") == 1
    assert value(fams, "svc_http_request_duration_seconds_count", family="redirect") == 3
    assert value(fams, "svc_http_requests_in_flight") == 1  # the scrape itself
    assert value(fams, "svc_store_writes_total") >= 1
    assert value(fams, "svc_store_commits_total") >= 1
    assert 0 < value(fams, "svc_store_used_bytes") <= value(fams, "svc_store_map_size_bytes")
    assert 0 < value(fams, "svc_store_decode_cache_bytes") <= 32 << 20  # the link, the key
    assert "(at most 32 MiB;" in r.text  # the bound it has (its help said 16)
    assert value(fams, "svc_webhook_endpoints") == 0
    assert value(fams, "svc_webhook_endpoints_overflowed") == 0
    assert value(fams, "svc_webhook_body_cache_bytes") == 0  # no endpoint, nothing fanned out
    assert value(fams, "svc_timer_deadlines_held") >= 0
    assert value(fams, "svc_events_rejected_total") == 0
    assert value(fams, "process_resident_memory_bytes") > 1 << 20
    # user and system time, both (counters: no less than just before the scrape)
    assert value(fams, "process_cpu_seconds_total") >= before.ru_utime + before.ru_stime
    assert value(fams, "svc_build_info", version="0.1.0") == 1
    for private in ("spring-sale", "no-such-link", "/p/1", "Chrome", "example.com",
                    metered.project_id, TOKEN):
        assert private not in r.text, private


async def test_an_answer_cut_short_is_still_counted(metered: App) -> None:
    """A client gone (or a write ended by the server's send watch) while the
    answer goes out: the request is still counted (and logged)."""
    scope = {"type": "http", "method": "GET", "path": "/healthz", "query_string": b"",
             "headers": [], "client": ("10.0.0.1", 1)}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            raise trio.BrokenResourceError("the client went away")

    with pytest.raises(trio.BrokenResourceError):
        await metered.front(scope, receive, send)
    fams = parse(metered.front.metrics.render().decode())
    assert value(fams, "svc_http_requests_total", family="ops", code="2xx") == 1


# -- over a real socket ------------------------------------------------------------


def test_a_served_process_reports_its_connections(server_factory: Any) -> None:
    srv = server_factory(env={"SVC_METRICS_TOKEN": TOKEN}).start()
    with httpx.Client(base_url=srv.url) as c:
        assert c.get("/healthz").status_code == 200
        r = c.get("/metrics", headers={"authorization": f"Bearer {TOKEN}"})
        assert c.get("/metrics").status_code == 401
    assert r.status_code == 200
    fams = parse(r.text)
    assert value(fams, "svc_http_connections") >= 1
    assert value(fams, "svc_http_connections_limit") == 1024
    assert value(fams, "svc_http_connections_refused_total") == 0
    assert value(fams, "svc_http_requests_total", family="ops", code="2xx") >= 1
    assert value(fams, "process_open_fds") > 3
    assert value(fams, "process_cpu_seconds_total") > 0
    srv.stop()
    assert TOKEN not in srv.logs()
    assert "127.0.0.1" not in r.text


def test_each_metric_reads_the_statistic_its_name_says() -> None:
    """The collectors read statistics their owners keep: over owners whose
    every statistic is a different number, each metric is its own (a commit
    count read from the writes, or deadlines held from those fired, would
    pass any test that only asks for a number)."""
    from types import SimpleNamespace as NS
    from typing import cast

    from web import metrics_sources as ms

    numbers = iter(range(101, 1_000))

    def stats(*names: str) -> NS:
        return NS(**{n: next(numbers) for n in names})

    w = stats("batches", "ops", "failed_ops", "failed_commits", "queued")
    store = NS(writer=NS(statistics=lambda: w), cache=NS(max_bytes=64 << 20, size_bytes=7),
               stats=lambda: {"map_size": 1 << 30, "used_bytes": 5})
    h = stats("endpoints", "ready", "in_flight", "parked_by_plan", "endpoints_overflowed",
              "body_cache_bytes", "deliveries_created", "attempts", "delivered",
              "failed_attempts", "write_failures")
    t = stats("pending", "fired", "steps_back")
    srv = NS(limiter=NS(borrowed_tokens=next(numbers)), settings=NS(max_connections=1024),
             refused=next(numbers), shed=next(numbers), stalled=next(numbers), lag_s=0.25)
    expected = {
        "svc_store_commits_total": w.batches, "svc_store_writes_total": w.ops,
        "svc_store_failed_writes_total": w.failed_ops,
        "svc_store_failed_commits_total": w.failed_commits, "svc_store_write_queue": w.queued,
        "svc_webhook_endpoints": h.endpoints, "svc_webhook_deliveries_ready": h.ready,
        "svc_webhook_deliveries_in_flight": h.in_flight,
        "svc_webhook_deliveries_parked": h.parked_by_plan,
        "svc_webhook_endpoints_overflowed": h.endpoints_overflowed,
        "svc_webhook_body_cache_bytes": h.body_cache_bytes,
        "svc_webhook_deliveries_created_total": h.deliveries_created,
        "svc_webhook_attempts_total": h.attempts, "svc_webhook_delivered_total": h.delivered,
        "svc_webhook_failed_attempts_total": h.failed_attempts,
        "svc_webhook_write_failures_total": h.write_failures,
        "svc_timer_deadlines_held": t.pending, "svc_timer_fired_total": t.fired,
        "svc_timer_clock_steps_back_total": t.steps_back,
        "svc_http_connections": srv.limiter.borrowed_tokens,
        "svc_http_connections_refused_total": srv.refused,
        "svc_http_requests_shed_total": srv.shed, "svc_http_send_timeouts_total": srv.stalled,
    }
    collected = [*ms.store_metrics(cast(Any, store))(),
                 *ms.webhook_metrics(lambda: cast(Any, NS(statistics=lambda: h)))(),
                 *ms.timer_metrics(cast(Any, NS(statistics=lambda: t)))(),
                 *ms.server_metrics(cast(Any, srv))()]
    got = {m.name: m.samples[0][1] for m in collected}
    assert {name: got[name] for name in expected} == expected
