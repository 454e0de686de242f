"""`svc doctor`'s findings about what a data dir holds (web/doctor.py), read
in process from a real LMDB store: deadlines pending and overdue, webhook
deliveries waiting, a schema newer than this svc and one never recorded.
(test_e2e_foundation runs the command itself on a healthy, a missing and a
nearly full data dir.)"""

from __future__ import annotations

import os

import attrs
import lmdb

from storage.lmdb_store import LmdbStore
from storage.schema import SCHEMA_VERSION
from storage.webhooks_store import WebhookStore
from svc_engine import webhook_delivery as wd
from svc_engine.deadlines import Deadline
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import DeliveryStatus
from web.doctor import Finding, diagnose

NOW = 1_790_000_000_000
MAP = 64 << 20
PROJECT = "00000000-0000-4000-8000-000000000001"
ENDPOINT = "00000000-0000-4000-8000-0000000000e1"


def _findings(path: str) -> dict[str, Finding]:
    return {f.check: f for f in diagnose(path, NOW, MAP)}


def _delivery(n: int, status: DeliveryStatus) -> wd.Delivery:
    d = wd.new_delivery(f"0190a000-0000-7000-8000-{n:012d}", ENDPOINT,
                        f"00000000-0000-4000-8000-{n:012d}", "click", Mode.LIVE, NOW - 1_000)
    return attrs.evolve(d, status=status)


def test_deadlines_due_at_or_before_now_are_overdue(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "data")
    store = LmdbStore(path, map_size=MAP)
    with store.env.begin(write=True) as txn:
        for due, ref in ((NOW - 60_000, "a"), (NOW, "b"), (NOW + 1, "c"), (NOW + 60_000, "d")):
            store.put_deadline(txn, Deadline(due_ms=due, kind="test", ref=ref))
    store.close()
    deadlines = _findings(path)["deadlines"]
    assert (deadlines.verdict, deadlines.detail) == (
        "ok", "4 pending, 2 overdue (they fire when the service starts)")


def test_deliveries_queued_retrying_or_cut_off_sending_are_waiting(
        tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "data")
    store = LmdbStore(path, map_size=MAP)
    hooks = WebhookStore(store)
    with store.env.begin(write=True) as txn:
        statuses = [DeliveryStatus.QUEUED, DeliveryStatus.RETRYING, DeliveryStatus.SENDING,
                    DeliveryStatus.DELIVERED, DeliveryStatus.FAILED]
        for n, status in enumerate(statuses):
            hooks.add_delivery(txn, PROJECT, _delivery(n, status))
    store.close()
    webhooks = _findings(path)["webhooks"]
    assert (webhooks.verdict, webhooks.detail) == (
        "ok", "3 deliveries waiting, 0 events not yet queued")


def test_no_deadline_due_says_none_overdue(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "data")
    store = LmdbStore(path, map_size=MAP)
    with store.env.begin(write=True) as txn:
        store.put_deadline(txn, Deadline(due_ms=NOW + 1, kind="test", ref="a"))
    store.close()
    assert _findings(path)["deadlines"].detail == "1 pending, 0 overdue"


def _set_schema(path: str, value: bytes | None) -> None:
    env = lmdb.open(path, max_dbs=64, subdir=True)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn, create=False)
        if value is None:
            txn.delete(b"schema_version", db=meta)
        else:
            txn.put(b"schema_version", value, db=meta)
    env.close()


def test_a_schema_newer_than_this_svc_or_none_recorded_fails(
        tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "data")
    LmdbStore(path, map_size=MAP).close()
    assert _findings(path)["schema"].verdict == "ok"
    _set_schema(path, str(SCHEMA_VERSION + 1).encode())
    schema = _findings(path)["schema"]
    assert (schema.verdict, schema.detail) == (
        "fail", f"schema {SCHEMA_VERSION + 1}, this svc knows {SCHEMA_VERSION}")
    assert schema.remedy == "upgrade svc before serving this data"
    _set_schema(path, None)
    schema = _findings(path)["schema"]
    assert (schema.verdict, schema.detail) == ("fail", "no schema version recorded")
