"""The JSON checks a body goes through do work in proportion to its size,
with no Python step per value where C can do it: one event loop serves
every request, so a body that made a check quadratic, or a Python call per
value of a MiB, stalled every redirect behind it.

What was measured (an audit, session 34): the field of a long integer under
a long key was built for each of that key's siblings (140 KB: 378 ms and
478 MiB); the depth check made a generator per container (a MiB of ``[]``:
398 ms); the integer check decoded the body again calling Python per
integer whenever a run of 19 digits appeared, even in a string (a MiB of
``0``: 128 to 630 ms); an events batch walked oversized properties twice in
Python before measuring them (254 ms), and checked the whole body, ignored
fields included, once a kept property held a ``+``.

The tests bound the work, never the time (the suite runs on slow shared
machines): the Python calls made (:func:`counted_calls`, C functions
included) or the memory traced."""

from __future__ import annotations

import json
import sys
import tracemalloc
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.event_records import encode_all
from svc_engine.errors import ValidationError
from svc_engine.event_batch import PROPERTIES_MAX_BYTES, parse_event_rows
from svc_engine.event_columns import text_too_deep, too_deep
from web.api_events import validated
from web.http import Request, inexact_integer, refuse_inexact
from web.http import too_deep as body_too_deep
from web.request_head import BODY_EXTENSION

BIG = "123456789012345678901234567890"
MIB = 1 << 20
INSTALL = "5a1f3c3e-7b7e-4c1e-9a51-1c2d3e4f5a6b"
NOW = 1_900_000_000_000


@contextmanager
def counted_calls() -> Iterator[list[int]]:
    """How many functions are called in the block, Python's and C's."""
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        yield count
    finally:
        sys.setprofile(None)


def traced_peak(run: Callable[[], object]) -> tuple[object, int]:
    """What ``run`` returns, and the most memory it held at once (bytes)."""
    tracemalloc.start()
    try:
        result = run()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def event(properties: object, **more: object) -> dict[str, object]:
    return {"id": str(uuid.uuid4()), "name": "buy", "properties": properties,
            "occurredAt": "2026-01-02T03:04:05.123Z", **more}


# -- the field of a long integer: built once, not for every sibling --------------------------


def test_a_long_key_above_many_others_is_not_copied_into_their_paths() -> None:
    key = "k" * 20_000
    siblings = ",".join(f'"{i:x}":0' for i in range(2_000))
    body = f'{{"{key}":{{{siblings},"z":{BIG}}}}}'.encode()
    found, peak = traced_peak(lambda: inexact_integer(body))
    assert found == (BIG, f"{key}.z")
    # the decoded body and a few copies of the key; each sibling's path held
    # a copy of the key before (40 MB here, 478 MiB for a key of 100,000)
    assert peak < 4 * MIB, peak


async def test_the_error_names_the_field_cut_short() -> None:
    body = f'{{"{"k" * 100_000}":{{"a":[0,{{"z":{BIG}}}]}}}}'.encode()
    req = Request({"method": "POST", "path": "/v1/links", "headers": [],
                   "extensions": {BODY_EXTENSION: body}}, None)  # type: ignore[arg-type]
    with pytest.raises(ValidationError) as info:
        await req.json(MIB)
    assert info.value.field == "k" * 96 + "..."
    assert len(info.value.message) < 300


@pytest.mark.parametrize(("body", "field"), [
    (b'[[0, [1]], {"a": [{"b": 1}, {"c": %s}]}]', "[1].a[1].c"),
    (b'{"": {"": %s}}', None),  # as before: empty keys make an empty path
    (b'{"": [%s]}', "[0]"),
    (b'{"a": {}, "b": [], "c": [[], {}, [[%s]]]}', "c[2][0][0]"),
    (b'{"t": true, "n": [false, null, 1.5, "x", -%s]}', "n[4]"),
], ids=["nested", "empty keys", "under an empty key", "past empty containers", "among others"])
def test_the_field_is_the_path_to_the_first_one(body: bytes, field: str | None) -> None:
    body = body % BIG.encode()
    orjson.loads(body)
    text = ("-" + BIG) if b"-%s" % BIG.encode() in body else BIG
    assert inexact_integer(body) == (text, field)


