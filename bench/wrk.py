"""Driving wrk: the Lua script it runs, its command line, and reading its output.

wrk's own text output rounds latencies (``9.40ms``) and prints four
percentiles. The harness therefore always appends a ``done`` hook to the Lua
script that prints one line, ``BENCH_JSON {...}``, holding the exact request
count, duration, error counts and latency percentiles in microseconds.
``parse_wrk_output`` prefers that line and falls back on the text (run with
``--latency``) when it is missing, e.g. for output captured by hand.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from pathlib import Path

import attrs

from storage.flush_probe import nearest_rank

JSON_MARKER = "BENCH_JSON "

DONE_HOOK = r"""
-- appended by bench.harness: exact results as one JSON line
done = function(summary, latency, requests)
  if bench_write_latencies then bench_write_latencies() end
  local e = summary.errors
  io.write(string.format(
    'BENCH_JSON {"requests": %d, "duration_us": %d, "bytes": %d, ' ..
    '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}, ' ..
    '"latency_us": {"min": %d, "max": %d, "mean": %.3f, "stdev": %.3f, ' ..
    '"p50": %d, "p75": %d, "p90": %d, "p99": %d, "p99.9": %d}}\n',
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency.min, latency.max, latency.mean, latency.stdev,
    latency:percentile(50), latency:percentile(75), latency:percentile(90),
    latency:percentile(99), latency:percentile(99.9)))
end
"""

TIMER_HOOK = r"""
-- appended by bench.harness (one connection): each request's own latency on
-- the monotonic clock, from the request handed to wrk to its response read,
-- written to a file when the run is done (wrk's own record adds samples of
-- its coordinated-omission correction; see bench/README.md, session 32)
local bench_ffi = require("ffi")
bench_ffi.cdef[[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *tp);
]]
local bench_ts = bench_ffi.new("bench_timespec")
local function bench_now_us()
  bench_ffi.C.clock_gettime(1, bench_ts)  -- CLOCK_MONOTONIC
  return tonumber(bench_ts.tv_sec) * 1000000 + tonumber(bench_ts.tv_nsec) / 1000
