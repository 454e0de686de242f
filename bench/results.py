"""What one benchmark run produced, and the ratios to the baselines.

Absolute numbers drift by 10-15 % between runs on a shared machine, so every
claim is made as a ratio to baselines measured in the same run: a target's
loaded (c32) throughput divided by each baseline's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import attrs

from bench.wrk import WrkResult
from storage.flush_probe import nearest_rank as nearest_rank  # every bench percentile

HYPERCORN_302 = "hypercorn-trio-302"
H11_302 = "trio-h11-302"
BASELINES = (HYPERCORN_302, H11_302)
AGAIN = "-again"  # a baseline measured a second time, after the service's paths
PAGE = 4096


@attrs.frozen
class PhaseResult:
    """One measured wrk run against a running server."""

    connections: int
    load: WrkResult
    server_cpu_s: float
    wrk_argv: tuple[str, ...]
    wrk_cpu_s: float = 0.0
    other_cpu_s: float = 0.0
    """CPU time used by everything but the server and wrk during the run (noise)."""
    steal_s: float = 0.0
    server_p99_ms: float | None = None
    """p99 of the same requests as the service timed them (its access log:
    from the parsed head to the answer written); None without an access log."""
    store_bytes: int | None = None
    """Bytes the server wrote to files during the run other than its log (its
    ``wchar`` less its log's growth): LMDB's pages; None when unknown."""

    @property
    def other_load(self) -> float:
        """Cores' worth of CPU that other processes used during the run."""
        return self.other_cpu_s / self.load.duration_s if self.load.duration_s else 0.0

    @property
    def cpu_us_per_request(self) -> float | None:
        if self.load.requests == 0:
            return None
        return self.server_cpu_s * 1e6 / self.load.requests

    @property
    def pages_per_request(self) -> float | None:
        """4 KiB pages the server wrote a request (LMDB writes whole pages):
        unlike req/s and CPU, a count the machine's phase does not move."""
        if self.store_bytes is None or self.load.requests == 0:
            return None
        return self.store_bytes / PAGE / self.load.requests


@attrs.frozen
class FlushProbe:
    """One page written and flushed ``count`` times just before a path's
    measurement (bench/disk_probe.py): the disk's phase beside that path.
    ``scattered_p50_us`` and ``adjacent_p50_us``: the p50 time to write and
    flush ``batch_pages`` pages at once, at scattered offsets and side by
    side (None in records made before session 23)."""

    count: int
    p50_us: float
    p99_us: float
    batch_pages: int = 0
    scattered_p50_us: float | None = None
    adjacent_p50_us: float | None = None


@attrs.frozen
class TargetResult:
    name: str
    group: str
    description: str
    server_argv: tuple[str, ...]
    loaded: PhaseResult
    unloaded: PhaseResult
    exit_status: int
    stopped_cleanly: bool
    note: str | None = None
    paired: tuple[float, float] | None = None
    """req/s of the bare Hypercorn 302 app (c32, same wrk settings) measured
    just before and just after this path's measurements: the paired baseline."""
    flush: FlushProbe | None = None
    """The disk's flush time just before this path's measurements."""

    @property
    def paired_ratio(self) -> float | None:
        """Loaded req/s over the mean of the paired baseline's two runs: the
        ratio least moved by the machine's drift (minutes apart, another
        tenant's load can change every number by a third)."""
        if self.paired is None or not all(self.paired):
            return None
        return self.loaded.load.rps / (sum(self.paired) / 2)


@attrs.frozen
class RunRecord:
    """A whole run: where, with what, how, and the results."""

    started_at: str
    command: str
    profile: str
    durations: str
    pinning: str
    machine: tuple[tuple[str, str], ...]
    versions: tuple[tuple[str, str], ...]
    results: tuple[TargetResult, ...]
    ratios: Mapping[str, Mapping[str, float | None]]
    elapsed_s: float
    notes: tuple[str, ...] = ()


def compute_ratios(
    rps: Mapping[str, float], baselines: Sequence[str] = BASELINES
) -> dict[str, dict[str, float | None]]:
    """Each target's throughput divided by each baseline's (None if that baseline
    is missing). A baseline measured again after the paths (``name + AGAIN``)
    counts with its first measurement: the ratio is to their mean, so a drift
    of the machine during the run moves the baseline as it moved the paths."""
    bases: dict[str, float | None] = {}
    for baseline in baselines:
        runs = [r for r in (rps.get(baseline), rps.get(baseline + AGAIN)) if r]
        bases[baseline] = sum(runs) / len(runs) if runs else None
    ratios: dict[str, dict[str, float | None]] = {}
    for name, value in rps.items():
        ratios[name] = {}
        for baseline in baselines:
            base = bases[baseline]
            ratios[name][baseline] = value / base if base else None
    return ratios


def ratios_for(results: Sequence[TargetResult]) -> dict[str, dict[str, float | None]]:
    """Ratios of the loaded throughput of every result to the baselines among them."""
    return compute_ratios({r.name: r.loaded.load.rps for r in results})


def as_json(record: RunRecord) -> dict[str, object]:
    """The run as plain JSON-ready data (kept in bench/out/ for later comparison)."""
    data = attrs.asdict(record, recurse=True)
    data["machine"] = dict(record.machine)
    data["versions"] = dict(record.versions)
    for result, raw in zip(record.results, data["results"], strict=True):
        for phase_name in ("loaded", "unloaded"):
            phase: PhaseResult = getattr(result, phase_name)
            raw[phase_name]["cpu_us_per_request"] = phase.cpu_us_per_request
            raw[phase_name]["pages_per_request"] = phase.pages_per_request
    return data
