"""A/B of service paths at two (or more) revisions or settings, in alternating order.

Usage::

    .venv/bin/python -m bench.ab --target init-ios-network \\
        --side base=HEAD~1 --side new=HEAD [--rounds 4]
    .venv/bin/python -m bench.ab --target resolve --side base=. --side knob=.:SVC_X=1

A side is ``LABEL=REV`` with optional ``:NAME=VALUE`` settings for its
server's environment; ``REV`` is a git revision (checked out in a temporary
worktree that shares this checkout's ``.venv``) or ``.`` for this checkout as
it is, uncommitted changes included. The load (the targets' scripts and
their minting) is this checkout's for every side: only the service differs.

Why a tool: on this shared machine the speed of everything drifts by a
third within minutes, so two sides measured one after the other in a fixed
order measure the drift as much as the change (session 14 in bench/README.md:
a fixed order showed +25-39 % for a setting that alternating rounds showed
to do nothing). Each round measures every side once, and odd rounds reverse
the order, so a trend counts against each side in turn. The summary gives
each side's medians and, against the first side, the ratio of median c32
throughput and in how many rounds the side was faster: read a change as real
only when it wins most rounds, not from one ratio.

Nothing here is written to bench/README.md: an A/B informs a change, whose
result goes into the notes with the rounds (README "What each change
bought").
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import attrs

from bench.harness import REPO_ROOT, Profile, ensure_wrk, measure_target, plan_pinning
from bench.results import TargetResult
from bench.target import Target
from bench.targets import select

HERE = "."


@attrs.frozen
class Side:
    label: str
    rev: str
    env: tuple[tuple[str, str], ...] = ()


@attrs.frozen
class Sample:
    """One side's measurement of one target in one round."""

    round: int
    side: str
    target: str
    rps: float
    cpu_us: float | None
    c1_p50_ms: float
    c1_p99_ms: float
    server_p99_ms: float | None
    steal_s: float = 0.0
    """CPU time the hypervisor took from the machine during the c32 run."""
    flush_p50_us: float | None = None
    """The disk's flush time just before the side was measured (bench/disk_probe.py)."""
    pages: float | None = None
    """4 KiB pages the server wrote a request at c32 (``PhaseResult.pages_per_request``)."""
    pages_c1: float | None = None
    """The same at c1: what one request's commit writes."""

    @classmethod
    def of(cls, round_: int, side: str, result: TargetResult) -> Sample:
        return cls(round=round_, side=side, target=result.name, rps=result.loaded.load.rps,
                   cpu_us=result.loaded.cpu_us_per_request,
                   c1_p50_ms=result.unloaded.load.p50_ms, c1_p99_ms=result.unloaded.load.p99_ms,
                   server_p99_ms=result.unloaded.server_p99_ms,
                   steal_s=result.loaded.steal_s,
                   flush_p50_us=None if result.flush is None else result.flush.p50_us,
                   pages=result.loaded.pages_per_request,
                   pages_c1=result.unloaded.pages_per_request)

    def line(self) -> str:
        cpu = f"{self.cpu_us:.0f}" if self.cpu_us is not None else "-"
        server = f"{self.server_p99_ms:.2f}" if self.server_p99_ms is not None else "-"
        flush = f"{self.flush_p50_us:.0f}" if self.flush_p50_us is not None else "-"
        pages = f"{self.pages:.1f}" if self.pages is not None else "-"
        pages_c1 = f"{self.pages_c1:.1f}" if self.pages_c1 is not None else "-"
        return (f"round {self.round} {self.side:<10} {self.target:<26} c32 {self.rps:8,.0f}/s "
                f"CPU {cpu:>5} µs/req {pages:>5} pages/req | c1 p50 {self.c1_p50_ms:.3f} ms p99 "
                f"{self.c1_p99_ms:.3f} ms (service {server} ms) {pages_c1:>5} pages/req | "
                f"steal {self.steal_s:.2f} s | flush p50 {flush} µs")


def parse_side(text: str) -> Side:
    """``LABEL=REV[:NAME=VALUE...]``; ``ValueError`` says what is wrong."""
    label, eq, rest = text.partition("=")
    if not eq or not label or not rest:
        raise ValueError(f"a side is LABEL=REV[:NAME=VALUE...], not {text!r}")
    rev, *settings = rest.split(":")
    env = []
    for setting in settings:
        name, eq, value = setting.partition("=")
        if not eq or not name:
            raise ValueError(f"a side's setting is NAME=VALUE, not {setting!r} in {text!r}")
        env.append((name, value))
    if not rev:
        raise ValueError(f"no revision in {text!r} (use . for this checkout)")
    return Side(label, rev, tuple(env))


def round_order(sides: Sequence[Side], round_: int) -> list[Side]:
    """Every side once; odd rounds in reverse, so a drift of the machine
    during a round counts against each side in turn."""
    return list(sides) if round_ % 2 == 0 else list(reversed(sides))


