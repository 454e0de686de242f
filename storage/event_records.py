"""The stored forms of a custom event, and a validated batch made ready to store.

Records (``scope`` is project (16) | mode (1); integers big-endian):

- ``events``, version 2 (written since the events fast path):
  scope | second (8) | receivedAt ms (8) | ms within the second (2) |
  event id (16) -> ``02`` | install id (16) | event JSON.
  ``second`` is the time the event occurred (clamped to its arrival), in ms,
  rounded down to the second; plus the ms within it, that is the exact time.
- ``events``, version 1 (still read, never written): scope | occurredAt ms (8)
  | event id (16) -> ``01`` | receivedAt ms (8) | install id (16) | event JSON.
- ``event_ids`` (schema 4): scope | install id (16) | sent ms (8) | event id
  (16) -> the part of the event's key between scope and event id (18 bytes;
  8 for version 1), so ``scope + value + event id`` is the event's key either
  way. ``sent ms`` is ``occurredAt`` exactly as the app sent it (not clamped
  to arrival): a resent batch repeats it, so a resend finds the entry.

Why version 2 orders by the second first and by arrival within it: keyed by
the exact time, the events of a batch landed among those of every other
install that occurred in the same seconds, each on its own page of the index,
so a batch of 100 dirtied about 50 pages and the commit wrote ~230 KB
(fsync CPU ~0.6 ms a batch under the events benchmark). Within a second,
later arrivals go after earlier ones, so a batch's events are appended
together at the end of each second they occurred in: a handful of pages. A
range of time still reads one key range (rounded down to the second and
filtered); within a second, events come in the order they arrived. (A version
1 record, kept until retention removes it, sorts after the version 2 records
of its second.)

Why the dedup entries are ordered by time within an install (schema 4):
keyed by install and the random event id alone, an install's entries grew in
random order, so the 100 ids of a batch landed on as many pages of that
install's range as it had (an install that sent 1,000 events had 20): at
100,000 events a second the dedup index cost more than the events
themselves. By time, a batch's entries go together at the end of the
install's range: one or two pages, however long the install's history.

The event JSON is ``{"id", "name", "properties", "linkId", "occurredAt"}``
with ``occurredAt`` exactly as the app sent it, assembled from the pieces the
validation encoded (``properties`` once for the whole batch, see
:func:`encode_all`), so nothing is decoded or encoded again to store an event,
and exports read the key and header without touching the JSON.
"""

from __future__ import annotations

import decimal
import functools
import itertools
import operator
import struct
from collections.abc import Iterable, Sequence
from typing import Any

import attrs
import orjson

from svc_engine.event_batch import EventRows, Rejection
from svc_engine.event_columns import look_up
from svc_engine.events import revenue
from svc_engine.sdk_requests import parse_timestamp_ms

VERSION = 2
V1_KEY_SIZE = 17 + 8 + 16
_V1_HEADER = struct.Struct(">BQ16s")  # version, receivedAt ms, install id
_HEADER = struct.Struct(">B16s")  # version, install id
_PLACE = struct.Struct(">QQH")  # second, receivedAt ms, ms within the second
_MS = struct.Struct(">Q")
_OCCURRED_AT = b',"occurredAt":"'
_ONLY_DICT = frozenset({dict})
_MEMO_MAX = 4096


def uid16(value: str) -> bytes:
    """The 16 bytes of a canonical UUID string (validated before it gets here)."""
    return bytes.fromhex(value.replace("-", ""))


def uuid_text(raw: bytes) -> str:
    h = raw.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def encode_all(values: Sequence[object]) -> list[bytes]:
    """Each value as orjson's compact JSON (``svc_engine.event_batch.EncodeAll``).

    One orjson call for the whole batch when its text can be cut back into
    the values without parsing it: when every value is an object and the text
    holds no ``{`` but the objects' own first ones, every ``{`` starts a value,
    so ``},{`` is exactly where one value ends and the next begins (inside a
    string, ``},`` cannot be followed by ``{``; a newline never occurs in
    compact JSON). Otherwise one call a value."""
    if values and set(map(type, values)) == _ONLY_DICT:
        whole = orjson.dumps(values)
        n = len(values)
        if whole.count(b"{") == n:
            pieces = whole[1:-1].replace(b"},{", b"}\n{").split(b"\n")
            if len(pieces) == n:
                return pieces
    return [orjson.dumps(v) for v in values]


