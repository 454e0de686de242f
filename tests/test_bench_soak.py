"""The soak harness's own logic: phases, slopes, the growth verdict, key spaces."""

from __future__ import annotations

import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import lmdb
import pytest

from bench import soak_verdict as sv
from bench.soak import count_live_bytes, live_bytes, open_reader, parse_metrics
from bench.soak_load import KeySpace, _address, _currency

MIB = sv.MIB


def run(total_s: float, anon_at: Callable[[float], float], *, step: float = 10.0,
        fds: Callable[[float], int] = lambda t: 40,
        threads: Callable[[float], int] = lambda t: 3) -> list[dict[str, Any]]:
    out = []
    t = 0.0
    while t <= total_s:
        out.append({"t": t, "phase": sv.phase_of(t, total_s), "rss_anon": anon_at(t),
                    "fds": fds(t), "threads": threads(t), "store_used": 10 * MIB + t * 1000,
                    "live_bytes": 9 * MIB + t * 1000, "writes": t * 100})
        t += step
    return out


def test_phases_cut_the_run_at_20_and_55_percent() -> None:
    assert sv.phase_of(0, 600) == "warmup"
    assert sv.phase_of(119.9, 600) == "warmup"
    assert sv.phase_of(120, 600) == "same"
    assert sv.phase_of(329.9, 600) == "same"
    assert sv.phase_of(330, 600) == "fresh"
    assert sv.phase_bounds(600)["fresh"] == (330, 600)


def test_slope_is_theil_sen_and_ignores_one_outlier() -> None:
    assert sv.slope([(0, 1), (1, 3), (2, 5)]) == pytest.approx(2.0)
    assert sv.slope([(0, 0), (1, 0), (2, 0)]) == 0.0
    spiky = [(t, 100.0 + (64.0 if t == 5 else 0.0)) for t in range(10)]
    assert sv.slope(spiky) == 0.0
    assert sv.slope([(5, 1)]) is None
    assert sv.slope([(5, 1), (5, 2)]) is None


def test_a_flat_process_is_steady_and_does_not_grow_with_keys() -> None:
    samples = run(600, lambda t: 100 * MIB + (MIB if int(t) % 20 else 0))  # allocator jitter
    v = sv.verdict(samples, 600, {"fresh": {"addresses": 50_000}})
    assert v.steady
    assert not v.grows_with_keys
    assert v.per_key_bytes is not None and abs(v.per_key_bytes) < sv.PER_KEY_NOISE_BYTES
    assert v.unexplained_per_key is not None and v.unexplained_per_key < 1


def test_growth_per_request_is_not_steady_and_extrapolates_to_an_hour() -> None:
    samples = run(600, lambda t: 100 * MIB + t * 10_000)  # 10 kB/s: 34.3 MiB/h
    g = sv.growth(samples, "rss_anon", 600)
    assert g.per_hour_overall == pytest.approx(36_000_000)
    assert g.per_hour_same_early == pytest.approx(36_000_000)
    assert g.per_hour_same_late == pytest.approx(36_000_000)
    v = sv.verdict(samples, 600, {"fresh": {"addresses": 50_000}})
    assert not v.steady
    assert not v.grows_with_keys  # the same slope with new keys: not the keys
    # growing faster with new keys, but growing anyway: no verdict on keys
    faster = run(600, lambda t: 100 * MIB + t * 10_000 + max(0.0, t - 330) * 20_000)
    v = sv.verdict(faster, 600, {"fresh": {"addresses": 50_000}})
    assert not v.grows_with_keys
    assert any("NOT CONCLUSIVE" in line for line in v.lines)


def test_the_webhook_body_cache_filling_is_not_growth_with_known_keys() -> None:
    """The body cache is bounded but fills with traffic (most of an hour at a
    soak's rate): memory that grows exactly as the service says the cache
    does is steady; growth beside it is still growth."""
    def cache(t: float) -> float:
        return min(16 * MIB, t * 20_000)

    filling = run(600, lambda t: 100 * MIB + cache(t))
    for s in filling:
        s["body_cache"] = cache(s["t"])
    v = sv.verdict(filling, 600, {"fresh": {"addresses": 50_000}})
    assert v.steady and any("net of the webhook body cache" in line for line in v.lines)
    unreported = [{k: x for k, x in s.items() if k != "body_cache"} for s in filling]
    assert not sv.verdict(unreported, 600, {"fresh": {"addresses": 50_000}}).steady
    beside = run(600, lambda t: 100 * MIB + cache(t) + t * 10_000)
    for s in beside:
        s["body_cache"] = cache(s["t"])
    assert not sv.verdict(beside, 600, {"fresh": {"addresses": 50_000}}).steady


