"""Operational metrics in Prometheus' text format, served at ``GET /metrics``.

Off unless ``SVC_METRICS_TOKEN`` is set (then ``/metrics`` is a 404 like any
unknown path); when set, the scraper sends it as a bearer token
(``authorization: Bearer <token>``, Prometheus' ``authorization`` or
``bearer_token_file`` setting) and a missing or wrong one gets 401.

What is measured:

- requests by path family and status class, and their service time (from
  the parsed head to the answer handed to the server) as a histogram: the
  families are fixed (``redirect``, ``sdk``, ``api``, ``wellknown``,
  ``dashboard``, ``ops``), so no path, slug, key, address or user agent ever
  becomes a label, and the series stay few;
- gauges and counters read at scrape time from the part that owns each (the
  server's connections and load shedding, the front's requests in flight, the
  store's writer and map, the webhook actor, the timer, the events route's
  refused events, the process), through collectors registered with
  :meth:`Metrics.add`.

One owner: :class:`Metrics` is the front's, called from its task only (the
event loop's thread), so its counters are plain integers. Observing a request
costs a dictionary lookup, a bisection over 14 bounds and three additions.
"""

from __future__ import annotations

import bisect
import hmac
import os
import resource
from collections.abc import Callable, Iterable, Sequence
from importlib import metadata

import attrs

Labels = tuple[tuple[str, str], ...]
CONTENT_TYPE = b"text/plain; version=0.0.4; charset=utf-8"
# Service-time histogram bounds, in seconds: 0.25 ms (a redirect served from
# memory) to 10 s (an export page, a request queued behind an overload).
BOUNDS: tuple[float, ...] = (0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05,
                             0.1, 0.25, 0.5, 1.0, 2.5, 10.0)
CLASSES = ("other", "1xx", "2xx", "3xx", "4xx", "5xx")
OPS_PATHS = frozenset({"/healthz", "/metrics"})


@attrs.frozen
class Metric:
    """One metric family: its name, ``counter`` or ``gauge``, help text and
    samples (label pairs and value)."""

    name: str
    kind: str
    help: str
    samples: tuple[tuple[Labels, float], ...]


def gauge(name: str, help: str, value: float, labels: Labels = ()) -> Metric:
    return Metric(name, "gauge", help, ((labels, value),))


def counter(name: str, help: str, value: float, labels: Labels = ()) -> Metric:
    return Metric(name, "counter", help, ((labels, value),))


Collector = Callable[[], Iterable[Metric]]


def family_of(path: str) -> str:
    """The fixed family a request path belongs to (a metric label), as
    web/front.py routes it."""
    if path.startswith("/v1/") or path == "/v1":
        return "sdk" if path.startswith("/v1/sdk/") else "api"
    if path == "/dashboard" or path.startswith("/dashboard/"):
        return "dashboard"
    if path.startswith("/.well-known/"):
        return "wellknown"
    if path in OPS_PATHS:
        return "ops"
    return "redirect"


@attrs.define(slots=True)
class _Family:
    classes: list[int] = attrs.field(factory=lambda: [0] * len(CLASSES))
    buckets: list[int] = attrs.field(factory=lambda: [0] * (len(BOUNDS) + 1))
    seconds: float = 0.0


class Metrics:
    """Request counters and the collectors read at each scrape."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._collectors: list[Collector] = []

    def add(self, collector: Collector) -> None:
        self._collectors.append(collector)

    def observe(self, family: str, status: int, seconds: float) -> None:
        f = self._families.get(family)
        if f is None:
            f = self._families[family] = _Family()
        cls = status // 100
        f.classes[cls if 0 < cls < 6 else 0] += 1
        f.buckets[bisect.bisect_left(BOUNDS, seconds)] += 1
        f.seconds += seconds

    def render(self) -> bytes:
        """The exposition text of every metric (format 0.0.4)."""
        out: list[str] = []
        _request_lines(self._families, out)
        for collect in self._collectors:
            for metric in collect():
                _metric_lines(metric, out)
        out.append("")
        return "\n".join(out).encode()


def token_matches(header: str | None, token: str) -> bool:
    """Whether an ``authorization`` header carries ``token`` as a bearer
    token (compared in constant time)."""
    if not header:
        return False
    scheme, _, given = header.strip().partition(" ")
    if scheme.lower() != "bearer":
        return False
    return hmac.compare_digest(given.strip().encode(), token.encode())


def process_metrics(started_at_s: float) -> Collector:
    """The process' memory, CPU, descriptors, start time and version."""
    page = os.sysconf("SC_PAGE_SIZE")
    try:
        version = metadata.version("svc")
    except metadata.PackageNotFoundError:
        version = "unknown"

    def collect() -> list[Metric]:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        metrics = [
            counter("process_cpu_seconds_total", "User and system CPU time spent.",
                    usage.ru_utime + usage.ru_stime),
            gauge("process_start_time_seconds", "Start time since the Unix epoch.",
                  started_at_s),
            gauge("svc_build_info", "The running version.", 1, (("version", version),)),
        ]
        try:
            with open("/proc/self/statm") as statm:
                resident_pages = int(statm.read().split()[1])
            metrics.append(gauge("process_resident_memory_bytes", "Resident memory.",
                                 resident_pages * page))
            metrics.append(gauge("process_open_fds", "Open file descriptors.",
                                 len(os.listdir("/proc/self/fd"))))
        except OSError:  # no /proc (not Linux): those two are left out
            pass
        return metrics

    return collect


def _request_lines(families: dict[str, _Family], out: list[str]) -> None:
    names = sorted(families)
    out.append("# HELP svc_http_requests_total Requests answered, by path family and "
               "status class.")
    out.append("# TYPE svc_http_requests_total counter")
    for name in names:
        for cls, n in zip(CLASSES, families[name].classes, strict=True):
            if n:
                out.append(f'svc_http_requests_total{{family="{name}",code="{cls}"}} {n}')
    out.append("# HELP svc_http_request_duration_seconds Service time of a request, from "
               "its parsed head to its answer.")
    out.append("# TYPE svc_http_request_duration_seconds histogram")
    for name in names:
        f = families[name]
        running = 0
        for bound, n in zip((*BOUNDS, None), f.buckets, strict=True):
            running += n
            le = "+Inf" if bound is None else repr(float(bound))
            out.append(f'svc_http_request_duration_seconds_bucket{{family="{name}",'
                       f'le="{le}"}} {running}')
        out.append(f'svc_http_request_duration_seconds_sum{{family="{name}"}} '
                   f"{_number(f.seconds)}")
        out.append(f'svc_http_request_duration_seconds_count{{family="{name}"}} {running}')


def _metric_lines(metric: Metric, out: list[str]) -> None:
    out.append(f"# HELP {metric.name} {metric.help}")
    out.append(f"# TYPE {metric.name} {metric.kind}")
    for labels, value in metric.samples:
        out.append(f"{metric.name}{_labels(labels)} {_number(value)}")


def _labels(labels: Sequence[tuple[str, str]]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(v)}"' for k, v in labels)
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _number(value: float) -> str:
    if isinstance(value, int) or float(value).is_integer():
        return str(int(value))
    return repr(float(value))
