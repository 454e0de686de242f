"""The indexed click window (storage/click_window_store.py, schemas 3 and 7) on real LMDB.

A launch judged from the store's indexes must decide exactly what the pure
rules decide from the whole window (SPEC.md "Probabilistic matching flow",
"Limits": network hash deleted once matched and within 7 hours), leave every
index in step with the entries, and read only its candidates."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import attrs
import lmdb
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import storage.click_window_store as cws
from storage import layout
from storage.click_window_store import KEEP_MS, ClickWindow
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore
from storage.schema import SCHEMA_VERSION
from svc_engine.attribution import (
    Candidates,
    ClickWindowEntry,
    LaunchFacts,
    Matched,
    decide_first_launch,
    decide_from_candidates,
)
from svc_engine.click_window import COHORT_TAPS_COUNTED
from svc_engine.keys import Mode
from svc_engine.settings import DeferredSettings

NOW = 1_795_000_000_000
MIN = 60_000
PROJECT = "00000000-0000-4000-8000-00000000c0de"
OTHER_PROJECT = "00000000-0000-4000-8000-00000000beef"
LINKS = [f"{n:08x}-0000-4000-8000-000000000001" for n in (0xA, 0xB, 0xC)]
NET, OTHER_NET = b"n" * 32, b"o" * 32
INDEXES = (b"click_window", b"click_window_by_cohort", b"click_window_by_net")


def click_id(n: int) -> str:
    return str(uuid.UUID(int=(0xF00D << 64) + n))


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LmdbStore]:
    s = LmdbStore(str(tmp_path_factory.mktemp("window")), map_size=256 << 20)
    yield s
    s.close()


def cohort_key(project_id: str, e: ClickWindowEntry) -> bytes:
    scope = layout.scope(project_id, e.mode.value)
    return (scope + layout.part(str(e.os_major).encode())
            + layout.part(e.country.encode() if e.country is not None else None)
            + layout.ms(e.at_ms // (15 * MIN) * (15 * MIN)) + layout.uid(e.link_id)
            + layout.ms(e.at_ms) + layout.uid(e.click_id))


def expected_keys(project_id: str, entries: list[ClickWindowEntry],
                  live: list[ClickWindowEntry] | None = None) -> dict[bytes, set[bytes]]:
    """The keys of each database for a window holding ``entries``, of which
    ``live`` (all, unless given) a launch can still match, spelled out from
    the layout: every entry stays until the sweep, a consumed tap has no row
    in either index."""
    out: dict[bytes, set[bytes]] = {name: set() for name in INDEXES}
    for e in entries:
        out[b"click_window"].add(layout.scope(project_id, e.mode.value)
                                 + layout.ms(e.at_ms) + layout.uid(e.click_id))
    for e in entries if live is None else live:
        scope = layout.scope(project_id, e.mode.value)
        tail = layout.ms(e.at_ms) + layout.uid(e.click_id)
        out[b"click_window_by_cohort"].add(cohort_key(project_id, e))
        if e.net_hash is not None:
            out[b"click_window_by_net"].add(
                scope + layout.part(e.net_hash) + layout.part(str(e.os_major).encode()) + tail)
    return out


def cohort_values(txn: lmdb.Transaction, store: LmdbStore) -> dict[bytes, bytes]:
    return {bytes(k): bytes(v)
            for k, v in txn.cursor(db=store.db(b"click_window_by_cohort")).iternext()}


def put_schema_7(txn: lmdb.Transaction, store: LmdbStore, project_id: str,
                 e: ClickWindowEntry) -> None:
    """A tap as schemas 3-7 stored it: its hash in its entry, no value in its
    cohort row (the network row as now)."""
    scope = layout.scope(project_id, e.mode.value)
    tail = layout.ms(e.at_ms) + layout.uid(e.click_id)
    txn.put(scope + tail, encode(e), db=store.db(b"click_window"))
    txn.put(cohort_key(project_id, e), b"", db=store.db(b"click_window_by_cohort"))
    if e.net_hash is not None:
        txn.put(layout.window_net_prefix(scope, e.net_hash, e.os_major) + tail,
                layout.uid(e.link_id), db=store.db(b"click_window_by_net"))


def matchable(window: ClickWindow, txn: lmdb.Transaction,
              project_id: str) -> list[ClickWindowEntry]:
    """The project's taps a launch can still match, both modes, by click id."""
    return sorted(window.entries(txn, project_id, "live", 0)
                  + window.entries(txn, project_id, "test", 0), key=lambda e: e.click_id)


