"""The probabilistic click window in LMDB, indexed so a launch reads only its candidates.

Every tap is one entry in ``click_window`` (project | mode | ms | click id ->
``ClickWindowEntry``; the expiry sweep reads each project and mode's oldest
entries from there) and one key in each of:

- ``click_window_by_cohort`` (project | mode | iOS major | country | ms |
  click id -> link id): the cohort group of a launch is one key range;
- ``click_window_by_net`` (project | mode | net hash | iOS major | ms |
  click id -> link id), for taps with a network hash: the network group is
  one key range, and every tap of a network is one prefix (deleting a hash).

All three change together, inside the caller's write transaction: :meth:`put`
adds a tap, consuming (:meth:`consume`), forgetting a hash
(:meth:`forget_net_hash`) and the sweep (:meth:`sweep`) remove it or its hash
from each. A launch (:meth:`candidates`) walks two key ranges, reading keys
and link ids only, and summarizes each group for the pure decision; the taps a
match consumes are deleted by key. So a launch costs the size of its groups,
whatever else the window holds.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import attrs
import lmdb

from storage import layout
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore
from svc_engine.attribution import (
    Candidates,
    ClickWindowEntry,
    LaunchFacts,
    Matched,
    cohort_skip,
    network_skip,
    window_bounds,
)
from svc_engine.settings import DeferredSettings

KEEP_MS = 360 * 60_000  # the longest window; hashes go with their entries (< 7 h)
_TAIL = 24  # ms | click id: the end of every key of a tap


@attrs.frozen
class LaunchCandidates:
    """A launch's two groups and where their listed taps are stored."""

    network: Candidates
    cohort: Candidates
    tails: dict[str, bytes]  # click id -> ms | click id, for the listed taps


