"""Schema version and migrations.

``SCHEMA_VERSION`` is stored in the ``meta`` database. On open, each migration
from the stored version up to the current one runs inside the opening write
transaction, so an upgrade is all or nothing. A data dir written by a newer
version is refused rather than misread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lmdb

SCHEMA_VERSION = 1
_KEY = b"schema_version"

# version N -> function taking the write txn, bringing data from N-1 to N.
MIGRATIONS: dict[int, Callable[[lmdb.Transaction], None]] = {}


class SchemaTooNew(RuntimeError):
    pass


def stored_version(txn: lmdb.Transaction, meta: Any) -> int | None:
    raw = txn.get(_KEY, db=meta)
    return int(bytes(raw).decode()) if raw is not None else None


def migrate(txn: lmdb.Transaction, meta: Any) -> int:
    current = stored_version(txn, meta)
    if current is None:
        txn.put(_KEY, str(SCHEMA_VERSION).encode(), db=meta)
        return SCHEMA_VERSION
    if current > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"data dir has schema {current}, this svc knows up to {SCHEMA_VERSION}: upgrade svc"
        )
    for v in range(current + 1, SCHEMA_VERSION + 1):
        MIGRATIONS[v](txn)
        txn.put(_KEY, str(v).encode(), db=meta)
    return SCHEMA_VERSION
