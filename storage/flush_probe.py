"""How long this disk takes to make pages durable, measured with a scratch file.

Every acknowledged write of the service waits for two flushes of its data
file: one for the pages its commit wrote, one for the meta page that makes
the commit current (storage/writer.py, "Durability"). So the disk's flush
time is the floor of an unloaded durable request, and on a disk that serves
one request at a time it grows with every *separate* page a flush carries:
an LMDB commit's pages lie where its free list puts them, scattered.

``measure`` writes a scratch file of ``FILE_PAGES`` pages in a directory
(the data dir, so the same file system and device), times one page written
and flushed (``fdatasync``) ``singles`` times, then ``batches`` times
``batch_pages`` pages at scattered offsets and as many side by side, each
batch written as LMDB writes (adjacent pages in one write) and flushed once,
and removes the file. ``svc doctor --disk`` and the benchmark harness's disk
probe (bench/disk_probe.py) both use it.
"""

from __future__ import annotations

import os
import random
import tempfile
import time
from collections.abc import Sequence

import attrs

PAGE = 4096
FILE_PAGES = 1024  # 4 MiB, written whole first, so no probe grows the file
BATCH_PAGES = 32  # about what an iOS first launch's commit writes unloaded


@attrs.frozen
class FlushTimes:
    """Seconds, each list sorted: one page a flush, and a batch of
    ``batch_pages`` pages a flush, scattered and side by side."""

    single: tuple[float, ...]
    scattered: tuple[float, ...]
    adjacent: tuple[float, ...]
    batch_pages: int

    def summary(self) -> FlushSummary:
        return FlushSummary(one_p50_us=nearest_rank(self.single, 0.5) * 1e6,
                            one_p99_us=nearest_rank(self.single, 0.99) * 1e6,
                            scattered_p50_us=nearest_rank(self.scattered, 0.5) * 1e6,
                            adjacent_p50_us=nearest_rank(self.adjacent, 0.5) * 1e6,
                            batch_pages=self.batch_pages)


@attrs.frozen
class FlushSummary:
    """What the doctor and the bench report of a measurement, in µs: one page
    a flush (p50, p99), and ``batch_pages`` a flush scattered and side by side
    (p50)."""

    one_p50_us: float
    one_p99_us: float
    scattered_p50_us: float
    adjacent_p50_us: float
    batch_pages: int


def measure(directory: str, *, singles: int, batches: int, batch_pages: int = BATCH_PAGES,
            seed: int = 8) -> FlushTimes:
    """Time flushes in a scratch file of ``directory`` (removed afterwards)."""
    if singles < 1 or batches < 1:
        raise ValueError("singles and batches must be at least 1")
    if not 1 <= batch_pages <= FILE_PAGES // 2:
        raise ValueError(f"batch_pages must be 1-{FILE_PAGES // 2}")
    rng = random.Random(seed)  # noqa: S311 (where to write, not a secret)
    page = rng.randbytes(PAGE)
    fd, path = tempfile.mkstemp(prefix=".flush-probe-", dir=directory)
    try:
        os.pwrite(fd, bytes(PAGE * FILE_PAGES), 0)
        os.fdatasync(fd)
        single = [write_and_flush(fd, page, [rng.randrange(FILE_PAGES)])
                  for _ in range(singles)]
        scattered = [write_and_flush(fd, page, sorted(rng.sample(range(FILE_PAGES), batch_pages)))
                     for _ in range(batches)]
        adjacent = [write_and_flush(fd, page, list(range(first, first + batch_pages)))
                    for first in (rng.randrange(FILE_PAGES - batch_pages) for _ in range(batches))]
    finally:
        os.close(fd)
        os.unlink(path)
    return FlushTimes(tuple(sorted(single)), tuple(sorted(scattered)), tuple(sorted(adjacent)),
                      batch_pages)


def write_and_flush(fd: int, page: bytes, pages: Sequence[int]) -> float:
    """Seconds to write ``page`` at each of ``pages`` (page numbers, ascending;
    adjacent ones in one write, as LMDB does) and flush them once."""
    start = time.perf_counter()
    run_start = prev = pages[0]
    for n in [*pages[1:], -1]:
        if n != prev + 1:
            os.pwrite(fd, page * (prev - run_start + 1), run_start * PAGE)
            run_start = n
        prev = n
    os.fdatasync(fd)
    return time.perf_counter() - start


def nearest_rank(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile (``fraction`` 0.5 for p50, 0.99 for p99) of
    values sorted ascending; ``ValueError`` when there are none."""
    if not sorted_values:
        raise ValueError("no values")
    rank = -(-round(fraction * 1000) * len(sorted_values) // 1000)  # ceil, exact
    return sorted_values[max(1, rank) - 1]