class ClickWindow:
    def __init__(self, store: LmdbStore) -> None:
        self.store = store
        self._entries = store.db(b"click_window")
        self._by_cohort = store.db(b"click_window_by_cohort")
        self._by_net = store.db(b"click_window_by_net")

    def put(self, txn: lmdb.Transaction, project_id: str, entry: ClickWindowEntry) -> None:
        for key, value, db in self.puts(project_id, entry):
            txn.put(key, value, db=db)

    def puts(self, project_id: str, entry: ClickWindowEntry) -> list[tuple[bytes, bytes, Any]]:
        """What :meth:`put` writes, as (key, value, database): made before
        the write op runs, so the redirect builds them and the writer (which
        holds the GIL while the request loop waits for it) only stores them."""
        scope = layout.scope(project_id, entry.mode.value)
        tail = layout.ms(entry.at_ms) + layout.uid(entry.click_id)
        link = layout.uid(entry.link_id)
        out = [(scope + tail, encode(entry), self._entries),
               (layout.window_cohort_prefix(scope, entry.os_major, entry.country) + tail, link,
                self._by_cohort)]
        if entry.net_hash is not None:
            out.append((layout.window_net_prefix(scope, entry.net_hash, entry.os_major) + tail,
                        link, self._by_net))
        return out

    def entries(self, txn: lmdb.Transaction, project_id: str, mode: str,
                since_ms: int) -> list[ClickWindowEntry]:
        """Every entry of a project's window from ``since_ms`` on (the debugger)."""
        scope = layout.scope(project_id, mode)
        cur = txn.cursor(db=self._entries)
        out = []
        ok = cur.set_range(scope + layout.ms(max(0, since_ms)))
        while ok:
            k = bytes(cur.key())
            if not k.startswith(scope):
                break
            out.append(decode(ClickWindowEntry, bytes(cur.value())))
            ok = cur.next()
        return out

    def newest(self, txn: lmdb.Transaction, project_id: str, mode: str, since_ms: int,
               limit: int) -> list[ClickWindowEntry]:
        """At most ``limit`` entries from ``since_ms`` on, newest first, read
        backwards from the end of the project's range (the debugger's list)."""
        scope = layout.scope(project_id, mode)
        cur = txn.cursor(db=self._entries)
        ok = cur.prev() if cur.set_range(scope + b"\xff" * 25) else cur.last()
        out: list[ClickWindowEntry] = []
        while ok and len(out) < limit:
            if not bytes(cur.key()).startswith(scope):
                break
            entry = decode(ClickWindowEntry, bytes(cur.value()))
            if entry.at_ms < since_ms:
                break
            out.append(entry)
            ok = cur.prev()
        return out

    # -- a launch -------------------------------------------------------------------

    def candidates(self, txn: lmdb.Transaction, project_id: str, launch: LaunchFacts,
                   settings: DeferredSettings, net_hash: bytes | None,
                   now_ms: int) -> LaunchCandidates:
        """The launch's network and cohort groups (empty when a step does not apply)."""
        scope = layout.scope(project_id, launch.mode.value)
        first, last = window_bounds(settings.probabilistic_window_minutes, now_ms)
        tails: dict[str, bytes] = {}
        network = cohort = Candidates()
        if network_skip(launch, settings, net_hash) is None:
            assert net_hash is not None and launch.os_major is not None
            network = self._group(txn, self._by_net,
                                  layout.window_net_prefix(scope, net_hash, launch.os_major),
                                  first, last, tails, list_all=True)
        if cohort_skip(launch, settings) is None:
            assert launch.os_major is not None
            prefix = layout.window_cohort_prefix(scope, launch.os_major, launch.country)
            cohort = self._group(txn, self._by_cohort, prefix, first, last, tails,
                                 list_all=False)
        return LaunchCandidates(network, cohort, tails)

    def _group(self, txn: lmdb.Transaction, db: Any, prefix: bytes, first_ms: int,
               last_ms: int, tails: dict[str, bytes], *, list_all: bool) -> Candidates:
        """Summarize the taps of one index range, reading keys and link ids only."""
        if last_ms < max(0, first_ms):
            return Candidates()
        cur = txn.cursor(db=db)
        if not cur.set_range(prefix + layout.ms(max(0, first_ms))):
            return Candidates()
        end = prefix + layout.ms(last_ms) + b"\xff" * 16
        taps = 0
        links: set[bytes] = set()
        listed: list[bytes] = []
        for k, v in cast(Iterator[tuple[bytes, bytes]], cur.iternext()):  # buffers off
            if k > end:
                break
            taps += 1
            links.add(v)
            if list_all or taps == 1:
                listed.append(k[-_TAIL:])
        ids = []
        for tail in listed:
            click_id = layout.from_uid(tail[8:])
            tails[click_id] = tail
            ids.append(click_id)
        link_id = layout.from_uid(next(iter(links))) if len(links) == 1 else None
        return Candidates(taps=taps, links=len(links), link_id=link_id, click_ids=tuple(ids))

    def consume(self, txn: lmdb.Transaction, project_id: str, mode: str, decision: Matched,
                found: LaunchCandidates) -> None:
        """Delete the taps a match consumed (by key), then forget its network hashes."""
        scope = layout.scope(project_id, mode)
        for click_id in decision.consume_click_ids:
            tail = found.tails[click_id]  # the decision consumes listed taps only
            raw = txn.get(scope + tail, db=self._entries)
            if raw is not None:
                self._remove(txn, scope, tail, decode(ClickWindowEntry, bytes(raw)))
        for net in decision.delete_net_hashes:
            self.forget_net_hash(txn, scope, net)

    def forget_net_hash(self, txn: lmdb.Transaction, scope: bytes, net_hash: bytes) -> int:
        """Drop ``net_hash`` from every tap of the scope that carries it (the taps stay)."""
        prefix = layout.window_net_prefix(scope, net_hash)
        done = 0
        for k, _ in self.store.scan_in(txn, b"click_window_by_net", prefix):
            key = scope + k[-_TAIL:]
            raw = txn.get(key, db=self._entries)
            if raw is not None:
                entry = decode(ClickWindowEntry, bytes(raw))
                txn.put(key, encode(attrs.evolve(entry, net_hash=None)), db=self._entries)
            txn.delete(k, db=self._by_net)
            done += 1
        return done

    # -- expiry ------------------------------------------------------------------------

    def sweep(self, txn: lmdb.Transaction, now_ms: int, limit: int) -> int:
        """Delete up to ``limit`` taps older than the longest window (and so their
        hashes, well within 7 hours): the oldest entries of each project and
        mode, one key range each, then a seek past the rest of that scope.
        (A tap's entry is read by key, so no separate time index is written
        with every tap and every consumption.)"""
        cutoff = layout.ms(max(0, now_ms - KEEP_MS))
        due: list[tuple[bytes, bytes]] = []
        cur = txn.cursor(db=self._entries)
        ok = cur.first()
        while ok and len(due) < limit:
            key = bytes(cur.key())
            scope = key[:17]
            if key[17:25] >= cutoff:  # the rest of this scope is newer
                ok = cur.set_range(layout.prefix_end(scope))
                continue
            due.append((key, bytes(cur.value())))
            ok = cur.next()
        for key, raw in due:
            self._remove(txn, key[:17], key[17:], decode(ClickWindowEntry, raw))
        return len(due)

    def _remove(self, txn: lmdb.Transaction, scope: bytes, tail: bytes,
                entry: ClickWindowEntry) -> None:
        txn.delete(scope + tail, db=self._entries)
        txn.delete(layout.window_cohort_prefix(scope, entry.os_major, entry.country) + tail,
                   db=self._by_cohort)
        if entry.net_hash is not None:
            txn.delete(layout.window_net_prefix(scope, entry.net_hash, entry.os_major) + tail,
                       db=self._by_net)
