"""``svc doctor``: check a data dir and say what to do.

Checks, each with a verdict (ok, warn, fail) and a remedy:

- the data dir opens, and its schema version is one this svc knows;
- how full the LMDB map is (warn from 80 %, fail from 95 %);
- how much room the data dir's file system has left (warn under 1 GiB or
  10 % free, fail under 64 MiB: a full disk fails every write with 503
  ``storage_unavailable`` until it has room again);
- the server secret exists (it keys network hashes and dashboard CSRF);
- deadlines: how many, and how many are overdue (overdue ones fire at start);
- webhook deliveries waiting (Queued, Sending, Retrying) and events in the
  outbox not yet turned into deliveries;
- whether a bootstrap organization exists;
- who else may read the data: the data dir and its files should be the
  service user's alone (0700 and 0600, what `svc serve` creates since
  session 33), since webhook signing secrets are stored in clear; a data
  dir made before then, or copied with other modes, is a warning with the
  `chmod` that fixes it;
- with ``--disk``, how long the data dir's disk takes to flush (below).

Safe while the service runs: it only reads (one read transaction). With
``--disk`` it also writes and flushes a 4 MiB scratch file in the data dir
for a fraction of a second (storage/flush_probe.py), then removes it.

The disk check. Every acknowledged write waits for two flushes of the data
file (its pages, then the meta page: storage/writer.py), so the flush time
is the floor of an unloaded durable request, and it grows with every
separate page a commit writes (a first launch writes 16-28, mostly
scattered: bench/README.md, session 23). It warns when one page takes
``SLOW_FLUSH_US`` or more at the median, or a batch of scattered pages
``SLOW_BATCH_US``: a disk behind a network, a spinning one, or one whose
flushes queue behind other tenants'.
"""

from __future__ import annotations

import os
from typing import Any

import attrs
import cbor2
import lmdb

from storage import flush_probe, layout
from storage.data_file import RESTORE, cut_short
from storage.lmdb_store import has_data
from storage.schema import SCHEMA_VERSION
from svc_engine.errors import StoreUnreachable

WARN_FULL = 0.80
FAIL_FULL = 0.95
WARN_FREE_BYTES = 1 << 30
WARN_FREE_SHARE = 0.10
FAIL_FREE_BYTES = 64 << 20
WAITING = {"Queued", "Sending", "Retrying"}
DATA_FILES = ("data.mdb", "lock.mdb", "network-keys")  # the last: web/network_keyring.py
SLOW_FLUSH_US = 1_000  # one page: then an unloaded durable write takes >2 ms
SLOW_BATCH_US = 5_000  # 32 scattered pages, about one first launch's commit
DISK_SINGLES = 50
DISK_BATCHES = 10


@attrs.frozen
class Finding:
    check: str
    verdict: str  # ok, warn, fail
    detail: str
    remedy: str = ""

    def to_json(self) -> dict[str, str]:
        return attrs.asdict(self)


def diagnose(path: str, now_ms: int, map_size: int, *, disk: bool = False) -> list[Finding]:
    """``map_size`` is the one the service opens with (SVC_MAP_SIZE); ``disk``:
    also time the disk's flushes in ``path`` (writes a scratch file)."""
    try:
        present = has_data(path)
    except StoreUnreachable as e:
        return [Finding("data dir", "fail", e.message.removeprefix("SVC_DATA_DIR: "),
                        "run svc doctor as the user svc runs as, and give it the data dir")]
    if not present:
        return [Finding("data dir", "fail", f"no LMDB data in {path}",
                        "check --data / SVC_DATA_DIR, or start the service once to create it")]
    if (why := cut_short(path)) is not None:  # mapping it would die of SIGBUS
        return [Finding("data dir", "fail", why, RESTORE)]
    try:
        env = lmdb.open(path, readonly=True, lock=True, max_dbs=len(layout.DATABASES) + 16,
                        subdir=True, mode=0o600)  # (its lock.mdb, if it makes one: owner only)
    except lmdb.Error as e:
        return [Finding("data dir", "fail", f"cannot open: {e}",
                        "check permissions; restore from `svc backup` if the files are damaged")]
    try:
        found = _checks(env, now_ms, map_size)
    finally:
        env.close()
    found.append(judge_modes(path, {name: os.stat(os.path.join(path, name)).st_mode
                                    for name in ("", *DATA_FILES)
                                    if os.path.exists(os.path.join(path, name))}))
    fs = os.statvfs(path)
    found.append(judge_space(free=fs.f_bavail * fs.f_frsize, total=fs.f_blocks * fs.f_frsize))
    if disk:
        found.append(disk_finding(path))
    return found


def judge_modes(path: str, modes: dict[str, int]) -> Finding:
    """The verdict on the permission bits of the data dir (name ``""``) and
    its files: any bit for the group or others is a warning."""
    open_to = sorted(name or "the data dir" for name, mode in modes.items()
                     if mode & 0o077)
    if not open_to:
        return Finding("permissions", "ok", "the data dir and its files are the owner's only")
    return Finding("permissions", "warn",
                   f"readable or writable by others than its owner: {', '.join(open_to)} "
                   "(webhook signing secrets are stored in clear; network-keys would let "
                   "them test the network hashes of iPhone taps against a guessed address)",
                   f"chmod 700 {path} && chmod 600 {os.path.join(path, '*.mdb')}"
                   + (f" {os.path.join(path, 'network-keys')}" if "network-keys" in modes else ""))