end
bench_latencies, bench_sent_us = {}, 0
local bench_threads = {}
local bench_setup, bench_request, bench_response, bench_fixed = setup, request, response, nil
setup = function(thread)
  bench_threads[#bench_threads + 1] = thread
  if bench_setup then bench_setup(thread) end
end
request = function()
  local req
  if bench_request then
    req = bench_request()
  else
    bench_fixed = bench_fixed or wrk.format()
    req = bench_fixed
  end
  bench_sent_us = bench_now_us()
  return req
end
response = function(status, headers, body)
  bench_latencies[#bench_latencies + 1] = bench_now_us() - bench_sent_us
  if bench_response then return bench_response(status, headers, body) end
end
bench_write_latencies = function()
  local out = assert(io.open(%s, "w"))
  for _, thread in ipairs(bench_threads) do
    for _, us in ipairs(thread:get("bench_latencies")) do
      out:write(string.format("%%.1f\n", us))
    end
  end
  out:close()
end
"""

MAX_BUSY_RATIO = 1.3
"""Above this a wrk record is taken as impossible (see ``WrkResult.plausible``)."""

_TIME_UNITS_US = {"us": 1.0, "ms": 1e3, "s": 1e6, "m": 60e6, "h": 3600e6}
_NUMBER_UNIT = r"([\d.]+)(us|ms|s|m|h)"


@attrs.frozen
class WrkResult:
    """One wrk run: throughput, latency percentiles (ms) and error counts."""

    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p99_ms: float
    percentiles_ms: tuple[tuple[str, float], ...]
    socket_errors: int
    non_2xx_3xx: int
    exact: bool
    """True when read from the JSON done hook, False when from wrk's rounded text."""
    mean_ms: float | None = None
    """Mean latency; None when read from the text (which rounds it)."""
    timed: bool = False
    """True when the percentiles and mean are the requests' own latencies as
    the timer hook measured them (:func:`with_latencies`), not wrk's record."""
    wrk_p99_ms: float | None = None
    """wrk's own p99 when ``timed`` replaced it: its record with the samples its
    coordinated-omission correction adds (see :func:`with_latencies`)."""

    @property
    def errors(self) -> int:
        return self.socket_errors + self.non_2xx_3xx

    def busy_ratio(self, connections: int) -> float | None:
        """The latencies' sum over the time the connections had: at most 1 for a
        true record, since one connection's requests follow one another. wrk's
        own records can run over (up to 1.95 times the run at c1 in session 32) by
        the samples its coordinated-omission correction adds (see
        :func:`with_latencies`). None without the exact mean."""
        if self.mean_ms is None or connections <= 0:
            return None
        return self.requests * self.mean_ms / 1e3 / (connections * self.duration_s)

    def plausible(self, connections: int) -> bool:
        """False when the record cannot be true (see :meth:`busy_ratio`): wrk once
        reported 9,288 latencies summing to 29.4 s in an 8 s run on one
        connection, a p99 of 114 ms while the service timed the same requests
        at 1.1 ms (most likely a few stalls of ~100 ms, each given ~100 synthetic
        siblings by its correction)."""
        ratio = self.busy_ratio(connections)
        return ratio is None or ratio <= MAX_BUSY_RATIO


def read_latencies(path: Path) -> list[float]:
    """The latencies (µs) the timer hook wrote, one a line, sorted."""
    return sorted(float(line) for line in path.read_text().split())


def with_latencies(result: WrkResult, latencies_us: Sequence[float]) -> WrkResult:
    """``result`` with its percentiles and mean taken from the requests' own
    latencies (sorted, µs; nearest rank), wrk's p99 kept as ``wrk_p99_ms``.

    Why not wrk's. After a run wrk "corrects" its record for coordinated
    omission (``stats_correct`` in wrk 4.1's stats.c): it takes the mean time
    between a connection's requests as the interval a client would have sent
    them at, and for every latency of two intervals or more it adds a sample
    at that latency less one interval, less two, and so on. On one
    connection that interval is about the mean latency itself, so every
    request slower than twice the mean gains synthetic siblings, and the
    record's latencies can add up to more than the run (up to 1.95 times it
    in session 32's records; 3.7 times once, session 12). That models a client
    sending at the server's full rate and queueing behind a slow answer, not
    an unloaded one; the requests' own latencies are what the unloaded p99
    means. ``ValueError`` when there are none."""
    if not latencies_us:
        raise ValueError("the timer hook recorded no latencies")
    ms = [us / 1e3 for us in latencies_us]
    percentiles = tuple((f"p{p:g}", nearest_rank(ms, p / 100)) for p in (50, 75, 90, 99, 99.9))
    return attrs.evolve(result, p50_ms=nearest_rank(ms, 0.5), p99_ms=nearest_rank(ms, 0.99),
                        percentiles_ms=percentiles, mean_ms=sum(ms) / len(ms), timed=True,
                        wrk_p99_ms=result.p99_ms)


def parse_wrk_output(text: str) -> WrkResult:
    """Read a wrk run's results from its stdout; ``ValueError`` if there are none."""
    for line in text.splitlines():
        if line.startswith(JSON_MARKER):
            return _from_json(json.loads(line[len(JSON_MARKER) :]))
    return _from_text(text)


def _from_json(data: dict[str, object]) -> WrkResult:
    latency = _mapping(data["latency_us"])
    errors = _mapping(data["errors"])
    requests = _int(data["requests"])
    duration_s = _int(data["duration_us"]) / 1e6
    if duration_s <= 0:
        raise ValueError("wrk reported a zero duration")
    percentiles = tuple(
        (name, _int(latency[name]) / 1e3) for name in ("p50", "p75", "p90", "p99", "p99.9")
    )
    return WrkResult(
        requests=requests,
        duration_s=duration_s,
        rps=requests / duration_s,
        p50_ms=_int(latency["p50"]) / 1e3,
        p99_ms=_int(latency["p99"]) / 1e3,
        percentiles_ms=percentiles,
        socket_errors=sum(_int(errors[k]) for k in ("connect", "read", "write", "timeout")),
        non_2xx_3xx=_int(errors["status"]),
        exact=True,
        mean_ms=_number(latency["mean"]) / 1e3,
    )


def _from_text(text: str) -> WrkResult:
    rps = re.search(r"^Requests/sec:\s+([\d.]+)", text, re.MULTILINE)
    total = re.search(r"^\s*(\d+) requests in " + _NUMBER_UNIT, text, re.MULTILINE)
    if rps is None or total is None:
        raise ValueError("no wrk results found (neither a BENCH_JSON line nor Requests/sec)")
    found = {
        m.group(1): _to_ms(m.group(2), m.group(3))
        for m in re.finditer(r"^\s+(50|75|90|99)%\s+" + _NUMBER_UNIT + r"\s*$", text, re.MULTILINE)
    }
    if "50" not in found or "99" not in found:
        raise ValueError("no latency distribution in wrk output (run wrk with --latency)")
    socket = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text
    )
    status = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    return WrkResult(
        requests=int(total.group(1)),
        duration_s=_to_ms(total.group(2), total.group(3)) / 1e3,
        rps=float(rps.group(1)),
        p50_ms=found["50"],
        p99_ms=found["99"],
        percentiles_ms=tuple((f"p{k}", v) for k, v in found.items()),
        socket_errors=sum(int(g) for g in socket.groups()) if socket else 0,
        non_2xx_3xx=int(status.group(1)) if status else 0,
        exact=False,
    )


def _to_ms(number: str, unit: str) -> float:
    return float(number) * _TIME_UNITS_US[unit] / 1e3


def _mapping(value: object) -> dict[str, object]:
    if not isinstance(value, dict):
        raise ValueError(f"expected a JSON object in BENCH_JSON, got {value!r}")
    return value


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number in BENCH_JSON, got {value!r}")
    return int(value)


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number in BENCH_JSON, got {value!r}")
    return float(value)


def lua_string(text: str) -> str:
    """``text`` as a Lua string literal (bytes outside printable ASCII escaped)."""
    out = []
    for byte in text.encode():
        char = chr(byte)
        if char in '"\\':
            out.append("\\" + char)
        elif 32 <= byte < 127:
            out.append(char)
        else:
            out.append(f"\\{byte:03d}")
    return '"' + "".join(out) + '"'


def render_lua(
    *,
    name: str,
    method: str = "GET",
    headers: Sequence[tuple[str, str]] = (),
    body_file: str | None = None,
    paths: Sequence[str] = ("/",),
    paths_file: str | None = None,
    user_script: str | None = None,
    latencies_file: str | None = None,
) -> str:
    """The whole wrk script for a target: request setup, optional user script, done hook.

    With ``latencies_file`` the timer hook comes before the done hook: each
    request's own latency, written to that file at the end (one connection
    only: wrk's Lua cannot tell its connections apart).

    With one fixed path and no user script, wrk builds the request once (the
    cheapest way for wrk). With several paths, or a ``paths_file``, a
    ``request`` function picks one at random (fixed seed) for each request.
    """
    lines = [f"-- generated by bench.harness for {name}; do not edit", ""]
    lines.append(f"wrk.method = {lua_string(method)}")
    for key, value in headers:
        lines.append(f"wrk.headers[{lua_string(key)}] = {lua_string(value)}")
    if body_file is not None:
        lines += [
            f"local body_handle = assert(io.open({lua_string(body_file)}, 'rb'))",
            "wrk.body = body_handle:read('*a')",
            "body_handle:close()",
        ]
    if paths_file is not None or len(paths) > 1:
        lines.append("local bench_paths = {}")
        if paths_file is not None:
            lines += [
                f"for line in io.lines({lua_string(paths_file)}) do",
                "  if #line > 0 then bench_paths[#bench_paths + 1] = line end",
                "end",
            ]
        for path in paths if paths_file is None else ():
            lines.append(f"bench_paths[#bench_paths + 1] = {lua_string(path)}")
        lines += [
            "assert(#bench_paths > 0, 'no request paths')",
            "math.randomseed(20261122)",
            "request = function()",
            "  return wrk.format(nil, bench_paths[math.random(#bench_paths)])",
            "end",
        ]
    if user_script is not None:
        lines += ["", "-- target's own script", user_script.rstrip("\n")]
    timer = TIMER_HOOK % lua_string(latencies_file) if latencies_file is not None else ""
    return "\n".join(lines) + "\n" + timer + DONE_HOOK


def wrk_argv(
    *,
    url: str,
    script: str,
    connections: int,
    duration_s: int,
    threads: int = 1,
    timeout_s: int = 5,
    cpus: str | None = None,
) -> list[str]:
    """The wrk command line, behind ``taskset -c CPUS`` when ``cpus`` is given."""
    argv = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration_s}s",
        f"--timeout={timeout_s}s",
        "--latency",
        "-s",
        script,
        url,
    ]
    return ["taskset", "-c", cpus, *argv] if cpus is not None else argv


def wrk_version() -> str:
    """wrk's version (``debian/4.1.0-3+b2 [epoll]``), or ``unknown``."""
    try:
        done = subprocess.run(["wrk", "-v"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    first = (done.stdout or done.stderr).strip().splitlines()
    return first[0].split(" Copyright")[0].removeprefix("wrk ") if first else "unknown"
