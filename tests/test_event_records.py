"""Stored custom events (storage/event_records.py, storage/events_store.py): the
batch encoder, the records a validated batch becomes, both record versions
read back, deduplicated and purged, and the counter sums of a batch."""

from __future__ import annotations

import decimal
import struct
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from storage import layout
from storage.codec import encode
from storage.event_records import (
    V1_KEY_SIZE,
    NewEvents,
    StoredEvent,
    dedup_key,
    encode_all,
    event_json,
    received_and_install,
    second_floor,
    sent_at_ms,
    uid16,
)
from storage.events_store import EventsStore, _sums
from storage.lmdb_store import LmdbStore
from svc_engine.event_batch import parse_event_rows
from svc_engine.events import revenue
from svc_engine.installs import Install
from svc_engine.keys import Mode
from tests.migration_helpers import cut_migration, reopened

INSTALL = "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab"
PROJECT = "0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"
LINK = "0d9e8f7a-6b5c-4d3e-9f21-0a1b2c3d4e5f"
NOW = 1_795_000_000_000
DAY_MS = 86_400_000

json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=8),
                         st.sampled_from(["}", "{", "},{", "}\n{", '","', "}, {"]))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=15)


@settings(max_examples=500)
@given(st.lists(st.one_of(st.dictionaries(st.text(max_size=5), json_values, max_size=4),
                          json_values), max_size=8))
def test_encode_all_is_orjson_per_value(values: list[Any]) -> None:
    assert encode_all(values) == [orjson.dumps(v) for v in values]
    objects = [v for v in values if isinstance(v, dict)]
    assert encode_all(objects) == [orjson.dumps(v) for v in objects]


@pytest.mark.parametrize("values", [
    ["},{", "{"],  # one '{' a value and a '},{' that no object makes
    [{"a": "},{"}, {}],
    [{"a": [{}, {}]}, {"b": 1}],
    [[{}], [{}]],
])
def test_encode_all_cuts_only_a_batch_of_objects_at_their_own_braces(values: list[Any]) -> None:
    assert encode_all(values) == [orjson.dumps(v) for v in values]


@pytest.mark.parametrize(("ms", "floor"), [
    (0, 0), (999, 0), (1_000, 1_000), (1_795_000_000_999, 1_795_000_000_000), (-5, 0)])
def test_a_scan_from_a_time_starts_at_its_second(ms: int, floor: int) -> None:
    assert second_floor(ms) == floor


def ev(i: int, **over: Any) -> dict[str, Any]:
    body = {"id": str(uuid.UUID(int=i + 1)), "name": f"n{i % 3}",
            "properties": {"revenue": 1.25 * (i % 4), "currency": "EUR", "i": i},
            "linkId": None, "occurredAt": "2026-11-01T10:00:00.123Z"}
    body.update(over)
    return body


def new_events(items: list[dict[str, Any]], now: int = NOW) -> NewEvents:
    rows = parse_event_rows({"installId": INSTALL, "events": items}, now_ms=now,
                            encode_all=encode_all)
    return NewEvents.of(rows, received_at_ms=now)


def test_new_events_hold_the_stored_json_and_key_parts() -> None:
    items = [ev(0, name='quote " and %s', linkId=LINK.upper()),
             ev(1, occurredAt="2999-01-01T00:00:00Z", properties=None)]
    new = new_events(items)
    assert new.ids == (items[0]["id"], items[1]["id"]) and new.distinct
    assert new.id16 == (uuid.UUID(items[0]["id"]).bytes, uuid.UUID(items[1]["id"]).bytes)
    assert orjson.loads(new.json(0)) == {**items[0], "linkId": LINK}
    assert orjson.loads(new.json(1)) == {**items[1], "properties": {}}
    assert new.values[0][:17] == b"\x02" + uid16(INSTALL)
    occurred = 1_793_527_200_123
    assert new.places == (struct.pack(">QQH", occurred - 123, NOW, 123),
                          struct.pack(">QQH", NOW - NOW % 1000, NOW, NOW % 1000))
    assert new.revenue == (("EUR", decimal.Decimal(0)), None)
    # dedup keys on the time as sent, not clamped to arrival
    assert new.dedup == (struct.pack(">Q", occurred) + new.id16[0],
                         struct.pack(">Q", 32_472_144_000_000) + new.id16[1])
    assert not new_events([ev(0), ev(0)]).distinct
    assert new_events([ev(0, properties={"k": 1})]).revenue is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["EUR", "USD", "usd", 5, None]),
                          st.sampled_from([1, 1.0, True, 0.0, -0.0, 0, 9.99, "1", None,
                                           [1], 10**13]),
                          st.booleans()), min_size=1, max_size=12))
