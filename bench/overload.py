"""Redirects at 256 connections, with and without load shedding:
``python -m bench.overload [--quick]``.

The service refuses new requests with an immediate 503 and ``Retry-After``
while the event loop's smoothed delay is over ``SVC_MAX_LAG_MS`` (default
50 ms; web/server.py), instead of letting them join a long queue. This step
runs the ``redirect-desktop`` path (desktop user agent, 1000 links, click
recorded) through the harness machinery at 256 connections: with the
default, with a tighter 25 ms, and with shedding off. It reports throughput,
the 302s per second (goodput), p50/p99/p99.9 over all answers (wrk does not
split them by status; its record, with the samples of its coordinated-omission
correction: see ``with_latencies`` in bench/wrk.py), and the number of 503s.
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs

from bench import report_sections
from bench.harness import OUT_DIR, Profile, ensure_wrk, measure_target, plan_pinning
from bench.service_targets import REDIRECT_TARGETS
from bench.target import Target

BENCH_DIR = Path(__file__).resolve().parent
OUT = OUT_DIR / "overload.json"
LIMITS = (("default", 50), ("tight", 25), ("off", 0))
FULL = Profile("c256", warmup_s=2, loaded_s=8, unloaded_s=1, paired_s=0, connections=256)
QUICK = Profile("c256-quick", warmup_s=1, loaded_s=4, unloaded_s=1, paired_s=0,
                connections=256)


def variants() -> list[tuple[str, int, Target]]:
    base = next(t for t in REDIRECT_TARGETS if t.name == "redirect-desktop")
    out = []
    for label, limit in LIMITS:
        env = (*base.env, ("SVC_MAX_LAG_MS", str(limit)))
        out.append((label, limit, attrs.evolve(base, name=f"overload-c256-lag{limit}",
                                               env=env)))
    return out


def run(*, quick: bool, command: str = "") -> dict[str, object]:
    ensure_wrk()
    profile = QUICK if quick else FULL
    pinning = plan_pinning()
    started = time.monotonic()
    rows = []
    for label, limit, target in variants():
        result = measure_target(target, profile, pinning)
        load = result.loaded.load
        refused = load.non_2xx_3xx
        rows.append({
            "variant": label,
            "max_lag_ms": limit,
            "connections": profile.connections,
            "requests": load.requests,
            "duration_s": load.duration_s,
            "rps": load.rps,
            "goodput_rps": (load.requests - refused) / load.duration_s,
            "p50_ms": load.p50_ms,
            "p99_ms": load.p99_ms,
            "percentiles_ms": dict(load.percentiles_ms),
            "status_503": refused,
            "socket_errors": load.socket_errors,
            "cpu_us_per_request": result.loaded.cpu_us_per_request,
            "other_load": result.loaded.other_load,
            "wrk": shlex.join(result.loaded.wrk_argv),
            "stopped_cleanly": result.stopped_cleanly,
        })
    return {
        "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "profile": profile.describe(),
        "pinning": pinning.note,
        "path": "redirect-desktop",
        "rows": rows,
        "elapsed_s": time.monotonic() - started,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.overload",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--readme", type=Path, default=BENCH_DIR / "README.md")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    data = run(quick=args.quick,
               command=shlex.join([".venv/bin/python", "-m", "bench.overload", *given]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=2) + "\n")
    text = report_sections.render("overload", data)
    if not args.no_readme:
        report_sections.update_readme(args.readme, {"overload": text})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
