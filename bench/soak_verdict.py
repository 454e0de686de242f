"""The soak's arithmetic (no I/O): phases, growth slopes, the verdict and the table.

A soak run (bench/soak.py) is cut into three phases of its duration:

- ``warmup`` (the first 20 %): the mixed load with the *pool* key set (a
  fixed set of client addresses, user agents, user IDs, e-mails, event names
  and currencies, used over and over); every in-memory table and cache fills
  up to what that set needs, the allocator's arenas and LMDB's pages settle;
- ``same`` (20 % to 55 %): the same load, the same pool: whatever still grows
  here grows with requests or with the store (not with distinct keys);
- ``fresh`` (55 % to the end): the same load, but every request draws keys
  never seen before: a table keyed by any of them grows here, and the
  difference between this phase's slope and ``same``'s, divided by the new
  keys it saw, is what each distinct key costs.

Slopes are Theil-Sen fits of the sampled values against time (the median
of the slopes between every two samples: robust to the allocator's steps
and to a sample that caught a transient allocation, as a first-last
difference or a least-squares fit is not), extrapolated to an hour. The
same-keys phase is fitted in two halves: a bounded table or cache that
takes minutes to fill grows in the first and stops in the second (or, if it
fills later, by the fresh phase). The fresh phase's growth is set against
what the service's bounded per-key tables could have gained from its new
keys (bench/soak_calibrate.py measures an entry of each), and what is left
over, per new client address, is the verdict on growth with keys. The
verdict names each sampled quantity steady or growing by thresholds stated
here, so that a reader can judge them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

WARMUP_END = 0.20
SAME_END = 0.55
PHASES = ("warmup", "same", "fresh")

MIB = 1024 * 1024
# Anonymous memory growing less than this an hour (steady state extrapolated)
# is called steady: a few MiB is what pymalloc's arenas and glibc's heap move
# by on their own between two samples of an idle Python process.
ANON_STEADY_PER_HOUR = 16 * MIB
# Growth in the fresh phase beyond the same-keys phase's, per distinct new
# client address: an unbounded per-address table entry costs 150-300 bytes
# in CPython (key, value object, dict slot); less than this is noise.
PER_KEY_NOISE_BYTES = 40.0
# Descriptors and threads: more than this many above the warm-up's highest
# at the end is growth (a few come and go with connections and trio's
# thread cache, which keeps an idle worker thread ~10 s).
FD_SLACK = 16
THREAD_SLACK = 8
# Bounded caches that fill with traffic, not keys, as sampled (bench/soak.py
# METRIC_FIELDS) and named in the verdict.
TRAFFIC_CACHES = (("body_cache", "webhook body cache"),
                  ("decode_cache", "decoded-record cache"))


def phase_of(t_s: float, total_s: float) -> str:
    """The phase a moment ``t_s`` seconds into a run of ``total_s`` belongs to."""
    if t_s < WARMUP_END * total_s:
        return "warmup"
    if t_s < SAME_END * total_s:
        return "same"
    return "fresh"


def phase_bounds(total_s: float) -> dict[str, tuple[float, float]]:
    return {"warmup": (0.0, WARMUP_END * total_s),
            "same": (WARMUP_END * total_s, SAME_END * total_s),
            "fresh": (SAME_END * total_s, total_s)}


def slope(points: Sequence[tuple[float, float]]) -> float | None:
    """Theil-Sen slope (units of y per unit of x) of ``points``: the median of
    the slopes between every two points, which one outlier (a sample that
    caught a transient allocation) cannot move much, as it moves a
    least-squares fit; None for fewer than two distinct x."""
    slopes = sorted((y2 - y1) / (x2 - x1) for i, (x1, y1) in enumerate(points)
                    for x2, y2 in points[i + 1:] if x2 != x1)
    if not slopes:
        return None
    mid = len(slopes) // 2
    return slopes[mid] if len(slopes) % 2 else (slopes[mid - 1] + slopes[mid]) / 2


def per_hour(slope_per_s: float | None) -> float | None:
    return None if slope_per_s is None else slope_per_s * 3600.0


def series(samples: Sequence[Mapping[str, Any]], field: str, start_s: float,
           end_s: float) -> list[tuple[float, float]]:
    """(t, value) of the samples with ``start_s <= t <= end_s`` that have ``field``."""
    return [(float(s["t"]), float(s[field])) for s in samples
            if start_s <= s["t"] <= end_s and s.get(field) is not None]


def at_or_before(samples: Sequence[Mapping[str, Any]], t_s: float) -> Mapping[str, Any]:
    """The last sample taken at or before ``t_s`` (the first one if none)."""
    found = samples[0]
    for s in samples:
        if s["t"] <= t_s:
            found = s
    return found


@attrs.frozen
class Growth:
    field: str
    warm_value: float          # at the end of warm-up
    end_value: float
    per_hour_overall: float    # (end - warm) / elapsed, an hour
    per_hour_same_early: float | None  # fitted, first half of the same-keys phase, an hour
    per_hour_same_late: float | None   # fitted, second half of the same-keys phase
    per_hour_fresh: float | None       # fitted, the fresh-keys phase


def growth(samples: Sequence[Mapping[str, Any]], field: str, total_s: float) -> Growth:
    samples = [s for s in samples if s.get(field) is not None]
    if not samples:
        return Growth(field, 0.0, 0.0, 0.0, None, None, None)
    bounds = phase_bounds(total_s)
    warm = at_or_before(samples, bounds["warmup"][1])
    end = samples[-1]
    elapsed = float(end["t"]) - float(warm["t"])
    overall = ((float(end[field]) - float(warm[field])) / elapsed * 3600.0
               if elapsed > 0 else 0.0)
    lo, hi = bounds["same"]
    mid = (lo + hi) / 2
    return Growth(field, float(warm[field]), float(end[field]), overall,
                  per_hour(slope(series(samples, field, lo, mid))),
                  per_hour(slope(series(samples, field, mid, hi))),
                  per_hour(slope(series(samples, field, *bounds["fresh"]))))


@attrs.frozen
class Verdict:
    lines: tuple[str, ...]
    steady: bool
    """Anonymous memory steady with known keys (once whatever filled had
    filled), descriptors and threads held."""
    grows_with_keys: bool
    """Anonymous memory grew with the fresh phase's new keys by more than the
    bounded tables' fill explains (``unexplained_per_key``) and the noise."""
    per_key_bytes: float | None
    """Fresh-phase growth per new client address (all of it, an upper bound)."""
    unexplained_per_key: float | None


