"""The disk probe of bench/disk_probe.py: real writes and flushes in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.disk_probe import probe_flushes
from bench.results import nearest_rank


def test_percentiles_are_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]  # 1..100
    assert nearest_rank(values, 0.5) == 50.0 and nearest_rank(values, 0.99) == 99.0
    assert nearest_rank([3.0, 7.0], 0.99) == 7.0 and nearest_rank([2.0], 0.5) == 2.0
    assert nearest_rank([1.0, 2.0, 3.0], 0.5) == 2.0  # ceil(1.5) = 2
    with pytest.raises(ValueError):
        nearest_rank([], 0.5)


def test_a_probe_times_real_flushes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    where = tmp_path / "probe"
    probe = probe_flushes(where, count=20, batches=5)
    assert probe.count == 20
    # a flush reaches the device: it takes time, and the p99 is not below the p50
    assert 0 < probe.p50_us <= probe.p99_us
    # and so do the batches of pages flushed at once (which is faster, scattered
    # or adjacent, depends on the disk: not asserted)
    assert probe.batch_pages == 32
    assert probe.scattered_p50_us is not None and probe.scattered_p50_us > 0
    assert probe.adjacent_p50_us is not None and probe.adjacent_p50_us > 0
    assert list(where.iterdir()) == []
    with pytest.raises(ValueError):
        probe_flushes(where, count=0)
    with pytest.raises(ValueError):
        probe_flushes(where, batches=0)
    assert list(where.iterdir()) == []


def test_a_batch_writes_its_pages_adjacent_ones_in_one_write(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    from storage.flush_probe import PAGE, write_and_flush

    fd = os.open(tmp_path / "f", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.pwrite(fd, bytes(PAGE * 8), 0)
        writes: list[tuple[int, int]] = []
        real = os.pwrite

        def spy(fd_: int, data: bytes, offset: int) -> int:
            writes.append((offset // PAGE, len(data) // PAGE))
            return real(fd_, data, offset)

        with monkeypatch.context() as patched:
            patched.setattr(os, "pwrite", spy)
            assert write_and_flush(fd, b"x" * PAGE, [1, 2, 3, 5, 7]) > 0
        assert writes == [(1, 3), (5, 1), (7, 1)]
        assert os.pread(fd, PAGE * 8, 0) == b"".join(
            (b"x" if n in (1, 2, 3, 5, 7) else b"\0") * PAGE for n in range(8))
    finally:
        os.close(fd)
