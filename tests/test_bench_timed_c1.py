"""The unloaded (c1) percentiles are the requests' own latencies, not wrk's record.

wrk corrects its record for coordinated omission after a run (``stats_correct``
in wrk 4.1's stats.c), adding synthetic samples for every slow request; on one
connection that makes its latencies add up to more than the run. The load
script times each request itself (``TIMER_HOOK`` in bench/wrk.py) and the
harness reads those latencies (``with_latencies``). The last tests run the
real wrk against the bare trio + h11 baseline on loopback for a second each.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from bench.harness import REPO_ROOT, _measure, lua_for
from bench.server import RunningServer, free_port, start_server, stop_server, wait_ready
from bench.target import Target
from bench.wrk import (
    DONE_HOOK,
    parse_wrk_output,
    read_latencies,
    render_lua,
    with_latencies,
    wrk_argv,
)
from storage.flush_probe import nearest_rank

C1_JSON = (
    'BENCH_JSON {"requests": 2000, "duration_us": 1000000, "bytes": 1, '
    '"errors": {"connect": 0, "read": 0, "write": 0, "status": 0, "timeout": 0}, '
    '"latency_us": {"min": 300, "max": 40000, "mean": 610.0, "stdev": 1.0, '
    '"p50": 420, "p75": 450, "p90": 500, "p99": 9000, "p99.9": 38000}}\n'
)


def wrk_corrected(latencies_us: Sequence[int], duration_us: int, connections: int = 1,
                  ) -> list[int]:
    """wrk 4.1's record of these latencies after its ``stats_correct``, written
    from its description: the interval is the run over each connection's
    requests, and every latency of two intervals or more adds a sample at
    itself less one interval, less two, ... while that is above one interval."""
    interval = duration_us // (len(latencies_us) // connections)
    samples = list(latencies_us)
    for n in latencies_us:
        if n >= 2 * interval:
            m = n - interval
            while m > interval:
                samples.append(m)
                m -= interval
    return sorted(samples)


def test_the_requests_own_latencies_replace_wrk_percentiles() -> None:
    wrk = parse_wrk_output(C1_JSON)
    latencies = sorted([400.0] * 1970 + [900.0] * 20 + [5000.0] * 9 + [40000.0])
    timed = with_latencies(wrk, latencies)
    assert timed.timed and not wrk.timed
    assert timed.p50_ms == 0.4 and timed.p99_ms == 0.9
    assert dict(timed.percentiles_ms)["p99.9"] == 5.0
    assert timed.mean_ms == pytest.approx(sum(latencies) / len(latencies) / 1e3)
    assert timed.wrk_p99_ms == 9.0  # wrk's own figure is kept beside it
    assert (timed.requests, timed.rps) == (wrk.requests, wrk.rps)
    # wrk's record added up to more than the run; the requests' own do not
    assert wrk.busy_ratio(1) == pytest.approx(1.22)
    ratio = timed.busy_ratio(1)
    assert ratio is not None and ratio < 1


def test_no_latencies_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no latencies"):
        with_latencies(parse_wrk_output(C1_JSON), [])
    (tmp_path / "lat.txt").write_text("3.5\n1.0\n\n2.25\n")
    assert read_latencies(tmp_path / "lat.txt") == [1.0, 2.25, 3.5]


def test_wrk_correction_turns_a_single_stall_into_a_tail() -> None:
    """Why the record is not wrk's: one request of 100 ms among 8,000 of 1 ms
    moves not even the requests' p99.9, but wrk's corrected record gives it
    97 synthetic siblings between 1 and 100 ms, and they make its p99."""
    latencies = sorted([1000] * 7999 + [100_000])
    corrected = wrk_corrected(latencies, duration_us=sum(latencies))
    assert nearest_rank(latencies, 0.999) == 1000
    assert len(corrected) == 8000 + 97
    assert nearest_rank(corrected, 0.99) > 10_000


def test_the_timer_hook_wraps_the_target_script_and_reports_before_done() -> None:
    user = 'request = function() return wrk.format(nil, "/x") end'
    plain = render_lua(name="t", user_script=user)
    timed = render_lua(name="t", user_script=user, latencies_file="/tmp/l.txt")
    assert "bench_latencies" not in plain and plain.endswith(DONE_HOOK)
    assert timed.endswith(DONE_HOOK)
    # the target's own request comes first, so the hook wraps it
    assert timed.index(user) < timed.index("local bench_setup, bench_request, bench_response")
    assert 'io.open("/tmp/l.txt", "w")' in timed
    assert "if bench_write_latencies then bench_write_latencies() end" in DONE_HOOK


# -- the real wrk ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def h11_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    assert shutil.which("wrk"), "wrk is missing: `make test` installs it (bench/setup.sh)"
    port = free_port()
    log = tmp_path_factory.mktemp("h11") / "server.log"
    server = start_server([sys.executable, "-m", "bench.baselines.h11_302", "--port", str(port)],
                          port=port, cwd=REPO_ROOT, env={}, cpus=None, log_path=log)
    try:
        wait_ready(server, "/s1")
        yield server
    finally:
        stop_server(server)


def _target(script: Path | None) -> Target:
    return Target(name="t", description="t", group="baseline", server=(),
                  paths=("/s1",), lua_script=None if script is None else str(script))


# A target's own hooks, which the timer must still call: each leaves a trace.
USER_SCRIPT = """
setup = function(thread) io.open("{dir}/setup-ran", "w"):close() end
request = function() return wrk.format(nil, "/s2") end
seen = 0
response = function(status, headers, body)
  seen = seen + 1
  local out = io.open("{dir}/seen", "w"); out:write(seen); out:close()
end
"""


@pytest.mark.parametrize("own_hooks", [False, True])
def test_real_wrk_times_every_request_once(h11_server: RunningServer, tmp_path: Path,
                                           own_hooks: bool) -> None:
    script_file = None
    if own_hooks:
        script_file = tmp_path / "user.lua"
        script_file.write_text(USER_SCRIPT.replace("{dir}", str(tmp_path)))
    latencies = tmp_path / "latencies.txt"
    script = tmp_path / "wrk-c1.lua"
    script.write_text(lua_for(_target(script_file), {}, latencies_file=latencies))
    argv = wrk_argv(url=h11_server.base_url + "/s1", script=str(script), connections=1,
                    duration_s=1)
    phase = _measure(h11_server, argv, 1, tmp_path / "wrk.txt", 1, latencies=latencies)
    record = phase.load
    assert record.timed and record.errors == 0
    timed = read_latencies(latencies)
    # each completed request timed once (wrk may stop with one in flight)
    assert record.requests - 1 <= len(timed) <= record.requests
    assert record.requests > 100
    if own_hooks:  # the target's hooks ran too, its response once a request
        assert (tmp_path / "setup-ran").exists()
        assert int((tmp_path / "seen").read_text()) == len(timed)
    # one connection: the requests' own latencies fit in the run
    assert sum(timed) <= record.duration_s * 1e6
    assert 0 < record.p50_ms <= record.p99_ms <= timed[-1] / 1e3
    # wrk's own p99 is its record after the correction, near what the
    # correction makes of the requests' own latencies (the timer also counts
    # a Lua call each side)
    assert record.wrk_p99_ms is not None
    corrected = wrk_corrected([round(us) for us in timed], round(record.duration_s * 1e6))
    assert record.wrk_p99_ms == pytest.approx(nearest_rank(corrected, 0.99) / 1e3, rel=0.25)