def summarize(samples: Sequence[Sample], sides: Sequence[Side]) -> str:
    """Per target: each side's medians; against the first side, the ratio of
    median c32 throughput and the rounds in which the side was faster."""
    lines = []
    targets = list(dict.fromkeys(s.target for s in samples))
    first = sides[0].label
    for target in targets:
        lines.append(f"{target}:")
        by_side = {side.label: [s for s in samples if s.target == target and s.side == side.label]
                   for side in sides}
        base_rounds = {s.round: s.rps for s in by_side[first]}
        base_rps = statistics.median(base_rounds.values()) if base_rounds else None
        for side in sides:
            own = by_side[side.label]
            if not own:
                continue
            rps = statistics.median(s.rps for s in own)
            cpus = [s.cpu_us for s in own if s.cpu_us is not None]
            cpu = f"{statistics.median(cpus):.0f}" if cpus else "-"
            written = [s.pages for s in own if s.pages is not None]
            pages = f"{statistics.median(written):.1f}" if written else "-"
            written_c1 = [s.pages_c1 for s in own if s.pages_c1 is not None]
            pages_c1 = f"{statistics.median(written_c1):.1f}" if written_c1 else "-"
            p50 = statistics.median(s.c1_p50_ms for s in own)
            p99 = statistics.median(s.c1_p99_ms for s in own)
            text = (f"  {side.label:<10} median of {len(own)}: c32 {rps:8,.0f}/s,"
                    f" CPU {cpu} µs/req, {pages} pages/req, c1 p50 {p50:.3f} ms,"
                    f" p99 {p99:.3f} ms, {pages_c1} pages/req at c1")
            if side.label != first and base_rps:
                paired = [s for s in own if s.round in base_rounds]
                won = sum(1 for s in paired if s.rps > base_rounds[s.round])
                text += (f"; {rps / base_rps:.2f} of {first}'s c32,"
                         f" faster in {won} of {len(paired)} rounds")
            lines.append(text)
    return "\n".join(lines)


@contextmanager
def checkouts(sides: Sequence[Side], repo: Path = REPO_ROOT) -> Iterator[dict[str, Path]]:
    """Each side's checkout: ``repo`` for ``.``, else a temporary worktree of
    ``repo`` at its revision (sharing ``repo``'s ``.venv``), removed afterwards."""
    roots: dict[str, Path] = {}
    made: list[Path] = []
    with tempfile.TemporaryDirectory(prefix="svc-ab-") as tmp:
        try:
            for side in sides:
                if side.rev == HERE:
                    roots[side.label] = repo
                    continue
                where = Path(tmp) / side.label
                subprocess.run(["git", "worktree", "add", "--detach", "--force", str(where),
                                side.rev], cwd=repo, check=True, capture_output=True)
                made.append(where)
                (where / ".venv").symlink_to(repo / ".venv")
                roots[side.label] = where
            yield roots
        finally:
            for where in made:
                subprocess.run(["git", "worktree", "remove", "--force", str(where)],
                               cwd=repo, check=False, capture_output=True)


def add_side_arguments(parser: argparse.ArgumentParser) -> None:
    """``--target`` and ``--side``, as this tool and bench/icount.py take them."""
    parser.add_argument("--target", action="append", required=True,
                        help="a service path of bench/targets.py (repeat for more)")
    parser.add_argument("--side", action="append", required=True, metavar="LABEL=REV[:K=V]",
                        help="a revision (or . for this checkout) and its settings")


def sides_and_targets(parser: argparse.ArgumentParser, args: argparse.Namespace, *,
                      least: int) -> tuple[list[Side], list[Target]]:
    """The parsed sides (at least ``least``, each with its own label) and the
    named service paths; a usage error (exit 2) otherwise."""
    try:
        sides = [parse_side(text) for text in args.side]
        targets = [t for t in select(args.target) if t.group != "baseline"]
    except ValueError as e:
        parser.error(str(e))
    if len(sides) < least or len({s.label for s in sides}) != len(sides):
        parser.error(f"give {least} or more sides, each with its own label")
    if not targets:
        parser.error("name a service path: the baselines do not depend on the side")
    return sides, targets


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.ab",
        description="A/B of service paths at revisions or settings, in alternating rounds")
    add_side_arguments(parser)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--loaded", type=int, default=4, help="seconds at c32 (after 1 s warm-up)")
    parser.add_argument("--unloaded", type=int, default=10, help="seconds at c1")
    args = parser.parse_args(argv)
    sides, targets = sides_and_targets(parser, args, least=2)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    ensure_wrk()
    profile = Profile("ab", warmup_s=1, loaded_s=args.loaded, unloaded_s=args.unloaded,
                      paired_s=0)
    pinning = plan_pinning()
    print(f"[ab] {pinning.note}; {args.rounds} rounds of {len(sides)} sides x "
          f"{len(targets)} targets, order reversed every other round", file=sys.stderr)
    samples: list[Sample] = []
    with checkouts(sides) as roots:
        for round_ in range(args.rounds):
            for side in round_order(sides, round_):
                for target in targets:
                    run = attrs.evolve(target, env=(*target.env, *side.env))
                    result = measure_target(run, profile, pinning, root=roots[side.label])
                    sample = Sample.of(round_, side.label, result)
                    samples.append(sample)
                    print(sample.line(), flush=True)
    print(summarize(samples, sides))
    return 0


if __name__ == "__main__":
    sys.exit(main())
