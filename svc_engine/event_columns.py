"""The fast check of an events batch (``POST /v1/sdk/events``): the common
shape checked a column at a time, giving exactly the rows the reference check
(``svc_engine.event_batch``, which holds the rules and calls this first) would
give, or None: "not sure", never "invalid". No error is built here; on None
the reference runs, keeps the good events and names the bad ones (or accepts
a shape this check does not know). A batch with a bad event is never vouched
for, so the rows given here are always the whole batch's.

How: the ids by character positions in the ids joined by newlines, the names
by their shortest and longest lengths, all properties with one encoder call
(nesting bounded by counting ``{`` and ``[`` in the encoded text, and measured
on that text when the count allows too many levels: :func:`text_too_deep`,
never a walk of the values), timestamps
of the usual ``...THH:MM:SS[.fff]Z`` shape by a per-second memo of the
reference parser.

Cost model (CPython, instructions counted): a Python-level step per event (a
``map`` of a function, a slice, a tuple) costs a few hundred instructions, a
C loop over a joined text a few per character. So the columns are checked on
joined texts (positions by strided slices) and looked up in tables with one
``operator.itemgetter`` call (:func:`look_up`), rather than event by event.

The limits, the encoder's type, the rows' shape, :func:`too_deep` and
:func:`text_too_deep` are shared by both checks and defined here
(``event_batch`` imports and re-exports them), so this module never imports
``event_batch``.
tests/test_event_batch.py holds the two checks to the same answers over
generated batches.
"""

from __future__ import annotations

import functools
import itertools
import operator
import re
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Final

from svc_engine.sdk_requests import parse_timestamp_ms

EVENT_NAME_MAX: Final = 100
PROPERTIES_MAX_BYTES: Final = 8 * 1024
PROPERTIES_MAX_DEPTH: Final = 8

EncodeAll = Callable[[Sequence[object]], list[bytes]]
"""Encodes each value as compact UTF-8 JSON, one result per value; raises
TypeError or ValueError for what JSON cannot hold."""

Rows = tuple[tuple[str, ...], bytes, tuple[str, ...], tuple[dict[str, object], ...],
             tuple[bytes, ...], tuple[str | None, ...], tuple[int, ...], tuple[str, ...],
             tuple[int, ...]]
"""The validated batch as columns, in :class:`svc_engine.event_batch.EventRows`'s
order after ``install_id``."""

_ZULU = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?Z"
_ZULU_LINES = re.compile(f"{_ZULU}(?:\n{_ZULU})*", re.A)
_FIELD_NAMES = ("id", "name", "properties", "linkId", "occurredAt")
_FIELDS = operator.itemgetter(*_FIELD_NAMES)
_TO_SECOND = operator.itemgetter(slice(0, 19))
_DOT_MILLI_DIGITS = operator.itemgetter(slice(19, 23))
_MORE_DIGITS = operator.itemgetter(slice(23, -1))
_LAST = operator.itemgetter(-1)
_DOT_MILLI_DIGITS_Z = operator.itemgetter(slice(19, 24))
_MILLIS = {f".{i:03d}": i for i in range(1000)}
_MILLIS_Z = {f".{i:03d}Z": i for i in range(1000)}
_MILLIS_ASCII = {f"{i:03d}".encode(): i for i in range(1000)}
_ONLY_Z = frozenset({"Z"})
_ONLY_24 = frozenset({24})
_CONTAINERS = (dict, list)
_ONLY_DICT = frozenset({dict})


