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
free list) and once side by side. A commit at c1 writes every tree it
touches from root to leaf (the table's "pages/req c1"), so the scattered
figure beside it tells what its flush waits for (session 23 in the notes).
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

from bench.results import FlushProbe, nearest_rank

PAGE = 4096
FILE_PAGES = 1024  # a 4 MiB file: written whole first, so a probe never grows it
PROBE_FLUSHES = 200
BATCH_PAGES = 32  # about what an iOS first launch's commit writes at c1
BATCH_FLUSHES = 40
SEED = 8


def probe_flushes(directory: Path, *, count: int = PROBE_FLUSHES, seed: int = SEED,
                  batches: int = BATCH_FLUSHES) -> FlushProbe:
    """Time ``count`` one-page writes, each made durable by ``fdatasync``;
    then ``batches`` times ``BATCH_PAGES`` pages at scattered offsets and as
    many side by side, each batch written (one page a write, as LMDB writes
    pages that are not adjacent) and made durable by one ``fdatasync``."""
    if count < 1 or batches < 1:
        raise ValueError("count and batches must be at least 1")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "flush-probe.bin"
    rng = random.Random(seed)
    page = rng.randbytes(PAGE)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.pwrite(fd, bytes(PAGE * FILE_PAGES), 0)
        os.fdatasync(fd)
        took = []
        for _ in range(count):
            offset = rng.randrange(FILE_PAGES) * PAGE
            start = time.perf_counter()
            os.pwrite(fd, page, offset)
            os.fdatasync(fd)
            took.append(time.perf_counter() - start)
        scattered = [_batch(fd, page, sorted(rng.sample(range(FILE_PAGES), BATCH_PAGES)))
                     for _ in range(batches)]
        adjacent = [_batch(fd, page, [first + i for i in range(BATCH_PAGES)])
                    for first in (rng.randrange(FILE_PAGES - BATCH_PAGES) for _ in range(batches))]
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    took.sort()
    return FlushProbe(count=count, p50_us=nearest_rank(took, 0.5) * 1e6,
                      p99_us=nearest_rank(took, 0.99) * 1e6, batch_pages=BATCH_PAGES,
                      scattered_p50_us=nearest_rank(sorted(scattered), 0.5) * 1e6,
                      adjacent_p50_us=nearest_rank(sorted(adjacent), 0.5) * 1e6)


def _batch(fd: int, page: bytes, pages: list[int]) -> float:
    """Seconds to write ``pages`` (page numbers, ascending) and flush them once:
    adjacent pages in one write, as LMDB does."""
    start = time.perf_counter()
    run_start = prev = pages[0]
    for n in [*pages[1:], -1]:
        if n != prev + 1:
            os.pwrite(fd, page * (prev - run_start + 1), run_start * PAGE)
            run_start = n
        prev = n
    os.fdatasync(fd)
    return time.perf_counter() - start