def test_revenue_of_each_event_is_the_rule(pairs: list[tuple[Any, Any, bool]]) -> None:
    items = []
    for i, (currency, amount, present) in enumerate(pairs):
        props = {"currency": currency, "revenue": amount} if present else {"x": 1}
        items.append(ev(i, properties=props))
    for _ in range(2):  # the second time from memory
        new = new_events(items)
        expected = [revenue(i["properties"]) for i in items]
        found = new.revenue if new.revenue is not None else (None,) * len(items)
        assert [None if r is None else (r[0], str(r[1])) for r in found] == [
            None if r is None else (r[0], str(r[1])) for r in expected]


def reference_sums(new: NewEvents, indexes: list[int]) -> tuple[dict[Any, int], dict[Any, Any]]:
    groups: dict[Any, int] = {}
    amounts: dict[Any, decimal.Decimal] = {}
    for i in indexes:
        day = new.occurred_at_ms[i] // DAY_MS
        key = (new.link_ids[i], day, new.names[i])
        groups[key] = groups.get(key, 0) + 1
        found = revenue(orjson.loads(new.json(i))["properties"])
        if found is not None:
            k = (new.link_ids[i], day, found[0])
            amounts[k] = amounts.get(k, decimal.Decimal(0)) + found[1]
    return groups, amounts


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([None, LINK]), st.integers(0, 2),
                          st.sampled_from(["EUR", "USD", None]),
                          st.sampled_from([1, 2.5, 0.1, -3, 10**12])),
                min_size=1, max_size=20), st.booleans())
@example([(LINK, 0, "EUR", 1), (LINK, 0, "USD", 2.5), (LINK, 0, "EUR", 0.1)], False)
def test_batch_sums_are_the_per_event_sums(spec: list[tuple[Any, int, Any, Any]],
                                          some_duplicates: bool) -> None:
    items = [ev(i, linkId=link, occurredAt=f"2026-11-0{1 + day}T10:00:00.123Z",
                properties={"currency": cur, "revenue": amount} if cur else {})
             for i, (link, day, cur, amount) in enumerate(spec)]
    new = new_events(items)
    indexes = list(range(len(items)))[::2] if some_duplicates else list(range(len(items)))
    got = _sums(new, indexes if some_duplicates else range(len(items)))
    want = reference_sums(new, indexes)
    assert got[0] == want[0]
    assert {k: str(v) for k, v in got[1].items()} == {k: str(v) for k, v in want[1].items()}


# --- in LMDB ------------------------------------------------------------------------------


async def registered(store: LmdbStore) -> EventsStore:
    install = Install(install_id=INSTALL, project_id=PROJECT, mode=Mode.LIVE,
                      platform="ios", created_at_ms=1)
    await store.write(lambda txn: txn.put(layout.scope(PROJECT, "live") + layout.uid(INSTALL),
                                          encode(install), db=store.db(b"installs")))
    return EventsStore(store)


async def record(events: EventsStore, items: list[dict[str, Any]], now: int = NOW) -> Any:
    return await events.record_batch(project_id=PROJECT, mode=Mode.LIVE, install_id=INSTALL,
                                     events=new_events(items, now), idem=None)


async def put_v1(store: LmdbStore, event_id: str, occurred_ms: int, received_ms: int,
                 json: bytes) -> None:
    """An event as the version 1 layout stored it (scope | ms | id)."""
    scope = layout.scope(PROJECT, "live")

    def op(txn: Any) -> None:
        txn.put(scope + struct.pack(">Q", occurred_ms) + uid16(event_id),
                struct.pack(">BQ16s", 1, received_ms, uid16(INSTALL)) + json,
                db=store.db(b"events"))
        # its dedup entry as the schema 4 migration leaves it
        txn.put(dedup_key(scope, uid16(INSTALL), occurred_ms, uid16(event_id)),
                struct.pack(">Q", occurred_ms), db=store.db(b"event_ids"))

    await store.write(op)