def fast_rows(items: list[Any], now_ms: int, encode_all: EncodeAll) -> Rows | None:
    """The rows of a valid batch, exactly as the reference
    (``event_batch._reference_rows``) gives them for a batch it refuses no
    event of, or None: "not sure", never "invalid" (no error is built here)."""
    n = len(items)
    columns = _columns(items)
    if columns is None:
        return None
    ids, names, properties, link_ids, occurred = columns
    checked_ids = _canonical_uuids(ids)
    if checked_ids is None:
        return None
    # names
    try:
        "".join(names)  # every name a str, in one C loop
    except TypeError:
        return None
    lengths = set(map(len, names))
    if min(lengths) < 1 or max(lengths) > EVENT_NAME_MAX:
        return None
    # properties
    kinds = set(map(type, properties))
    if kinds != _ONLY_DICT and type(None) in kinds:
        properties = tuple({} if p is None else p for p in properties)
        kinds = set(map(type, properties))
    if kinds != _ONLY_DICT:
        return None
    try:
        encoded = encode_all(properties)
    except (TypeError, ValueError, RecursionError):
        return None
    if len(encoded) != n or max(map(len, encoded)) > PROPERTIES_MAX_BYTES:
        return None
    if not _shallow(encoded):
        return None
    # link ids (count compares None by identity first: cheaper than a set of types)
    if link_ids.count(None) != n:
        given = [link for link in link_ids if link is not None]
        checked_links = _canonical_uuids(given)
        if checked_links is None:
            return None
        if len(given) == n:
            link_ids = checked_links[0]
        else:
            lowered = iter(checked_links[0])
            link_ids = tuple(None if link is None else next(lowered) for link in link_ids)
    # occurredAt
    try:
        joined = "\n".join(occurred)  # every text a str, in one C loop
    except TypeError:
        return None
    sent = _times(occurred, joined)
    if sent is None:
        return None
    times = sent if max(sent) <= now_ms else tuple(map(min, sent, itertools.repeat(now_ms)))
    return (*checked_ids, names, properties, tuple(encoded), link_ids, times, occurred, sent)


def _canonical_uuids(ids: Sequence[Any]) -> tuple[tuple[str, ...], bytes] | None:
    """The ids in lower case and as bytes if each is a canonical UUID
    (``is_uuid``), else None.

    Without a regular expression or a step per id, on the ids joined by
    newlines (a TypeError if one is not a str): 37 characters an id but the
    last, a newline at offset 36 of each and a hyphen at offsets 8, 13, 18 and
    23, and the 32 other characters of each hex digits. Those are checked at
    once: ``bytes.fromhex`` of the text with the hyphens made spaces gives 16
    bytes an id only if they are (it skips whitespace between bytes, newlines
    too, and refuses any other non-hex character). With every character's
    place known, no id holds a newline, so each is 36 characters long."""
    n = len(ids)
    try:
        joined = "\n".join(ids)
    except TypeError:
        return None
    hyphens = "-" * n
    if (len(joined) != 37 * n - 1 or joined[36::37] != "\n" * (n - 1)
            or joined[8::37] != hyphens or joined[13::37] != hyphens
            or joined[18::37] != hyphens or joined[23::37] != hyphens):
        return None
    try:
        binary = bytes.fromhex(joined.replace("-", " "))
    except ValueError:
        return None
    if len(binary) != 16 * n:
        return None
    lowered = joined.lower()  # (not islower(): a Unicode lookup per character)
    if lowered == joined:
        return tuple(ids), binary
    return tuple(lowered.split("\n")), binary


def _columns(items: list[Any]) -> list[tuple[Any, ...]] | None:
    """The five fields of the events as columns (None for an absent field), or
    None if an item is not a dict.

    The usual batch has the same keys in the same order in every event (one
    SDK wrote it): then the columns are the events' values zipped, with no
    lookup per event and field. Otherwise each event is looked up."""
    n = len(items)
    try:
        layouts = set(map(tuple, items))  # each dict's keys, in order
        if len(layouts) == 1:
            values = zip(*map(dict.values, items), strict=True)
            by_name = dict(zip(layouts.pop(), values, strict=True))
            missing = (None,) * n
            return [by_name.get(name, missing) for name in _FIELD_NAMES]
    except TypeError:  # an item is not a dict (or has a key tuple() cannot hash)
        pass
    if set(map(type, items)) != _ONLY_DICT:
        return None
    try:
        fields = list(map(_FIELDS, items))
    except KeyError:  # an optional field is absent
        fields = [(e.get("id"), e.get("name"), e.get("properties"), e.get("linkId"),
                   e.get("occurredAt")) for e in items]
    return list(zip(*fields, strict=True))


def _shallow(encoded: Sequence[bytes]) -> bool:
    """Whether no value nests deeper than the limit, judged on the encoded
    texts. Each level needs a ``{`` or ``[`` of its own, and each value has at
    least one, so a batch with at most ``limit - 1`` more than one apiece is
    shallow enough; otherwise the texts with too many are measured
    (:func:`text_too_deep`: a few C passes each, where a walk of the values
    was a Python call per container: 150 ms for 100 events of 8 KiB of
    ``[]``)."""
    whole = b"".join(encoded)
    # (``in`` is a memchr, far cheaper than counting: the usual batch has no list)
    openers = whole.count(b"{") if b"[" not in whole else _openers(whole)
    if openers - len(encoded) < PROPERTIES_MAX_DEPTH:
        return True
    return not any(text_too_deep(e, PROPERTIES_MAX_DEPTH) for e in encoded
                   if _openers(e) > PROPERTIES_MAX_DEPTH)