def stored_keys(txn: lmdb.Transaction, store: LmdbStore) -> dict[bytes, set[bytes]]:
    return {name: {bytes(k) for k in txn.cursor(db=store.db(name)).iternext(values=False)}
            for name in INDEXES}


def stored_entries(txn: lmdb.Transaction, store: LmdbStore) -> list[ClickWindowEntry]:
    return [decode(ClickWindowEntry, bytes(v))
            for v in txn.cursor(db=store.db(b"click_window")).iternext(keys=False)]


# --- the indexed decision equals the pure decision over the whole window ---------------

ages = st.one_of(st.sampled_from([0, -1, 15 * MIN, 15 * MIN + 1, 120 * MIN, 120 * MIN + 1]),
                 st.integers(min_value=-MIN, max_value=130 * MIN))
taps = st.lists(st.tuples(st.sampled_from(LINKS), ages, st.sampled_from([16, 17]),
                          st.sampled_from(["DE", "FR", None]),
                          st.sampled_from([NET, OTHER_NET, None]), st.sampled_from(Mode)),
                max_size=14)


A, B = LINKS[0], LINKS[1]
T = Mode.TEST


# A launch hashes its network under one key or, in the first hours of an
# epoch, two (the taps either side of the key's change are one group:
# storage/click_window_store.py's ``_joined``), in either order.
launch_nets = st.sampled_from([(), (NET,), (OTHER_NET,), (NET, OTHER_NET), (OTHER_NET, NET)])


@settings(max_examples=300, deadline=None)
@given(taps, st.sampled_from([16, 17, None]), st.sampled_from(["DE", "FR", None]),
       launch_nets, st.booleans(), st.booleans(),
       st.sampled_from([15, 120]), st.sampled_from(Mode))
# Both edges of the window are in (README: "inclusive and exact"), for either
# step, alone and as a conflict: drawn at random, a mutant dropping one edge
# was caught in 2 to 4 runs of 8.
@example([(A, 120 * MIN, 17, None, NET, T)], 17, "DE", (NET,), True, True, 120, T)
@example([(B, 120 * MIN, 17, None, NET, T), (A, 5 * MIN, 17, None, NET, T)],
         17, "DE", (NET,), True, True, 120, T)
@example([(A, 0, 17, "DE", NET, T)], 17, "DE", (NET,), True, True, 120, T)
@example([(A, 0, 17, "DE", None, T)], 17, "DE", (), True, False, 120, T)
@example([(A, 5 * MIN, 17, "DE", None, T), (B, 0, 17, "DE", None, T)],
         17, "DE", (), True, False, 120, T)
@example([(B, 120 * MIN, 17, "DE", None, T), (A, 5 * MIN, 17, "DE", None, T)],
         17, "DE", (), True, False, 120, T)
# Under two keys: one link's taps under both are one group, oldest first
# whatever the keys' order; two links, one under each, are a conflict; a
# group under one key alone is the whole group.
@example([(A, 9 * MIN, 17, None, OTHER_NET, T), (A, 5 * MIN, 17, None, NET, T),
          (A, 1 * MIN, 17, None, OTHER_NET, T)], 17, None, (NET, OTHER_NET), True, True, 120, T)
@example([(A, 5 * MIN, 17, None, NET, T), (B, 1 * MIN, 17, None, OTHER_NET, T)],
         17, None, (OTHER_NET, NET), True, True, 120, T)
@example([(A, 5 * MIN, 17, None, NET, T), (B, 1 * MIN, 17, None, NET, T),
          (A, 1 * MIN, 17, None, OTHER_NET, T)], 17, None, (OTHER_NET, NET), True, True, 120, T)