def _rate(value: float | None) -> float:
    return value if value is not None else 0.0


def verdict(samples: Sequence[Mapping[str, Any]], total_s: float,
            keys_by_phase: Mapping[str, Mapping[str, int]],
            explained: Sequence[tuple[str, int, float]] = ()) -> Verdict:
    """Judge a run's samples (each: ``t`` and the sampled fields).

    ``explained``: (table, entries added, bytes) the bounded per-key tables
    could have gained from the fresh phase's keys (bench/soak_calibrate.py)."""
    lines: list[str] = []
    bounds = phase_bounds(total_s)
    # Caches bounded by bytes that fill with traffic, not with keys (a soak
    # fills them for tens of minutes), would read as growth with known keys:
    # judged net of each the service reports in every sample.
    caches = [(field, name) for field, name in TRAFFIC_CACHES
              if samples and all(s.get(field) is not None for s in samples)]
    if caches:
        samples = [{**s, "rss_anon_net": s["rss_anon"] - sum(s[f] for f, _ in caches)}
                   for s in samples]
    anon = growth(samples, "rss_anon_net" if caches else "rss_anon", total_s)
    fresh_s = bounds["fresh"][1] - bounds["fresh"][0]
    if caches:
        lines.append("anon RSS below is net of " + " and ".join(
            f"the {name} ({mib(float(samples[-1][field]))} at the end)" for field, name in caches)
            + ": bounded, they fill with traffic")
    lines.append(
        f"anon RSS: {mib(anon.warm_value)} at the end of warm-up -> {mib(anon.end_value)} at "
        f"the end: {signed_mib(anon.per_hour_overall)}/h extrapolated; fitted (Theil-Sen): "
        f"same keys {signed_mib(anon.per_hour_same_early)}/h then "
        f"{signed_mib(anon.per_hour_same_late)}/h, fresh keys "
        f"{signed_mib(anon.per_hour_fresh)}/h")
    late = anon.per_hour_same_late
    fresh = anon.per_hour_fresh
    fresh_keys = keys_by_phase.get("fresh", {})
    addresses = int(fresh_keys.get("addresses", 0))
    accounted = sum(b for _, _, b in explained)
    late_ok = late is not None and late <= ANON_STEADY_PER_HOUR
    # The fresh phase's growth less what the bounded per-key tables could
    # have gained from its new keys: what is left grew with requests or with
    # keys that no bounded table explains.
    fresh_net = (None if fresh is None
                 else (max(0.0, fresh) / 3600.0 * fresh_s - accounted) / fresh_s * 3600.0)
    fresh_ok = fresh_net is not None and fresh_net <= ANON_STEADY_PER_HOUR
    if late_ok:
        known = "steady"
    elif fresh_ok:
        known = ("grew while the same keys were sent, then stopped: steady by the end, net of "
                 "the bounded tables' fill (something bounded filled: see the census)")
    else:
        known = (f"GROWS (by the end, net of the bounded tables' fill: "
                 f"{signed_mib(fresh_net)}/h)")
    anon_steady = late_ok or fresh_ok
    lines.append(f"  with known keys: {known} (threshold {signed_mib(ANON_STEADY_PER_HOUR)}/h)")
    pk = unexplained_pk = None
    grows = False
    if fresh is None or addresses <= 0:
        lines.append("  with new keys: not measured (no fresh-phase samples or keys)")
    else:
        gained = max(0.0, fresh) / 3600.0 * fresh_s
        # Growth with requests alone, to set aside: the same-keys phase's late
        # slope, when the process went on growing as fast with new keys; when
        # it slowed down (a fill ending), none: all of it is charged to keys.
        sustained = late is not None and late > 0 and late <= max(0.0, fresh) * 1.25
        baseline = late if sustained and late is not None else 0.0
        net = max(0.0, fresh - baseline) / 3600.0 * fresh_s
        pk = gained / addresses
        unexplained = max(0.0, net - accounted)
        unexplained_pk = unexplained / addresses
        conclusive = anon_steady  # memory was level with known keys, or became so
        grows = conclusive and unexplained_pk > PER_KEY_NOISE_BYTES
        lines.append(
            f"  with new keys: {mib(gained)} gained in the fresh phase ({addresses} new "
            f"addresses, " + ", ".join(f"{v} {k}" for k, v in sorted(fresh_keys.items())
                                        if k != "addresses")
            + f"): at most {pk:.0f} bytes per new address"
            + (f"; {mib(baseline / 3600.0 * fresh_s)} of it set aside as growth with requests"
               if baseline else ""))
        for name, entries, b in explained:
            lines.append(f"    bounded table filled: {name}: {entries} entries, ~{mib(b)}")
        judged = ("GROWS WITH KEYS" if grows else "no growth with keys") if conclusive else (
            "NOT CONCLUSIVE: memory still grew with the same keys through both phases (a "
            "run too short for what fills, or growth with requests): run longer")
        lines.append(
            f"    unexplained by bounded tables: {mib(unexplained)} ({unexplained_pk:.0f} B per "
            f"new address): {judged} (noise threshold {PER_KEY_NOISE_BYTES:.0f} B/key)")
    warm_part = [s for s in samples if s["t"] <= bounds["warmup"][1]] or [samples[0]]
    ok = anon_steady
    for field, slack, name in (("fds", FD_SLACK, "open fds"), ("threads", THREAD_SLACK,
                                                                 "threads")):
        values = [s[field] for s in samples if s.get(field) is not None]
        if not values:
            continue
        warm_max = max(s[field] for s in warm_part if s.get(field) is not None)
        end_value = samples[-1][field]
        held = end_value <= warm_max + slack
        ok = ok and held
        lines.append(f"{name}: warm-up max {warm_max}, end {end_value}, run max {max(values)}: "
                     f"{'steady' if held else 'GROWS'}")
    store = growth(samples, "store_used", total_s)
    writes = _delta(samples, "writes", bounds["warmup"][1])
    per_write = ((store.end_value - store.warm_value) / writes) if writes else None
    lines.append(
        f"store (LMDB high-water, svc_store_used_bytes): {mib(store.warm_value)} -> "
        f"{mib(store.end_value)}: {signed_mib(store.per_hour_overall)}/h at this load"
        + (f", {per_write:.0f} bytes per committed write op" if per_write is not None else "")
        + " (grows with what is stored: clicks, installs, events, deliveries, tokens,"
          " idempotency records; their sweeps run on hours-to-days deadlines)")
    if samples[-1].get("live_bytes") is not None:
        live = growth(samples, "live_bytes", total_s)
        lines.append(f"store live pages (B-trees, excl. free pages): {mib(live.warm_value)} -> "
                     f"{mib(live.end_value)}; free pages at the end: "
                     f"{mib(float(samples[-1]['store_used']) - live.end_value)}")
    return Verdict(tuple(lines), ok, grows, pk, unexplained_pk)