def _openers(text: bytes) -> int:
    """How many ``{`` and ``[`` are in ``text``."""
    return text.count(b"{") + text.count(b"[")


def _times(texts: Sequence[str], joined: str) -> tuple[int, ...] | None:
    """Each text's time in ms; None if one is invalid. ``joined`` is the texts
    joined by newlines."""
    fast = _one_second_times(texts, joined)
    if fast is not None:
        return fast
    out = _zulu_times(texts)
    if out is None:
        out = []
        for text in texts:
            ms = parse_timestamp_ms(text)
            if ms is None:
                return None
            out.append(ms)
    return tuple(out)


def _one_second_times(texts: Sequence[str], joined: str) -> tuple[int, ...] | None:
    """The times of texts shaped ``YYYY-MM-DDTHH:MM:SS.fffZ`` that all fall in
    the same second (a batch an app sends at once), or None: "not this shape",
    not "invalid".

    Every character of the texts joined by newlines is checked in place: the
    length is 25 a text (so, with the newlines where they belong, none holds
    another and each is 24 long), and at offsets 19, 23 and 24 of each are the
    dot, the ``Z`` and the newline; the first text's second, checked by the
    reference parser, occurs ``n`` times (it holds neither a dot nor a
    newline, so it can only occur at the start of a text); the three digits
    of each fraction are cut out by one ``struct`` call and looked up all at
    once (a missing key: not three ASCII digits)."""
    n = len(texts)
    if (len(joined) != 25 * n - 1 or not joined.isascii() or joined[19::25] != "." * n
            or joined[23::25] != "Z" * n or joined[24::25] != "\n" * (n - 1)):
        return None
    second = joined[:19]
    base = _second_ms(second)
    if base is None or joined.count(second) != n:
        return None
    try:
        millis = look_up(_MILLIS_ASCII, _milli_digits(n).unpack_from(joined.encode()))
    except KeyError:
        return None
    return tuple(map(operator.add, itertools.repeat(base), millis))


@functools.lru_cache(maxsize=128)
def _milli_digits(n: int) -> struct.Struct:
    """Cuts the three digits after the dot out of ``n`` texts of 24 characters
    joined by newlines."""
    return struct.Struct("20x3s2x" * (n - 1) + "20x3s")


def look_up(table: Mapping[Any, Any] | Sequence[Any], keys: Sequence[Any]) -> tuple[Any, ...]:
    """``table[k]`` for each key, in one C call (KeyError if one is missing)."""
    if len(keys) == 1:  # itemgetter of one key gives the value, not a tuple
        return (table[keys[0]],)
    return operator.itemgetter(*keys)(table)  # type: ignore[no-any-return]


def _zulu_times(texts: Sequence[str]) -> list[int] | None:
    """The times of texts shaped ``YYYY-MM-DDTHH:MM:SS[.f{1,9}]Z`` (what SDKs
    send), or None for any other shape or an invalid time. A text is its whole
    second, checked and converted by the reference parser once per distinct
    second, plus its fraction's milliseconds."""
    lengths = set(map(len, texts))
    millis: Iterable[int | None]
    if lengths == _ONLY_24:  # .fffZ, one lookup checks and converts the fraction
        millis = list(map(_MILLIS_Z.get, map(_DOT_MILLI_DIGITS_Z, texts)))
        if None in millis:
            return None
    elif min(lengths) >= 24 and max(lengths) <= 30:  # .fff to .fffffffff: no regex
        millis = list(map(_MILLIS.get, map(_DOT_MILLI_DIGITS, texts)))
        rest = "".join(map(_MORE_DIGITS, texts))
        if (None in millis or set(map(_LAST, texts)) != _ONLY_Z
                or (rest and not (rest.isascii() and rest.encode().isdigit()))):
            return None
    else:
        joined = "\n".join(texts)
        if _ZULU_LINES.fullmatch(joined) is None or joined.count("\n") != len(texts) - 1:
            return None
        millis = map(_fraction_ms, texts)
    prefixes = list(map(_TO_SECOND, texts))
    seconds = {p: _second_ms(p) for p in set(prefixes)}
    if None in seconds.values():
        return None
    return list(map(operator.add, map(seconds.__getitem__, prefixes), millis))


