"""The collectors behind ``/metrics`` (web/metrics.py): each reads, at scrape
time, the statistics the part that owns them already keeps; none counts
anything itself."""

from __future__ import annotations

from collections.abc import Callable

from actors.timer import TimerActor
from actors.webhooks import WebhookActor
from storage.lmdb_store import LmdbStore
from web.api_events import EventStatistics
from web.metrics import Collector, Metric, counter, gauge
from web.server import HttpServer


def server_metrics(server: HttpServer) -> Collector:
    def collect() -> list[Metric]:
        return [
            gauge("svc_http_connections", "Open client connections.",
                  server.limiter.borrowed_tokens),
            gauge("svc_http_connections_limit", "Open connections allowed (SVC_MAX_CONNECTIONS).",
                  server.settings.max_connections),
            counter("svc_http_connections_refused_total",
                    "Connections refused with 503 over the connection limit.", server.refused),
            counter("svc_http_requests_shed_total",
                    "Requests answered 503 while the event loop was overloaded.", server.shed),
            counter("svc_http_send_timeouts_total",
                    "Connections ended because the client took nothing of an answer for "
                    "60 s (it stopped reading).", server.stalled),
            gauge("svc_event_loop_lag_seconds",
                  "Smoothed event-loop delay (measured when SVC_MAX_LAG_MS is on).",
                  server.lag_s),
        ]

    return collect


def front_metrics(in_flight: Callable[[], int]) -> Collector:
    def collect() -> list[Metric]:
        return [gauge("svc_http_requests_in_flight",
                      "Requests being handled (admission limit: SVC_MAX_IN_FLIGHT).",
                      in_flight())]

    return collect


def store_metrics(store: LmdbStore) -> Collector:
    def collect() -> list[Metric]:
        w = store.writer.statistics()
        space = store.stats()
        return [
            counter("svc_store_commits_total", "Write transactions committed (group commits).",
                    w.batches),
            counter("svc_store_writes_total", "Write operations committed.", w.ops),
            counter("svc_store_failed_writes_total",
                    "Write operations that failed (the caller got the error).", w.failed_ops),
            counter("svc_store_failed_commits_total",
                    "Group commits (or one write in them) the store could not write: a "
                    "full disk or map, a failing device; answered 503 storage_unavailable.",
                    w.failed_commits),
            gauge("svc_store_write_queue", "Write operations waiting for the writer.", w.queued),
            gauge("svc_store_map_size_bytes", "LMDB map size (SVC_MAP_SIZE).",
                  space["map_size"]),
            gauge("svc_store_used_bytes", "Bytes of the map in use.", space["used_bytes"]),
            gauge("svc_store_decode_cache_bytes",
                  "Memory the cache of decoded records holds, as charged (at most "
                  f"{store.cache.max_bytes >> 20} MiB; fills with traffic).",
                  store.cache.size_bytes),
        ]

    return collect


def webhook_metrics(webhooks: Callable[[], WebhookActor | None]) -> Collector:
    def collect() -> list[Metric]:
        actor = webhooks()
        if actor is None:
            return []
        s = actor.statistics()
        return [
            gauge("svc_webhook_endpoints", "Webhook endpoints known.", s.endpoints),
            gauge("svc_webhook_deliveries_ready", "Deliveries due and waiting to be sent.",
                  s.ready),
            gauge("svc_webhook_deliveries_in_flight", "Deliveries being sent.", s.in_flight),
            gauge("svc_webhook_deliveries_parked",
                  "Deliveries held back by their organization's plan.", s.parked_by_plan),
            gauge("svc_webhook_endpoints_overflowed",
                  "Endpoints whose due deliveries wait in the store (their ready queue was "
                  "full).", s.endpoints_overflowed),
            gauge("svc_webhook_body_cache_bytes",
                  "Memory the cache of recently dispatched event bodies holds (at most "
                  "16 MiB; fills with traffic).", s.body_cache_bytes),
            counter("svc_webhook_deliveries_created_total", "Deliveries created from events.",
                    s.deliveries_created),
            counter("svc_webhook_attempts_total", "Delivery attempts made.", s.attempts),
            counter("svc_webhook_delivered_total", "Attempts the receiver accepted (2xx).",
                    s.delivered),
            counter("svc_webhook_failed_attempts_total",
                    "Attempts that failed (refused address, error status, timeout).",
                    s.failed_attempts),
            counter("svc_webhook_write_failures_total",
                    "Delivery state writes that failed (the actor then reloads its state).",
                    s.write_failures),
        ]

    return collect


def events_metrics(events: EventStatistics) -> Collector:
    def collect() -> list[Metric]:
        return [counter("svc_events_rejected_total",
                        "Custom events refused by the rules in batches otherwise accepted "
                        "(listed in the answer, not stored).", events.rejected)]

    return collect


def redirect_metrics(declined: Callable[[], int]) -> Collector:
    def collect() -> list[Metric]:
        return [counter("svc_redirect_prefetches_declined_total",
                        "Browser prefetches of a short link answered 503 so that the tap "
                        "itself is counted (also in the redirect family's 5xx).", declined())]

    return collect


def timer_metrics(timer: TimerActor) -> Collector:
    def collect() -> list[Metric]:
        s = timer.statistics()
        return [
            gauge("svc_timer_deadlines_held", "Deadlines held in memory (later ones wait in "
                  "the store).", s.pending),
            counter("svc_timer_fired_total", "Deadlines fired.", s.fired),
            counter("svc_timer_clock_steps_back_total", "Times the wall clock went back "
                    "more than a second (the deadlines held kept their moments).",
                    s.steps_back),
        ]

    return collect