def test_the_longest_integers_orjson_takes_are_named() -> None:
    """orjson refuses a number past a double's range, so no integer it takes
    has more than 309 digits, far below what ``int()`` converts (4,300): the
    standard library's decoder, with its own C conversion, reads each one."""
    longest = "1" + "0" * 308
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(longest + "0")
    body = f'{{"s": "{"1" * 5_000}", "ok": [1, 18446744073709551615], "n": [-{longest}]}}'
    orjson.loads(body)
    assert inexact_integer(body.encode()) == (f"-{longest}", "n[0]")
    with pytest.raises(ValidationError) as info:
        refuse_inexact(body.encode())
    assert info.value.field == "n[0]" and "(310 characters)" in info.value.message
    assert inexact_integer(f'{{"s": "{"1" * 5_000}", "n": 5}}'.encode()) is None


# -- the integer check: no Python call per integer --------------------------------------------


def test_a_long_number_in_a_string_costs_no_call_per_value() -> None:
    """A MiB of small integers and a 19-digit string: decoded again in C,
    and encoded (orjson refuses only an integer past 64 bits); none found."""
    body = ('{"a":[' + "0," * (MIB // 2 - 32) + '"1234567890123456789"]}').encode()
    with counted_calls() as calls:
        assert inexact_integer(body) is None
    assert calls[0] < 100, calls[0]  # a Python call per integer before: 524,000


def test_a_long_integer_after_a_mib_of_integers_costs_no_call_per_value() -> None:
    body = ('{"a":[' + "0," * (MIB // 2 - 32) + f"{BIG}]}}").encode()
    with counted_calls() as calls:
        found = inexact_integer(body)
    assert found == (BIG, f"a[{MIB // 2 - 32}]")
    assert calls[0] < 100, calls[0]


# -- the depth check: measured on the text -----------------------------------------------------


@pytest.mark.parametrize("body", [
    b'{"a":[' + b"[]," * (MIB // 3 - 16) + b"[]]}",
    b'{"a":[' + b",".join([b"[" * 29 + b'"]"' + b"]" * 29] * (MIB // 63)) + b"]}",
], ids=["empty lists", "chains 31 deep"])
def test_the_depth_of_a_mib_of_containers_costs_no_call_per_container(body: bytes) -> None:
    value = orjson.loads(body)
    with counted_calls() as calls:
        assert body_too_deep(body, value) is False
    assert calls[0] < 100, calls[0]  # a generator per container before


@pytest.mark.parametrize("body", [
    b"[" * 32 + b"1" + b"]" * 32,
    b"[[]," + b"[" * 31 + b"1" + b"]" * 31 + b"]",
    b'[{},' + b'{"a":' * 31 + b'"x"' + b"}" * 31 + b"]",
], ids=["alone", "beside a list", "objects"])
def test_the_levels_are_the_containers(body: bytes) -> None:
    """32 containers one in another, a value in the innermost: within the
    limit, however many brackets the body has (the walk counted the value as
    a 33rd level, but only in a body of more than 32 brackets)."""
    assert body_too_deep(body, orjson.loads(body)) is False
    assert body_too_deep(b"[" + body + b"]", orjson.loads(b"[" + body + b"]")) is True


def test_a_repeated_keys_deeper_earlier_value_is_not_judged() -> None:
    """The text may be deeper than the value: a decoder keeps a repeated
    key's last value. The value's own text is measured then."""
    body = b'{"a": ' + b"[" * 40 + b"]" * 40 + b', "a": 1}'
    assert body_too_deep(body, orjson.loads(body)) is False
    body = b'{"a": ' + b"[" * 40 + b"]" * 40 + b', "b": 1}'
    assert body_too_deep(body, orjson.loads(body)) is True


json_leaves = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                        st.floats(allow_nan=False, allow_infinity=False),
                        st.text(alphabet='[]{}"\\ab\u00e9\n\x01', max_size=6))
json_values = st.recursive(
    json_leaves,
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.text(alphabet='[]{}"\\k', max_size=3), inner, max_size=3),
    max_leaves=30)


@settings(max_examples=400)
@given(json_values, st.integers(0, 10))
def test_the_text_gives_the_depth_the_walk_gives(value: Any, levels: int) -> None:
    for text in (orjson.dumps(value), orjson.dumps(value, option=orjson.OPT_INDENT_2),
                 json.dumps(value).encode(), json.dumps(value, ensure_ascii=False).encode()):
        assert text_too_deep(text, levels) is too_deep(value, levels)


def chain(levels: int, inner: Any = 1) -> Any:
    for _ in range(levels):
        inner = [inner]
    return inner


@pytest.mark.parametrize("levels", [0, 1, 7, 8, 9, 31, 32, 33])
@pytest.mark.parametrize("shape", [
    lambda d: [chain(d, "]")] * 50,
    lambda d: [chain(d), chain(d // 2), {"k": chain(max(d - 1, 0))}] * 30,
    lambda d: [chain(3)] * 100 + [chain(d)] + [chain(2)] * 100,
    lambda d: [[chain(i % (d + 1)) for i in range(40)]],
], ids=["chains", "mixed", "one deep among many", "staircase"])
def test_the_text_measures_chains_as_the_walk_does(levels: int, shape: Any) -> None:
    """Long chains, where a pass removes little: counted by their peaks."""
    value = shape(levels)
    text = orjson.dumps(value)
    for limit in (levels - 1, levels, levels + 1, 8, 32):
        if limit >= 0:
            assert text_too_deep(text, limit) is too_deep(value, limit), limit


# -- the events batch: properties measured once, in C; only what is kept checked ---------------


def test_oversized_properties_are_measured_without_a_walk() -> None:
    """100 events with 10 KB of ``[]`` each: each refused as too large, with
    a few C calls an event (the properties were walked twice before)."""
    items = [event({"a": [[] for _ in range(3_400)]}) for _ in range(100)]
    with counted_calls() as calls, pytest.raises(ValidationError) as info:
        parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                         encode_all=encode_all)
    assert info.value.message == (f"events[0].properties: larger than {PROPERTIES_MAX_BYTES} "
                                  "bytes as JSON")
    assert calls[0] < 100 * 60, calls[0]  # 700,000 before


def test_a_valid_batch_of_lists_is_measured_without_a_walk() -> None:
    items = [event({"a": [[] for _ in range(2_700)]}) for _ in range(100)]
    body = {"installId": INSTALL, "events": items}
    with counted_calls() as calls:
        rows = parse_event_rows(body, now_ms=NOW, encode_all=encode_all)
    assert len(rows) == 100 and not rows.rejected
    assert max(map(len, rows.properties_json)) <= PROPERTIES_MAX_BYTES
    assert calls[0] < 100 * 30, calls[0]  # a call per container before: 270,000


def test_properties_the_encoder_refuses_are_measured_on_the_standard_text() -> None:
    """A lone surrogate (orjson refuses it): still "not encodable", still
    "nested deeper" first when it is both, and no walk of a big value."""
    flat = {"s": "\ud83d", "a": [[] for _ in range(3_400)]}
    deep: Any = {"s": "\ud83d", "a": [[] for _ in range(3_400)], "d": [[[[[[[[1]]]]]]]]}
    with counted_calls() as calls:
        rows = parse_event_rows({"installId": INSTALL, "events": [
            event(flat), event(deep), event({"ok": 1})]},
            now_ms=NOW, encode_all=encode_all, fast=False)
    assert [(r.index, r.message) for r in rows.rejected] == [
        (0, "events[0].properties: not encodable as JSON"),
        (1, "events[1].properties: nested deeper than 8 levels")]
    assert calls[0] < 500, calls[0]


def batch_body(*events: str, extra: str = "") -> bytes:
    return f'{{"installId": "{INSTALL}", "events": [{", ".join(events)}]{extra}}}'.encode()


def raw_event(properties: str, extra: str = "", name: str = '"buy"') -> str:
    return (f'{{"id": "{uuid.uuid4()}", "name": {name}, '
            f'"occurredAt": "2026-01-02T03:04:05Z", "properties": {properties}{extra}}}')


def check(body: bytes) -> tuple[str, Any]:
    return validated(orjson.loads(body), NOW, body)


def test_a_plus_in_what_is_kept_does_not_check_what_is_ignored() -> None:
    """A ``+`` in the kept properties (a phone number, a float's exponent)
    made the whole body be checked: a long integer in a field the batch
    ignores, or in an event refused for another rule, refused the batch.
    Only the kept properties are checked now."""
    phone = '{"phone": "+44 20 7946 0000", "f": 1e30}'  # (1e+30 encoded: read again)
    for body, refused in [(batch_body(raw_event(phone), extra=f', "sdk": {BIG}'), []),
                          (batch_body(raw_event(phone, extra=f', "x": [{BIG}]')), []),
                          (batch_body(raw_event(f'{{"n": {BIG}}}', name='""'), raw_event(phone)),
                           ["events[0].name"])]:
        install, new = check(body)
        assert (install, len(new), [r.field for r in new.rejected]) == (INSTALL, 1, refused)


def test_a_long_integer_in_what_is_kept_refuses_its_event_by_its_field() -> None:
    """Alone, like any bad event (it took the whole batch with it, which the
    SDK then drops); the batch is 400 only when no event is left, on the
    first event refused."""
    install, new = check(batch_body(raw_event('{"p": "+1"}'),
                                    raw_event(f'{{"a": {{"b": [2, {BIG}]}}}}'),
                                    raw_event(f'{{"c": {BIG}, "d": "+"}}')))
    assert (install, len(new)) == (INSTALL, 1)
    assert [(r.index, r.field) for r in new.rejected] == [
        (1, "events[1].properties.a.b[1]"), (2, "events[2].properties.c")]
    assert all("cannot be kept exactly" in r.message for r in new.rejected)
    for body, field in [
        (batch_body(raw_event(f'{{"a": {{"b": [2, {BIG}]}}}}')), "events[0].properties.a.b[1]"),
        (batch_body(raw_event("{}", name='""'), raw_event(f'{{"n": -{BIG}, "p": "+"}}'),
                    extra=f', "sdk": {BIG}'),
         "events[0].name"),
    ]:
        with pytest.raises(ValidationError) as info:
            check(body)
        assert info.value.field == field


@pytest.mark.parametrize(("number", "refused"), [
    ("18446744073709551616", True), ("-9223372036854775809", True),  # e+19, e+18 as floats
    ("18446744073709551615", False), ("-9223372036854775808", False),
    ("1e17", False), ("9.3e18", False), ("1.5e+300", False),
])
def test_the_smallest_integers_past_the_bounds_are_found(number: str, refused: bool) -> None:
    """The body is read again only for properties whose encoded text holds
    an exponent of 18 or more; the integers just past the bounds have one."""
    body = batch_body(raw_event(f'{{"n": [1, {number}], "s": "+1234567890123456789"}}'))
    if refused:
        with pytest.raises(ValidationError) as info:
            check(body)
        assert info.value.field == "events[0].properties.n[1]"
    else:
        assert len(check(body)[1]) == 1


def test_an_ignored_mib_with_a_long_integer_costs_no_call_per_value() -> None:
    """The audit's batch: a kept ``+``, and a MiB of integers ending in a
    long one in a field the batch ignores (581 ms, and refused, before)."""
    ignored = "[" + "0," * (MIB // 2 - 512) + BIG + "]"
    body = batch_body(raw_event('{"p": "+1", "f": 1.5e300}'), extra=f', "x": {ignored}')
    with counted_calls() as calls:
        check(body)
    assert calls[0] < 2_000, calls[0]
