"""The benchmark harness's pure parts: wrk output parsing, ratios, README carry-over.

No network and no subprocess: canned wrk output (captured from a real run of
``bench.harness`` against the trio-h11-302 baseline, then edited for the
error and unit cases).
"""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path

import attrs
import pytest

# bench/ is not an installed package; make the repository root importable.
from bench import extras
from bench.harness import FULL, estimate_seconds
from bench.report import DEFAULT_KEPT, KEEP_END, KEEP_START, kept_section, versions
from bench.results import (
    H11_302,
    HYPERCORN_302,
    FlushProbe,
    PhaseResult,
    RunRecord,
    TargetResult,
    compute_ratios,
)
from bench.server import ProcStat
from bench.targets import all_targets
from bench.wrk import lua_string, parse_wrk_output, render_lua, with_latencies

WRK_TEXT = """\
Running 3s test @ http://127.0.0.1:52567/s1
  1 threads and 32 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.00ms  603.53us   6.45ms   72.56%
    Req/Sec    16.09k     1.79k   18.18k    76.67%
  Latency Distribution
     50%    1.93ms
     75%    2.21ms
     90%    2.80ms
     99%    3.96ms
  47992 requests in 3.00s, 4.39MB read
Requests/sec:  15991.61
Transfer/sec:      1.46MB
"""
WRK_JSON = (
    'BENCH_JSON {"requests": 47992, "duration_us": 3001073, "bytes": 4607232, '
    '"errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}, '
    '"latency_us": {"min": 99, "max": 6454, "mean": 2000.794, "stdev": 603.525, '
    '"p50": 1927, "p75": 2212, "p90": 2796, "p99": 3960, "p99.9": 4906}}\n'
)
WRK_TEXT_ERRORS = """\
Running 1m test @ http://127.0.0.1:8000/
  1 threads and 1 connections
  Latency Distribution
     50%  292.00us
     75%  350.00us
     90%  401.00us
     99%    1.20s
  186000 requests in 1.00m, 17.00MB read
  Socket errors: connect 0, read 2, write 1, timeout 4
  Non-2xx or 3xx responses: 12
Requests/sec:   3100.00
"""


def test_json_line_gives_exact_results() -> None:
    result = parse_wrk_output(WRK_TEXT + WRK_JSON)
    assert result.exact
    assert result.requests == 47992
    assert result.duration_s == pytest.approx(3.001073)
    assert result.rps == pytest.approx(47992 / 3.001073)
    assert result.p50_ms == pytest.approx(1.927)
    assert result.p99_ms == pytest.approx(3.96)
    assert dict(result.percentiles_ms)["p99.9"] == pytest.approx(4.906)
    assert result.errors == 0


def test_text_output_is_the_fallback() -> None:
    result = parse_wrk_output(WRK_TEXT)
    assert not result.exact
    assert result.rps == pytest.approx(15991.61)
    assert result.requests == 47992
    assert result.duration_s == pytest.approx(3.0)
    assert result.p50_ms == pytest.approx(1.93)
    assert result.p99_ms == pytest.approx(3.96)


def test_text_units_and_error_counts() -> None:
    result = parse_wrk_output(WRK_TEXT_ERRORS)
    assert result.p50_ms == pytest.approx(0.292)
    assert result.p99_ms == pytest.approx(1200.0)
    assert result.duration_s == pytest.approx(60.0)
    assert (result.socket_errors, result.non_2xx_3xx, result.errors) == (7, 12, 19)


@pytest.mark.parametrize(
    "text",
    ["", "wrk: connection refused\n", WRK_TEXT.replace("     99%    3.96ms\n", "")],
)
def test_output_without_results_is_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_wrk_output(text)


def test_ratios_are_against_both_baselines_of_the_same_run() -> None:
    hypercorn = parse_wrk_output(WRK_TEXT_ERRORS).rps  # 3100.00
    h11 = parse_wrk_output(WRK_TEXT).rps  # 15991.61
    ratios = compute_ratios({HYPERCORN_302: hypercorn, H11_302: h11, "redirect": 1550.0})
    assert ratios["redirect"][HYPERCORN_302] == pytest.approx(0.5)
    assert ratios["redirect"][H11_302] == pytest.approx(1550.0 / 15991.61)
    assert ratios[HYPERCORN_302][HYPERCORN_302] == pytest.approx(1.0)
    assert ratios[H11_302][HYPERCORN_302] == pytest.approx(15991.61 / 3100.0)