@example([(A, 5 * MIN, 17, None, OTHER_NET, T)], 17, None, (NET, OTHER_NET), True, True, 120, T)
# A tap after the launch (a clock's step), in the launch's quarter hour: not in
# the window, so neither a candidate nor a conflict.
@example([(B, -MIN // 2, 17, "DE", None, T), (A, 5 * MIN, 17, "DE", None, T)],
         17, "DE", (), True, False, 120, T)
def test_indexed_launch_matches_the_pure_rules_and_keeps_indexes_in_step(
        store: LmdbStore, drawn: list[tuple[str, int, int, str | None, bytes | None, Mode]],
        os_major: int | None, country: str | None, nets: tuple[bytes, ...], prob: bool, ip: bool,
        minutes: int, mode: Mode) -> None:
    window = ClickWindow(store)
    entries = [ClickWindowEntry(click_id=click_id(i), link_id=link, mode=m, os_major=major,
                                country=c, at_ms=NOW - ago, net_hash=h)
               for i, (link, ago, major, c, h, m) in enumerate(drawn)]
    launch = LaunchFacts(mode=mode, platform="ios", os_major=os_major, country=country)
    deferred = DeferredSettings(probabilistic_matching=prob, probabilistic_ip_matching=ip,
                                probabilistic_window_minutes=minutes)
    expected = decide_first_launch(launch, token=None, window=entries, settings=deferred,
                                   net_hashes=nets, now_ms=NOW)
    txn = store.env.begin(write=True)
    try:
        for e in entries:
            window.put(txn, PROJECT, e)
            window.put(txn, OTHER_PROJECT, e)  # another project's taps never count
        found = window.candidates(txn, PROJECT, launch, deferred, nets, NOW)
        decision = decide_from_candidates(launch, token=None, network=found.network,
                                          cohort=found.cohort, settings=deferred,
                                          net_hashes=nets, now_ms=NOW)
        assert decision == expected
        left = entries
        if isinstance(decision, Matched):
            window.consume(txn, PROJECT, mode.value, decision, found)
            gone = set(decision.consume_click_ids)
            left = [attrs.evolve(e, net_hash=None)
                    if e.mode is mode and e.net_hash in decision.delete_net_hashes else e
                    for e in entries if e.click_id not in gone]
        keys = stored_keys(txn, store)
        for project_id, now_left in ((PROJECT, left), (OTHER_PROJECT, entries)):
            pid = layout.uid(project_id)
            assert {name: {k for k in ks if pid in (k[:16], k[8:24])}
                    for name, ks in keys.items()} == expected_keys(project_id, entries, now_left)
        # no entry holds a hash; the taps still matchable get theirs from the cohort row
        assert sorted((decode(ClickWindowEntry, bytes(v)) for k, v in txn.cursor(
            db=store.db(b"click_window")).iternext() if k.startswith(layout.uid(PROJECT))),
                      key=lambda e: e.click_id
                      ) == sorted((attrs.evolve(e, net_hash=None) for e in entries),
                                  key=lambda e: e.click_id)
        assert matchable(window, txn, PROJECT) == sorted(left, key=lambda e: e.click_id)
    finally:
        txn.abort()


# --- network hash deletion, expiry --------------------------------------------------------


def tap(n: int, *, ago: int = 5 * MIN, major: int = 17, country: str | None = "DE",
        net: bytes | None = NET, mode: Mode = Mode.LIVE, link: str = LINKS[0]) -> ClickWindowEntry:
    return ClickWindowEntry(click_id=click_id(n), link_id=link, mode=mode, os_major=major,
                            country=country, at_ms=NOW - ago, net_hash=net)


def test_a_network_match_forgets_the_hash_on_every_tap_of_the_scope(store: LmdbStore) -> None:
    window = ClickWindow(store)
    entries = [tap(1), tap(2, major=16, link=LINKS[1]),  # same NAT, other device: hash goes
               tap(3, ago=200 * MIN),  # out of the window, same network: hash goes
               tap(4, mode=Mode.TEST),  # other mode: untouched
               tap(5, net=OTHER_NET)]
    launch = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country="DE")
    deferred = DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True)
    txn = store.env.begin(write=True)
    try:
        for e in entries:
            window.put(txn, PROJECT, e)
        found = window.candidates(txn, PROJECT, launch, deferred, (NET,), NOW)
        decision = decide_from_candidates(launch, token=None, network=found.network,
                                          cohort=found.cohort, settings=deferred, net_hashes=(NET,),
                                          now_ms=NOW)
        assert isinstance(decision, Matched) and decision.consume_click_ids == (click_id(1),)
        window.consume(txn, PROJECT, "live", decision, found)
        hashes = {e.click_id: e.net_hash for e in matchable(window, txn, PROJECT)}
        assert hashes == {click_id(2): None, click_id(3): None, click_id(4): NET,
                          click_id(5): OTHER_NET}
        assert window.forget_net_hash(txn, layout.scope(PROJECT, "live"), NET) == 0
        # the hash is nowhere: not in an entry, not in an index row
        assert all(e.net_hash is None for e in stored_entries(txn, store))
        live = layout.scope(PROJECT, "live")
        values = cohort_values(txn, store)
        assert {k: v for k, v in values.items() if k.startswith(live) and v} == {
            cohort_key(PROJECT, entries[4]): OTHER_NET}
        assert values[cohort_key(PROJECT, entries[3])] == NET  # the other mode's tap
        assert not any(k.startswith(live + layout.part(NET))
                       for k in stored_keys(txn, store)[b"click_window_by_net"])
        # the other mode's tap, forgotten on its own: one tap's hash
        assert window.forget_net_hash(txn, layout.scope(PROJECT, "test"), NET) == 1
        assert cohort_values(txn, store)[cohort_key(PROJECT, entries[3])] == b""
    finally:
        txn.abort()