def _fraction_ms(text: str) -> int:
    """The ms of the fraction of a ``...SS[.f{1,9}]Z`` text."""
    return int(text[20:23].rstrip("Z").ljust(3, "0")) if len(text) > 20 else 0


@functools.lru_cache(maxsize=4096)
def _second_ms(prefix: str) -> int | None:
    """``YYYY-MM-DDTHH:MM:SS`` as ms, by the reference parser (None: not a time,
    or before 1970; a second before 1970 ends before it, so its fractions are too)."""
    return parse_timestamp_ms(prefix + "Z")



def too_deep(value: object, levels: int) -> bool:
    """Whether containers nest more than ``levels`` deep in ``value``; never recurses
    further than ``levels + 1``, so a hostile body cannot exhaust the stack.

    A Python step per container: for a value an encoder gave a text of, use
    :func:`text_too_deep` on that text instead."""
    if isinstance(value, dict):
        children: Iterable[object] = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return False
    if levels == 0:
        return True
    for child in children:  # a loop, not any(): this runs for every event  # noqa: SIM110
        if isinstance(child, _CONTAINERS) and too_deep(child, levels - 1):
            return True
    return False


_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET_OR_QUOTE = bytes(sorted(set(range(256)) - set(b'"[]{}')))


def text_too_deep(text: bytes, levels: int) -> bool:
    """Whether the JSON ``text`` (valid JSON, or valid JSON values one after
    the other) nests containers more than ``levels`` deep: :func:`too_deep`
    of what it decodes to, when no object in it repeats a key (a decoder
    keeps a repeated key's last value, which may be shallower than the text).

    In C passes over the text, never a Python step per value: the escapes
    ``\\\\`` and ``\\"`` are dropped (in valid JSON a backslash is always
    the start of an escape, so pairs of them are read left to right, and any
    ``"`` left delimits a string); all but brackets and quotes are dropped,
    ``{}`` made ``[]``, and what lies between quotes (a string's brackets)
    dropped. That leaves the nesting alone: a run of more than ``levels``
    ``[`` answers at once, and otherwise each ``replace`` of ``[]``
    removes the innermost level; ``levels`` of them leave something only if
    there are more levels. A pass that removes little (long chains, as in
    ``[[[[]]]]``, a pass a level each) hands over to :func:`_deepest`, a few
    C steps a chain instead. About 4 ms for a MiB of ``[]``, 20 at most (a
    MiB of chains 12 deep, measured against 8 levels), where decoding such
    a MiB takes 100 to 200."""
    if text.count(b"[") + text.count(b"{") <= levels:
        return False
    if b"\\" in text:
        text = text.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = text.translate(_SQUARE, _NOT_BRACKET_OR_QUOTE)
    if b'"' in marks:
        marks = b"".join(marks.split(b'"')[::2])
    if b"[" * (levels + 1) in marks:  # a chain too deep, as a walk would stop at it
        return True
    for left in range(levels, 0, -1):
        if len(marks) <= 2 * left:  # too few brackets left for more than ``left`` levels
            return False
        peeled = marks.replace(b"[]", b"")
        # A pass removes two brackets a peak: few removed, long chains, about
        # len/removed passes to go at ~5 ns a byte, against ~250 ns a peak for _deepest.
        removed = max(len(marks) - len(peeled), 1)
        if removed * 100 < min(left, len(marks) // removed) * len(marks):
            return _deepest(peeled) >= left
        marks = peeled
    return bool(marks)


def _deepest(marks: bytes) -> int:
    """How deep the brackets ``marks`` (balanced, nothing else) nest, in a few
    C steps per peak: cut where a ``]`` meets a ``[``, each piece is ``a``
    opening brackets then closing ones, and its peak is every ``[`` up to it
    less every ``]`` of the pieces before."""
    if not marks:
        return 0
    pieces = marks.replace(b"][", b"]\n[").split(b"\n")
    opens = list(map(bytes.find, pieces, itertools.repeat(b"]")))
    closes_before = itertools.accumulate(map(operator.sub, map(len, pieces), opens), initial=0)
    deepest: int = max(map(operator.sub, itertools.accumulate(opens), closes_before))
    return deepest
