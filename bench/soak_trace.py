"""``svc`` under tracemalloc, for the soak's ``--tracemalloc`` diagnosis:
``python -m bench.soak_trace serve ...`` (the arguments of ``svc``).

Starts tracing (``SOAK_TRACE_FRAMES`` frames a trace, default 6) before the
service is imported, and on each SIGUSR1 writes the live allocations grouped
by traceback (``tracemalloc.Snapshot.statistics("traceback")``, the largest
``SOAK_TRACE_TOP`` groups, default 400) as JSON to
``$SOAK_TRACE_DIR/trace-NNN.json``. Two of them, one taken after warm-up and
one at the end, say which code holds what the process gained between them
(``diff``, which bench/soak.py prints). Tracing slows the service several
times over and taking a snapshot stalls it for a moment: numbers of a traced
run are for the diagnosis only, not the verdict. ``SOAK_TRACE_BOUND=N``
holds the client rate limiter (web/auth.py ``MAX_BUCKETS``) and the sign-in
throttle (web/dashboard/throttle.py ``MAX_ENTRIES``) to N entries each.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType
from typing import Any


def dump(path: Path, top: int) -> None:
    snapshot = tracemalloc.take_snapshot().filter_traces(
        (tracemalloc.Filter(False, tracemalloc.__file__),))
    stats = snapshot.statistics("traceback")
    total = sum(s.size for s in stats)
    groups = [{"size": s.size, "count": s.count,
               "frames": [f"{f.filename}:{f.lineno}" for f in s.traceback]}
              for s in stats[:top]]
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"total": total, "blocks": sum(s.count for s in stats),
                               "groups": groups}))
    os.replace(tmp, path)


def diff(before: dict[str, Any], after: dict[str, Any], top: int = 15) -> list[str]:
    """The groups that grew most between two dumps, one line each (the
    innermost frames of the service's code)."""
    old = {tuple(g["frames"]): g for g in before["groups"]}
    grown = []
    for g in after["groups"]:
        was = old.get(tuple(g["frames"]), {"size": 0, "count": 0})
        grown.append((g["size"] - was["size"], g["count"] - was["count"], g["frames"]))
    grown.sort(key=lambda x: -x[0])
    lines = [f"traced total {before['total'] / 2**20:.1f} -> {after['total'] / 2**20:.1f} MiB "
             f"({before['blocks']} -> {after['blocks']} blocks)"]
    for size, count, frames in grown[:top]:
        ours = [f for f in frames if "/site-packages/" not in f and "<frozen" not in f]
        where = " <- ".join(reversed((ours or frames)[-3:]))
        lines.append(f"{size / 2**20:+8.2f} MiB {count:+9d} blocks  {where}")
    return lines


def hold(bound: int) -> None:
    """Hold the per-address tables to ``bound`` entries (both read their
    module's bound at each insertion)."""
    from web import auth
    from web.dashboard import throttle

    auth.MAX_BUCKETS = min(auth.MAX_BUCKETS, bound)
    throttle.MAX_ENTRIES = min(throttle.MAX_ENTRIES, bound)


def main() -> None:
    out = Path(os.environ.get("SOAK_TRACE_DIR", "."))
    top = int(os.environ.get("SOAK_TRACE_TOP", "400"))
    tracemalloc.start(int(os.environ.get("SOAK_TRACE_FRAMES", "6")))
    taken = 0

    def on_signal(signum: int, frame: FrameType | None) -> None:
        nonlocal taken
        taken += 1
        dump(out / f"trace-{taken:03d}.json", top)

    signal.signal(signal.SIGUSR1, on_signal)
    bound = os.environ.get("SOAK_TRACE_BOUND")
    if bound:
        hold(int(bound))
    from web.cli import main as svc_main

    svc_main(sys.argv[1:])


if __name__ == "__main__":
    main()