@attrs.frozen
class StoredEvent:
    """One stored custom event; ``json`` is the event as validated (see module doc)."""

    id: str
    occurred_at_ms: int
    received_at_ms: int
    install_id: str
    json: bytes

    @classmethod
    def from_item(cls, key: bytes, value: bytes) -> StoredEvent:
        if value[0] > VERSION:
            raise ValueError(f"stored event version {value[0]} is newer than this code knows")
        if len(key) == V1_KEY_SIZE:
            _, received, install = _V1_HEADER.unpack_from(value)
            return cls(id=uuid_text(key[25:41]), occurred_at_ms=_MS.unpack_from(key, 17)[0],
                       received_at_ms=received, install_id=uuid_text(install),
                       json=bytes(value[_V1_HEADER.size:]))
        second, received, within = _PLACE.unpack_from(key, 17)
        return cls(id=uuid_text(key[-16:]), occurred_at_ms=second + within,
                   received_at_ms=received, install_id=uuid_text(value[1:17]),
                   json=bytes(value[_HEADER.size:]))

    def fields(self) -> dict[str, Any]:
        decoded = orjson.loads(self.json)
        if not isinstance(decoded, dict):
            raise ValueError("a stored event's JSON is not an object")
        return decoded


def sent_at_ms(event_json: bytes) -> int:
    """The time a stored event's ``occurredAt`` says, exactly (its dedup
    entry's time; see the module doc). Version 2 JSON ends with it; for
    anything else the JSON is decoded."""
    head, _, tail = event_json.rpartition(_OCCURRED_AT)
    text = tail[:-2].decode() if head and tail.endswith(b'"}') and b'"' not in tail[:-2] \
        else str(orjson.loads(event_json)["occurredAt"])
    ms = parse_timestamp_ms(text)
    if ms is None:
        raise ValueError(f"a stored event's occurredAt is not a time: {text!r}")
    return ms


def event_json(key: bytes, value: bytes) -> bytes:
    """The JSON part of a stored event's value, either version."""
    return value[_V1_HEADER.size if len(key) == V1_KEY_SIZE else _HEADER.size:]


def dedup_key(scope: bytes, install16: bytes, sent_ms: int, id16: bytes) -> bytes:
    """An event's ``event_ids`` key (see the module doc)."""
    return scope + install16 + _MS.pack(sent_ms) + id16


def received_and_install(key: bytes, value: bytes) -> tuple[int, bytes]:
    """A stored event's arrival time and install id (16 bytes), either version."""
    if len(key) == V1_KEY_SIZE:
        _, received, install = _V1_HEADER.unpack_from(value)
        return received, install
    return _MS.unpack_from(key, 25)[0], bytes(value[1:17])


def second_floor(ms: int) -> int:
    """Where a scan for events that occurred at or after ``ms`` starts."""
    return max(0, ms) // 1000 * 1000


Revenue = tuple[str, decimal.Decimal]


