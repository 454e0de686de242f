"""Instructions a request costs, counted by callgrind: an A/B the machine's drift cannot move.

Usage::

    .venv/bin/python -m bench.icount --target events-batch-100 \\
        --side base=HEAD~1 --side new=. [--seconds 20]

Sides are as in bench/ab.py (``LABEL=REV[:NAME=VALUE...]``, ``.`` for this
checkout as it is); the load is this checkout's for every side.

Why a second A/B tool. On this shared machine the speed of everything drifts
by a third within minutes, and bench/ab.py's alternating rounds only average
the drift out: in session 30 the events path's CPU a batch sat near 930 or
near 1,250 µs depending on the minute, the same code either way, so a 10 %
change took a dozen rounds to see. Valgrind counts the instructions the
server executes, which do not depend on the minute: the same code counted
twice agreed within 0.1 %. It found what timing had not: the events path
had grown 11 % since session 11, in two commits (bench/README.md, session
30).

What it does not count: the kernel's work (system calls, the page cache,
flushes; for a durable path the disk is the rest of the time), waiting, and
how fast each instruction runs (a cache miss costs no more than a hit). So
it answers "does this change make the service do less", and bench/ab.py
"is it faster here"; a change to the writer's system calls or to memory
layout needs the latter.

How. Each side's server runs under ``valgrind --tool=callgrind`` with
instrumentation off (several times slower, so the target's preparation and
readiness take longer), on a 4 GiB map (valgrind cannot reserve the default
256 GiB of address space). The target's preparation, its status check and a
warm-up at one connection run against it; then ``callgrind_control -i on``,
a run of wrk at one connection for ``--seconds``, ``-i off``, and the count
divided by the requests wrk completed. Every thread of the server is
counted: the commit thread's LMDB work too. Nothing is written to
bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import attrs

from bench.ab import Side, add_side_arguments, checkouts, sides_and_targets
from bench.harness import BENCH_DIR, OUT_DIR, check_status, ensure_wrk, lua_for, prepared
from bench.server import BenchFailed, free_port, start_server, stop_server, wait_ready
from bench.target import Target
from bench.wrk import parse_wrk_output, wrk_argv
from bench.wrk_mint import LOAD_SECONDS_ENV

MAP_SIZE = str(4 << 30)
LOAD_SECONDS = 2
READY_S = 300.0
STOP_S = 300.0
_TOTALS = re.compile(r"^totals:\s+(\d+)", re.MULTILINE)


@attrs.frozen
class Count:
    side: str
    target: str
    instructions: int
    requests: int
    note: str | None = None  # the target's (how many requests found fresh minted state)

    @property
    def per_request(self) -> float:
        return self.instructions / self.requests

    def line(self) -> str:
        note = f"; {self.note}" if self.note else ""
        return (f"{self.side:<10} {self.target:<26} {self.per_request:12,.0f} instructions a "
                f"request ({self.instructions:,} over {self.requests:,} requests){note}")


def callgrind_total(text: str) -> int:
    """The instruction count of a callgrind output file: its last ``totals:``
    line (the ``summary:`` line at its head is written before any count)."""
    found = _TOTALS.findall(text)
    if not found:
        raise BenchFailed("callgrind wrote no totals (was the server killed before it exited?)")
    return int(found[-1])


def count(target: Target, side: Side, root: Path, seconds: int, warmup: int) -> Count:
    """One side's instructions a request on one target (the module docstring's How)."""
    workdir = OUT_DIR / f"icount-{side.label}-{target.name}"
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    out = workdir / "callgrind.out"
    port = free_port()
    values = {"python": sys.executable, "port": str(port), "workdir": str(workdir)}
    argv = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
            f"--callgrind-out-file={out}", *target.server_argv(values)]
    env = {**dict(target.env), **dict(side.env), "SVC_MAP_SIZE": MAP_SIZE}
    server = start_server(argv, port=port, cwd=root, env=env, cpus=None,
                          log_path=workdir / "server.log")
    try:
        wait_ready(server, target.ready_path, timeout_s=READY_S)
        # Paths that consume minted state get what LOAD_SECONDS of full-speed
        # load would use: under valgrind the warm-up and the count use less.
        os.environ[LOAD_SECONDS_ENV] = str(LOAD_SECONDS)
        target = prepared(target, server.base_url, workdir)
        check_status(target, server, values)
        script = workdir / "wrk.lua"
        script.write_text(lua_for(target, values))

        def run(duration: int, label: str) -> int:
            argv = wrk_argv(url=server.base_url + target.paths[0], script=str(script),
                            connections=1, duration_s=duration, threads=1, cpus=None)
            done = subprocess.run(argv, capture_output=True, text=True, timeout=duration + 120)
            (workdir / f"wrk-{label}.txt").write_text(done.stdout + done.stderr)
            result = parse_wrk_output(done.stdout)
            if result.errors:
                raise BenchFailed(f"{target.name}: {result.errors} failed requests under valgrind")
            return result.requests

        run(warmup, "warmup")
        _instrument(server.pid, "on")
        requests = run(seconds, "counted")
        _instrument(server.pid, "off")
        note = target.note(workdir) if target.note is not None else None
    finally:
        stop_server(server, grace_s=STOP_S)
    if requests < 1:
        raise BenchFailed(f"{target.name}: no request completed in {seconds} s under valgrind")
    return Count(side.label, target.name, callgrind_total(out.read_text(errors="replace")),
                 requests, note)


def ensure_valgrind() -> None:
    """Install valgrind with bench/setup.sh when it is missing (needs root)."""
    if shutil.which("valgrind") and shutil.which("callgrind_control"):
        return
    print("valgrind not found; running bench/setup.sh valgrind", file=sys.stderr)
    subprocess.run(["sh", str(BENCH_DIR / "setup.sh"), "valgrind"], check=False)
    if not (shutil.which("valgrind") and shutil.which("callgrind_control")):
        raise BenchFailed("valgrind is missing and bench/setup.sh could not install it")


def _instrument(pid: int, state: str) -> None:
    done = subprocess.run(["callgrind_control", "-i", state, str(pid)], capture_output=True,
                          text=True, timeout=120)
    if done.returncode != 0 or "OK" not in done.stdout:
        raise BenchFailed(f"callgrind_control -i {state} {pid}: {done.stdout}{done.stderr}")


def summarize(counts: Sequence[Count], first: str) -> str:
    """Per target, each side's instructions a request and its ratio to the first side's."""
    lines = []
    for target in dict.fromkeys(c.target for c in counts):
        own = [c for c in counts if c.target == target]
        base = next((c.per_request for c in own if c.side == first), None)
        lines.append(f"{target}:")
        for c in own:
            ratio = f" ({c.per_request / base:.3f} of {first}'s)" if base and c.side != first \
                else ""
            lines.append(f"  {c.side:<10} {c.per_request:12,.0f} instructions a request{ratio}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.icount",
        description="Instructions a request, under callgrind, at revisions or settings")
    add_side_arguments(parser)
    parser.add_argument("--seconds", type=int, default=20, help="counted wrk run, at c1")
    parser.add_argument("--warmup", type=int, default=3, help="wrk run before counting")
    args = parser.parse_args(argv)
    sides, targets = sides_and_targets(parser, args, least=1)
    if args.seconds < 1 or args.warmup < 0:
        parser.error("--seconds must be at least 1 and --warmup at least 0")
    ensure_wrk()
    ensure_valgrind()
    counts = []
    with checkouts(sides) as roots:
        for side in sides:
            for target in targets:
                found = count(target, side, roots[side.label], args.seconds, args.warmup)
                counts.append(found)
                print(found.line(), flush=True)
    print(summarize(counts, sides[0].label))
    return 0


if __name__ == "__main__":
    sys.exit(main())