def test_ratio_is_none_without_that_baseline() -> None:
    ratios = compute_ratios({H11_302: 10_000.0, "resolve": 2_500.0})
    assert ratios["resolve"] == {HYPERCORN_302: None, H11_302: pytest.approx(0.25)}


def test_proc_stat_survives_odd_command_names() -> None:
    text = "4242 (py (x) 1) S 17 4242 4242 0 -1 4194560 9 0 0 0 311 42 5 6 20 0 3 0 1 2 3"
    assert ProcStat.from_text(text) == ProcStat(ppid=17, utime=311, stime=42, cutime=5, cstime=6)


def test_hand_written_section_is_carried_over() -> None:
    existing = f"# old\n| table |\n{KEEP_START}\n- actor batching: 0.58 -> 1.02\n{KEEP_END}\n"
    assert kept_section(existing) == "- actor batching: 0.58 -> 1.02"
    assert kept_section(None) == DEFAULT_KEPT
    assert kept_section("# a README without markers\n") == DEFAULT_KEPT


def test_lua_strings_and_random_paths() -> None:
    assert lua_string('a"b\\c\n') == '"a\\"b\\\\c\\010"'
    script = render_lua(name="t", paths=("/a", "/b"))
    assert 'bench_paths[#bench_paths + 1] = "/b"' in script
    assert "request = function()" in script
    assert "BENCH_JSON" in script
    assert "request = function()" not in render_lua(name="t", paths=("/a",))


def test_full_run_measures_unloaded_longer_than_loaded() -> None:
    # bench/report.py's method text says so: c1's p99 must not be one short slow phase
    assert FULL.unloaded_s > FULL.loaded_s


def test_full_run_of_registered_targets_and_steps_fits_the_time_budget() -> None:
    steps = extras.estimate_seconds(extras.STEPS, quick=False)
    assert estimate_seconds(all_targets(), FULL) + steps <= 570


def test_steps_shrink_to_their_quick_sizes_only_when_the_run_would_end_late() -> None:
    from bench.extras import RUN_LIMIT_S

    full = extras.ESTIMATE_S["full"]
    rest = ("scale_lite", "memory", "webhooks")
    on_time = RUN_LIMIT_S - full["overload"] - sum(full[n] for n in rest)
    assert not extras.runs_quick("overload", rest, on_time, RUN_LIMIT_S)
    assert extras.runs_quick("overload", rest, on_time + 1, RUN_LIMIT_S)
    # the last step alone decides for itself
    assert extras.runs_quick("webhooks", (), RUN_LIMIT_S - full["webhooks"] + 1, RUN_LIMIT_S)
    # a step whose quick size is no shorter keeps its full size, however late
    slow_quick = [n for n in extras.STEPS
                  if extras.ESTIMATE_S["quick"][n] >= full[n]]
    for name in slow_quick:
        assert not extras.runs_quick(name, (), RUN_LIMIT_S * 2, RUN_LIMIT_S)