@attrs.frozen
class NewEvents:
    """A validated batch on its way into the batch op, as columns: what the op
    needs, built before it runs (outside the writer). Only immutable atoms, so
    the decoded request body can be freed while the write waits for its
    commit, and a batch adds a dozen objects to the garbage collector's work,
    not hundreds. Built with C loops (``map``, ``struct``, ``join``) wherever
    one does, with as few steps per event as it takes (each costs a few
    hundred instructions): this runs for every event.

    ``places[i]`` is event i's key between scope and event id (and its dedup
    entry's value); ``dedup[i]`` its dedup key after scope and install (sent
    ms and id); ``values[i]`` its stored value; ``revenue`` is None when no
    event of the batch carries revenue. ``rejected`` are the events of the
    request the rules refused (not among these, never stored; the answer
    lists them)."""

    received_at_ms: int
    ids: tuple[str, ...]
    id16: tuple[bytes, ...]
    names: tuple[str, ...]
    link_ids: tuple[str | None, ...]
    occurred_at_ms: tuple[int, ...]
    revenue: tuple[Revenue | None, ...] | None
    places: tuple[bytes, ...]
    dedup: tuple[bytes, ...]
    values: tuple[bytes, ...]
    distinct: bool  # no id occurs twice in the batch
    rejected: tuple[Rejection, ...] = ()

    def __len__(self) -> int:
        return len(self.ids)

    def json(self, i: int) -> bytes:
        return self.values[i][_HEADER.size:]

    @classmethod
    def of(cls, rows: EventRows, *, received_at_ms: int) -> NewEvents:
        n = len(rows)
        id16 = _pieces(16, n).unpack(rows.id_bytes)
        # validated ids and times are ASCII, without newlines
        id_text = "\n".join(rows.ids).encode().split(b"\n")
        occurred_text = "\n".join(rows.occurred_at).encode().split(b"\n")
        # The JSON of an event is joined from 7 pieces, the constant text
        # between fields kept with the name (remembered per name) and the link.
        try:
            names = look_up(_NAME_PIECE, rows.names)
        except KeyError:
            names = tuple(map(_name_piece, rows.names))
        if rows.link_ids.count(None) == n:
            links: Iterable[bytes] = itertools.repeat(_NO_LINK)
        else:
            links = [_NO_LINK if link is None else _LINK % link.encode()
                     for link in rows.link_ids]
        head = _HEADER.pack(VERSION, uid16(rows.install_id)) + b'{"id":"'
        values = tuple(map(b"".join, zip(itertools.repeat(head), id_text, names,
                                         rows.properties_json, links, occurred_text,
                                         itertools.repeat(b'"}'))))
        times = rows.occurred_at_ms
        return cls(received_at_ms=received_at_ms, ids=rows.ids, id16=id16, names=rows.names,
                   link_ids=rows.link_ids, occurred_at_ms=times,
                   revenue=_revenues(rows.properties),
                   places=_places(times, received_at_ms),
                   dedup=_interleaved("Q16s", rows.sent_at_ms, id16),
                   values=values, distinct=len(set(id16)) == n, rejected=rows.rejected)


_TAILS = tuple(struct.pack(">H", ms) for ms in range(1000))  # ms within a second, packed


def _places(times: Sequence[int], received_at_ms: int) -> tuple[bytes, ...]:
    """Each event's place (second, receivedAt ms, ms within the second).

    When the batch's events all occurred in one second (usual: an app sends
    what it just recorded), each place is the same 16 bytes followed by its ms
    within the second, taken from a table: the places are that prefix joined
    by the tails, cut up by one ``struct`` call."""
    n = len(times)
    second = times[0] - times[0] % 1000
    within = list(map(operator.sub, times, itertools.repeat(second)))
    if min(within) >= 0 and max(within) < 1000:
        prefix = _MS.pack(second) + _MS.pack(received_at_ms)
        return _pieces(_PLACE.size, n).unpack(prefix + prefix.join(look_up(_TAILS, within)))
    within = list(map(operator.mod, times, itertools.repeat(1000)))
    return _interleaved("QQH", list(map(operator.sub, times, within)),
                        (received_at_ms,) * n, within)


def later_place(place: bytes) -> bytes:
    """``place`` one receivedAt millisecond later: where an event goes whose
    place another event with its id holds already. Two events of one id
    differ by the time they were sent (their dedup keys), yet share a place
    when the times clamp to the same one (both in the future) and they
    arrive in the same millisecond; the second would overwrite the first."""
    second, received, within = _PLACE.unpack(place)
    return _PLACE.pack(second, received + 1, within)


