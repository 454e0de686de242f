"""Edges of the command line and its helpers, in process: `svc doctor` on a
data dir path that is a file, on a data file that is not LMDB, on an LMDB
dir whose svc databases were never made and on undecodable delivery records
(web/doctor.py); `svc webhooks listen --port` refusing what is not a port
and a command's unexpected error keeping its traceback (web/cli.py); the
process metrics without a package version or /proc (web/metrics.py); and the
malloc arena cap doing nothing on a C library that is not glibc
(web/malloc_arenas.py). (test_doctor_findings holds the doctor's deadline,
delivery and schema findings.)"""

from __future__ import annotations

import builtins
import ctypes
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import cbor2
import lmdb
import pytest

from storage.lmdb_store import LmdbStore
from storage.schema import SCHEMA_VERSION
from storage.webhooks_store import WebhookStore
from svc_engine import config as config_mod
from svc_engine.webhook_delivery import DeliveryStatus
from tests.test_doctor_findings import MAP, NOW, PROJECT, _delivery, _findings
from web import cli, malloc_arenas, metrics
from web.doctor import diagnose

# --- svc doctor ---------------------------------------------------------------


def test_doctor_on_a_data_path_that_is_a_file_fails_in_one_finding(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    with pytest.raises(SystemExit) as exit_:
        cli.main(["doctor", "--data", str(data), "--json"])
    assert exit_.value.code == 1
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    assert json.loads(out.out) == [{
        "check": "data dir", "verdict": "fail", "detail": f"{data} is not a directory",
        "remedy": "run svc doctor as the user svc runs as, and give it the data dir"}]


def test_doctor_on_a_data_file_that_is_not_lmdb_says_it_cannot_open_it(
        tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "data.mdb").write_bytes(b"\x5a" * 16_384)  # no LMDB magic: LMDB refuses it
    [finding] = diagnose(str(data), NOW, MAP)
    assert (finding.check, finding.verdict) == ("data dir", "fail")
    assert finding.detail.startswith("cannot open: ")
    assert finding.remedy == ("check permissions; restore from `svc backup` if the files "
                              "are damaged")


def test_doctor_on_an_lmdb_dir_without_svc_databases_reports_them_empty(
        tmp_path: Path) -> None:
    """An LMDB dir holding only a schema version (none of the deadlines,
    deliveries or outbox databases): counted as none, not a crash, and not
    taken from the main database (where another program keeps its own)."""
    path = str(tmp_path / "data")
    env = lmdb.open(path, max_dbs=4, subdir=True)
    with env.begin(write=True) as txn:
        txn.put(b"zz-record", cbor2.dumps({"status": "Queued"}))  # the main database
        meta = env.open_db(b"meta", txn=txn)
        txn.put(b"schema_version", str(SCHEMA_VERSION).encode(), db=meta)
    env.close()
    found = _findings(path)
    assert (found["schema"].verdict, found["schema"].detail) == ("ok", f"schema {SCHEMA_VERSION}")
    assert (found["deadlines"].verdict, found["deadlines"].detail) == (
        "ok", "0 pending, 0 overdue")
    assert (found["webhooks"].verdict, found["webhooks"].detail) == (
        "ok", "0 deliveries waiting, 0 events not yet queued")
    assert (found["server secret"].verdict, found["bootstrap"].verdict) == ("warn", "warn")


def test_doctor_skips_delivery_records_it_cannot_decode(tmp_path: Path) -> None:
    path = str(tmp_path / "data")
    store = LmdbStore(path, map_size=MAP)
    hooks = WebhookStore(store)
    delivery = _delivery(1, DeliveryStatus.QUEUED)
    with store.env.begin(write=True) as txn:
        hooks.add_delivery(txn, PROJECT, delivery)
        db = store.env.open_db(b"deliveries", txn=txn, create=False)
        txn.put(b"\xff\x01", b"\xff\xfe not cbor", db=db)  # undecodable
        txn.put(b"\xff\x02", cbor2.dumps(["Queued"]), db=db)  # not a map
        txn.put(b"\xff\x03", cbor2.dumps({"status": "Retrying"}), db=db)  # a map: counted
    store.close()
    webhooks = _findings(path)["webhooks"]
    assert (webhooks.verdict, webhooks.detail) == (
        "ok", "2 deliveries waiting, 0 events not yet queued")


# --- svc (web/cli.py) ---------------------------------------------------------


@pytest.mark.parametrize("port", ["nine", "65536", "-1"])
def test_webhooks_listen_refuses_what_is_not_a_port(
        port: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["webhooks", "listen", "--secret", "whsec_AAAA", "--port", port])
    assert exit_.value.code == 2  # a usage error, before anything listens
    assert f"not a port (0 to 65535): {port!r}" in capsys.readouterr().err


@pytest.mark.parametrize("port", ["0", "65535"])
def test_webhooks_listen_port_bounds_are_ports(port: str) -> None:
    args = cli.parser().parse_args(["webhooks", "listen", "--secret", "whsec_AAAA",
                                    "--port", port])
    assert args.port == int(port)


def test_a_command_s_unexpected_error_keeps_its_traceback(tmp_path: Path) -> None:
    """Only a lone SvcError comes out of the store's nursery on its own (one
    line, exit 2); anything else (a bug) is raised as it came, not hidden."""
    path = str(tmp_path / "data")
    LmdbStore(path, map_size=MAP).close()
    cfg = config_mod.load({}, {"data_dir": path, "map_size": MAP})

    async def broken(store: LmdbStore) -> Any:
        raise RuntimeError("a bug")

    with pytest.raises(BaseExceptionGroup) as group:
        cli._with_store(cfg, broken)
    assert [type(e) for e in cli._leaves(group.value)] == [RuntimeError]


# --- process metrics -----------------------------------------------------------


def _by_name(collect: metrics.Collector) -> dict[str, metrics.Metric]:
    return {m.name: m for m in collect()}


def test_process_metrics_without_an_installed_version_say_unknown(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def not_installed(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    found = _by_name(metrics.process_metrics(1.0))
    assert found["svc_build_info"].samples == (((("version", "unknown"),), 1),)


def test_process_metrics_without_proc_leave_out_memory_and_descriptors(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real_open = builtins.open

    def no_proc(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).startswith("/proc/"):
            raise FileNotFoundError(2, "No such file or directory", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(metrics, "open", no_proc, raising=False)
    collect = metrics.process_metrics(1.0)
    assert sorted(_by_name(collect)) == [
        "process_cpu_seconds_total", "process_start_time_seconds", "svc_build_info"]
    m = metrics.Metrics()
    m.add(collect)
    text = m.render().decode()
    assert "process_start_time_seconds 1" in text
    assert "process_resident_memory_bytes" not in text


# --- malloc arenas --------------------------------------------------------------


class _OtherLibc:
    """A C library with ``mallopt`` but not glibc's ``gnu_get_libc_version``."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    @property
    def mallopt(self) -> Any:
        def mallopt(param: int, value: int) -> int:
            self.calls.append((param, value))
            return 1
        return mallopt


def test_arenas_are_left_alone_on_a_c_library_other_than_glibc(
        monkeypatch: pytest.MonkeyPatch) -> None:
    libc = _OtherLibc()
    monkeypatch.setattr(ctypes, "CDLL", lambda name: libc)
    assert malloc_arenas.limit({}) is None
    assert libc.calls == []


def test_arenas_are_left_alone_when_the_c_library_cannot_be_loaded(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def cannot_load(name: Any) -> Any:
        raise OSError("no C library")

    monkeypatch.setattr(ctypes, "CDLL", cannot_load)
    assert malloc_arenas.limit({}) is None
