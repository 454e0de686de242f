"""The benchmark harness: ``python -m bench.harness [--quick] [--only NAME ...]``.

For each target (the two baselines always, then the service paths registered
in ``bench/targets.py``):

1. start its server on a free loopback port, pinned to CPU 1 with taskset
   while wrk runs on CPU 0 (unpinned, and said so, if taskset or a second CPU
   is missing);
2. wait until it answers, run the target's ``prepare`` hook, and check that a
   sample request gets the expected status;
3. warm up with wrk at the fixed concurrency, then measure at that
   concurrency (``-t1 -c32``) and unloaded (``-t1 -c1``), reading the server
   process tree's CPU time from /proc around each measured run;
4. stop the server with SIGTERM and record whether it exited cleanly.

Then it computes every target's throughput ratio to both baselines, runs the
steps of ``bench/extras.py`` (attribution, overload, scale-lite, memory,
webhooks; all of them by default, none with ``--only`` unless named with
``--step``), writes the raw results to ``bench/out/`` and rewrites
``bench/README.md`` (see ``bench/report.py``). The whole run is bounded: the
harness refuses to start when its estimate exceeds ``--budget`` seconds.
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import re
import resource
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

if __package__ in (None, ""):  # run as `python bench/harness.py`: make `bench` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import attrs

from bench import disk_probe, extras, pyspy, report
from bench.results import (
    AGAIN,
    HYPERCORN_302,
    PhaseResult,
    RunRecord,
    TargetResult,
    as_json,
    nearest_rank,
    ratios_for,
)
from bench.server import (
    BenchFailed,
    RunningServer,
    free_port,
    machine_cpu_seconds,
    request,
    start_server,
    stop_server,
    tree_bytes_written,
    tree_cpu_seconds,
    wait_ready,
)
from bench.target import Target, fill_optional
from bench.targets import select
from bench.wrk import (
    WrkResult,
    parse_wrk_output,
    read_latencies,
    render_lua,
    with_latencies,
    wrk_argv,
)
from bench.wrk_mint import LOAD_SECONDS_ENV

PROFILE_ENV = "SVC_BENCH_PYSPY"

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
OUT_DIR = BENCH_DIR / "out"
START_ATTEMPTS = 3
STARTUP_ALLOWANCE_S = 4


@attrs.frozen
class Profile:
    """How long each phase of a target's run lasts, and at what concurrency."""

    name: str
    warmup_s: int
    loaded_s: int
    unloaded_s: int
    paired_s: int = 3
    connections: int = 32
    threads: int = 1

    def describe(self) -> str:
        return (
            f"warm-up {self.warmup_s}s at c{self.connections}, then "
            f"-t{self.threads} -c{self.connections} -d{self.loaded_s}s and "
            f"-t1 -c1 -d{self.unloaded_s}s"
            + (f"; paired baseline runs -c{self.connections} -d{self.paired_s}s"
               if self.paired_s else "")
        )


FULL = Profile("full", warmup_s=2, loaded_s=6, unloaded_s=8)
QUICK = Profile("quick", warmup_s=1, loaded_s=3, unloaded_s=2, paired_s=2)


@attrs.frozen
class Pinning:
    enabled: bool
    note: str


def estimate_seconds(targets: Sequence[Target], profile: Profile) -> int:
    """A generous upper estimate of the run's wall time."""
    per_target = (STARTUP_ALLOWANCE_S + profile.warmup_s + profile.loaded_s + profile.unloaded_s
                  + round(3 * ACCESS_FLUSH_S))  # three wrk runs, each waits for the log
    baselines = sum(1 for t in targets if t.group == "baseline")
    paths = len(targets) - baselines
    again = baselines if paths else 0  # measured again after the paths
    pairs = (paths + 1) * (profile.paired_s + 1) if paths else 0
    return (len(targets) + again) * per_target + pairs


def plan_pinning() -> Pinning:
    if shutil.which("taskset") is None:
        return Pinning(False, "taskset not found: server and wrk ran unpinned")
    if not {0, 1} <= os.sched_getaffinity(0):
        return Pinning(False, "CPUs 0 and 1 not both available: server and wrk ran unpinned")
    return Pinning(True, "server pinned to CPU 1, wrk to CPU 0 (taskset)")


