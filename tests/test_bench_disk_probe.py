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
    probe = probe_flushes(where, count=20)
    assert probe.count == 20
    # a flush reaches the device: it takes time, and the p99 is not below the p50
    assert 0 < probe.p50_us <= probe.p99_us
    assert list(where.iterdir()) == []
    with pytest.raises(ValueError):
        probe_flushes(where, count=0)