def test_the_decoded_record_cache_filling_is_set_aside_beside_the_body_cache() -> None:
    """Both byte-bounded caches that fill with traffic are reported and set
    aside; one that fills while the other is full is no growth either."""
    def body(t: float) -> float:
        return min(16 * MIB, t * 200_000)

    def decoded(t: float) -> float:
        return min(16 * MIB, t * 10_000)

    filling = run(600, lambda t: 100 * MIB + body(t) + decoded(t))
    for s in filling:
        s["body_cache"], s["decode_cache"] = body(s["t"]), decoded(s["t"])
    v = sv.verdict(filling, 600, {"fresh": {"addresses": 50_000}})
    assert v.steady
    assert any("net of the webhook body cache" in line and "decoded-record cache" in line
               for line in v.lines)
    only_body = [{k: x for k, x in s.items() if k != "decode_cache"} for s in filling]
    assert not sv.verdict(only_body, 600, {"fresh": {"addresses": 50_000}}).steady


def test_growth_only_with_new_keys_is_charged_per_key() -> None:
    fresh_from = 0.55 * 600

    def anon(t: float) -> float:  # flat, then 200 bytes per new address at 100 addresses/s
        return 100 * MIB + (max(0.0, t - fresh_from) * 100 * 200)

    samples = run(600, anon)
    new_addresses = int((600 - fresh_from) * 100)
    v = sv.verdict(samples, 600, {"fresh": {"addresses": new_addresses}})
    assert v.steady
    assert v.grows_with_keys
    assert v.per_key_bytes == pytest.approx(200, rel=0.1)
    assert v.unexplained_per_key == pytest.approx(200, rel=0.1)
    # the same growth, all of it explained by bounded tables' fill: no growth with keys
    explained = [("a bounded table", new_addresses, 200.0 * new_addresses)]
    v = sv.verdict(samples, 600, {"fresh": {"addresses": new_addresses}}, explained)
    assert not v.grows_with_keys
    assert v.unexplained_per_key == pytest.approx(0, abs=10)


def test_a_cache_that_fills_then_stops_is_steady_by_the_end() -> None:
    def anon(t: float) -> float:  # 1 MB/s until 300 s (late in the same phase), then flat
        return 100 * MIB + min(t, 300.0) * 1_000_000

    v = sv.verdict(run(600, anon), 600, {"fresh": {"addresses": 30_000}})
    assert v.steady
    assert not v.grows_with_keys
    assert any("then stopped" in line for line in v.lines)