def ensure_wrk() -> None:
    """Install wrk with bench/setup.sh when it is missing (needs root for apt-get)."""
    if shutil.which("wrk") is not None:
        return
    print("wrk not found; running bench/setup.sh", file=sys.stderr)
    subprocess.run(["sh", str(BENCH_DIR / "setup.sh")], check=False)
    if shutil.which("wrk") is None:
        raise BenchFailed("wrk is missing and bench/setup.sh could not install it")


def measure_target(target: Target, profile: Profile, pinning: Pinning, *,
                   root: Path = REPO_ROOT) -> TargetResult:
    """Run one target through start, readiness, warm-up, both measurements and
    stop. ``root``: the checkout whose service the server runs (bench/ab.py
    passes another revision's)."""
    workdir = OUT_DIR / target.name
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    server = _start(target, workdir, pinning, root)
    values = {"python": sys.executable, "port": str(server.port), "workdir": str(workdir)}
    note = None
    try:
        wait_ready(server, target.ready_path)
        # Room for one more unloaded phase: it is measured again when wrk's
        # record of it is impossible (see below), and paths that consume
        # state need fresh items for that run too.
        os.environ[LOAD_SECONDS_ENV] = str(
            profile.warmup_s + profile.loaded_s + 2 * profile.unloaded_s)
        target = prepared(target, server.base_url, workdir)
        check_status(target, server, values)
        script = workdir / "wrk.lua"
        script.write_text(lua_for(target, values))
        # at c1 each request is timed by the script itself (bench/wrk.py, with_latencies)
        latencies = workdir / "wrk-unloaded-latencies.txt"
        timed_script = workdir / "wrk-c1.lua"
        timed_script.write_text(lua_for(target, values, latencies_file=latencies))
        url = server.base_url + target.paths[0]
        wrk_cpus = target.wrk_cpus if pinning.enabled else None

        def phase(connections: int, duration_s: int, threads: int, label: str) -> PhaseResult:
            timed = connections == 1 and threads == 1
            spy = None
            if label == "loaded" and os.environ.get(PROFILE_ENV):
                spy = pyspy.start(server.pid, duration_s, workdir / "profile.txt")
            argv = wrk_argv(
                url=url,
                script=str(timed_script if timed else script),
                connections=connections,
                duration_s=duration_s,
                threads=threads,
                cpus=wrk_cpus,
            )
            latencies.unlink(missing_ok=True)
            result = _measure(server, argv, duration_s, workdir / f"wrk-{label}.txt", connections,
                              latencies=latencies if timed else None)
            if spy is not None:
                spy.wait(30)
                print(pyspy.summarize(workdir / "profile.txt"), file=sys.stderr, flush=True)
            return result

        flush = disk_probe.probe_flushes(workdir)
        phase(profile.connections, profile.warmup_s, profile.threads, "warmup")
        loaded = phase(profile.connections, profile.loaded_s, profile.threads, "loaded")
        unloaded, again = measure_unloaded(
            lambda: phase(1, profile.unloaded_s, 1, "unloaded"), workdir)
        notes = [again] if again else []
        if not loaded.load.plausible(profile.connections):
            notes.append(
                f"wrk's record of the loaded run is impossible (its latencies add up to "
                f"{loaded.load.busy_ratio(profile.connections):.2f} times the time "
                f"{profile.connections} connections had, with the samples its "
                "coordinated-omission correction adds); its percentiles are not a measurement")
        said = target.note(workdir) if target.note is not None else None
        if said:
            notes.append(said)
        note = "; ".join(notes) or None
    finally:
        exit_status, clean = stop_server(server)
    return TargetResult(
        name=target.name,
        group=target.group,
        description=target.description,
        server_argv=tuple(server.argv),
        loaded=loaded,
        unloaded=unloaded,
        exit_status=exit_status,
        stopped_cleanly=clean,
        note=note,
        flush=flush,
    )


def prepared(target: Target, base_url: str, workdir: Path) -> Target:
    """Run the target's ``prepare`` against the started server; the target with
    the headers it returned (a key, say) added to its requests."""
    if target.prepare is None:
        return target
    extra = target.prepare(base_url, workdir)
    return attrs.evolve(target, headers=(*target.headers, *extra.items())) if extra else target