async def test_a_batch_is_stored_deduplicated_and_read_back(store: LmdbStore) -> None:
    events = await registered(store)
    items = [ev(i, occurredAt=f"2026-11-01T10:00:0{i % 2}.{100 + i}Z") for i in range(6)]
    assert (await record(events, items)).to_json() == {"accepted": 6, "duplicates": 0,
                                                        "rejected": []}
    late = ev(7, occurredAt="2026-11-01T10:00:00.050Z")  # earlier, but it arrives later
    again = await record(events, [items[0], late, late], now=NOW + 5)
    assert again.to_json() == {"accepted": 1, "duplicates": 2, "rejected": []}
    got = events.get(PROJECT, Mode.LIVE, INSTALL, items[3]["id"])
    assert got is not None and orjson.loads(got.json) == items[3]
    assert (got.occurred_at_ms, got.received_at_ms, got.install_id) == (
        1_793_527_201_103, NOW, INSTALL)
    # by the second it occurred, then by arrival; a range filters the exact time
    pages = list(events.pages(PROJECT, Mode.LIVE, 0, 2 * NOW, page_size=4))
    assert [len(p) for p in pages] == [4, 3]
    order = [e.id for p in pages for e in p]
    assert order == [*(items[i]["id"] for i in (0, 2, 4)), late["id"],
                     *(items[i]["id"] for i in (1, 3, 5))]
    start = 1_793_527_201_103  # .103 of the second second: not its .101
    inside = [e.id for p in events.pages(PROJECT, Mode.LIVE, start, start + 3) for e in p]
    assert inside == [items[3]["id"], items[5]["id"]]


async def test_version_1_records_are_read_deduplicated_and_purged(store: LmdbStore) -> None:
    events = await registered(store)
    old = ev(1)
    await put_v1(store, old["id"], 1_793_527_200_123, NOW - 10, orjson.dumps(old))
    got = events.get(PROJECT, Mode.LIVE, INSTALL, old["id"])
    assert got is not None and (got.occurred_at_ms, got.received_at_ms) == (
        1_793_527_200_123, NOW - 10)
    assert orjson.loads(got.json) == old
    new = ev(2, occurredAt="2026-11-01T10:00:00.124Z")
    assert (await record(events, [old, new])).to_json() == {"accepted": 1, "duplicates": 1,
                                                             "rejected": []}
    # both in one range; within their second, a version 1 key (exact ms) sorts
    # after the version 2 keys (the second's start)
    assert [e.id for p in events.pages(PROJECT, Mode.LIVE, 0, NOW) for e in p] == [
        new["id"], old["id"]]
    keys = []
    with store.read() as txn:
        for key, value in txn.cursor(db=store.db(b"events")).iternext():
            keys.append(len(key))
            assert received_and_install(bytes(key), bytes(value))[1] == uid16(INSTALL)
    assert sorted(keys) == [V1_KEY_SIZE, V1_KEY_SIZE + 10]
    assert await events.purge(NOW - 5) == 1  # the old one arrived before the cutoff
    assert events.get(PROJECT, Mode.LIVE, INSTALL, old["id"]) is None
    assert await events.purge(NOW + 1) == 1
    with store.read() as txn:
        assert txn.stat(store.db(b"event_ids"))["entries"] == 0


def test_a_newer_record_version_is_refused() -> None:
    key = layout.scope(PROJECT, "live") + b"\x00" * 34
    with pytest.raises(ValueError, match=r"^stored event version 3 is newer than this code"):
        StoredEvent.from_item(key, b"\x03" + b"\x00" * 16 + b"{}")


def test_the_json_of_a_stored_event_is_after_its_header_in_either_version() -> None:
    new = new_events([ev(0)])
    key = layout.scope(PROJECT, "live") + new.places[0] + new.id16[0]
    assert event_json(key, new.values[0]) == new.json(0)
    v1_key = layout.scope(PROJECT, "live") + struct.pack(">Q", NOW) + new.id16[0]
    v1_value = struct.pack(">BQ16s", 1, NOW, uid16(INSTALL)) + new.json(0)
    assert len(v1_key) == V1_KEY_SIZE and event_json(v1_key, v1_value) == new.json(0)


@pytest.mark.parametrize(("text", "ms"), [
    ("2026-11-01T10:00:00.123Z", 1_793_527_200_123),
    ("2026-11-01T11:00:00.5+01:00", 1_793_527_200_500),
    ("2026-11-01T10:00:00Z", 1_793_527_200_000),
])
def test_the_sent_time_is_read_back_from_either_json(text: str, ms: int) -> None:
    new = new_events([ev(0, occurredAt=text, properties={"x": ',"occurredAt":"1970"}'})])
    assert sent_at_ms(new.json(0)) == ms
    v1 = orjson.dumps({"occurredAt": text, "id": "x", "properties": {}})  # another order
    assert sent_at_ms(v1) == ms
    later = orjson.dumps({"id": "x", "occurredAt": text, "name": "n"})  # not the last key
    assert sent_at_ms(later) == ms