def test_sweep_deletes_old_taps_from_every_index(store: LmdbStore) -> None:
    window = ClickWindow(store)
    old = [tap(1, ago=KEEP_MS + 1), tap(2, ago=KEEP_MS + 5 * MIN, net=None, country=None)]
    kept = [tap(3, ago=KEEP_MS), tap(4, ago=MIN)]
    txn = store.env.begin(write=True)
    try:
        for e in old + kept:
            window.put(txn, PROJECT, e)
        assert window.sweep(txn, NOW, limit=1) == 1
        assert window.sweep(txn, NOW, limit=10) == 1
        assert window.sweep(txn, NOW, limit=10) == 0
        assert stored_keys(txn, store) == expected_keys(PROJECT, kept)
        # 7 hours after the last tap nothing, and so no network hash, is left
        window.sweep(txn, NOW + 7 * 60 * MIN, limit=10)
        assert stored_keys(txn, store) == expected_keys(PROJECT, [])
    finally:
        txn.abort()


def test_sweep_reads_every_project_and_mode(store: LmdbStore) -> None:
    """Each scope's old taps go, whatever the scopes around it hold."""
    window = ClickWindow(store)
    mine_old = [tap(1, ago=KEEP_MS + 2), tap(2, ago=KEEP_MS + 1, mode=Mode.TEST)]
    mine_kept = [tap(3, ago=MIN), tap(4, ago=2 * MIN, mode=Mode.TEST)]
    other_old = [tap(5, ago=KEEP_MS + 3), tap(6, ago=KEEP_MS + 9 * MIN)]
    other_kept = [tap(7, ago=3 * MIN)]
    txn = store.env.begin(write=True)
    try:
        for e in mine_old + mine_kept:
            window.put(txn, PROJECT, e)
        for e in other_old + other_kept:
            window.put(txn, OTHER_PROJECT, e)
        assert window.sweep(txn, NOW, limit=3) == 3
        assert window.sweep(txn, NOW, limit=3) == 1
        assert window.sweep(txn, NOW, limit=3) == 0
        kept = expected_keys(PROJECT, mine_kept)
        for name, keys in expected_keys(OTHER_PROJECT, other_kept).items():
            kept[name] |= keys
        assert stored_keys(txn, store) == kept
    finally:
        txn.abort()


def test_sweep_deletes_taps_dated_further_ahead_than_a_clock_step_back_allows(
        store: LmdbStore) -> None:
    """A tap more than ``AHEAD_MS`` after the slice's clock (``latest_ms``,
    or the run's ``now_ms``) was dated by a wall clock that went back since:
    it goes. One at the edge stays, as do the taps made during a long run."""
    window = ClickWindow(store)
    later = NOW + 10 * MIN  # the clock as a slice began, a long run after NOW
    kept = [tap(1, ago=MIN), tap(2, ago=-5 * MIN),  # made during the run
            tap(3, ago=-(10 * MIN + cws.AHEAD_MS)), tap(4, ago=-MIN, mode=Mode.TEST)]
    ahead = [tap(5, ago=-(10 * MIN + cws.AHEAD_MS) - 1), tap(6, ago=-9 * 60 * MIN),
             tap(7, ago=-9 * 60 * MIN, mode=Mode.TEST)]
    txn = store.env.begin(write=True)
    try:
        for e in kept + ahead:
            window.put(txn, PROJECT, e)
        window.put(txn, OTHER_PROJECT, ahead[0])
        assert window.sweep(txn, NOW, limit=10, latest_ms=later) == 4
        assert stored_keys(txn, store) == expected_keys(PROJECT, kept)
        # without a slice's clock the run's own is the edge: taps 2 and 3 lie
        # further ahead of it, tap 4 at the edge
        assert window.sweep(txn, NOW, limit=10) == 2
        assert stored_keys(txn, store) == expected_keys(PROJECT, [kept[0], kept[3]])
    finally:
        txn.abort()