def test_the_steps_runner_passes_each_step_its_size_and_says_why(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    asked: list[tuple[str, bool]] = []

    def runner(name: str) -> object:
        def run(quick: bool) -> dict[str, object]:
            asked.append((name, quick))
            clock[0] += 40.0  # each step takes 40 s
            return {}
        return run

    clock = [400.0]
    monkeypatch.setattr(extras, "OUT_DIR", tmp_path)
    monkeypatch.setattr(extras, "RUNNERS", {n: runner(n) for n in extras.STEPS})
    monkeypatch.setattr(extras.report_sections, "render", lambda name, data: name)
    sections, notes = extras.run(("overload", "scale_lite", "memory"), False,
                                 elapsed=lambda: clock[0], limit_s=500)
    # 400 + 60 + 55 + 25 > 500: overload quick; then 440 + 55 + 25 > 500: scale_lite
    # quick; then 480 + 25 > 500: memory quick too
    assert asked == [("overload", True), ("scale_lite", True), ("memory", True)]
    assert set(sections) == {"overload", "scale_lite", "memory"}
    assert notes[0] == ("step overload ran its quick size: 400 s had passed, and the "
                        "full steps left would have ended the run past 500 s")
    asked.clear()
    clock[0] = 100.0
    _, notes = extras.run(("overload", "memory"), False, elapsed=lambda: clock[0], limit_s=500)
    assert asked == [("overload", False), ("memory", False)] and notes == []
    asked.clear()
    extras.run(("overload",), True)  # --quick: every step quick, no limit needed
    assert asked == [("overload", True)]


def test_post_targets_check_the_path_their_script_loads() -> None:
    for target in all_targets():
        if target.method == "POST":
            assert target.paths[0].startswith("/v1/"), target.name


def test_a_baseline_measured_again_counts_as_the_mean_of_both() -> None:
    from bench.results import AGAIN

    ratios = compute_ratios({HYPERCORN_302: 3000.0, HYPERCORN_302 + AGAIN: 2000.0,
                             H11_302: 10_000.0, "init": 2250.0})
    assert ratios["init"][HYPERCORN_302] == pytest.approx(0.9)
    assert ratios[HYPERCORN_302 + AGAIN][HYPERCORN_302] == pytest.approx(0.8)
    assert ratios["init"][H11_302] == pytest.approx(0.225)  # measured once: itself


def _result(name: str, rps: float, paired: tuple[float, float] | None) -> TargetResult:
    load = parse_wrk_output(WRK_TEXT)
    phase = PhaseResult(connections=32, load=attrs.evolve(load, rps=rps), server_cpu_s=1.0,
                        wrk_argv=("wrk",))
    return TargetResult(name=name, group="service", description="", server_argv=(),
                        loaded=phase, unloaded=phase, exit_status=0, stopped_cleanly=True,
                        paired=paired)


def test_the_paired_ratio_is_to_the_mean_of_the_runs_next_to_the_path() -> None:
    assert _result("init", 2250.0, (2000.0, 3000.0)).paired_ratio == pytest.approx(0.9)
    assert _result("init", 2250.0, None).paired_ratio is None
    assert _result("init", 2250.0, (0.0, 3000.0)).paired_ratio is None  # a failed run


def test_the_table_shows_the_paired_ratio_of_paths_only() -> None:
    from bench.report import render_table

    results = (_result(HYPERCORN_302, 2500.0, None), _result("init", 2250.0, (2000.0, 3000.0)))
    record = RunRecord(started_at="", command="", profile="full", durations="", pinning="",
                       machine=(), versions=(), results=results,
                       ratios=compute_ratios({r.name: r.loaded.load.rps for r in results}),
                       elapsed_s=1.0)
    head, _, base, path = render_table(record).splitlines()
    assert head.endswith(f"| paired ratio vs {HYPERCORN_302} |")
    assert base.endswith("| n/a |  |") and path.endswith("| 0.90 | n/a | 0.90 |")


def test_goals_are_judged_on_the_paired_ratio_and_the_unloaded_p99() -> None:
    from bench.report import render_goals

    results = (_result(HYPERCORN_302, 2500.0, None),
               _result("redirect-desktop", 2400.0, (2500.0, 2500.0)),  # 0.96: met
               attrs.evolve(_result("init-ios-network", 2000.0, (2500.0, 2500.0)),  # 0.80
                            flush=FlushProbe(count=200, p50_us=1234.4, p99_us=2501.0,
                                             batch_pages=32, scattered_p50_us=640.2,
                                             adjacent_p50_us=180.9)),
               _result("events-batch-100", 1100.0, (1500.0, 2500.0)))
    record = RunRecord(started_at="", command="", profile="full", durations="", pinning="",
                       machine=(), versions=(), results=results, ratios={}, elapsed_s=1.0)
    text = "\n".join(render_goals(record))
    # WRK_TEXT's p99 is 3.96 ms: the p99 goals are not met
    assert "| redirect-desktop | paired ratio >= 0.9 | 0.96 | yes | 2,500 |  |  |" in text
    # each goal beside the paired baseline's mean rate and the disk's flush
    # times measured before its path (when probed): one page, then 32 pages
    # scattered and adjacent
    assert "| 32 pages a flush, scattered / adjacent, p50 |" in text
    assert ("| init-ios-network | paired ratio >= 0.85 | 0.80 | **no** | 2,500 "
            "| 1,234 / 2,501 µs | 640 / 181 µs |" in text)
    assert ("| init-ios-network | p99 c1 < 2 ms | 3.96 ms | **no** | 2,500 | 1,234 / 2,501 µs "
            "| 640 / 181 µs |" in text)
    assert "| redirect-desktop | p99 c1 < 2 ms | 3.96 ms | **no** | 2,500 |  |  |" in text
    assert "| events-batch-100 | events/s >= 100,000 | 110,000 | yes | 2,000 |  |  |" in text
    assert text.startswith("### Goals, this run: 2 of 5 met")
    # a record made before the batch probe existed shows its one-page figure only
    old = attrs.evolve(results[2], flush=FlushProbe(count=200, p50_us=1234.4, p99_us=2501.0))
    assert "| 1,234 / 2,501 µs |  |" in "\n".join(
        render_goals(attrs.evolve(record, results=(old,))))


def test_the_service_side_p99_comes_from_its_access_lines() -> None:
    from bench.harness import access_p99_ms

    lines = [f"2026-11-22 16:24:21,6{i:02d} INFO svc.access POST /v1/sdk/init 200 "
             f"{0.5 + i / 100:.1f}ms" for i in range(100)]
    noise = ["2026-11-22 16:24:21,700 INFO svc stopped; data is closed",
             "svc: listening on http://127.0.0.1:1"]
    # nearest rank: the 99th of 100 sorted times (0.5 + 98/100 -> "1.5")
    assert access_p99_ms("\n".join(noise[:1] + lines + noise[1:])) == pytest.approx(1.5)
    assert access_p99_ms("\n".join(lines[:1])) == pytest.approx(0.5)
    assert access_p99_ms("\n".join(noise)) is None


def _table_of(base: TargetResult, path: TargetResult) -> list[str]:
    """The rendered table of a baseline and a path, line by line."""
    from bench.report import render_table

    record = RunRecord(started_at="", command="", profile="full", durations="", pinning="",
                       machine=(), versions=(), results=(base, path),
                       ratios=compute_ratios({path.name: path.loaded.load.rps,
                                              base.name: base.loaded.load.rps}),
                       elapsed_s=1.0)
    return render_table(record).splitlines()


def test_the_table_shows_the_service_side_p99_where_there_is_one() -> None:
    base, path = _result(HYPERCORN_302, 2500.0, None), _result("init", 2250.0, (2000.0, 3000.0))
    timed = with_latencies(path.unloaded.load, [900.0] * 99 + [1200.0])
    path = attrs.evolve(path, unloaded=attrs.evolve(path.unloaded, server_p99_ms=1.3,
                                                    load=timed))
    head, _, base_row, path_row = _table_of(base, path)
    assert "| p99 c1 | p99 c1 in server | p99 c1 as wrk records it | CPU µs/req |" in head
    assert "| 3.96 ms |  |  | " in base_row  # no access log; wrk's own record
    # the requests' own p99, the service's, and wrk's corrected record
    assert "| 0.900 ms | 1.30 ms | 3.96 ms | " in path_row


def _c1_json(requests: int, mean_us: float, p99_us: int, duration_us: int = 8_000_000) -> str:
    return (
        f'BENCH_JSON {{"requests": {requests}, "duration_us": {duration_us}, "bytes": 1, '
        '"errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}, '
        f'"latency_us": {{"min": 90, "max": 200000, "mean": {mean_us}, "stdev": 1.0, '
        f'"p50": 800, "p75": 900, "p90": 1000, "p99": {p99_us}, "p99.9": 150000}}}}\n'
    )


# The record of session 12's 23:45 run (redirect-android-token, c1, 8 s):
# 9,288 latencies of mean 3.16 ms add up to 29.4 s on one connection.
IMPOSSIBLE_C1 = _c1_json(9288, 3164.0, 114_000)
TRUE_C1 = _c1_json(9288, 850.0, 1100)


def test_a_record_whose_latencies_outlast_the_run_is_impossible() -> None:
    impossible, true = parse_wrk_output(IMPOSSIBLE_C1), parse_wrk_output(TRUE_C1)
    assert impossible.busy_ratio(1) == pytest.approx(9288 * 3.164e-3 / 8.0, rel=1e-3)
    assert not impossible.plausible(1)
    assert true.plausible(1) and true.busy_ratio(1) == pytest.approx(0.987, abs=1e-3)
    # 32 connections have 32 times the time: WRK_JSON's loaded run fills ~1.0 of it
    loaded = parse_wrk_output(WRK_JSON)
    assert loaded.plausible(32) and loaded.busy_ratio(32) == pytest.approx(1.0, abs=0.01)
    assert not loaded.plausible(1)
    # wrk's text rounds the mean: nothing to judge, so nothing is rejected
    assert parse_wrk_output(WRK_TEXT).busy_ratio(1) is None
    assert parse_wrk_output(WRK_TEXT).plausible(1)


def _phase(text: str) -> PhaseResult:
    return PhaseResult(connections=1, load=parse_wrk_output(text), server_cpu_s=1.0,
                       wrk_argv=("wrk",))


def test_an_impossible_unloaded_record_is_measured_again_and_noted(tmp_path: Path) -> None:
    from bench.harness import measure_unloaded

    records = iter([IMPOSSIBLE_C1, TRUE_C1])

    def measure() -> PhaseResult:
        text = next(records)
        (tmp_path / "wrk-unloaded.txt").write_text(text)
        return _phase(text)

    phase, note = measure_unloaded(measure, tmp_path)
    assert phase.load.p99_ms == pytest.approx(1.1)
    assert (tmp_path / "wrk-unloaded.txt").read_text() == TRUE_C1
    assert (tmp_path / "wrk-unloaded-discarded.txt").read_text() == IMPOSSIBLE_C1
    assert note is not None
    assert "9,288 latencies adding up to 3.67 times the 8.0 s run" in note
    assert "p99 114 ms" in note and "(p99 1.1 ms, in the table)" in note
    assert "impossible too" not in note


def test_a_true_unloaded_record_is_measured_once(tmp_path: Path) -> None:
    from bench.harness import measure_unloaded

    calls = []

    def measure() -> PhaseResult:
        calls.append(1)
        return _phase(TRUE_C1)

    _, note = measure_unloaded(measure, tmp_path)
    assert (len(calls), note) == (1, None)


def test_a_second_impossible_record_is_kept_and_said(tmp_path: Path) -> None:
    from bench.harness import measure_unloaded

    def measure() -> PhaseResult:
        (tmp_path / "wrk-unloaded.txt").write_text(IMPOSSIBLE_C1)
        return _phase(IMPOSSIBLE_C1)

    _, note = measure_unloaded(measure, tmp_path)
    assert note is not None and "impossible too (3.67 times its run)" in note


def test_pages_a_request_come_from_the_bytes_written_and_show_in_the_table() -> None:
    base, path = _result(HYPERCORN_302, 2500.0, None), _result("init", 2250.0, (2000.0, 3000.0))
    requests = path.loaded.load.requests
    assert path.loaded.pages_per_request is None  # not measured: no cell, no guess
    loaded = attrs.evolve(path.loaded, store_bytes=6 * 4096 * requests + 2048 * requests)
    assert loaded.pages_per_request == pytest.approx(6.5)
    # at c1 a request is a commit of its own: what one commit writes
    unloaded = attrs.evolve(path.unloaded,
                            store_bytes=29 * 4096 * path.unloaded.load.requests)
    path = attrs.evolve(path, loaded=loaded, unloaded=unloaded)
    base = attrs.evolve(base, loaded=attrs.evolve(base.loaded, store_bytes=0))
    head, _, base_row, path_row = _table_of(base, path)
    cpu = f"{1e6 / requests:,.0f}"  # one CPU second over the canned run's requests
    assert "| CPU µs/req | pages/req c32 | pages/req c1 | ratio vs" in head
    assert f"| {cpu} | 0.0 |  | " in base_row and f"| {cpu} | 6.5 | 29.0 | " in path_row


def test_the_versions_line_names_the_interpreter_it_ran_on() -> None:
    """Its build (with or without PGO and LTO) moves every figure by 10-20 %,
    so a run names the interpreter's file, not only its version."""
    name, value = versions()[0]
    assert name == "python"
    assert value == f"{platform.python_version()} ({os.path.realpath(sys.executable)})"
    assert os.path.isfile(value[value.index("(") + 1:-1])