def measure_unloaded(
    measure: Callable[[], PhaseResult], workdir: Path
) -> tuple[PhaseResult, str | None]:
    """The unloaded phase, measured a second time when the record of the first
    is impossible (``WrkResult.plausible``; its output is kept as
    ``wrk-unloaded-discarded.txt``), and the note saying so. Since session 32
    the record is the requests' own latencies (``with_latencies``), which on
    one connection cannot outlast the run: this guards against a broken
    timer. wrk's own records were impossible now and then, through the
    samples its coordinated-omission correction adds."""
    first = measure()
    if first.load.plausible(1):
        return first, None
    (workdir / "wrk-unloaded.txt").replace(workdir / "wrk-unloaded-discarded.txt")
    again = measure()
    return again, impossible_note(first.load, again.load)


def impossible_note(first: WrkResult, again: WrkResult) -> str:
    """What the notes say when the first unloaded run was measured again."""
    text = (
        f"the first unloaded record was impossible ({first.requests:,} latencies adding up "
        f"to {first.busy_ratio(1):.2f} times the {first.duration_s:.1f} s run on one "
        f"connection; p99 {first.p99_ms:.3g} ms), so the unloaded run was measured again "
        f"(p99 {again.p99_ms:.3g} ms, in the table)")
    if not again.plausible(1):
        text += f"; that record is impossible too ({again.busy_ratio(1):.2f} times its run)"
    return text


def _start(target: Target, workdir: Path, pinning: Pinning,
           root: Path = REPO_ROOT) -> RunningServer:
    """Start the server, retrying on a new port if it dies (e.g. the port was taken)."""
    last: BenchFailed | None = None
    for attempt in range(START_ATTEMPTS):
        port = free_port()
        values = {"python": sys.executable, "port": str(port), "workdir": str(workdir)}
        server = start_server(
            target.server_argv(values),
            port=port,
            cwd=root,
            env=dict(target.env),
            cpus=target.server_cpus if pinning.enabled else None,
            log_path=workdir / f"server-{attempt}.log",
        )
        try:
            wait_ready(server, target.ready_path)
            return server
        except BenchFailed as exc:
            stop_server(server)
            last = exc
    raise BenchFailed(f"{target.name}: {last}")


def lua_for(target: Target, values: dict[str, str], *,
            latencies_file: Path | None = None) -> str:
    """The target's wrk script; with ``latencies_file``, one that times each
    request itself and writes the latencies there (one connection only)."""
    script_path = fill_optional(target.lua_script, values)
    return render_lua(
        name=target.name,
        method=target.method,
        headers=target.headers,
        body_file=fill_optional(target.body_file, values),
        paths=target.paths,
        paths_file=fill_optional(target.paths_file, values),
        user_script=Path(script_path).read_text() if script_path else None,
        latencies_file=None if latencies_file is None else str(latencies_file),
    )


def check_status(target: Target, server: RunningServer, values: dict[str, str]) -> None:
    """One real request per sample path must get the target's expected status."""
    body_file = fill_optional(target.body_file, values)
    body = Path(body_file).read_bytes() if body_file else None
    paths_file = fill_optional(target.paths_file, values)
    paths = Path(paths_file).read_text().split() if paths_file else list(target.paths)
    for path in paths[:3]:
        status = request(server.port, target.method, path, headers=target.headers, body=body)
        if status != target.expect_status:
            raise BenchFailed(
                f"{target.name}: {target.method} {path} answered {status}, "
                f"expected {target.expect_status}"
            )