@contextmanager
def migrated(old: LmdbStore, path: str) -> Iterator[LmdbStore]:
    """``old``'s data dir reopened (so its migrations run), at the current
    schema version; closed afterwards."""
    old.close()
    s = LmdbStore(path, map_size=16 << 20)
    try:
        assert s.meta("schema_version") == str(SCHEMA_VERSION).encode()
        yield s
    finally:
        s.close()


def test_migration_to_schema_6_empties_the_time_index(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "v5")
    s = LmdbStore(path, map_size=16 << 20)
    with s.env.begin(write=True) as txn:  # a data dir as schema 5 left it
        put_schema_7(txn, s, PROJECT, tap(1))
        txn.put(layout.ms(NOW) + layout.scope(PROJECT, "live") + layout.uid(click_id(1)), b"",
                db=s.db(b"click_window_by_time"))
        txn.put(b"schema_version", b"5", db=s.db(b"meta"))
    with migrated(s, path) as s:
        assert s.scan(b"click_window_by_time", b"") == []
        with s.read() as txn:
            assert stored_keys(txn, s) == expected_keys(PROJECT, [tap(1)])


def test_newest_reads_backwards_within_the_scope_and_the_window(store: LmdbStore) -> None:
    window = ClickWindow(store)
    mine = [tap(n, ago=n * MIN) for n in range(1, 8)]
    others = [tap(20, ago=MIN, mode=Mode.TEST)]
    txn = store.env.begin(write=True)
    try:
        for e in mine + others:
            window.put(txn, PROJECT, e)
        window.put(txn, OTHER_PROJECT, tap(30, ago=0))
        newest = window.newest(txn, PROJECT, "live", NOW - 5 * MIN, limit=3)
        assert [e.click_id for e in newest] == [click_id(1), click_id(2), click_id(3)]
        since = window.newest(txn, PROJECT, "live", NOW - 4 * MIN, limit=10)
        assert [e.click_id for e in since] == [click_id(n) for n in (1, 2, 3, 4)]
        assert window.newest(txn, OTHER_PROJECT, "test", 0, limit=5) == []
    finally:
        txn.abort()


def test_newest_examines_a_bounded_number_of_entries(
        store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """Consumed taps keep their entries until the sweep: the debugger's list
    skips them, and gives up after ``NEWEST_SCAN`` entries however many the
    window holds."""
    monkeypatch.setattr(cws, "NEWEST_SCAN", 20)
    window = ClickWindow(store)
    live = tap(1, ago=30 * MIN, net=None)
    consumed = [tap(100 + n, ago=n * 1000, net=None, link=LINKS[n % 2]) for n in range(1, 40)]
    txn = store.env.begin(write=True)
    try:
        for e in [live, *consumed]:
            window.put(txn, PROJECT, e)
        scope = layout.scope(PROJECT, "live")
        for e in consumed:
            window._release(txn, scope, layout.ms(e.at_ms) + layout.uid(e.click_id), e)
        assert window.newest(txn, PROJECT, "live", 0, limit=5) == []  # 20 examined, all gone
        monkeypatch.setattr(cws, "NEWEST_SCAN", 39)  # the live tap is the 40th from the end
        assert window.newest(txn, PROJECT, "live", 0, limit=5) == []
        monkeypatch.setattr(cws, "NEWEST_SCAN", 40)
        assert window.newest(txn, PROJECT, "live", 0, limit=5) == [live]
    finally:
        txn.abort()


# --- cost: a launch reads its candidates, not the window ------------------------------------


def test_a_launch_decodes_only_what_it_consumes(store: LmdbStore,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    window = ClickWindow(store)
    crowd = [tap(100 + i, ago=(i % 100) * MIN, major=16 + i % 2, country=("FR", "SE")[i % 2],
                 net=bytes([2 + i % 7]) * 32, link=LINKS[i % 3]) for i in range(5000)]
    mine = [tap(1, ago=9 * MIN, net=None), tap(2, ago=3 * MIN, net=None)]
    decoded = 0

    def counting(cls: object, raw: bytes) -> object:
        nonlocal decoded
        decoded += 1
        return decode(cls, raw)  # type: ignore[arg-type]

    launch = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country="DE")
    deferred = DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True)
    txn = store.env.begin(write=True)
    try:
        for e in crowd + mine:
            window.put(txn, PROJECT, e)
        monkeypatch.setattr(cws, "decode", counting)
        found = window.candidates(txn, PROJECT, launch, deferred, (b"\x01" * 32,), NOW)
        assert decoded == 0
        assert (found.network.taps, found.cohort.taps) == (0, 2)
        decision = decide_from_candidates(launch, token=None, network=found.network,
                                          cohort=found.cohort, settings=deferred,
                                          net_hashes=(b"\x01" * 32,), now_ms=NOW)
        assert isinstance(decision, Matched) and decision.consume_click_ids == (click_id(1),)
        window.consume(txn, PROJECT, "live", decision, found)
        assert decoded == 1  # the consumed tap, deleted by key
    finally:
        txn.abort()


