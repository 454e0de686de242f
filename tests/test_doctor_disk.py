"""`svc doctor`: the verdict on the data dir's free space; with `--disk`, on
flush times, and the probe it runs (real writes and flushes in a temp dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from storage import flush_probe
from web.doctor import (
    FAIL_FREE_BYTES,
    SLOW_BATCH_US,
    SLOW_FLUSH_US,
    WARN_FREE_BYTES,
    disk_finding,
    judge_disk,
    judge_space,
)


def _judge(one: float, scattered: float) -> tuple[str, str, str]:
    f = judge_disk(one_p50_us=one, one_p99_us=one * 2, scattered_p50_us=scattered,
                   adjacent_p50_us=one * 1.5, batch_pages=32)
    return f.verdict, f.detail, f.remedy


def test_a_local_ssd_like_disk_is_ok_and_the_detail_gives_the_figures() -> None:
    verdict, detail, remedy = _judge(118.0, 621.0)
    assert verdict == "ok" and remedy == ""
    assert detail == ("one page 118 µs p50 (236 p99); 32 pages 621 µs scattered, 177 side "
                      "by side; a durable write waits two flushes")


@pytest.mark.parametrize(("one", "scattered", "verdict"), [
    (SLOW_FLUSH_US - 1, SLOW_BATCH_US - 1, "ok"),
    (SLOW_FLUSH_US, 600.0, "warn"),       # every flush slow: a network or spinning disk
    (300.0, SLOW_BATCH_US, "warn"),       # single pages fine, scattered ones slow
    (8_000.0, 40_000.0, "warn"),
])
def test_a_slow_flush_warns_with_a_remedy(one: float, scattered: float, verdict: str) -> None:
    got, _, remedy = _judge(one, scattered)
    assert got == verdict
    assert (remedy != "") == (verdict == "warn") and ("local SSD" in remedy or not remedy)


def test_the_probe_times_real_flushes_and_removes_its_file(tmp_path: Path) -> None:
    took = flush_probe.measure(str(tmp_path), singles=5, batches=3, batch_pages=8)
    assert len(took.single) == 5 and len(took.scattered) == 3 and len(took.adjacent) == 3
    assert all(t > 0 for t in (*took.single, *took.scattered, *took.adjacent))
    assert list(took.single) == sorted(took.single) and took.batch_pages == 8
    assert os.listdir(tmp_path) == []
    for bad in ({"singles": 0, "batches": 1}, {"singles": 1, "batches": 0},
                {"singles": 1, "batches": 1, "batch_pages": 0},
                {"singles": 1, "batches": 1, "batch_pages": flush_probe.FILE_PAGES}):
        with pytest.raises(ValueError):
            flush_probe.measure(str(tmp_path), **bad)  # type: ignore[arg-type]
    assert os.listdir(tmp_path) == []


def test_a_data_dir_it_cannot_write_is_a_failed_check(tmp_path: Path) -> None:
    gone = tmp_path / "not-there"
    f = disk_finding(str(gone))
    assert f.check == "disk flush" and f.verdict == "fail"
    assert "cannot write a scratch file" in f.detail and f.remedy


GIB = 1 << 30


@pytest.mark.parametrize(("free", "total", "verdict"), [
    (200 * GIB, 500 * GIB, "ok"),
    (WARN_FREE_BYTES, 8 * GIB, "ok"),          # 1 GiB and an eighth of a small disk
    (WARN_FREE_BYTES - 1, 8 * GIB, "warn"),    # under 1 GiB
    (40 * GIB, 500 * GIB, "warn"),             # under a tenth of the file system
    (FAIL_FREE_BYTES, 500 * GIB, "warn"),
    (FAIL_FREE_BYTES - 1, 500 * GIB, "fail"),  # writes are about to fail
    (0, 500 * GIB, "fail"),
])
def test_free_space_is_judged_with_a_remedy(free: int, total: int, verdict: str) -> None:
    f = judge_space(free=free, total=total)
    assert (f.check, f.verdict) == ("disk space", verdict)
    assert f.detail == f"{free / GIB:.1f} GiB free of {total / GIB:.1f} GiB"
    assert (f.remedy != "") == (verdict != "ok")
    if verdict == "fail":
        assert "every write fails" in f.remedy


def test_a_data_dir_others_may_read_is_a_warning_with_the_chmod(tmp_path: Path) -> None:
    """A data dir made before session 33 (umask 022: 0755 and 0644) or copied
    with other modes: others could read its webhook signing secrets. A new
    one (0700, 0600) is ok, and after the remedy's chmod so is the old one."""
    from storage.lmdb_store import LmdbStore
    from web.doctor import diagnose

    data = tmp_path / "data"
    LmdbStore(str(data), map_size=64 << 20).close()

    def permissions() -> tuple[str, str, str]:
        [f] = [f for f in diagnose(str(data), 0, 64 << 20) if f.check == "permissions"]
        return f.verdict, f.detail, f.remedy

    assert permissions()[0] == "ok"
    os.chmod(data, 0o755)
    os.chmod(data / "data.mdb", 0o644)
    verdict, detail, remedy = permissions()
    assert verdict == "warn" and "the data dir" in detail and "data.mdb" in detail
    assert "lock.mdb" not in detail
    assert remedy == f"chmod 700 {data} && chmod 600 {data}/*.mdb"
    os.system(remedy)  # the remedy, as an operator would run it
    assert permissions()[0] == "ok"
    (data / "network-keys").write_bytes(b"")  # what `svc serve` adds (web/network_keyring.py)
    os.chmod(data / "network-keys", 0o644)
    verdict, detail, remedy = permissions()
    assert verdict == "warn" and "network-keys" in detail
    assert remedy == f"chmod 700 {data} && chmod 600 {data}/*.mdb {data}/network-keys"
    os.system(remedy)
    assert permissions()[0] == "ok"


@pytest.mark.parametrize(("dir_mode", "file_mode", "verdict"), [
    (0o700, 0o600, "ok"), (0o750, 0o640, "warn"), (0o710, 0o600, "warn"),
    (0o700, 0o604, "warn")])
def test_a_bit_for_the_group_is_a_warning_as_one_for_others(
        dir_mode: int, file_mode: int, verdict: str) -> None:
    from web.doctor import judge_modes
    assert judge_modes("/d", {"": dir_mode, "data.mdb": file_mode}).verdict == verdict


def test_every_status_still_to_be_sent_is_a_waiting_delivery(tmp_path: Path) -> None:
    import cbor2
    import lmdb

    from web.doctor import _waiting_deliveries
    env = lmdb.open(str(tmp_path / "w"), max_dbs=2)
    db = env.open_db(b"deliveries")
    with env.begin(write=True) as txn:
        for i, status in enumerate(("Queued", "Sending", "Retrying", "Retrying", "Delivered",
                                    "Failed")):
            txn.put(b"%d" % i, cbor2.dumps({"status": status}), db=db)
    with env.begin() as txn:
        assert _waiting_deliveries(txn, db) == 4
    env.close()