def _measure(
    server: RunningServer, argv: list[str], duration_s: int, out: Path, connections: int,
    *, latencies: Path | None = None,
) -> PhaseResult:
    """One wrk run; with ``latencies`` (the timer hook's file), its percentiles
    are the requests' own (``with_latencies``)."""
    log_start = server.log_path.stat().st_size
    written_before = tree_bytes_written(server.pid)
    before = tree_cpu_seconds(server.pid)
    busy_before, steal_before = machine_cpu_seconds()
    wrk_before = _children_cpu_seconds()
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=duration_s + 30)
    except subprocess.TimeoutExpired as exc:
        raise BenchFailed(f"wrk did not finish: {shlex.join(argv)}") from exc
    after = tree_cpu_seconds(server.pid)
    written = tree_bytes_written(server.pid) - written_before
    log_growth = server.log_path.stat().st_size - log_start
    busy_after, steal_after = machine_cpu_seconds()
    wrk_cpu = _children_cpu_seconds() - wrk_before
    out.write_text(done.stdout + done.stderr)
    if done.returncode != 0:
        raise BenchFailed(f"wrk failed ({done.returncode}): {done.stderr.strip()[:400]}")
    if server.process.poll() is not None:
        raise BenchFailed(f"server exited during the run: see {server.log_path}")
    time.sleep(ACCESS_FLUSH_S)  # the service writes its access lines every 0.25 s
    with server.log_path.open("rb") as log:
        log.seek(log_start)
        logged = log.read().decode("utf-8", "replace")
    load = parse_wrk_output(done.stdout)
    if latencies is not None:
        try:
            load = with_latencies(load, read_latencies(latencies))
        except (OSError, ValueError) as exc:
            raise BenchFailed(f"no latencies from the timed run ({latencies}): {exc}") from exc
    return PhaseResult(
        connections=connections,
        load=load,
        server_cpu_s=after - before,
        wrk_argv=tuple(argv),
        wrk_cpu_s=wrk_cpu,
        other_cpu_s=max(0.0, busy_after - busy_before - (after - before) - wrk_cpu),
        steal_s=steal_after - steal_before,
        server_p99_ms=access_p99_ms(logged),
        store_bytes=max(0, written - log_growth),
    )


ACCESS_FLUSH_S = 0.35
_ACCESS = re.compile(r" svc\.access \S+ \S+ \d{3} (\d+(?:\.\d+)?)ms$", re.MULTILINE)


def access_p99_ms(log_text: str) -> float | None:
    """The p99 (nearest rank) of the times in the service's access lines
    (``... svc.access GET /path 302 0.4ms``); None when there are none."""
    times = sorted(float(m) for m in _ACCESS.findall(log_text))
    if not times:
        return None
    return nearest_rank(times, 0.99)


class PairedBaseline:
    """The bare Hypercorn 302 app, kept running through the paths and measured
    for ``profile.paired_s`` seconds at the paths' concurrency just before and
    just after each path (one run between two paths serves both): the paired
    baseline of ``TargetResult.paired``. Idle, it costs the paths nothing."""

    def __init__(self, target: Target, profile: Profile, pinning: Pinning) -> None:
        workdir = OUT_DIR / "paired-baseline"
        if workdir.exists():
            shutil.rmtree(workdir)
        workdir.mkdir(parents=True)
        self.workdir, self.profile = workdir, profile
        self.server = _start(target, workdir, pinning)
        values = {"python": sys.executable, "port": str(self.server.port),
                  "workdir": str(workdir)}
        script = workdir / "wrk.lua"
        script.write_text(lua_for(target, values))
        self._argv = functools.partial(
            wrk_argv, url=self.server.base_url + target.paths[0], script=str(script),
            connections=profile.connections, threads=profile.threads,
            cpus=target.wrk_cpus if pinning.enabled else None)
        self.runs = 0
        self.measure()  # a warm-up, not used

    def measure(self) -> float:
        seconds = self.profile.paired_s
        self.runs += 1
        result = _measure(self.server, self._argv(duration_s=seconds), seconds,
                          self.workdir / f"wrk-{self.runs}.txt", self.profile.connections)
        return result.load.rps

    def stop(self) -> None:
        stop_server(self.server)