# --- schema 3: the migration builds the indexes from existing entries -------------------------


def test_migration_to_schema_3_indexes_the_window(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "v2")
    s = LmdbStore(path, map_size=16 << 20)
    entries = [tap(1), tap(2, net=None, country=None, major=16, link=LINKS[1]),
               tap(3, mode=Mode.TEST, ago=200 * MIN), tap(4, net=b"x" * 300)]
    with s.env.begin(write=True) as txn:
        for e in entries:
            put_schema_7(txn, s, PROJECT, e)
        written = stored_keys(txn, s)
        # the data dir as schema 2 left it: entries and the time index only
        txn.drop(s.db(b"click_window_by_cohort"), delete=False)
        txn.drop(s.db(b"click_window_by_net"), delete=False)
        txn.put(b"schema_version", b"2", db=s.db(b"meta"))
    with migrated(s, path) as s, s.read() as txn:  # migrations 3 and on run
        assert stored_keys(txn, s) == written == expected_keys(PROJECT, entries)
        assert_schema_8_values(txn, s, entries)


def assert_schema_8_values(txn: lmdb.Transaction, s: LmdbStore,
                           entries: list[ClickWindowEntry]) -> None:
    """Each tap's hash in its cohort row's value (the link is in the key since
    schema 7), none in its entry; the window reads as the taps put."""
    assert cohort_values(txn, s) == {cohort_key(PROJECT, e): e.net_hash or b""
                                     for e in entries}
    assert all(e.net_hash is None for e in stored_entries(txn, s))
    assert matchable(ClickWindow(s), txn, PROJECT) == sorted(entries,
                                                             key=lambda e: e.click_id)


# --- schema 7: the cohort index keyed by link -----------------------------------------------


def test_migration_to_schema_7_keys_the_cohort_index_by_link(
        tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "v6")
    s = LmdbStore(path, map_size=16 << 20)
    entries = [tap(1), tap(2, net=None, country=None, major=16, link=LINKS[1]),
               tap(3, mode=Mode.TEST, ago=200 * MIN, link=LINKS[2])]
    with s.env.begin(write=True) as txn:
        for e in entries:
            put_schema_7(txn, s, PROJECT, e)
        written = stored_keys(txn, s)
        # the cohort index as schema 6 left it: ... | ms | click id -> link id
        cohort = s.db(b"click_window_by_cohort")
        txn.drop(cohort, delete=False)
        for e in entries:
            scope = layout.scope(PROJECT, e.mode.value)
            txn.put(layout.window_cohort_prefix(scope, e.os_major, e.country)
                    + layout.ms(e.at_ms) + layout.uid(e.click_id), layout.uid(e.link_id),
                    db=cohort)
        txn.put(b"schema_version", b"6", db=s.db(b"meta"))
    with migrated(s, path) as s, s.read() as txn:
        assert stored_keys(txn, s) == written == expected_keys(PROJECT, entries)
        assert_schema_8_values(txn, s, entries)
        found = ClickWindow(s).candidates(
            txn, PROJECT, LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17,
                                      country="DE"),
            DeferredSettings(probabilistic_matching=True), (), NOW)
        assert found.cohort.click_ids == (click_id(1),)


# --- schema 8: the hash in the cohort row, the entry kept after a match -----------------------


