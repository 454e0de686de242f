"""bench/icount.py: reading callgrind's count and summarizing sides (the
counting itself runs valgrind on a real server: run by hand, bench/README.md)."""

from __future__ import annotations

import pytest

from bench.icount import Count, callgrind_total, summarize
from bench.server import BenchFailed

# The head and tail of a real callgrind output file (bench/out, session 30).
OUTPUT = """# callgrind format
version: 1
creator: callgrind-3.19.0
pid: 11394
cmd:  /work/main/.venv/bin/python -m web.cli serve --port 35013 --data data
part: 1

events: Ir
summary: 0

fl=(1) ???
fn=(1) 0x0000000000001100
0 3
totals: 2487653128
"""


def test_the_count_is_the_totals_line_not_the_summary_written_first() -> None:
    assert callgrind_total(OUTPUT) == 2_487_653_128


def test_no_totals_is_a_failure_not_zero() -> None:
    with pytest.raises(BenchFailed, match="no totals"):
        callgrind_total(OUTPUT.replace("totals: 2487653128\n", ""))


def test_each_side_is_given_a_request_and_against_the_first() -> None:
    counts = [Count("base", "events-batch-100", 2_140_471_519, 334),
              Count("new", "events-batch-100", 2_487_653_128, 425),
              Count("base", "resolve", 1_000_000, 10), Count("new", "resolve", 900_000, 10)]
    assert counts[1].per_request == pytest.approx(5_853_301.5)
    assert summarize(counts, "base").splitlines() == [
        "events-batch-100:",
        "  base          6,408,597 instructions a request",
        "  new           5,853,301 instructions a request (0.913 of base's)",
        "resolve:",
        "  base            100,000 instructions a request",
        "  new              90,000 instructions a request (0.900 of base's)"]
