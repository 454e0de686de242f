"""The steps the harness runs after the hot-path targets.

Each step measures something a wrk run against one path cannot, writes its
raw results to ``bench/out/<section>.json`` and returns the README section
rendered from them (``bench/report_sections.py``):

- ``attribution``: ``bench.attribution`` (simulated population, ENGINE and
  HTTP, precision and recall per flow);
- ``overload``: ``bench.overload`` (c256 with the default and a low
  ``SVC_MAX_IN_FLIGHT``);
- ``scale_lite``: ``bench.scale --lite`` (100k links, 500k clicks; the full
  1M/10M scale is ``python -m bench.scale``, ``make bench-scale``: about 15
  minutes here, too long for ``make bench``);
- ``memory``: ``bench.memory`` (per active project, per window entry);
- ``webhooks``: ``bench.webhooks_bench`` in a subprocess (signed deliveries to
  a local receiver, sender alone and end to end).

With ``--quick`` every step runs its quick size. Otherwise a step runs its
quick size only when the run would end past its limit (``limit_s``, counted
from the harness's start) if it and the steps after it ran their full sizes,
and its quick size is the shorter: the paths take longer in the machine's
slow phases, and ``make bench`` must end within 10 minutes. The run's notes
say which steps ran quick and why. A step that fails is reported in the
run's notes; the others still run.
"""

from __future__ import annotations

import datetime
import json
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench import report_sections

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"
# `make bench` ends within 10 minutes (issue 8): the steps after the paths
# shrink to their quick sizes when the paths took long (``runs_quick``),
# leaving room to write the README.
RUN_LIMIT_S = 585
STEPS: tuple[str, ...] = ("attribution", "overload", "scale_lite", "memory", "webhooks")
ESTIMATE_S: Mapping[str, Mapping[str, int]] = {
    # about 1.5 times the run of 2026-11-22 10:09 (15, 41, 37, 15 and 7 s)
    "full": {"attribution": 25, "overload": 60, "scale_lite": 55, "memory": 25,
             "webhooks": 15},
    "quick": {"attribution": 30, "overload": 45, "scale_lite": 35, "memory": 15,
              "webhooks": 10},
}


def estimate_seconds(names: Sequence[str], quick: bool) -> int:
    table = ESTIMATE_S["quick" if quick else "full"]
    return sum(table[n] for n in names)


def _attribution(quick: bool) -> dict[str, Any]:
    from bench import attribution

    flag = ["--quick"] if quick else []
    return attribution.run(quick=quick, command=_cmd("bench.attribution", flag))


def _overload(quick: bool) -> dict[str, Any]:
    from bench import overload

    flag = ["--quick"] if quick else []
    return overload.run(quick=quick, command=_cmd("bench.overload", flag))


def _scale_lite(quick: bool) -> dict[str, Any]:
    from bench import scale

    size = "quick" if quick else "lite"
    return scale.run(size, command=_cmd("bench.scale", [f"--{size}"]))


def _memory(quick: bool) -> dict[str, Any]:
    from bench import memory

    flag = ["--quick"] if quick else []
    return memory.run(quick=quick, command=_cmd("bench.memory", flag))


def _webhooks(quick: bool) -> dict[str, Any]:
    args = ["--seconds", "2", "--events", "1000"] if quick else ["--seconds", "5",
                                                                  "--events", "5000"]
    argv = [sys.executable, "-m", "bench.webhooks_bench", *args]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    done = subprocess.run(argv, capture_output=True, text=True, check=True, cwd=REPO_ROOT,
                          timeout=300)
    data: dict[str, Any] = json.loads(done.stdout)
    data.update(started_at=started, command=_cmd("bench.webhooks_bench", args))
    return data


RUNNERS: Mapping[str, Callable[[bool], dict[str, Any]]] = {
    "attribution": _attribution, "overload": _overload, "scale_lite": _scale_lite,
    "memory": _memory, "webhooks": _webhooks}


def _cmd(module: str, args: Sequence[str]) -> str:
    return " ".join([".venv/bin/python", "-m", module, *args])


def runs_quick(name: str, after: Sequence[str], elapsed_s: float, limit_s: float) -> bool:
    """Whether step ``name`` runs its quick size to end the run by ``limit_s``:
    when it and the steps ``after`` it, all at their full sizes, would end past
    it, and its quick size is estimated shorter than its full one."""
    full, quick = ESTIMATE_S["full"], ESTIMATE_S["quick"]
    if elapsed_s + full[name] + sum(full[n] for n in after) <= limit_s:
        return False
    return quick[name] < full[name]


def run(names: Sequence[str], quick: bool, *, elapsed: Callable[[], float] | None = None,
        limit_s: float | None = None) -> tuple[dict[str, str], list[str]]:
    """Run the named steps; returns (README section texts, notes about failures
    and about steps that ran their quick size to end the run by ``limit_s``;
    ``elapsed()`` is the run's time so far)."""
    sections: dict[str, str] = {}
    notes: list[str] = []
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        step_quick = quick
        if not quick and elapsed is not None and limit_s is not None:
            so_far = elapsed()
            step_quick = runs_quick(name, names[i + 1:], so_far, limit_s)
            if step_quick:
                notes.append(f"step {name} ran its quick size: {so_far:.0f} s had passed, and "
                             f"the full steps left would have ended the run past {limit_s:.0f} s")
        print(f"[bench] step {name} ...", file=sys.stderr, flush=True)
        started = time.monotonic()
        try:
            data = RUNNERS[name](step_quick)
        except Exception as exc:  # a failed step must not lose the others' results
            traceback.print_exc()
            notes.append(f"step {name} failed: {type(exc).__name__}: {str(exc)[:300]}")
            continue
        (OUT_DIR / f"{name}.json").write_text(json.dumps(data, indent=2) + "\n")
        sections[name] = report_sections.render(name, data)
        print(f"[bench] step {name}: done in {time.monotonic() - started:.0f}s",
              file=sys.stderr, flush=True)
    return sections, notes
