"""Attribution throughput, precision and recall: ``python -m bench.attribution [--quick]``.

A seeded simulated population (``bench/population.py``: Android with a Play
referrer, iOS with the landing page's open button, iOS by cohort, iOS by
network hash, handoff claims, conflicting cohorts, organic installs) taps
links and launches. Its ground truth is known per device, so each driver
reports precision and recall per flow (``bench/attribution_score.py``):

- ENGINE (``bench/attribution_engine.py``): the pure decision, in memory, on
  a large population (decisions per second) and on the HTTP run's population
  (the same devices, for comparison);
- HTTP (``bench/attribution_http.py``): the real service over loopback.

Results go to ``bench/out/attribution.json`` and, unless ``--no-readme``, to
the attribution section of ``bench/README.md``. Bounded: the HTTP replay
stops starting new events after ``--cap`` seconds (default 40, quick 12).
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

from bench import attribution_engine, attribution_http, report_sections
from bench.population import DEFAULT_MIX, build

BENCH_DIR = Path(__file__).resolve().parent
OUT = BENCH_DIR / "out" / "attribution.json"
FULL = {"engine_devices": 20_000, "http_devices": 3_000, "cap_s": 40.0}
QUICK = {"engine_devices": 5_000, "http_devices": 1_000, "cap_s": 12.0}


def run(*, quick: bool, seed: int = 20261122, concurrency: int = 32,
        engine_devices: int | None = None, http_devices: int | None = None,
        cap_s: float | None = None, command: str = "") -> dict[str, object]:
    sizes = QUICK if quick else FULL
    n_engine = int(engine_devices or sizes["engine_devices"])
    n_http = int(http_devices or sizes["http_devices"])
    cap = float(cap_s or sizes["cap_s"])
    started = time.monotonic()
    big = build(n_engine, seed=seed)
    engine = attribution_engine.run(big)
    small = build(n_http, seed=seed)
    engine_same = attribution_engine.run(small)
    http = attribution_http.measure(small, concurrency=concurrency, cap_s=cap)
    return {
        "started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": command,
        "profile": "quick" if quick else "full",
        "seed": seed,
        "mix": {f.value: w for f, w in DEFAULT_MIX.items()},
        "links": dict(big.links),
        "engine": engine,
        "engine_same_population": engine_same,
        "http": http,
        "elapsed_s": time.monotonic() - started,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.attribution",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller populations")
    parser.add_argument("--seed", type=int, default=20261122)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--engine-devices", type=int)
    parser.add_argument("--http-devices", type=int)
    parser.add_argument("--cap", type=float, help="seconds after which the HTTP replay stops")
    parser.add_argument("--readme", type=Path, default=BENCH_DIR / "README.md")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    data = run(quick=args.quick, seed=args.seed, concurrency=args.concurrency,
               engine_devices=args.engine_devices, http_devices=args.http_devices,
               cap_s=args.cap, command=shlex.join([".venv/bin/python", "-m", "bench.attribution",
                                                   *given]))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=2) + "\n")
    text = report_sections.render("attribution", data)
    if not args.no_readme:
        report_sections.update_readme(args.readme, {"attribution": text})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