def test_migration_to_schema_8_moves_each_hash_into_its_cohort_row(
        tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "v7")
    s = LmdbStore(path, map_size=16 << 20)
    entries = [tap(1), tap(2, net=None, country=None, major=16, link=LINKS[1]),
               tap(3, mode=Mode.TEST, ago=200 * MIN, net=OTHER_NET), tap(4, net=b"x" * 300),
               # enough taps for many pages: the migration rewrites them as it walks them
               *(tap(1000 + i, ago=(i % 300 + 1) * MIN // 3, major=16 + i % 2,
                     net=i.to_bytes(4, "big") * 8 if i % 3 else None, link=LINKS[i % 3])
                 for i in range(3000))]
    with s.env.begin(write=True) as txn:  # the data dir as schema 7 left it
        for e in entries:
            put_schema_7(txn, s, PROJECT, e)
        written = stored_keys(txn, s)
        assert set(cohort_values(txn, s).values()) == {b""}
        txn.put(b"schema_version", b"7", db=s.db(b"meta"))
    with migrated(s, path) as s:
        with s.read() as txn:
            assert stored_keys(txn, s) == written
            assert_schema_8_values(txn, s, entries)
        with s.env.begin(write=True) as txn:  # and a network match releases what it moved
            window = ClickWindow(s)
            launch = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country=None)
            deferred = DeferredSettings(probabilistic_matching=True,
                                        probabilistic_ip_matching=True)
            found = window.candidates(txn, PROJECT, launch, deferred, (NET,), NOW)
            decision = decide_from_candidates(launch, token=None, network=found.network,
                                              cohort=found.cohort, settings=deferred,
                                              net_hashes=(NET,), now_ms=NOW)
            assert isinstance(decision, Matched) and decision.consume_click_ids == (
                click_id(1),)
            window.consume(txn, PROJECT, "live", decision, found)
            assert stored_keys(txn, s) == expected_keys(PROJECT, entries, entries[1:])


def test_a_consumed_tap_leaves_the_window_at_once_and_its_entry_with_the_sweep(
        store: LmdbStore) -> None:
    """A match deletes the tap's index rows (and so its hash) and not its
    entry: one random leaf fewer in the launch's commit. Every reader counts
    the tap as gone; the sweep deletes its entry with the other old taps."""
    window = ClickWindow(store)
    mine, other = tap(1, ago=2 * MIN), tap(2, ago=MIN, major=16, link=LINKS[1])
    launch = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country="DE")
    deferred = DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True)
    txn = store.env.begin(write=True)
    try:
        for e in (mine, other):
            window.put(txn, PROJECT, e)
        assert window.holds(txn, PROJECT, "live", mine.at_ms, mine.click_id)
        found = window.candidates(txn, PROJECT, launch, deferred, (NET,), NOW)
        decision = decide_from_candidates(launch, token=None, network=found.network,
                                          cohort=found.cohort, settings=deferred,
                                          net_hashes=(NET,), now_ms=NOW)
        assert isinstance(decision, Matched)
        window.consume(txn, PROJECT, "live", decision, found)
        # the entry is still stored, without a hash; no index row of it is left
        assert stored_entries(txn, store) == [attrs.evolve(mine, net_hash=None),
                                              attrs.evolve(other, net_hash=None)]
        assert stored_keys(txn, store) == expected_keys(
            PROJECT, [mine, other], [attrs.evolve(other, net_hash=None)])
        assert not window.holds(txn, PROJECT, "live", mine.at_ms, mine.click_id)
        assert window.entries(txn, PROJECT, "live", 0) == [attrs.evolve(other, net_hash=None)]
        assert window.newest(txn, PROJECT, "live", 0, limit=5) == [
            attrs.evolve(other, net_hash=None)]
        # a second launch from the same cohort does not find it
        again = window.candidates(txn, PROJECT, launch, deferred, (NET,), NOW)
        assert (again.network, again.cohort) == (Candidates(), Candidates())
        assert window.sweep(txn, NOW + KEEP_MS + 2 * MIN, limit=10) == 2
        assert stored_keys(txn, store) == expected_keys(PROJECT, [])
    finally:
        txn.abort()


# --- cost: a crowded cohort costs a launch a few seeks ---------------------------------------


class _CountingCursor:
    """A cursor that counts its moves (every call that positions it)."""

    def __init__(self, inner: lmdb.Cursor, moves: list[int]) -> None:
        self._inner, self._moves = inner, moves

    def __getattr__(self, name: str) -> object:
        found = getattr(self._inner, name)
        if name not in ("set_range", "next", "first", "last", "prev", "iternext"):
            return found

        def counted(*args: object, **kwargs: object) -> object:
            self._moves[0] += 1
            result = found(*args, **kwargs)
            if name == "iternext":  # each item read is a move
                return (self._moves.__setitem__(0, self._moves[0] + 1) or item
                        for item in result)
            return result

        return counted