def _interleaved(fields: str, *columns: Sequence[object]) -> tuple[bytes, ...]:
    """Item i of each column packed by ``fields`` (big-endian), one piece per
    i: the columns are interleaved by slice assignments (C loops) into the
    arguments of one ``struct`` call."""
    n, k = len(columns[0]), len(columns)
    args: list[object] = [None] * (n * k)
    for i, column in enumerate(columns):
        args[i::k] = column
    packer = _packer(fields, n)
    return _pieces(packer.size // n, n).unpack(packer.pack(*args))


def joined(prefix: bytes, *columns: Sequence[bytes]) -> tuple[bytes, ...]:
    """``prefix + column_1[i] + column_2[i] ...`` for each i, the columns'
    items of one size each (an event's key, its dedup key): interleaved by
    slice assignments, joined and cut by C loops, not built one at a time."""
    n, k = len(columns[0]), len(columns) + 1
    parts: list[bytes] = [prefix] * (n * k)
    for i, column in enumerate(columns, 1):
        parts[i::k] = column
    whole = b"".join(parts)
    return _pieces(len(whole) // n, n).unpack(whole) if n else ()


@functools.lru_cache(maxsize=256)
def _packer(fields: str, n: int) -> struct.Struct:
    """Packs ``n`` times ``fields``, big-endian."""
    return struct.Struct(">" + fields * n)


@functools.lru_cache(maxsize=256)
def _pieces(size: int, n: int) -> struct.Struct:
    """Cuts ``n * size`` bytes into ``n`` pieces of ``size``."""
    return struct.Struct(f"{size}s" * n)


_NAME_PIECE: dict[str, bytes] = {}
_NO_LINK = b',"linkId":null,"occurredAt":"'
_LINK = b',"linkId":"%s","occurredAt":"'


def _name_piece(name: str) -> bytes:
    """The event JSON from the end of the id to the start of the properties,
    with ``orjson.dumps(name)``; remembered: a project has a few event names."""
    try:
        return _NAME_PIECE[name]
    except KeyError:
        pass
    if len(_NAME_PIECE) >= _MEMO_MAX:
        _NAME_PIECE.clear()
    piece = _NAME_PIECE[name] = b'","name":%s,"properties":' % orjson.dumps(name)
    return piece


_MISSING = object()
_AMOUNT = operator.itemgetter("revenue")
_CURRENCY = operator.itemgetter("currency")
_BY_KIND: dict[tuple[object, type], dict[object, Revenue | None]] = {}
_MEMOS_MAX = 16
"""Memos of ``_BY_KIND`` (currency and amount type pairs) kept at once: an
app has a few currencies, and any three capital letters pass as one, so the
product of the two bounds (16 x 4096 amounts, ~14 MiB) is what a client
sending made-up currencies can make the process hold."""


def _revenues(properties: Sequence[dict[str, object]]) -> tuple[Revenue | None, ...] | None:
    """``_revenue`` of each event's properties; None when no event has a
    ``revenue`` field. The usual batch, one currency and one type of amount, is
    looked up all at once (one C call) in a memo per currency and type; when
    one misses, each is found one at a time."""
    n = len(properties)
    try:  # the usual batch: every event has both (itemgetter: no lookup of .get)
        amounts = list(map(_AMOUNT, properties))
        currencies = set(map(_CURRENCY, properties))
        kinds = set(map(type, amounts))
        if len(currencies) == 1 and len(kinds) == 1:
            return look_up(_memo_of(currencies.pop(), kinds.pop()), amounts)
    except (KeyError, TypeError):  # one lacks either; an unhashable currency or amount
        pass
    amounts = list(map(dict.get, properties, itertools.repeat("revenue")))
    if amounts.count(None) == n:
        return None
    currencies_ = list(map(dict.get, properties, itertools.repeat("currency")))
    found: list[Any] = [_MISSING] * n
    try:
        pairs = set(zip(currencies_, map(type, amounts), strict=True))
        if len(pairs) == 1:
            found = list(map(_memo_of(*pairs.pop()).get, amounts, itertools.repeat(_MISSING)))
    except TypeError:  # an unhashable currency or amount
        pass
    if _MISSING in found:
        found = [f if f is not _MISSING else None if a is None else _revenue(p)
                 for p, a, f in zip(properties, amounts, found, strict=True)]
    return tuple(found)


def _memo_of(currency: object, kind: type) -> dict[object, Revenue | None]:
    """The remembered revenues of amounts of this currency and type (the memo
    of :func:`_revenue`, split so a batch is looked up by amount alone)."""
    memo = _BY_KIND.get((currency, kind))
    if memo is None:
        if len(_BY_KIND) >= _MEMOS_MAX:
            del _BY_KIND[next(iter(_BY_KIND))]  # the oldest: an app's few stay
        memo = _BY_KIND[currency, kind] = {}
    return memo


def _revenue(properties: dict[str, object]) -> Revenue | None:
    """``svc_engine.events.revenue``, remembered per (currency, amount type,
    amount): apps send the same few prices over and over, and building the
    exact decimal of a float is the costliest step of encoding an event.
    Bounded: a memo is cleared when it holds 4096 entries, and the oldest
    memo goes when a seventeenth currency and type pair comes (``_MEMOS_MAX``)."""
    currency, amount = properties.get("currency"), properties.get("revenue")
    if not isinstance(currency, str) or not isinstance(amount, int | float) or amount == 0:
        return revenue(properties)  # 0 too: 0.0 and -0.0 are equal keys, not equal text
    memo = _memo_of(currency, type(amount))  # the type keeps True, 1 and 1.0 apart
    try:
        return memo[amount]
    except KeyError:
        pass
    if len(memo) >= _MEMO_MAX:
        memo.clear()
    found = memo[amount] = revenue(properties)
    return found