def _delta(samples: Sequence[Mapping[str, Any]], field: str, from_s: float) -> float:
    start = at_or_before(samples, from_s).get(field)
    end = samples[-1].get(field)
    if start is None or end is None:
        return 0.0
    return float(end) - float(start)


def mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:.1f} MiB"


def signed_mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:+.1f} MiB"


TABLE_COLUMNS = (("t", "t s", "{:.0f}"), ("phase", "phase", "{}"),
                 ("rss_anon", "RssAnon MiB", "mib"), ("vm_rss", "VmRSS MiB", "mib"),
                 ("rss_file", "RssFile MiB", "mib"), ("fds", "fds", "{}"),
                 ("threads", "thr", "{}"), ("store_used", "store MiB", "mib"),
                 ("live_bytes", "live MiB", "mib"), ("file_bytes", "file MiB", "mib"),
                 ("req_rate", "req/s", "{:.0f}"), ("ready", "wh ready", "{:.0f}"),
                 ("timer_held", "timer", "{:.0f}"), ("addresses", "addrs", "{}"))


def table(samples: Sequence[Mapping[str, Any]]) -> str:
    """The samples as a fixed-width text table."""
    head = [h for _, h, _ in TABLE_COLUMNS]
    rows = [head]
    for s in samples:
        row = []
        for field, _, fmt in TABLE_COLUMNS:
            v = s.get(field)
            if v is None:
                row.append("-")
            elif fmt == "mib":
                row.append(f"{float(v) / MIB:.1f}")
            else:
                row.append(fmt.format(v))
        rows.append(row)
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True))
                     for r in rows)
