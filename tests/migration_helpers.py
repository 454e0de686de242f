"""A power cut in the middle of a resumable migration (storage/schema.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from storage import schema
from storage.lmdb_store import LmdbStore
from storage.schema import SCHEMA_VERSION


@contextmanager
def power_cut_on_slice(monkeypatch: pytest.MonkeyPatch, version: int,
                       slice_no: int) -> Iterator[list[bytes]]:
    """While inside, the migration to ``version`` raises "power cut" in its
    ``slice_no``-th transaction (the ones before it commit). Yields where
    each transaction was told to resume; the real migration is back after."""
    real, calls = schema.MIGRATIONS[version], []

    def dies(txn: Any, dbs: Any, resume: bytes) -> Any:
        calls.append(resume)
        if len(calls) == slice_no:
            raise RuntimeError("power cut")
        return real(txn, dbs, resume)

    monkeypatch.setitem(schema.MIGRATIONS, version, dies)
    try:
        yield calls
    finally:
        monkeypatch.setitem(schema.MIGRATIONS, version, real)


def cut_migration(monkeypatch: pytest.MonkeyPatch, path: str, *, version: int,
                  slice_size: int, slice_no: int) -> tuple[list[bytes], LmdbStore]:
    """Open the data dir at ``path``, migrating ``slice_size`` records a
    transaction, with the power cut in the ``slice_no``-th transaction of
    the migration to ``version``. Where each transaction was told to resume,
    and the data dir as the cut left it, open read-only. ``SLICE`` stays
    ``slice_size`` for the test's next open."""
    monkeypatch.setattr(schema, "SLICE", slice_size)
    with power_cut_on_slice(monkeypatch, version, slice_no) as calls, \
            pytest.raises(RuntimeError, match="power cut"):
        LmdbStore(path, map_size=64 << 20)
    return calls, LmdbStore(path, readonly=True)


def reopened(path: str, *, map_size: int = 64 << 20) -> LmdbStore:
    """Open the data dir at ``path`` again after a cut: the migration goes on
    where the committed slices ended and finishes (checked: the schema is
    current, nothing is left to resume). The caller closes the store."""
    s = LmdbStore(path, map_size=map_size)
    try:
        assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
        assert s.meta("schema_resume") is None
    except BaseException:
        s.close()
        raise
    return s
