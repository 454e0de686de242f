"""How long this machine's disk takes to make one page durable, right now.

The paired baseline (bench/harness.py) follows the CPU's drift, but the bare
302 app never waits for the disk, while every durable path of the service
waits for two flushes a commit. On this kind of shared machine the disk has
phases of its own, so each path's record carries a probe taken just before
its measurement: ``count`` times, one 4 KiB page written at a random offset
of a small file in the same directory tree as the service's data, then
``fdatasync``. A goal missed next to a slow probe points at the disk; next
to a usual one (100-200 µs p50 here) at the CPU's side: the path's own work,
or a slow phase of the machine that slows it more than the bare app
(bench/README.md, session 16, measured two such runs).

A flush's cost also grows with the pages it carries, and on this kind of
disk it grows with how many separate runs of pages they make: the probe
also times ``BATCH_PAGES`` pages written and flushed together, once at
scattered offsets (as an LMDB commit's pages usually lie: they come from its
free list) and once side by side. The measuring is storage/flush_probe.py's,
which ``svc doctor --disk`` uses too. A commit at c1 writes every tree it
touches from root to leaf (the table's "pages/req c1"), so the scattered
figure beside it tells what its flush waits for (session 23 in the notes).
"""

from __future__ import annotations

from pathlib import Path

from bench.results import FlushProbe
from storage.flush_probe import BATCH_PAGES as BATCH_PAGES  # the goals table names it
from storage.flush_probe import measure

PROBE_FLUSHES = 200
BATCH_FLUSHES = 40


def probe_flushes(directory: Path, *, count: int = PROBE_FLUSHES,
                  batches: int = BATCH_FLUSHES) -> FlushProbe:
    """Time ``count`` one-page writes, each made durable by ``fdatasync``;
    then ``batches`` times ``BATCH_PAGES`` pages at scattered offsets and as
    many side by side, each batch made durable by one ``fdatasync``."""
    directory.mkdir(parents=True, exist_ok=True)
    took = measure(str(directory), singles=count, batches=batches).summary()
    return FlushProbe(count=count, p50_us=took.one_p50_us, p99_us=took.one_p99_us,
                      batch_pages=took.batch_pages, scattered_p50_us=took.scattered_p50_us,
                      adjacent_p50_us=took.adjacent_p50_us)