def judge_space(*, free: int, total: int) -> Finding:
    """The verdict on the data dir's file system: ``free`` bytes this
    process may still write of ``total``."""
    detail = f"{free / 2**30:.1f} GiB free of {total / 2**30:.1f} GiB"
    if free < FAIL_FREE_BYTES:
        return Finding("disk space", "fail", detail,
                       "free space on this file system now: every write fails until it has "
                       "room (nothing stored is lost)")
    if free < WARN_FREE_BYTES or free < WARN_FREE_SHARE * total:
        return Finding("disk space", "warn", detail,
                       "free space on this file system, or move the data dir to a larger one "
                       "(`svc backup` makes the copy)")
    return Finding("disk space", "ok", detail)


def disk_finding(path: str) -> Finding:
    """The disk check: flushes timed in a scratch file of ``path``."""
    try:
        took = flush_probe.measure(path, singles=DISK_SINGLES, batches=DISK_BATCHES)
    except OSError as e:
        return Finding("disk flush", "fail", f"cannot write a scratch file in {path}: {e}",
                       "check the data dir's permissions and free space")
    return judge_disk(**attrs.asdict(took.summary()))


def judge_disk(*, one_p50_us: float, one_p99_us: float, scattered_p50_us: float,
               adjacent_p50_us: float, batch_pages: int) -> Finding:
    """The verdict on measured flush times (µs; see the module's docstring)."""
    detail = (f"one page {one_p50_us:,.0f} µs p50 ({one_p99_us:,.0f} p99); {batch_pages} pages "
              f"{scattered_p50_us:,.0f} µs scattered, {adjacent_p50_us:,.0f} side by side; "
              "a durable write waits two flushes")
    if one_p50_us < SLOW_FLUSH_US and scattered_p50_us < SLOW_BATCH_US:
        return Finding("disk flush", "ok", detail)
    return Finding("disk flush", "warn", detail,
                   "every acknowledged write waits for this disk: put the data dir on a "
                   "local SSD (not a network or spinning disk)")


def _open(env: lmdb.Environment, name: bytes, txn: lmdb.Transaction) -> Any:
    try:
        return env.open_db(name, txn=txn, create=False)
    except lmdb.NotFoundError:
        return None


def _count(txn: lmdb.Transaction, db: Any) -> int:
    return 0 if db is None else int(txn.stat(db)["entries"])


def _checks(env: lmdb.Environment, now_ms: int, map_size: int) -> list[Finding]:
    out: list[Finding] = []
    with env.begin() as txn:
        meta = _open(env, b"meta", txn)
        raw = txn.get(b"schema_version", db=meta) if meta is not None else None
        version = int(bytes(raw).decode()) if raw is not None else None
        if version is None:
            out.append(Finding("schema", "fail", "no schema version recorded",
                               "this is not an svc data dir, or it never finished opening"))
        elif version > SCHEMA_VERSION:
            out.append(Finding("schema", "fail", f"schema {version}, this svc knows "
                               f"{SCHEMA_VERSION}", "upgrade svc before serving this data"))
        else:
            out.append(Finding("schema", "ok", f"schema {version}"))
        info, stat = env.info(), env.stat()
        used = (info["last_pgno"] + 1) * stat["psize"]
        share = used / map_size
        detail = f"{used / 2**20:.1f} MiB of {map_size / 2**20:.0f} MiB ({share:.0%})"
        remedy = "stop the service and restart it with a larger SVC_MAP_SIZE"
        verdict = "fail" if share >= FAIL_FULL else "warn" if share >= WARN_FULL else "ok"
        out.append(Finding("map space", verdict, detail, remedy if verdict != "ok" else ""))
        secret = txn.get(b"server_secret", db=meta) if meta is not None else None
        out.append(Finding("server secret", "ok" if secret else "warn",
                           "present" if secret else "missing",
                           "" if secret else "start the service once; it creates the secret"))
        deadlines = _open(env, b"deadlines", txn)
        total = _count(txn, deadlines)
        overdue = 0
        if deadlines is not None:
            for k in txn.cursor(db=deadlines).iternext(values=False):
                if layout.from_ms(bytes(k)) > now_ms:
                    break
                overdue += 1
        out.append(Finding("deadlines", "ok", f"{total} pending, {overdue} overdue"
                           + (" (they fire when the service starts)" if overdue else "")))
        waiting = _waiting_deliveries(txn, _open(env, b"deliveries", txn))
        outbox = _count(txn, _open(env, b"outbox", txn))
        verdict = "warn" if outbox > 10_000 else "ok"
        out.append(Finding("webhooks", verdict,
                           f"{waiting} deliveries waiting, {outbox} events not yet queued",
                           "is the service running? the dispatcher drains the outbox"
                           if verdict == "warn" else ""))
        boot = txn.get(b"bootstrap", db=meta) if meta is not None else None
        org = cbor2.loads(bytes(boot))["org_id"] if boot else None
        out.append(Finding("bootstrap", "ok" if org else "warn",
                           f"organization {org}" if org else "no bootstrap organization",
                           "" if org else "run `svc bootstrap`"))
    return out


def _waiting_deliveries(txn: lmdb.Transaction, db: Any) -> int:
    if db is None:
        return 0
    n = 0
    for raw in txn.cursor(db=db).iternext(keys=False):
        try:
            status = cbor2.loads(bytes(raw)).get("status")
        except (ValueError, AttributeError, cbor2.CBORDecodeError):
            continue
        n += status in WAITING
    return n
