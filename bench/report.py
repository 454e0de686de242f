"""Writing bench/README.md from a run: machine, versions, command, results table.

The README is regenerated on every run, except the section between
``KEEP_START`` and ``KEEP_END`` ("What each change bought"), which is written
by people and carried over from the existing file unchanged. The sections of
the other steps (attribution, overload, scale, memory, webhooks) come from
``bench/report_sections.py``: rewritten when the step ran, else carried over.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import shlex
import sys
from collections.abc import Mapping
from pathlib import Path

from bench import disk_probe, extras, report_sections
from bench.results import AGAIN, BASELINES, HYPERCORN_302, FlushProbe, RunRecord, TargetResult
from bench.wrk import wrk_version

REPO_ROOT = Path(__file__).resolve().parent.parent
KEEP_START = "<!-- keep: what-each-change-bought (preserved by bench/report.py) -->"
KEEP_END = "<!-- /keep -->"
DEFAULT_KEPT = (
    "Nothing recorded yet. When a change moves a number, add one line here: the change,\n"
    "the path, and the ratio before and after (ratios, not absolute req/s: absolute\n"
    "numbers drift 10-15 % between runs)."
)
PACKAGES = ("trio", "hypercorn", "quart", "quart-trio", "lmdb", "h11")
PENDING_PATHS = (
    "redirect with click recording (plain, Android with token, iPhone with click window)",
    "SDK init, first launch, with each flow",
    "resolve",
    "events, batches of 100",
    "handoff create and claim",
    "webhook deliveries to a local receiver",
    "attribution throughput",
)


def machine_info() -> tuple[tuple[str, str], ...]:
    return (
        ("CPUs (nproc)", str(len(os.sched_getaffinity(0)))),
        ("CPU model", _cpu_model()),
        ("memory", _memory()),
        ("kernel", platform.release()),
        ("OS", _os_name()),
    )


def versions() -> tuple[tuple[str, str], ...]:
    # the interpreter's build matters as much as its version: a build without
    # PGO/LTO (pyenv's default) costs 10-20 % more CPU a request (session 25)
    found = [("python", f"{platform.python_version()} ({os.path.realpath(sys.executable)})")]
    for name in PACKAGES:
        try:
            found.append((name, importlib.metadata.version(name)))
        except importlib.metadata.PackageNotFoundError:
            found.append((name, "not installed"))
    found.append(("wrk", wrk_version()))
    return tuple(found)


def _cpu_model() -> str:
    """``model name`` from /proc/cpuinfo, with the family and model numbers."""
    fields: dict[str, str] = {}
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, sep, value = line.partition(":")
            if not sep and fields:
                break  # the first processor's block is enough
            fields.setdefault(key.strip(), value.strip())
    except OSError:
        return platform.processor() or "unknown"
    name = fields.get("model name", platform.processor() or "unknown")
    if "cpu family" in fields and "model" in fields:
        return f"{name} (family {fields['cpu family']}, model {fields['model']})"
    return name


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except (OSError, ValueError):
        pass
    return "unknown"


def _os_name() -> str:
    try:
        return platform.freedesktop_os_release().get("PRETTY_NAME", "unknown")
    except OSError:
        return "unknown"


def _relative(argv: tuple[str, ...]) -> str:
    """A command line with paths inside the repository shown relative to its root."""
    return shlex.join(argv).replace(f"{REPO_ROOT}/", "")


def fmt_ms(value: float) -> str:
    if value >= 100:
        return f"{value:,.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    if value >= 1:
        return f"{value:.2f} ms"
    return f"{value:.3f} ms"


def fmt_ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"


def render_table(record: RunRecord) -> str:
    c = record.results[0].loaded.connections if record.results else 32
    head = [
        "path",
        f"req/s c{c}",
        f"p50 c{c}",
        f"p99 c{c}",
        "req/s c1",
        "p50 c1",
        "p99 c1",
        "p99 c1 in server",
        "p99 c1 as wrk records it",
        "CPU µs/req",
        f"pages/req c{c}",
        "pages/req c1",
        *(f"ratio vs {b}" for b in BASELINES),
        f"paired ratio vs {HYPERCORN_302}",
    ]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in record.results:
        cpu = r.loaded.cpu_us_per_request
        pages = r.loaded.pages_per_request
        pages_c1 = r.unloaded.pages_per_request
        ratios = record.ratios.get(r.name, {})
        cells = [
            r.name,
            f"{r.loaded.load.rps:,.0f}",
            fmt_ms(r.loaded.load.p50_ms),
            fmt_ms(r.loaded.load.p99_ms),
            f"{r.unloaded.load.rps:,.0f}",
            fmt_ms(r.unloaded.load.p50_ms),
            fmt_ms(r.unloaded.load.p99_ms),
            "" if r.unloaded.server_p99_ms is None else fmt_ms(r.unloaded.server_p99_ms),
            "" if r.unloaded.load.wrk_p99_ms is None else fmt_ms(r.unloaded.load.wrk_p99_ms),
            "n/a" if cpu is None else f"{cpu:,.0f}",
            "" if pages is None else f"{pages:.1f}",
            "" if pages_c1 is None else f"{pages_c1:.1f}",
            *(fmt_ratio(ratios.get(b)) for b in BASELINES),
            "" if r.paired is None else fmt_ratio(r.paired_ratio),
        ]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


# The performance budget (issue 8), per path name prefix: the least paired
# ratio to the bare Hypercorn 302 app, and the most unloaded p99 (ms).
RATIO_GOALS = (("redirect-", 0.9), ("init-", 0.85))
P99_GOAL_MS = 2.0
EVENTS_GOAL = 100_000  # accepted events a second, batches of 100
EVENTS_PATH = "events-batch-100"


def render_goals(record: RunRecord) -> list[str]:
    """Each goal of the budget that this run's paths can tell, met or not,
    beside what the machine could do at that moment: the bare Hypercorn
    app's rate in the paired runs next to that path, and the disk's flush
    time measured just before it."""
    rows: list[tuple[str, str, str, bool, str, str, str]] = []
    for r in record.results:
        flush = "" if r.flush is None else f"{r.flush.p50_us:,.0f} / {r.flush.p99_us:,.0f} µs"
        batch = _batch_flush(r.flush)
        beside = "" if r.paired is None or not all(r.paired) else f"{sum(r.paired) / 2:,.0f}"
        for prefix, least in RATIO_GOALS:
            if r.name.startswith(prefix) and r.paired_ratio is not None:
                rows.append((r.name, f"paired ratio >= {least}", f"{r.paired_ratio:.2f}",
                             r.paired_ratio >= least, beside, flush, batch))
                p99 = r.unloaded.load.p99_ms
                rows.append((r.name, f"p99 c1 < {P99_GOAL_MS:g} ms", fmt_ms(p99),
                             p99 < P99_GOAL_MS, beside, flush, batch))
        if r.name == EVENTS_PATH:
            events = r.loaded.load.rps * 100
            rows.append((r.name, f"events/s >= {EVENTS_GOAL:,}", f"{events:,.0f}",
                         events >= EVENTS_GOAL, beside, flush, batch))
    if not rows:
        return []
    met = sum(1 for row in rows if row[3])
    return [
        f"### Goals, this run: {met} of {len(rows)} met",
        "",
        f"| path | goal | this run | met | {HYPERCORN_302} req/s beside it "
        "| disk flush p50 / p99 before it "
        f"| {disk_probe.BATCH_PAGES} pages a flush, scattered / adjacent, p50 |",
        "|---|---|---|---|---|---|---|",
        *(f"| {name} | {goal} | {value} | {'yes' if ok else '**no**'} | {beside} | {flush} "
          f"| {batch} |" for name, goal, value, ok, beside, flush, batch in rows),
        "",
        f"{HYPERCORN_302} req/s beside it: the mean of the paired runs of the bare "
        "Hypercorn app just before and just after the path (the paired ratio's "
        "denominator), which shows how fast this machine's CPU was at that moment: "
        "it does the same work a request in every run, so a lower rate is a slower "
        "machine, not a slower app.",
        "",
        "Disk flush: one 4 KiB page written and `fdatasync`ed, "
        f"{disk_probe.PROBE_FLUSHES} times, just before the path was measured "
        "(bench/disk_probe.py). The paired baseline follows the CPU's drift, but "
        "it never waits for the disk, and every durable path waits for two "
        "flushes a commit: a goal missed beside a slow flush points at the disk, "
        "beside a usual one (100-200 µs p50 on this machine) at the CPU's side.",
        f"Then {disk_probe.BATCH_PAGES} pages written and flushed at once, "
        f"{disk_probe.BATCH_FLUSHES} times at scattered offsets and as many side by "
        "side: a commit's pages lie where LMDB's free list puts them, scattered, and "
        "a path's commit at c1 writes its \"pages/req c1\" (the table above), so "
        "every durable request at c1 waits for about two flushes: one of that many "
        "scattered pages and one of the meta page (session 23 in the notes below).",
        "",
        "Webhook deliveries (goal: 2,000 a second) are in their own section below.",
        "",
    ]


def _batch_flush(flush: FlushProbe | None) -> str:
    if flush is None or flush.scattered_p50_us is None or flush.adjacent_p50_us is None:
        return ""
    return f"{flush.scattered_p50_us:,.0f} / {flush.adjacent_p50_us:,.0f} µs"


NOISY_LOAD = 0.1  # cores' worth of other processes' CPU during a measured run


def _problems(result: TargetResult) -> list[str]:
    found = []
    for label, phase in (("loaded", result.loaded), ("unloaded", result.unloaded)):
        if phase.other_load > NOISY_LOAD or phase.steal_s > NOISY_LOAD * phase.load.duration_s:
            found.append(
                f"{result.name} ({label}): other processes used {phase.other_load:.2f} cores"
                f" and steal was {phase.steal_s:.2f} s during the run: treat it as noisy"
            )
        if phase.load.errors:
            found.append(
                f"{result.name} ({label}): {phase.load.socket_errors} socket errors, "
                f"{phase.load.non_2xx_3xx} non-2xx/3xx responses"
            )
    return found


def kept_section(existing: str | None) -> str:
    """The hand-written text between the keep markers of an existing README."""
    if existing is None or KEEP_START not in existing:
        return DEFAULT_KEPT
    body = existing.split(KEEP_START, 1)[1].split(KEEP_END, 1)[0]
    return body.strip("\n") or DEFAULT_KEPT


def render_readme(record: RunRecord, kept: str, sections: Mapping[str, str] | None = None,
                  existing: str | None = None) -> str:
    service = [r for r in record.results if r.group == "service"]
    problems = [p for r in record.results for p in _problems(r)]
    notes = [*record.notes, *problems]
    if not any("noisy" in p for p in problems):
        notes.append(
            f"no measured run saw other processes use more than {NOISY_LOAD:.2f} cores"
            " (busy time from /proc/stat minus the server's and wrk's own)"
        )
    c = record.results[0].loaded.connections if record.results else 32
    lines = [
        "# svc benchmarks",
        "",
        "<!-- generated by bench/report.py on every `make bench`: edit only the",
        '     "What each change bought" section, which is carried over -->',
        "",
        "What this measures: each HTTP path of the service, served on loopback by a",
        "real server process and loaded by wrk, reported as throughput and latency",
        f"at a fixed concurrency (c{c}, saturation: closed loop, so queueing",
        "dominates p50/p99) and unloaded (c1: the service time of one request),",
        "plus the server's CPU time per request. Absolute numbers drift 10-15 %",
        "between runs on a shared machine, so every path is also given as a ratio",
        "of its throughput to two baselines measured in the same run:",
        "",
        "- `hypercorn-trio-302`: a bare ASGI app on Hypercorn's trio worker returning",
        "  302 (`bench/baselines/hypercorn_302.py`): the server Quart-Trio apps usually run on,",
        "  and svc did until it got its own (web/server.py);",
        "- `trio-h11-302`: a bare trio + h11 keep-alive server returning 302",
        "  (`bench/baselines/h11_302.py`): the floor trio itself allows.",
        "",
        "## How to run",
        "",
        "```",
        "make bench                                  # full run, rewrites this file",
        ".venv/bin/python -m bench.harness --quick   # shorter phases, smaller steps",
        ".venv/bin/python -m bench.harness --only NAME [--only NAME2]  # some paths, no steps",
        ".venv/bin/python -m bench.attribution [--quick]   # one step on its own:",
        ".venv/bin/python -m bench.overload [--quick]      #   rewrites only its section",
        ".venv/bin/python -m bench.scale [--lite|--quick]  # full: 1M links, 10M clicks",
        ".venv/bin/python -m bench.memory [--quick]",
        ".venv/bin/python -m bench.soak [--quick]  # memory over time, not in make bench",
        "make bench-scale                            # the full scale step (~15 min)",
        ".venv/bin/python -m bench.ab --target NAME --side base=HEAD~1 --side new=.  # A/B",
        ".venv/bin/python -m bench.icount --target NAME --side base=HEAD~1 --side new=.",
        "```",
        "",
        "`bench/setup.sh` installs wrk (Debian package) when it is missing. Each target:",
        "start its server on a free loopback port (pinned to CPU 1, wrk on CPU 0),",
        "wait until it answers, check one request's status, warm up, measure at the",
        "fixed concurrency and at c1, stop it with SIGTERM. The c32 p50/p99 come",
        "from a wrk `done` hook printing wrk's exact percentiles. The c1 p50/p99 are",
        "the requests' own latencies: at c1 the load script times each request itself",
        "on the monotonic clock (LuaJIT's ffi), from the request handed to wrk to its",
        "response read, and writes them to `wrk-unloaded-latencies.txt`",
        "(`TIMER_HOOK` and `with_latencies` in bench/wrk.py). wrk's own record is",
        "not that: after the run it adds synthetic samples to correct for",
        "coordinated omission (every request slower than two mean intervals gains",
        "samples at one interval less, two less, ...), which on one connection",
        "models a client sending at the server's full rate and queueing behind a",
        "slow answer, not an unloaded one; its c1 records added up to as much as",
        "1.95 times the run in session 32 (3.7 times once, session 12), which one",
        "connection cannot do. The table shows wrk's p99 beside ours (\"p99 c1 as",
        "wrk records it\"; session 32 in the notes below). \"p99 c1 in server\" is",
        "the p99 of the same requests as the service timed them (its access log,",
        "0.1 ms steps, from the parsed head to the answer written); the client's",
        "adds the loopback round trip, the event loop reaching the request, and wrk",
        "itself, and any moment the machine takes either CPU away (a few stalls of",
        "1.5-5 ms a second here: see session 9 in the notes below). A full run",
        "measures c1 for longer than c32 (the phases line) so that its p99 is not",
        "one short slow phase: about 9,000 requests for a path that waits for the",
        "disk, 40,000 for one that does not. A c1 record whose latencies add up to",
        "more than 1.3 times the run (wrk's did, before session 32) is measured",
        "again, and the notes give both. CPU µs/req is the",
        "server process tree's user+system time (from /proc) during the loaded run",
        "divided by the requests it served. pages/req c32 is what the server wrote",
        "to its files during the loaded run (`wchar` in /proc/PID/io, less its log's",
        "growth: LMDB's pages) in 4 KiB pages a request, amortized over the group",
        "commit's batches; pages/req c1 is the same during the unloaded run, where",
        "every request is a commit of its own: what one commit writes, every tree",
        "the request touches from root to leaf.",
        "Unlike req/s and CPU it does not move with the machine's",
        "phase, and on this disk every page a durable commit writes is a separate",
        "request that its flush waits for (sessions 20 and 23 in the notes below). Raw wrk",
        "output and server logs land in `bench/out/`.",
        "Service paths are registered in `bench/targets.py`. Paths that consume",
        "state (a token, a network's tap, a pending handoff) get it made first by real",
        "requests (`bench/wrk_mint.py`), then consumed in a fixed shuffled order, as",
        "production launches consume taps and tokens made hours apart (in minting",
        "order a batch would find them side by side in the store); the notes say how",
        "many requests found a fresh one.",
        "Every write a load script sends carries a fresh `Idempotency-Key`, as the",
        "SDK's writes do, so the service records each answer for replays as it does",
        "in production (`IDEM_LUA` in `bench/wrk_mint.py`).",
        "",
        "To measure a change, `bench/ab.py` runs one or more paths against two or",
        "more sides (a git revision in a temporary worktree, or `.` for this",
        "checkout; each side may add settings to its server's environment) for",
        "several rounds, reversing the order every other round, and prints each",
        "side's medians and in how many rounds it beat the first side. On this",
        "machine the speed of everything drifts within minutes, so sides measured",
        "in a fixed order measure the drift too (session 14 in the notes below).",
        "`bench/icount.py` counts instead the instructions a request costs at each",
        "side (the server under valgrind's callgrind, wrk at c1): the drift cannot",
        "move a count (the same code counted twice agreed within 0.1 %), but it",
        "leaves out the kernel's work, the disk and how fast each instruction ran,",
        "so it tells whether a change makes the service do less, and an A/B",
        "whether it is faster here (session 30 in the notes below).",
        "",
        "After the paths the harness runs the steps of `bench/extras.py`: the",
        "attribution benchmark, overload at c256, a smaller scale step, memory and",
        "webhook deliveries; each writes its own section below. The run is bounded:",
        "the harness refuses to start a run whose estimated wall time (paths and",
        "steps) exceeds `--budget` (570 s by default); every wrk run has a fixed",
        "duration and a timeout, and the attribution replay a time cap. In the",
        "machine's slow phases the paths take longer than estimated, so a step",
        "runs its quick size when the full sizes of the steps left would end the",
        f"run past {extras.RUN_LIMIT_S} s (the run's notes say which, and its section shows its",
        "command).",
        "",
        "## Last run",
        "",
        f"- date: {record.started_at}; wall time {record.elapsed_s:.0f} s",
        f"- command: `{record.command}`",
        f"- phases ({record.profile}): {record.durations}",
        f"- pinning: {record.pinning}",
        "- machine: " + "; ".join(f"{k} {v}" for k, v in record.machine),
        "- versions: " + "; ".join(f"{k} {v}" for k, v in record.versions),
        "",
        render_table(record),
        "",
        f"Ratios: this path's req/s at c{c} divided by the baseline's, same run: the "
        f"mean of the baseline measured before the paths and again after them "
        f"(rows `{AGAIN}`), so a drift of the machine during the run counts on both sides.",
        "",
        f"Paired ratio: this path's req/s at c{c} divided by the mean of two short runs "
        f"of `{HYPERCORN_302}` (same wrk settings; lengths in the phases line above) made just "
        "before and just after this path's measurements, with that server kept "
        "running idle through the run. On this shared machine the speed of everything "
        "can change by a third within minutes (another tenant's load), so the "
        "baseline measured next to a path is the fairer yardstick; the goals below "
        "are judged on it.",
        "",
        "p50 and p99 c1: the requests' own latencies, each timed by the load script "
        "on the monotonic clock from the request handed to wrk to its response read. "
        "\"p99 c1 as wrk records it\": wrk's own figure, after it adds synthetic "
        "samples to correct for coordinated omission (every request slower than two "
        "mean intervals gains siblings at one interval less, two less, ...), which on "
        "one connection models a client sending at the server's full rate, not an "
        "unloaded one; shown for comparison (session 32 in the notes below). The c32 "
        "percentiles are wrk's own.",
        "",
        *render_goals(record),
    ]
    if not service:
        lines += [
            "No service paths are registered yet, so only the baselines were measured.",
            "Paths to add in `bench/targets.py` as the service grows:",
            "",
            *(f"- {p}" for p in PENDING_PATHS),
            "",
        ]
    lines += ["### Commands of this run", ""]
    for r in record.results:
        lines += [
            f"- {r.name}: {r.description}",
            f"  - server: `{_relative(r.server_argv)}`",
            f"  - loaded: `{_relative(r.loaded.wrk_argv)}`",
            f"  - unloaded: `{_relative(r.unloaded.wrk_argv)}`",
        ]
    lines += ["", "### Notes", "", *(f"- {n}" for n in notes)]
    for block in report_sections.blocks(sections or {}, existing):
        lines += ["", block]
    lines += ["", "## What each change bought", "", KEEP_START, kept, KEEP_END, ""]
    return "\n".join(lines)


def write_readme(record: RunRecord, path: Path,
                 sections: Mapping[str, str] | None = None) -> None:
    """Rewrite the README: this run's hot paths and ``sections``; the other
    steps' sections and the kept section carried over from the existing file."""
    existing = path.read_text() if path.exists() else None
    path.write_text(render_readme(record, kept_section(existing), sections, existing))
