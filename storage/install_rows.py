"""An install's two records (schema 11).

- ``installs``: project | mode | install id -> the install's creation time
  (8 bytes). What a launch, a resolve, an event batch or a handoff claim
  looks up by install ID. Install IDs are random, so every new install
  lands in a random leaf of this tree; with 8-byte values the leaves hold
  about 80 records each and the tree stays a level shallower than when it
  held the whole install (about 7 a page), so a batch of first launches
  writes fewer pages (bench/README.md, session 22).
- ``installs_by_time``: project | mode | created ms | install id ->
  :class:`InstallRow`, the install and how its first launch was judged.
  New installs append to it in time order, so a batch's rows share pages;
  the dashboard and the export list installs from it directly.

Reading an install by ID is two lookups in one read transaction. A new
install is written by :func:`put` (both records), an upgrade by
:func:`upgrade` (the row alone: the creation time never changes).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs
import lmdb

from storage import layout
from storage.codec import decode, decode_map, encode
from svc_engine.attribution import Matched, Unattributed
from svc_engine.installs import Install, InstallAttribution


@attrs.frozen
class DecisionRecord:
    """How a first launch was judged: what the dashboard's debugger shows."""

    VERSION = 1
    at_ms: int
    matched: bool
    link_id: str | None
    method: str | None
    trials: list[dict[str, object]]

    @classmethod
    def from_map(cls, m: dict[str, object]) -> DecisionRecord:
        trials = m.get("trials")
        return cls(at_ms=int(m["at_ms"]), matched=bool(m["matched"]),  # type: ignore[call-overload]
                   link_id=m.get("link_id"), method=m.get("method"),  # type: ignore[arg-type]
                   trials=trials if isinstance(trials, list) else [])

    @classmethod
    def of(cls, decision: Matched | Unattributed, at_ms: int) -> DecisionRecord:
        matched = isinstance(decision, Matched)
        return cls(at_ms=at_ms, matched=matched,
                   link_id=decision.link_id if isinstance(decision, Matched) else None,
                   method=decision.method.value if isinstance(decision, Matched) else None,
                   trials=[t.to_json() for t in decision.trials])

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "at_ms": self.at_ms, "matched": self.matched,
                "link_id": self.link_id, "method": self.method, "trials": self.trials}


@attrs.frozen
class InstallRow:
    """An install and, for one created by a first launch, how it was judged."""

    VERSION = 1
    install: Install
    decision: DecisionRecord | None = None

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "install": self.install.to_map(),
                "decision": None if self.decision is None else self.decision.to_map()}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> InstallRow:
        decision = m.get("decision")
        return cls(install=decode_map(Install, m.get("install")),
                   decision=None if decision is None else decode_map(DecisionRecord, decision))


def index_key(project_id: str, mode: str, install_id: str) -> bytes:
    """The install's key in ``installs``: project | mode | install id."""
    return layout.scope(project_id, mode) + layout.uid(install_id)


def row_key(key: bytes, at: bytes) -> bytes:
    """The row's key in ``installs_by_time`` (project | mode | created ms |
    install id), from the install's ``installs`` key and its entry there."""
    return key[:17] + at + key[17:]


def put(txn: lmdb.Transaction, installs: Any, by_time: Any, row: InstallRow) -> None:
    """Write a new install's ``row`` and its index entry."""
    install = row.install
    key = index_key(install.project_id, install.mode.value, install.install_id)
    at = layout.ms(install.created_at_ms)
    txn.put(key, at, db=installs)
    txn.put(row_key(key, at), encode(row), db=by_time)


def upgrade(txn: lmdb.Transaction, by_time: Any, row: InstallRow,
            offered: InstallAttribution, now_ms: int) -> None:
    """Offer ``row``'s install a better attribution (a handoff claim, a
    landing-page open): its row is rewritten when that changes it. The index
    entry holds the creation time, which never changes, so it is not
    written."""
    upgraded = row.install.with_upgrade(offered, now_ms)
    if upgraded is not row.install:
        install = upgraded
        key = index_key(install.project_id, install.mode.value, install.install_id)
        txn.put(row_key(key, layout.ms(install.created_at_ms)),
                encode(attrs.evolve(row, install=upgraded)), db=by_time)


def get(txn: lmdb.Transaction, installs: Any, by_time: Any, key: bytes) -> InstallRow | None:
    """The row of the install whose ``installs`` key is ``key``, or None."""
    at = txn.get(key, db=installs)
    if at is None:
        return None
    raw = txn.get(row_key(key, bytes(at)), db=by_time)
    return decode(InstallRow, bytes(raw)) if raw is not None else None
