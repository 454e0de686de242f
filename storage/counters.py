"""Analytics counters, kept incrementally inside the transaction of the event
they count, so a query never scans raw events.

Key: project (16) | mode (1) | metric NUL scope NUL day NUL dimension NUL value,
where scope is a link id or "*" for the whole project and day is YYYY-MM-DD
(UTC), so one link's or the project's days are one ordered range. Values are
CBOR integers, or decimal strings for revenue amounts.
"""

from __future__ import annotations

import decimal
from collections.abc import Iterable
from typing import Any

import cbor2
import lmdb

from storage import layout
from svc_engine.events import CounterKey, add_amount


def counter_key(project_id: str, mode: str, key: CounterKey) -> bytes:
    return layout.scope(project_id, mode) + "\x00".join(key).encode()


def increment(txn: lmdb.Transaction, db: Any, project_id: str, mode: str,
              keys: Iterable[CounterKey], by: int = 1) -> None:
    for key in keys:
        k = counter_key(project_id, mode, key)
        raw = txn.get(k, db=db)
        n = cbor2.loads(bytes(raw)) if raw is not None else 0
        txn.put(k, cbor2.dumps(n + by), db=db)


def add_decimal(txn: lmdb.Transaction, db: Any, project_id: str, mode: str,
                keys: Iterable[CounterKey], amount: decimal.Decimal) -> None:
    for key in keys:
        k = counter_key(project_id, mode, key)
        raw = txn.get(k, db=db)
        total = cbor2.loads(bytes(raw)) if raw is not None else "0"
        txn.put(k, cbor2.dumps(add_amount(str(total), amount)), db=db)