class _CountingTxn:
    def __init__(self, inner: lmdb.Transaction) -> None:
        self._inner, self.moves = inner, [0]

    def cursor(self, db: Any = None) -> _CountingCursor:
        return _CountingCursor(self._inner.cursor(db=db), self.moves)

    def __getattr__(self, name: str) -> object:
        return getattr(self._inner, name)


@pytest.mark.parametrize("crowd", ["one link", "many links"])
def test_a_crowded_cohort_costs_a_launch_a_bounded_read(store: LmdbStore, crowd: str) -> None:
    """3,000 taps in the launch's cohort and window (and 1,000 of other links
    before the window): the cohort read moves the cursor a bounded number of
    times (the taps counted, a few seeks a quarter hour), not once a tap;
    what it finds decides as the pure rules do over the whole window."""
    window = ClickWindow(store)
    links = [LINKS[0]] if crowd == "one link" else [
        f"{n:08x}-0000-4000-8000-000000000002" for n in range(50)]
    inside = [tap(1000 + i, ago=(1 + i % 100) * MIN, net=None, link=links[i % len(links)])
              for i in range(3000)]
    before = [tap(5000 + i, ago=(130 + i % 100) * MIN, net=None,
                  link=f"{i:08x}-0000-4000-8000-000000000003") for i in range(1000)]
    launch = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country="DE")
    deferred = DeferredSettings(probabilistic_matching=True)
    txn = store.env.begin(write=True)
    try:
        for e in inside + before:
            window.put(txn, PROJECT, e)
        counting = _CountingTxn(txn)
        found = window.candidates(counting, PROJECT, launch,  # type: ignore[arg-type]
                                  deferred, (), NOW)
        # the taps counted and a few seeks in each of the window's quarter
        # hours (9 of them here); read tap by tap it would be 3,000 and more
        assert counting.moves[0] <= COHORT_TAPS_COUNTED + 60
        if crowd == "many links":  # the second link ends the read: nothing counted past it
            assert counting.moves[0] <= 60
        decision = decide_from_candidates(launch, token=None, network=found.network,
                                          cohort=found.cohort, settings=deferred,
                                          net_hashes=(), now_ms=NOW)
        assert decision == decide_first_launch(launch, token=None, window=inside + before,
                                               settings=deferred, net_hashes=(), now_ms=NOW)
        if crowd == "one link":
            assert found.cohort == Candidates(
                taps=COHORT_TAPS_COUNTED, links=1, link_id=LINKS[0], more=True,
                click_ids=(click_id(1000 + 99),))  # the oldest: 100 minutes ago
        else:
            assert found.cohort == Candidates(links=2)
    finally:
        txn.abort()


@pytest.mark.parametrize("n", [COHORT_TAPS_COUNTED - 1, COHORT_TAPS_COUNTED,
                               COHORT_TAPS_COUNTED + 1])
def test_a_cohort_counts_its_taps_to_the_bound_and_says_when_there_are_more(
        store: LmdbStore, n: int) -> None:
    """The debugger says "100 taps" or "more than 100": exactly
    ``COHORT_TAPS_COUNTED`` taps are not more."""
    window = ClickWindow(store)
    taps_ = [tap(3000 + i, ago=(1 + i) * MIN // 2, net=None) for i in range(n)]
    launch = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country="DE")
    deferred = DeferredSettings(probabilistic_matching=True)
    txn = store.env.begin(write=True)
    try:
        for e in taps_:
            window.put(txn, PROJECT, e)
        found = window.candidates(txn, PROJECT, launch, deferred, (), NOW)
        assert found.cohort == Candidates(
            taps=min(n, COHORT_TAPS_COUNTED), links=1, link_id=LINKS[0],
            more=n > COHORT_TAPS_COUNTED, click_ids=(click_id(3000 + n - 1),))
    finally:
        txn.abort()


@pytest.mark.parametrize(("a", "b"), [
    (None, b""), (b"", b"\x00"), (b"ab", b"abc"), (b"x" * 255, b"x" * 256),
    (b"x" * 300, b"x" * 301),
])
def test_key_parts_never_prefix_each_other(a: bytes | None, b: bytes) -> None:
    pa, pb = layout.part(a), layout.part(b)
    assert not pa.startswith(pb) and not pb.startswith(pa)