def _children_cpu_seconds() -> float:
    """CPU time of the harness's waited-for children (wrk: the server is waited for last)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(targets: Sequence[Target], profile: Profile, command: str) -> RunRecord:
    ensure_wrk()
    pinning = plan_pinning()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    started = time.monotonic()
    started_at = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    results = []
    hypercorn = next((t for t in targets if t.name == HYPERCORN_302), None)
    has_paths = any(t.group != "baseline" for t in targets)
    pair = PairedBaseline(hypercorn, profile, pinning) if hypercorn and has_paths else None
    try:
        last: float | None = None
        for target in targets:
            print(f"[bench] {target.name} ...", file=sys.stderr, flush=True)
            before = None
            if pair is not None and target.group != "baseline":
                before = last if last is not None else pair.measure()
            result = measure_target(target, profile, pinning)
            if pair is not None and before is not None:
                last = pair.measure()
                result = attrs.evolve(result, paired=(before, last))
            ratio = result.paired_ratio
            print(
                f"[bench] {target.name}: {result.loaded.load.rps:,.0f} req/s at "
                f"c{profile.connections}, p99 c1 {result.unloaded.load.p99_ms:.2f} ms"
                + (f", paired ratio {ratio:.2f}" if ratio is not None else ""),
                file=sys.stderr,
                flush=True,
            )
            results.append(result)
    finally:
        if pair is not None:
            pair.stop()
    if any(t.group != "baseline" for t in targets):
        # The baselines again, after the paths: ratios use the mean of both runs.
        for target in [t for t in targets if t.group == "baseline"]:
            again = attrs.evolve(target, name=target.name + AGAIN)
            print(f"[bench] {again.name} ...", file=sys.stderr, flush=True)
            results.append(measure_target(again, profile, pinning))
    notes = [f"load average when the run started: {load} (the CPUs may be shared)"]
    notes += [
        f"{r.name}: server did not stop cleanly (exit status {r.exit_status})"
        for r in results
        if not r.stopped_cleanly
    ]
    notes += [f"{r.name}: {r.note}" for r in results if r.note]
    return RunRecord(
        started_at=started_at,
        command=command,
        profile=profile.name,
        durations=profile.describe(),
        pinning=pinning.note,
        machine=report.machine_info(),
        versions=report.versions(),
        results=tuple(results),
        ratios=ratios_for(results),
        elapsed_s=time.monotonic() - started,
        notes=tuple(notes),
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.harness", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help=f"shorter runs ({QUICK.describe()})")
    parser.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME",
        help="run only this service target (repeatable); the baselines always run",
    )
    parser.add_argument(
        "--step",
        action="append",
        default=[],
        choices=extras.STEPS,
        help="run this step after the paths (repeatable; default: all, or none with --only)",
    )
    parser.add_argument("--no-steps", action="store_true", help="run no steps")
    parser.add_argument("--budget", type=int, default=570, help="refuse runs estimated longer (s)")
    parser.add_argument("--readme", type=Path, default=BENCH_DIR / "README.md")
    parser.add_argument("--no-readme", action="store_true", help="do not rewrite the README")
    parser.add_argument("--profile", action="store_true",
                        help="py-spy the loaded phase (bench/out/<target>/profile.txt); "
                        "implies --no-readme")
    args = parser.parse_args(argv)
    if args.profile:
        os.environ[PROFILE_ENV] = "1"
        args.no_readme = True

    profile = QUICK if args.quick else FULL
    try:
        targets = select(args.only)
    except ValueError as exc:
        parser.error(str(exc))
    if args.no_steps:
        steps: list[str] = []
    elif args.step:
        steps = list(dict.fromkeys(args.step))
    else:
        steps = [] if args.only else list(extras.STEPS)
    estimate = estimate_seconds(targets, profile) + extras.estimate_seconds(steps, args.quick)
    if estimate > args.budget:
        parser.error(f"estimated {estimate}s exceeds the {args.budget}s budget; use --only")
    given = sys.argv[1:] if argv is None else list(argv)
    python = sys.executable.removeprefix(f"{REPO_ROOT}/")
    command = shlex.join([python, "-m", "bench.harness", *given])
    print(f"[bench] {len(targets)} targets and {len(steps)} steps, about {estimate}s",
          file=sys.stderr)
    run_started = time.monotonic()
    try:
        record = run(targets, profile, command)
    except BenchFailed as exc:
        print(f"[bench] failed: {exc}", file=sys.stderr)
        return 1
    OUT_DIR.mkdir(parents=True, exist_ok=True)
    (OUT_DIR / "results.json").write_text(json.dumps(as_json(record), indent=2) + "\n")
    steps_started = time.monotonic()
    sections, failures = extras.run(steps, args.quick,
                                    elapsed=lambda: time.monotonic() - run_started,
                                    limit_s=extras.RUN_LIMIT_S)
    record = attrs.evolve(record, notes=(*record.notes, *failures),
                          elapsed_s=record.elapsed_s + time.monotonic() - steps_started)
    if not args.no_readme:
        report.write_readme(record, args.readme, sections)
        print(f"[bench] wrote {args.readme}", file=sys.stderr)
    print(report.render_table(record))
    goals = report.render_goals(record)
    if goals:
        print("\n" + "\n".join(goals))
    return 0


if __name__ == "__main__":
    sys.exit(main())
