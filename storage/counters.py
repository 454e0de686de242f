"""Analytics counters, kept incrementally inside the transaction of the event
they count, so a query never scans raw events.

Key: project (16) | mode (1) | metric NUL scope NUL day NUL dimension NUL value,
where scope is a link id or "*" for the whole project and day is YYYY-MM-DD
(UTC), so one link's or the project's days are one ordered range. Values are
CBOR integers, or decimal strings for revenue amounts (``read_value``).

Increments made by the ops of one writer batch are coalesced: each op's
deltas are kept aside while its child transaction runs, dropped if it aborts,
and the batch's sum per key is read, added and written once, in the batch's
transaction, just before it commits. A redirect's eight counters thus cost a
dictionary update each rather than eight LMDB read-modify-writes.
"""

from __future__ import annotations

import contextvars
import decimal
from collections.abc import Iterable
from typing import Any

import cbor2
import lmdb

from storage import layout
from svc_engine.events import CounterKey, add_amount, exact_sum

Delta = int | decimal.Decimal


class CounterKeyTooLong(ValueError):
    """A counter's key is longer than LMDB takes: a dimension whose value the
    service did not bound (a bug). Raised in the op that counts, so that op
    fails alone: kept for the batch's flush, the key would fail the commit of
    every write of the batch (session 33: a resolve's ``platform`` did)."""


def _too_long(key: bytes) -> CounterKeyTooLong:
    # The size only: a key holds what an app or browser sent.
    return CounterKeyTooLong(f"a counter key of {len(key)} bytes (LMDB takes "
                             f"{layout.MAX_KEY} at most)")


class CounterBatch:
    """The counter deltas of one writer batch."""

    def __init__(self) -> None:
        self._kept: dict[tuple[Any, bytes], Delta] = {}
        self._op: dict[tuple[Any, bytes], Delta] = {}

    def add(self, db: Any, key: bytes, delta: Delta) -> None:
        k = (db, key)
        before = self._op.get(k, 0)
        self._op[k] = before + delta if type(delta) is int else exact_sum(before, delta)

    def keep_op(self) -> None:
        for k, d in self._op.items():
            before = self._kept.get(k, 0)
            self._kept[k] = before + d if type(d) is int else exact_sum(before, d)
        self._op.clear()

    def drop_op(self) -> None:
        self._op.clear()

    def flush(self, txn: lmdb.Transaction) -> None:
        for (db, key), delta in self._kept.items():
            _apply(txn, db, key, delta)
        self._kept.clear()


_CURRENT: contextvars.ContextVar[CounterBatch | None] = contextvars.ContextVar(
    "svc_counter_batch", default=None)


def begin_batch() -> tuple[CounterBatch, contextvars.Token[CounterBatch | None]]:
    batch = CounterBatch()
    return batch, _CURRENT.set(batch)


def end_batch(token: contextvars.Token[CounterBatch | None]) -> None:
    _CURRENT.reset(token)


def counter_key(project_id: str, mode: str, key: CounterKey) -> bytes:
    return _key(layout.scope(project_id, mode), key)


def _key(scope: bytes, key: CounterKey) -> bytes:
    return scope + "\x00".join(key).encode()


def read_value(raw: bytes) -> int | str:
    """A stored counter: an int, or a decimal string for revenue totals."""
    n = _uint(raw)
    if n is not None:
        return n
    value = cbor2.loads(raw)
    if not isinstance(value, int | str):
        raise ValueError("a counter is an int or a decimal string")
    return value


def read_amount(raw: bytes) -> int | str | None:
    """A counter as a range read takes it: an int or a decimal string, None
    for anything else (never written; a damaged counter is skipped, not an
    error). The usual value, a count, is read without calling cbor2. (Not
    built on :func:`read_value`, nor it on this: each is an inner loop's
    call, the writer's flush and an analytics scan of 100,000s of rows.)"""
    n = _uint(raw)
    if n is not None:
        return n
    value = cbor2.loads(raw)
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


# CBOR's unsigned integers (major type 0), read and written here: a counter
# is read and rewritten at every flush, and calling into cbor2 twice was most
# of that. The bytes are cbor2's own (shortest form; tests compare them).
_UINT_WIDTH = {0x18: 1, 0x19: 2, 0x1A: 4, 0x1B: 8}


def _uint(raw: bytes) -> int | None:
    """The unsigned integer CBOR ``raw`` holds, or None for anything else."""
    if len(raw) == 1 and raw[0] < 0x18:
        return raw[0]
    width = _UINT_WIDTH.get(raw[0]) if raw else None
    if width is None or len(raw) != width + 1:
        return None
    return int.from_bytes(raw[1:], "big")


def encode_count(n: int) -> bytes:
    """``cbor2.dumps(n)`` for an int, without the call for the usual ones."""
    if n < 0 or n >= 1 << 64:
        return cbor2.dumps(n)
    if n < 0x18:
        return bytes((n,))
    for head, width in _UINT_WIDTH.items():
        if n < 1 << (8 * width):
            return bytes((head,)) + n.to_bytes(width, "big")
    raise AssertionError("unreachable: n < 2**64")


def _apply(txn: lmdb.Transaction, db: Any, key: bytes, delta: Delta) -> None:
    raw = txn.get(key, db=db)
    if isinstance(delta, decimal.Decimal):
        total = read_value(bytes(raw)) if raw is not None else "0"
        txn.put(key, cbor2.dumps(add_amount(str(total), delta)), db=db)
    else:
        n = read_value(bytes(raw)) if raw is not None else 0
        txn.put(key, encode_count(int(n) + delta), db=db)


def add_to(txn: lmdb.Transaction, db: Any, keys: Iterable[bytes], delta: Delta) -> None:
    """Add ``delta`` to counters whose keys ``counter_key`` already made (a caller
    that remembers its keys, like the events batch): kept aside for the writer
    batch's flush, or applied at once outside a batch."""
    batch = _CURRENT.get()
    if batch is None:
        for key in keys:
            _apply(txn, db, key, delta)
        return
    for key in keys:
        if len(key) > layout.MAX_KEY:
            raise _too_long(key)
        batch.add(db, key, delta)


def increment(txn: lmdb.Transaction, db: Any, project_id: str, mode: str,
              keys: Iterable[CounterKey], by: int = 1) -> None:
    add_to(txn, db, keys_of(layout.scope(project_id, mode), keys), by)


def keys_of(scope: bytes, keys: Iterable[CounterKey]) -> list[bytes]:
    """The stored keys of ``keys`` in a project's ``scope``, for ``add_to``."""
    return [_key(scope, key) for key in keys]


def add_decimal(txn: lmdb.Transaction, db: Any, project_id: str, mode: str,
                keys: Iterable[CounterKey], amount: decimal.Decimal) -> None:
    add_to(txn, db, keys_of(layout.scope(project_id, mode), keys), amount)
