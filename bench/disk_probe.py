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
SEED = 8


def probe_flushes(directory: Path, *, count: int = PROBE_FLUSHES, seed: int = SEED) -> FlushProbe:
    """Time ``count`` one-page writes, each made durable by ``fdatasync``."""
    if count < 1:
        raise ValueError("count must be at least 1")
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
    finally:
        os.close(fd)
        path.unlink(missing_ok=True)
    took.sort()
    return FlushProbe(count=count, p50_us=nearest_rank(took, 0.5) * 1e6,
                      p99_us=nearest_rank(took, 0.99) * 1e6)
