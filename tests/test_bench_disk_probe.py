"""The disk probe of bench/disk_probe.py: real writes and flushes in a temp dir."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.disk_probe import percentile_us, probe_flushes


def test_percentiles_are_nearest_rank_in_microseconds() -> None:
    times = [i / 1e6 for i in range(1, 101)]  # 1..100 µs
    assert percentile_us(times, 0.5) == pytest.approx(50.0)
    assert percentile_us(times, 0.99) == pytest.approx(99.0)
    assert percentile_us([0.002], 0.99) == pytest.approx(2000.0)
    with pytest.raises(ValueError):
        percentile_us([], 0.5)


def test_a_probe_times_real_flushes_and_leaves_nothing_behind(tmp_path: Path) -> None:
    where = tmp_path / "probe"
    probe = probe_flushes(where, count=20)
    assert probe.count == 20
    # a flush reaches the device: it takes time, and the p99 is not below the p50
    assert 0 < probe.p50_us <= probe.p99_us
    assert list(where.iterdir()) == []
    with pytest.raises(ValueError):
        probe_flushes(where, count=0)