async def test_a_resent_event_from_a_clock_ahead_is_a_duplicate(store: LmdbStore) -> None:
    events = await registered(store)
    ahead = ev(1, occurredAt="2999-01-01T00:00:00Z")  # clamped to each arrival
    assert (await record(events, [ahead])).to_json() == {"accepted": 1, "duplicates": 0,
                                                          "rejected": []}
    again = await record(events, [ahead, ev(2)], now=NOW + 60_000)
    assert again.to_json() == {"accepted": 1, "duplicates": 1, "rejected": []}
    got = events.get(PROJECT, Mode.LIVE, INSTALL, ahead["id"])
    assert got is not None and got.occurred_at_ms == got.received_at_ms == NOW


async def test_a_batch_dirties_few_pages_however_long_the_install_history(
        store: LmdbStore) -> None:
    """The dedup entries of a batch go together at the end of the install's
    range: with 4,000 earlier events of the install, a batch of 100 adds
    entries to at most a few leaf pages of ``event_ids``."""
    events = await registered(store)
    second = NOW - NOW % 1000
    for n in range(40):
        items = [ev(n * 100 + i, occurredAt=_iso(second - (40 - n) * 1000 + i))
                 for i in range(100)]
        await record(events, items, now=NOW + n)
    with store.read() as txn:
        before = txn.stat(store.db(b"event_ids"))
    items = [ev(5000 + i, occurredAt=_iso(second + i)) for i in range(100)]

    def pages_touched(txn: Any) -> int:
        new = new_events(items, NOW + 100)
        keys = [layout.scope(PROJECT, "live") + uid16(INSTALL) + d for d in new.dedup]
        cur = txn.cursor(db=store.db(b"event_ids"))
        # keys that fall between the same two existing neighbours share a leaf
        gaps = {bytes(cur.key()) if cur.set_range(k) else b"" for k in keys}
        return len(gaps)

    with store.read() as txn:
        assert before["entries"] == 4000 and before["leaf_pages"] >= 40
        assert pages_touched(txn) == 1  # all 100 go after the install's last entry
    assert (await record(events, items, now=NOW + 100)).accepted == 100


def _iso(ms: int) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(ms / 1000, dt.UTC).strftime(
        "%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"


async def test_migration_to_schema_4_orders_the_dedup_entries_by_time(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    import trio

    path = str(tmp_path / "v3")
    s = LmdbStore(path, map_size=64 << 20)
    items = [ev(i, occurredAt=f"2026-11-01T10:00:0{i % 3}.{100 + i}Z") for i in range(5)]
    scope, ids = layout.scope(PROJECT, "live"), s.db(b"event_ids")
    async with trio.open_nursery() as n:
        await n.start(s.writer.run)
        events = await registered(s)
        await record(events, items)
        await put_v1(s, ev(9)["id"], 1_793_527_200_123, NOW - 10, orjson.dumps(ev(9)))
        s.writer.close()
    with s.env.begin(write=True) as txn:  # the data dir as schema 3 left it
        entries = [(bytes(k), bytes(v)) for k, v in txn.cursor(db=ids).iternext()]
        assert len(entries) == 6
        for key, middle in entries:
            txn.delete(key, db=ids)
            txn.put(key[:33] + key[-16:], middle, db=ids)
        txn.put(scope + uid16(INSTALL) + uid16(ev(20)["id"]), b"\x00" * 18, db=ids)  # no event
        txn.put(b"schema_version", b"3", db=s.db(b"meta"))
    s.close()
    # Two entries a transaction, and the process dies after the second
    # transaction: the next start goes on where the committed slices ended.
    calls, stopped = cut_migration(monkeypatch, path, version=4, slice_size=2, slice_no=3)
    old_keys = sorted([key[:33] + key[-16:] for key, _ in entries]
                      + [scope + uid16(INSTALL) + uid16(ev(20)["id"])])
    assert calls == [b"", old_keys[1] + b"\x00", old_keys[3] + b"\x00"]  # after each slice
    assert stopped.meta("schema_version") == b"3"  # moves only when the migration is done
    assert stopped.meta("schema_resume") == b"4:" + calls[2]  # where it goes on
    stopped.close()
    s = reopened(path, map_size=64 << 20)
    try:
        ids = s.db(b"event_ids")
        with s.read() as reading:
            assert [(bytes(k), bytes(v))
                    for k, v in reading.cursor(db=ids).iternext()] == entries
        async with trio.open_nursery() as n:
            await n.start(s.writer.run)
            events = EventsStore(s)
            again = await record(events, [*items, ev(9), ev(10)], now=NOW + 5)
            assert again.to_json() == {"accepted": 1, "duplicates": 6, "rejected": []}
            assert await events.purge(NOW + 6) == 7
            s.writer.close()
        with s.read() as reading:
            assert reading.stat(ids)["entries"] == 0
    finally:
        s.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 2_999), st.sampled_from([None, LINK]),
                          st.sampled_from(["a", "b", 'q"%s'])), min_size=1, max_size=30),
       st.integers(0, 2_000))