def test_descriptors_or_threads_left_behind_are_growth() -> None:
    samples = run(600, lambda t: 100 * MIB, fds=lambda t: 40 + int(t // 10))
    v = sv.verdict(samples, 600, {"fresh": {"addresses": 1}})
    assert not v.steady
    assert any(line.startswith("open fds") and "GROWS" in line for line in v.lines)


def test_expected_fill_stops_at_each_tables_bound() -> None:
    from bench.soak_calibrate import Table, expected_fill

    t = Table("limiter", "addresses", 100, 200.0)
    ((_, added, b),) = expected_fill([t], {"addresses": 150}, {"addresses": 30})
    assert (added, b) == (70, 14_000.0)
    ((_, added, b),) = expected_fill([t], {}, {})
    assert (added, b) == (0, 0.0)


def test_a_small_bound_holds_the_per_address_tables_and_their_expected_fill() -> None:
    """``--bound``: the traced server's two per-address tables stop at the
    bound (bench/soak_trace.py), and the verdict counts them there."""
    from bench.soak_calibrate import Table, held_to

    tables = [Table("client rate limiter (per address)", "addresses", 100_000, 150.0),
              Table("sign-in throttle (per e-mail + client)", "emails", 50_000, 300.0),
              Table("user-agent verdicts", "user_agents", 4096, 900.0)]
    assert [t.bound for t in held_to(tables, 2000)] == [2000, 2000, 4096]
    assert [t.bound for t in held_to(tables, 10**9)] == [100_000, 50_000, 4096]
    code = ("from bench import soak_trace; soak_trace.hold(3); "
            "from web.auth import RateLimiter; from web.dashboard.throttle import SignInThrottle; "
            "rl = RateLimiter(10); [rl.check(str(i).encode(), 0) for i in range(10)]; "
            "t = SignInThrottle(b'k' * 32); [t.attempt(f'a{i}@x.org', f'10.0.0.{i}', 0) "
            "for i in range(10)]; print(len(rl._buckets), t.statistics())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.split(maxsplit=1) == ["1", "{'emails': 3, 'clients': 3}\n"]


def test_missing_fields_do_not_break_the_verdict_or_the_table() -> None:
    samples = run(60, lambda t: 100 * MIB)
    del samples[3]["store_used"]
    samples[4]["live_bytes"] = None
    v = sv.verdict(samples, 60, {})
    assert v.lines
    assert "-" in sv.table(samples)


def test_parse_metrics_takes_the_sampled_families() -> None:
    text = ("# HELP svc_store_used_bytes x\n# TYPE svc_store_used_bytes gauge\n"
            "svc_store_used_bytes 12345\nsvc_webhook_deliveries_ready 3\n"
            'svc_http_requests_total{family="sdk",status="2xx"} 9\n'
            "svc_timer_deadlines_held 7\nsvc_store_decode_cache_bytes 4096\n")
    assert parse_metrics(text) == {"store_used": 12345.0, "ready": 3.0, "timer_held": 7.0,
                                   "decode_cache": 4096.0}


def test_keyspace_repeats_its_pool_then_draws_fresh_values() -> None:
    keys = KeySpace(random.Random(1), pool_addresses=10, pool_user_agents=5)
    keys.set_phase("same")
    pooled = {keys.address() for _ in range(500)}
    assert pooled <= set(keys.pool_addresses)
    keys.set_phase("fresh")
    fresh = [keys.address() for _ in range(500)]
    assert len(set(fresh)) == 500 and not set(fresh) & pooled
    uas = [keys.user_agent("ios") for _ in range(100)]
    assert len(set(uas)) == 100
    assert keys.distinct("fresh")["addresses"] == 500
    assert keys.distinct("same")["addresses"] <= 10


def test_addresses_and_currencies_are_well_formed_and_distinct() -> None:
    import ipaddress

    addresses = [_address(i, 100) for i in range(100_000)]
    assert len(set(addresses)) == len(addresses)
    for a in addresses[:1000]:
        ipaddress.ip_address(a)
    codes = [_currency(i) for i in range(17576)]
    assert all(len(c) == 3 and c.isupper() and c.isalpha() for c in codes)
    assert len(set(codes)) == 17576


def _write(data: Path, entries: int) -> None:
    """Another process writes ``entries`` entries of 200 bytes (py-lmdb opens an
    environment once a process)."""
    subprocess.run([sys.executable, "-c", (
        "import lmdb, sys\n"
        "env = lmdb.open(sys.argv[1], map_size=1 << 30, max_dbs=8)\n"
        "db = env.open_db(b't')\n"
        "with env.begin(write=True) as txn:\n"
        "    for i in range(int(sys.argv[2])):\n"
        "        txn.put(i.to_bytes(4, 'big'), b'x' * 200, db=db)\n"), str(data), str(entries)],
        check=True, timeout=60)


def test_live_pages_are_read_after_the_server_grew_the_store(tmp_path: Path) -> None:
    """LMDB refuses a read in a view whose map the store has outgrown
    (MapResizedError: one failed sample in session 30's soak, three in a row
    in session 31's). py-lmdb's default map is as large as the file when
    opened; the soak's view maps 1 TiB, so growth between its open and its
    read is no reason to refuse."""
    _write(tmp_path, 1)
    default = lmdb.open(str(tmp_path), readonly=True, lock=True, max_dbs=256, subdir=True)
    try:
        _write(tmp_path, 80_000)  # 16 MB: past the default view's map (10 MiB at least)
        with pytest.raises(lmdb.MapResizedError):
            count_live_bytes(default)
    finally:
        default.close()  # py-lmdb opens a store once a process
    reader = open_reader(tmp_path)
    try:
        small = count_live_bytes(reader)
        _write(tmp_path, 160_000)  # 80,000 more entries (16 MB), under the open view
        grown = count_live_bytes(reader)
    finally:
        reader.close()
    assert grown > small + 80_000 * 200
    assert grown == live_bytes(tmp_path)
