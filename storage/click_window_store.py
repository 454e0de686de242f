"""The probabilistic click window in LMDB, indexed so a launch reads only its candidates.

Every tap is one entry in ``click_window`` (project | mode | ms | click id ->
``ClickWindowEntry`` without its network hash; the expiry sweep reads each
project and mode's oldest entries from there) and, while it can still be
matched, one key in each of:

- ``click_window_by_cohort`` (project | mode | iOS major | country | quarter
  hour | link id | ms | click id -> the tap's network hash, or nothing;
  schema 8): the cohort group of a launch is one key range, in it each
  quarter hour one range, and in that each link's taps one range in time
  order;
- ``click_window_by_net`` (project | mode | net hash | iOS major | ms |
  click id -> link id), for taps with a network hash: the network group is
  one key range, and every tap of a network is one prefix (deleting a hash).

So a tap's cohort row is what makes it matchable, and the network hash is
kept only in the two index rows (the cohort row's value and the network
row's key), never in the entry. A match (:meth:`consume`) deletes the
consumed taps' cohort and network rows, and so their hashes, and leaves
their entries to the sweep: deleting an entry is one more random leaf
written and flushed with the launch's commit (about a page and a third a
matched launch: bench/README.md, session 19), while the sweep deletes old
entries in time order, many to a page. Forgetting a hash
(:meth:`forget_net_hash`) empties it from the cohort rows and deletes the
network rows; the sweep (:meth:`sweep`) deletes an old tap's entry and
whatever rows it still has. Readers of the entries (:meth:`entries`,
:meth:`newest`, :meth:`holds`) count a tap as in the window only while its
cohort row stands, and give it the hash found there. All of it changes
inside the caller's write transaction.

A launch (:meth:`candidates`) reads two key ranges, keys and link ids only,
and summarizes each group for the pure decision (``Candidates``); the taps a
match consumes are released by key. Neither read goes on once the group has
taps of a second link (a conflict, whatever the rest holds). The cohort read
goes through the window's quarter hours, newest first, and in each seeks
from link to link: a link costs one seek, however many taps it has, and at
most ``COHORT_TAPS_COUNTED`` taps are counted (for the debugger's words). So
a launch in a cohort of thousands of taps (a popular campaign's iOS version
and country) costs a few seeks a quarter hour, where reading the range in
time order cost every tap, in the writer, for every launch; and the taps
kept from before the window (up to 6 hours of them) are never read, as
they are in quarter hours before it (only the window's first quarter hour
can hold some, a seek a link). So a launch costs its network group and a
bounded part of its cohort group, whatever else the window holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
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
from svc_engine.click_window import COHORT_TAPS_COUNTED
from svc_engine.settings import DeferredSettings

NEWEST_SCAN = 5_000  # entries :meth:`ClickWindow.newest` examines at most
KEEP_MS = 360 * 60_000  # the longest window; a tap's rows, and its hash, go with it (< 7 h)
AHEAD_MS = 60_000  # a tap this far after the sweep's now: the wall clock went back
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
        net = entry.net_hash
        stored = entry if net is None else attrs.evolve(entry, net_hash=None)
        out = [(scope + tail, encode(stored), self._entries),
               (_cohort_key(scope, entry, tail), net or b"", self._by_cohort)]
        if net is not None:
            out.append((layout.window_net_prefix(scope, net, entry.os_major) + tail,
                        layout.uid(entry.link_id), self._by_net))
        return out

    def entries(self, txn: lmdb.Transaction, project_id: str, mode: str,
                since_ms: int) -> list[ClickWindowEntry]:
        """Every tap of a project's window from ``since_ms`` on that a launch
        could still match, with its network hash (the debugger)."""
        scope = layout.scope(project_id, mode)
        cur = txn.cursor(db=self._entries)
        out = []
        ok = cur.set_range(scope + layout.ms(max(0, since_ms)))
        while ok:
            k = bytes(cur.key())
            if not k.startswith(scope):
                break
            entry = self._matchable(txn, scope, k[17:], bytes(cur.value()))
            if entry is not None:
                out.append(entry)
            ok = cur.next()
        return out

    def newest(self, txn: lmdb.Transaction, project_id: str, mode: str, since_ms: int,
               limit: int) -> list[ClickWindowEntry]:
        """At most ``limit`` taps from ``since_ms`` on that a launch could still
        match, newest first, read backwards from the end of the project's
        range (the debugger's list), among its newest ``NEWEST_SCAN`` entries:
        consumed taps keep their entries until the sweep, and a window whose
        taps were nearly all matched must not cost the page a read of all of
        them."""
        scope = layout.scope(project_id, mode)
        cur = txn.cursor(db=self._entries)
        ok = cur.prev() if cur.set_range(scope + b"\xff" * 25) else cur.last()
        out: list[ClickWindowEntry] = []
        since = layout.ms(max(0, since_ms))
        examined = 0
        while ok and len(out) < limit and examined < NEWEST_SCAN:
            k = bytes(cur.key())
            if not k.startswith(scope) or k[17:25] < since:
                break
            entry = self._matchable(txn, scope, k[17:], bytes(cur.value()))
            if entry is not None:
                out.append(entry)
            examined += 1
            ok = cur.prev()
        return out

    def holds(self, txn: lmdb.Transaction, project_id: str, mode: str, at_ms: int,
              click_id: str) -> bool:
        """Whether the tap of this click is still in the window (not consumed,
        not swept)."""
        scope = layout.scope(project_id, mode)
        tail = layout.ms(at_ms) + layout.uid(click_id)
        raw = txn.get(scope + tail, db=self._entries)
        return raw is not None and self._matchable(txn, scope, tail, bytes(raw)) is not None

    def _matchable(self, txn: lmdb.Transaction, scope: bytes, tail: bytes,
                   raw: bytes) -> ClickWindowEntry | None:
        """The stored entry with its network hash (from its cohort row), or
        None once a launch consumed it (its entry waits for the sweep)."""
        entry = decode(ClickWindowEntry, raw)
        net = txn.get(_cohort_key(scope, entry, tail), db=self._by_cohort)
        if net is None:
            return None
        return attrs.evolve(entry, net_hash=bytes(net)) if len(net) else entry

    # -- a launch -------------------------------------------------------------------

    def candidates(self, txn: lmdb.Transaction, project_id: str, launch: LaunchFacts,
                   settings: DeferredSettings, net_hashes: tuple[bytes, ...],
                   now_ms: int) -> LaunchCandidates:
        """The launch's network and cohort groups (empty when a step does not
        apply). The network group is the taps under any of ``net_hashes``
        (one a key a tap in the window may have been hashed with: a network's
        taps either side of a key's change are one group)."""
        scope = layout.scope(project_id, launch.mode.value)
        first, last = window_bounds(settings.probabilistic_window_minutes, now_ms)
        tails: dict[str, bytes] = {}
        network = cohort = Candidates()
        if last < max(0, first):
            return LaunchCandidates(network, cohort, tails)
        if network_skip(launch, settings, net_hashes) is None:
            assert launch.os_major is not None
            network = _joined([self._network_group(
                txn, layout.window_net_prefix(scope, net, launch.os_major), first, last, tails)
                for net in net_hashes], tails)
        if cohort_skip(launch, settings) is None:
            assert launch.os_major is not None
            cohort = self._cohort_group(
                txn, layout.window_cohort_prefix(scope, launch.os_major, launch.country),
                first, last, tails)
        return LaunchCandidates(network, cohort, tails)

    def _network_group(self, txn: lmdb.Transaction, prefix: bytes, first_ms: int,
                       last_ms: int, tails: dict[str, bytes]) -> Candidates:
        """The network group: its range in time order, every tap listed, until
        a tap of a second link (a conflict) or the end of the window."""
        cur = txn.cursor(db=self._by_net)
        if not cur.set_range(prefix + layout.ms(max(0, first_ms))):
            return Candidates()
        end = prefix + layout.ms(last_ms) + b"\xff" * 16
        link: bytes | None = None
        listed: list[bytes] = []
        for k, v in cast(Iterator[tuple[bytes, bytes]], cur.iternext()):  # buffers off
            if k > end:
                break
            if link is None:
                link = v
            elif v != link:
                return Candidates(links=2)
            listed.append(k[-_TAIL:])
        if link is None:
            return Candidates()
        return Candidates(taps=len(listed), links=1, link_id=layout.from_uid(link),
                          click_ids=tuple(_listed(listed, tails)))

    def _cohort_group(self, txn: lmdb.Transaction, prefix: bytes, first_ms: int,
                      last_ms: int, tails: dict[str, bytes]) -> Candidates:
        """The cohort group, quarter hour by quarter hour from the newest, link
        by link in each (keys: prefix | quarter hour | link | ms | click): a
        tap of a second link ends the read (a conflict); with one link, its
        oldest tap in the window and up to ``COHORT_TAPS_COUNTED`` of its taps
        counted. A link costs one seek in each quarter hour it has taps in."""
        lo, hi = layout.ms(max(0, first_ms)), layout.ms(last_ms)
        at = len(prefix) + 8 + 16  # where a key's ms begins
        cur = txn.cursor(db=self._by_cohort)
        key_of = cast(Callable[[], bytes], cur.key)  # buffers off: bytes
        link: bytes | None = None  # the one link found so far
        oldest = b""  # the key of its oldest tap in the window so far
        counted = 0
        bucket = last_ms - last_ms % layout.WINDOW_BUCKET_MS
        while bucket >= max(0, first_ms) - max(0, first_ms) % layout.WINDOW_BUCKET_MS:
            quarter = prefix + layout.ms(bucket)
            ok = cur.set_range(quarter)
            while ok:
                key = key_of()
                if not key.startswith(quarter):
                    break
                link_prefix = key[:at]
                if key[at:at + 8] < lo:  # this link's taps before the window: skip them
                    ok = cur.set_range(link_prefix + lo)
                    continue
                if key[at:at + 8] <= hi:
                    if link is None:
                        link = key[at - 16:at]
                    elif key[at - 16:at] != link:
                        return Candidates(links=2)
                    oldest = key  # a quarter hour read later is older
                    end = link_prefix + hi + b"\xff" * 16
                    while ok and counted <= COHORT_TAPS_COUNTED and key_of() <= end:
                        counted += 1
                        ok = cur.next()
                ok = cur.set_range(layout.prefix_end(link_prefix))
            bucket -= layout.WINDOW_BUCKET_MS
        if link is None:
            return Candidates()
        return Candidates(taps=min(counted, COHORT_TAPS_COUNTED), links=1,
                          link_id=layout.from_uid(link),
                          click_ids=tuple(_listed([oldest[-_TAIL:]], tails)),
                          more=counted > COHORT_TAPS_COUNTED)

    def consume(self, txn: lmdb.Transaction, project_id: str, mode: str, decision: Matched,
                found: LaunchCandidates) -> None:
        """Take the taps a match consumed out of the indexes (by key), then
        forget its network hashes. Their entries stay until the sweep."""
        scope = layout.scope(project_id, mode)
        for click_id in decision.consume_click_ids:
            tail = found.tails[click_id]  # the decision consumes listed taps only
            raw = txn.get(scope + tail, db=self._entries)
            if raw is not None:
                self._release(txn, scope, tail, decode(ClickWindowEntry, bytes(raw)))
        for net in decision.delete_net_hashes:
            self.forget_net_hash(txn, scope, net)

    def forget_net_hash(self, txn: lmdb.Transaction, scope: bytes, net_hash: bytes) -> int:
        """Drop ``net_hash`` from every tap of the scope that carries it (the taps stay)."""
        prefix = layout.window_net_prefix(scope, net_hash)
        done = 0
        for k, _ in self.store.scan_in(txn, b"click_window_by_net", prefix):
            tail = k[-_TAIL:]
            raw = txn.get(scope + tail, db=self._entries)
            if raw is not None:
                key = _cohort_key(scope, decode(ClickWindowEntry, bytes(raw)), tail)
                if txn.get(key, db=self._by_cohort) is not None:
                    txn.put(key, b"", db=self._by_cohort)
            txn.delete(k, db=self._by_net)
            done += 1
        return done

    def _release(self, txn: lmdb.Transaction, scope: bytes, tail: bytes,
                 entry: ClickWindowEntry) -> None:
        """Delete a tap's cohort row and, when it has a hash, its network row:
        it can no longer be matched, and its hash is gone."""
        net = txn.pop(_cohort_key(scope, entry, tail), db=self._by_cohort)
        if net:
            txn.delete(layout.window_net_prefix(scope, bytes(net), entry.os_major) + tail,
                       db=self._by_net)

    # -- expiry ------------------------------------------------------------------------

    def sweep(self, txn: lmdb.Transaction, now_ms: int, limit: int,
              latest_ms: int | None = None) -> int:
        """Delete up to ``limit`` taps older than the longest window, consumed
        or not (and so their hashes, well within 7 hours): the oldest entries
        of each project and mode, one key range each, then a seek past the
        rest of that scope.
        (A tap's entry is read by key, so no separate time index is written
        with every tap and every consumption.)

        Taps more than ``AHEAD_MS`` after ``latest_ms`` (the clock read as
        this slice began; ``now_ms`` is when its run began, and a long run's
        new taps are after it) go too: only a wall clock that went back puts
        a tap there, and no launch can match it (a window ends at its
        launch), while its hash would wait for the clock to catch up, hours
        past its 7."""
        latest = now_ms if latest_ms is None else max(now_ms, latest_ms)
        cutoff = layout.ms(max(0, now_ms - KEEP_MS))
        ahead = layout.ms(max(0, latest + AHEAD_MS))
        due: list[tuple[bytes, bytes]] = []
        cur = txn.cursor(db=self._entries)
        ok = cur.first()
        while ok and len(due) < limit:
            key = bytes(cur.key())
            scope = key[:17]
            if cutoff <= key[17:25] <= ahead:  # to the first tap ahead of now, kept
                ok = cur.set_range(scope + layout.ms(max(0, latest + AHEAD_MS + 1)))
                continue
            due.append((key, bytes(cur.value())))
            ok = cur.next()
        for key, raw in due:
            self._remove(txn, key[:17], key[17:], decode(ClickWindowEntry, raw))
        return len(due)

    def _remove(self, txn: lmdb.Transaction, scope: bytes, tail: bytes,
                entry: ClickWindowEntry) -> None:
        self._release(txn, scope, tail, entry)
        txn.delete(scope + tail, db=self._entries)


def _cohort_key(scope: bytes, entry: ClickWindowEntry, tail: bytes) -> bytes:
    return layout.window_cohort_key(
        layout.window_cohort_prefix(scope, entry.os_major, entry.country),
        layout.uid(entry.link_id), tail)


def _joined(groups: list[Candidates], tails: dict[str, bytes]) -> Candidates:
    """One network group of the groups found under each of a launch's hashes:
    a conflict when any is one or when they name different links; else every
    tap of every group, oldest first (their key tails: ms | click id)."""
    if len(groups) == 1:
        return groups[0]
    found = [g for g in groups if g.links]
    if any(g.links > 1 for g in found) or len({g.link_id for g in found}) > 1:
        return Candidates(links=2)
    if not found:
        return Candidates()
    click_ids = sorted((c for g in found for c in g.click_ids), key=tails.__getitem__)
    return Candidates(taps=len(click_ids), links=1, link_id=found[0].link_id,
                      click_ids=tuple(click_ids))


def _listed(tails_in_order: list[bytes], tails: dict[str, bytes]) -> Iterator[str]:
    """The click ids of these key tails (ms | click id), each remembered in
    ``tails`` so a match deletes its taps by key."""
    for tail in tails_in_order:
        click_id = layout.from_uid(tail[8:])
        tails[click_id] = tail
        yield click_id