@example([(0, None, "a"), (1_000, None, "a")], 2_000)  # the next second's first ms
@example([(999, None, "a"), (0, None, "a")], 2_000)
def test_new_events_are_the_per_event_records(spec: list[tuple[int, str | None, str]],
                                               ahead: int) -> None:
    """Every field of every event as the module doc defines it, one event at a
    time: the batch is cut and joined by one-second, several-seconds and
    clamped paths (``now`` may fall inside the batch's times)."""
    base = 1_793_527_200_000
    items = [ev(i, occurredAt=f"2026-11-01T10:00:{ms // 1000:02d}.{ms % 1000:03d}Z",
                linkId=link, name=name) for i, (ms, link, name) in enumerate(spec)]
    now = base + ahead
    new = new_events(items, now=now)
    for i, (ms, link, name) in enumerate(spec):
        sent = base + ms
        at = min(sent, now)
        assert new.places[i] == struct.pack(">QQH", at - at % 1000, now, at % 1000)
        assert new.dedup[i] == struct.pack(">Q", sent) + new.id16[i]
        assert new.values[i] == b"\x02" + uid16(INSTALL) + orjson.dumps(
            {"id": items[i]["id"], "name": name, "properties": items[i]["properties"],
             "linkId": link, "occurredAt": items[i]["occurredAt"]})


def test_revenue_memos_stay_bounded_with_made_up_currencies() -> None:
    """Any three capital letters pass as a currency, so a client could send a
    new one with every batch: the memos of all currencies together stay within
    ``_MEMOS_MAX`` x ``_MEMO_MAX`` entries (they once grew to 4096 x 4096)."""
    from storage import event_records

    event_records._BY_KIND.clear()
    letters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
    for i in range(300):
        currency = letters[i // 26 % 26] + letters[i % 26] + "Q"
        found = event_records._revenues(
            [{"currency": currency, "revenue": float(a) + 0.5} for a in range(100)])
        assert found is not None and found[1] == (currency, decimal.Decimal("1.5"))
    held = sum(map(len, event_records._BY_KIND.values()))
    assert len(event_records._BY_KIND) <= event_records._MEMOS_MAX
    assert held <= event_records._MEMOS_MAX * event_records._MEMO_MAX
    assert held <= 16 * 100  # what the last sixteen currencies' batches left


@pytest.mark.parametrize("one_batch", [True, False], ids=["one batch", "two batches"])
async def test_one_id_at_two_future_times_is_two_events_kept(store: LmdbStore,
                                                             one_batch: bool) -> None:
    """Two events of one id, sent at different times (so not duplicates),
    both in the future: their times clamp to the arrival, so in the same
    millisecond they had one place, and the second overwrote the first while
    both were answered and counted. The second now goes a millisecond later;
    both are read back, and both purged."""
    events = await registered(store)
    same = "11111111-1111-4111-8111-111111111111"
    first = ev(0, id=same, occurredAt="2999-01-01T00:00:00Z")
    second = ev(1, id=same, occurredAt="2999-01-02T00:00:00Z")
    if one_batch:  # (a batch with an id twice is stored an event at a time)
        answers = [(await record(events, [first, second])).to_json()]
    else:  # (a batch of distinct ids is stored at once)
        answers = [(await record(events, [first])).to_json(),
                   (await record(events, [second, ev(2)])).to_json()]
    assert sum(a["accepted"] for a in answers) == (2 if one_batch else 3)
    rows = [e for page in events.pages(PROJECT, Mode.LIVE, 0, 2 * NOW) for e in page]
    kept = sorted((e.fields()["occurredAt"], e.received_at_ms) for e in rows if e.id == same)
    assert kept == [("2999-01-01T00:00:00Z", NOW), ("2999-01-02T00:00:00Z", NOW + 1)]
    assert (await record(events, [second])).to_json()["duplicates"] == 1  # still known
    assert await events.purge(NOW + 2) == len(rows)
    with store.read() as reading:
        assert reading.stat(store.db(b"event_ids"))["entries"] == 0
