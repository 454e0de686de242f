"""The events batch check: the fast column check (svc_engine/event_columns.py)
gives exactly the rows of the reference (svc_engine/event_batch.py) or steps
aside, over generated batches; the reference keeps the good events of a batch
and names each bad one, judging every event alone; only a bad envelope or a
batch of nothing but bad events is refused whole. The rules themselves are
tabled in tests/test_sdk_requests.py (SPEC.md "SDK event", "Limits")."""

from __future__ import annotations

import datetime as dt
import functools
import json
import operator
import uuid
from typing import Any

import attrs
import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from storage.event_records import encode_all as encode_all_orjson
from svc_engine import event_batch, event_columns
from svc_engine.errors import ValidationError
from svc_engine.event_batch import (
    EncodeAll,
    Rejection,
    encode_all_stdlib,
    parse_event_rows,
    parse_events_batch,
)

INSTALL = "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab"
EVENT_ID = "a0b1c2d3-e4f5-1789-8abc-def012345678"
LINK = "0d9e8f7a-6b5c-4d3e-9f21-0a1b2c3d4e5f"
NOW = 1_795_000_000_000  # 2026-11-18T08:26:40Z
ENCODERS: list[EncodeAll] = [encode_all_stdlib, encode_all_orjson]


def _orjson_per_value(values: Any) -> list[bytes]:
    return [orjson.dumps(v) for v in values]


# --- generated batches ---------------------------------------------------------------------

hex_digit = st.sampled_from("0123456789abcdefABCDEF")
uuids = st.builds(lambda u, upper: u.upper() if upper else u,
                  st.uuids().map(str), st.booleans())


@st.composite
def broken_uuids(draw: st.DrawFn) -> str:
    """Strings that are almost a canonical UUID."""
    text = list(draw(uuids))
    where = draw(st.integers(0, 35))
    text[where] = draw(st.sampled_from([" ", "\t", "\n", "-", "g", "G", "\u0660", "é",
                                        "0", "A"]))
    if draw(st.booleans()):
        del text[draw(st.integers(0, len(text) - 1))]
    return "".join(text)


ids = st.one_of(uuids, broken_uuids(), st.just(EVENT_ID), st.sampled_from(
    ["", "x", EVENT_ID.replace("-", ""), "{" + EVENT_ID[1:-1] + "}",
     EVENT_ID[:35] + "\n", " " + EVENT_ID[1:]]), st.integers(), st.none())
names = st.one_of(st.text(min_size=0, max_size=102),
                  st.sampled_from(["purchase", "n" * 100, "n" * 101, "", "é" * 100]),
                  st.integers(), st.none(), st.booleans())
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**63), 2**63 - 1),
                         st.floats(allow_nan=False, allow_infinity=False),
                         st.text(max_size=12), st.sampled_from(["}", "{", "},{", "[", "\n"]))
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                           max_leaves=20)


def nested(levels: int) -> Any:
    value: Any = 1
    for i in range(levels - 1):
        value = {"k": value} if i % 2 else [value]
    return {"k": value}


properties = st.one_of(
    st.none(), st.dictionaries(st.text(max_size=6), json_values, max_size=5),
    st.sampled_from([{"revenue": 9.99, "currency": "USD"}, {}, nested(8), nested(9),
                     {"k": "é" * ((8192 - 8) // 2)}, {"k": "é" * ((8192 - 8) // 2) + "x"},
                     {"k": "x" * 8185}, {"k": "x" * 8184}, {"x": float("nan")},
                     {"x": float("inf")}, {"x": 2**70}]),
    json_values)
link_ids = st.one_of(st.none(), uuids, broken_uuids(), st.integers())


@st.composite
def timestamps(draw: st.DrawFn) -> str:
    """RFC 3339 texts around the accepted shapes, and near misses."""
    when = draw(st.integers(-86_400_000, 4_102_444_800_000))  # 1969-12-31 .. 2100
    at = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=when)
    digits = draw(st.integers(0, 10))
    fraction = "" if digits == 0 else "." + (f"{at.microsecond:06d}" + "987")[:digits] \
        if digits <= 9 else "." + "1" * digits
    separator = draw(st.sampled_from(["T", "T", "T", "t", " "]))
    zone = draw(st.sampled_from(["Z", "Z", "Z", "z", "+00:00", "-05:30", "+24:00", ""]))
    text = at.strftime(f"%Y-%m-%d{separator}%H:%M:%S") + fraction + zone
    mutate = draw(st.integers(0, 9))
    if mutate == 0:  # an impossible field
        where, value = draw(st.sampled_from([(5, "13"), (8, "30"), (8, "00"), (11, "24"),
                                             (14, "60"), (17, "60"), (17, "61")]))
        text = text[:where] + value + text[where + 2:]
    elif mutate == 1:
        text = text.replace("2", "\uff12", 1)
    elif mutate == 2:
        text = text + draw(st.sampled_from(["\n", " ", "Z", "0"]))
    return text


occurred = st.one_of(timestamps(), timestamps(), timestamps(), st.integers(), st.none(),
                     st.sampled_from(["2026-02-29T00:00:00Z", "2024-02-29T23:59:59.999Z",
                                      "1970-01-01T00:00:00.000Z", "2999-01-01T00:00:00Z"]))


@st.composite
def events(draw: st.DrawFn) -> Any:
    valid = {"id": draw(uuids), "name": "purchase",
             "properties": draw(st.sampled_from([None, {}, {"revenue": 1.5}])),
             "linkId": None, "occurredAt": "2026-11-01T10:00:00.123Z"}
    for field, strategy in (("id", ids), ("name", names), ("properties", properties),
                            ("linkId", link_ids), ("occurredAt", occurred)):
        choice = draw(st.integers(0, 5))
        if choice == 0:
            del valid[field]
        elif choice == 1:
            valid[field] = draw(strategy)
    if draw(st.integers(0, 20)) == 0:
        valid["extra"] = draw(json_values)
    if draw(st.integers(0, 30)) == 0:
        return draw(json_values)  # not an event object at all
    return valid


@st.composite
def batches(draw: st.DrawFn) -> list[Any]:
    """Mostly valid batches of the usual shape, with a few bad or odd events."""
    template = draw(events())
    size = draw(st.integers(1, 12))
    items = []
    for _ in range(size):
        if draw(st.integers(0, 3)) == 0:
            items.append(draw(events()))
        elif isinstance(template, dict):
            items.append({**template, "id": draw(uuids)})
        else:
            items.append(template)
    return items


def reference(items: list[Any], encode: EncodeAll) -> Any:
    """The reference's rows (None: no event kept) and its refusals as (index,
    field, message)."""
    rows, rejected = event_batch._reference_rows(items, NOW, encode)
    return rows, tuple((r.index, r.field, r.message) for r in rejected)


@settings(max_examples=1500, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(ENCODERS))
@example([{"id": EVENT_ID, "name": "n", "occurredAt": "2026-11-01T10:00:00Z"}],
         encode_all_stdlib)
def test_fast_check_gives_the_reference_rows_or_steps_aside(items: list[Any],
                                                           encode: EncodeAll) -> None:
    fast = event_columns.fast_rows(items, NOW, encode)
    if fast is not None:  # vouched for: the whole batch, as the reference keeps it
        assert (fast, ()) == reference(items, encode)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.builds(lambda i, n, p, lk, t: {"id": i, "name": n, "properties": p,
                                                 "linkId": lk, "occurredAt": t},
                          uuids, st.sampled_from(["purchase", "view", "é" * 100]),
                          st.one_of(st.none(), st.dictionaries(st.text(max_size=5),
                                                               json_values, max_size=4)),
                          st.one_of(st.none(), uuids),
                          st.one_of(timestamps(), st.sampled_from(
                              ["2026-11-01T10:00:00.123Z", "2026-11-01T10:00:00.123456Z",
                               "2026-11-01T10:00:00Z", "2026-11-01T10:00:00.5Z"]))),
                min_size=1, max_size=100))
def test_fast_check_takes_the_usual_valid_batches(items: list[Any]) -> None:
    """The differential test above must not pass by the fast check always
    stepping aside: valid batches of the usual shapes take the fast path."""
    rows, rejected = reference(items, encode_all_orjson)
    fast = event_columns.fast_rows(items, NOW, encode_all_orjson)
    if rejected:
        assert fast is None
        return
    assert fast == rows
    usual = all(isinstance(i["occurredAt"], str) and i["occurredAt"].endswith("Z")
                and "T" in i["occurredAt"] and len(i["occurredAt"]) != 21
                and "\uff12" not in i["occurredAt"] and " " not in i["occurredAt"]
                for i in items)
    if usual:
        assert fast is not None


# --- tables ------------------------------------------------------------------------------


def event(**over: Any) -> dict[str, Any]:
    body = {"id": EVENT_ID, "name": "purchase", "properties": {"revenue": 9.99},
            "linkId": LINK, "occurredAt": "2026-11-01T10:00:00.123Z"}
    body.update(over)
    return body


@pytest.mark.parametrize("encode", ENCODERS)
def test_rows_of_a_valid_batch(encode: EncodeAll) -> None:
    second = str(uuid.UUID(int=5))
    rows = parse_event_rows({"installId": INSTALL, "events": [
        event(id=EVENT_ID.upper(), linkId=LINK.upper()),
        event(id=second, properties=None, linkId=None, occurredAt="2999-01-01T00:00:00Z")]},
        now_ms=NOW, encode_all=encode)
    assert rows.install_id == INSTALL and len(rows) == 2
    assert rows.ids == (EVENT_ID, second)
    assert rows.id_bytes == uuid.UUID(EVENT_ID).bytes + uuid.UUID(second).bytes
    assert rows.names == ("purchase", "purchase")
    assert rows.properties == ({"revenue": 9.99}, {})
    assert [json.loads(p) for p in rows.properties_json] == [{"revenue": 9.99}, {}]
    assert rows.link_ids == (LINK, None)
    assert rows.occurred_at_ms == (1_793_527_200_123, NOW)  # the second is clamped
    assert rows.occurred_at == ("2026-11-01T10:00:00.123Z", "2999-01-01T00:00:00Z")
    assert rows.sent_at_ms == (1_793_527_200_123, 32_472_144_000_000)  # as sent
    batch = parse_events_batch({"installId": INSTALL, "events": [event()]}, now_ms=NOW)
    assert batch.events == parse_event_rows(
        {"installId": INSTALL, "events": [event()]}, now_ms=NOW).inputs()


@pytest.mark.parametrize(("text", "ms"), [
    ("2026-11-01T10:00:00Z", 1_793_527_200_000),
    ("2026-11-01T10:00:00.1Z", 1_793_527_200_100),
    ("2026-11-01T10:00:00.12Z", 1_793_527_200_120),
    ("2026-11-01T10:00:00.123Z", 1_793_527_200_123),
    ("2026-11-01T10:00:00.123456Z", 1_793_527_200_123),
    ("2026-11-01T10:00:00.123456789Z", 1_793_527_200_123),
    ("2026-11-01t10:00:00.123Z", 1_793_527_200_123),
    ("2026-11-01T12:00:00.123+02:00", 1_793_527_200_123),
    ("1970-01-01T00:00:00.000Z", 0),
])
def test_times_of_every_shape_agree_with_the_reference(text: str, ms: int) -> None:
    items = [event(occurredAt=text) for _ in range(3)]
    fast = event_columns.fast_rows(items, NOW, encode_all_orjson)
    assert fast is not None and (fast, ()) == event_batch._reference_rows(items, NOW,
                                                                           encode_all_orjson)
    assert fast[-3] == fast[-1] == (ms, ms, ms)  # clamped and as sent (in the past: equal)


@pytest.mark.parametrize("bad", [
    "2026-11-01T10:00:00.1234567890Z", "2026-11-01T10:00:00.123\u0663Z",
    "2026-11-01T10:00:00.12 Z", "2026-11-01T10:00:60.123Z", "2026-02-30T10:00:00.123Z",
    "1969-12-31T23:59:59.999Z", "2026-11-01T10:00:00.123", "2026-11-01T10:00:00.1234z0",
])
def test_bad_times_step_aside_and_the_reference_names_them(bad: str) -> None:
    items = [event(), event(occurredAt=bad)]
    assert event_columns.fast_rows(items, NOW, encode_all_orjson) is None
    rows = parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW)
    assert len(rows) == 1 and [r.field for r in rows.rejected] == ["events[1].occurredAt"]
    with pytest.raises(ValidationError) as info:
        parse_event_rows({"installId": INSTALL, "events": items[1:]}, now_ms=NOW)
    assert info.value.field == "events[0].occurredAt"


@pytest.mark.parametrize("bad", [
    EVENT_ID[:9] + " " + EVENT_ID[10:], EVENT_ID[:8] + "0" + EVENT_ID[9:],
    EVENT_ID.replace("a", "\u0660", 1), EVENT_ID[:35] + "g", "-" + EVENT_ID[1:],
    EVENT_ID[:35] + "\n",
])
def test_bad_ids_step_aside_and_the_reference_names_them(bad: str) -> None:
    items = [event(), event(), event(id=bad)]
    assert event_columns.fast_rows(items, NOW, encode_all_orjson) is None
    rows = parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW)
    assert len(rows) == 2 and [r.field for r in rows.rejected] == ["events[2].id"]


def test_every_bad_event_is_named_whatever_the_path() -> None:
    items = [event(), event(name=""), event(id="x")]
    rows = parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                            encode_all=encode_all_orjson)
    assert rows.rejected == (
        Rejection(1, "events[1].name", "events[1].name: must be 1 to 100 characters"),
        Rejection(2, "events[2].id", "events[2].id: must be a UUID"))


@pytest.mark.parametrize("encode", ENCODERS)
@pytest.mark.parametrize(("fields", "field"), [
    ({"name": " "}, None),  # a name is 1 to 100 characters, spaces too
    ({"name": " " * 100}, None),
    ({"name": "n" * 100 + " "}, "name"),
    ({"name": " " * 101}, "name"),
    ({"properties": {"k": "x" * 8184}}, None),  # 8,192 bytes as JSON: the limit itself
    ({"properties": {"k": "x" * 8185}}, "properties"),
])
def test_the_edges_hold_on_both_paths(fields: dict[str, Any], field: str | None,
                                      encode: EncodeAll) -> None:
    """Alone, a good event takes the fast column check; beside a bad one the
    reference judges each event: both keep and refuse the same events at the
    name's and the properties' limits (the reference measured a name's length
    stripped, and a size of exactly 8 KiB was caught only by chance)."""
    item = event(**fields)
    # a good event alone takes the fast check; beside a bad one, the reference
    other = event(id=str(uuid.UUID(int=7)), name="other") if field else event(id="x")
    for items in ([item], [item, other], [other, item]):
        if field is not None and len(items) == 1:
            with pytest.raises(ValidationError) as info:
                parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                                 encode_all=encode)
            assert info.value.field == f"events[0].{field}"
            continue
        rows = parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                                encode_all=encode)
        at = items.index(item)
        if field is not None:
            assert [r.field for r in rows.rejected] == [f"events[{at}].{field}"]
            assert rows.names == ("other",)
        else:
            assert [r.field for r in rows.rejected] == [
                f"events[{1 - at}].id" for _ in items[1:]]
            assert rows.names == (item["name"],)


# --- batches with bad events: the good ones are kept ------------------------------------


@pytest.mark.parametrize("encode", ENCODERS)
def test_a_mixed_batch_keeps_the_good_events_in_order_and_names_the_bad(
        encode: EncodeAll) -> None:
    good = [event(id=str(uuid.UUID(int=i + 1)), name=f"n{i}", properties={"i": i})
            for i in range(4)]
    good[1] = {**good[1], "id": good[1]["id"].upper(), "linkId": None}
    items = [good[0], event(name="n" * 101), good[1],
             event(properties={"k": "x" * 8185}), good[2], good[3], event(linkId="nope"),
             "not an event"]
    rows = parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                            encode_all=encode)
    alone = parse_event_rows({"installId": INSTALL, "events": good}, now_ms=NOW,
                             encode_all=encode)
    assert rows == attrs.evolve(alone, rejected=rows.rejected)  # the same rows, in order
    assert rows.names == ("n0", "n1", "n2", "n3")
    assert rows.ids[1] == good[1]["id"].lower()
    assert [r.to_json() for r in rows.rejected] == [
        {"index": 1, "field": "events[1].name", "code": "validation_error",
         "message": "events[1].name: must be 1 to 100 characters"},
        {"index": 3, "field": "events[3].properties", "code": "validation_error",
         "message": "events[3].properties: larger than 8192 bytes as JSON"},
        {"index": 6, "field": "events[6].linkId", "code": "validation_error",
         "message": "events[6].linkId: must be a UUID"},
        {"index": 7, "field": "events[7]", "code": "validation_error",
         "message": "events[7]: must be an object"}]
    batch = parse_events_batch({"installId": INSTALL, "events": items}, now_ms=NOW)
    assert batch.events == rows.inputs() and batch.rejected == rows.rejected
    assert alone.rejected == ()


@pytest.mark.parametrize("encode", ENCODERS)
def test_a_batch_of_only_bad_events_is_refused_for_the_first(encode: EncodeAll) -> None:
    items = [event(name=""), event(id="x"), event(properties={"k": "x" * 8185})]
    with pytest.raises(ValidationError) as info:
        parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                         encode_all=encode)
    assert (info.value.field, info.value.message) == (
        "events[0].name", "events[0].name: must be 1 to 100 characters")
    with pytest.raises(ValidationError) as info:
        parse_events_batch({"installId": INSTALL, "events": [event(linkId=3)]}, now_ms=NOW)
    assert (info.value.field, info.value.message) == (
        "events[0].linkId", "events[0].linkId: must be a UUID")


@pytest.mark.parametrize(("body", "field"), [
    ([event()], None),
    ({"installId": "nope", "events": [event(), event(name="")]}, "installId"),
    ({"events": [event()]}, "installId"),
    ({"installId": INSTALL, "events": {"0": event()}}, "events"),
    ({"installId": INSTALL, "events": []}, "events"),
    ({"installId": INSTALL, "events": [event(), event(name="")] * 50 + [event()]}, "events"),
])
def test_a_bad_envelope_refuses_the_whole_batch(body: Any, field: str | None) -> None:
    with pytest.raises(ValidationError) as info:
        parse_event_rows(body, now_ms=NOW)
    assert info.value.field == field


@settings(max_examples=500, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.sampled_from(ENCODERS))
def test_each_event_is_judged_alone(items: list[Any], encode: EncodeAll) -> None:
    """The reference keeps what it would keep of each event sent alone, in
    order, and refuses the others with what it would say of them alone."""
    rows, rejected = reference(items, encode)
    kept: list[Any] = []
    expected: list[tuple[int, str, str]] = []
    for i, item in enumerate(items):
        one, refused = reference([item], encode)
        if one is None:
            ((_, field, message),) = refused
            expected.append((i, field.replace("events[0]", f"events[{i}]", 1),
                             message.replace("events[0]", f"events[{i}]", 1)))
        else:
            assert refused == ()
            kept.append(one)
    assert rejected == tuple(expected)
    if not kept:
        assert rows is None
        return
    # each column of the kept events, joined (tuples and the ids' bytes alike)
    assert rows == tuple(functools.reduce(operator.add, column)
                         for column in zip(*kept, strict=True))


@pytest.mark.parametrize("encode", [*ENCODERS, _orjson_per_value])
def test_deep_properties_are_refused_whatever_the_encoder(encode: EncodeAll) -> None:
    items = [event(properties=nested(9))]
    assert event_columns.fast_rows(items, NOW, encode) is None
    with pytest.raises(ValidationError) as info:
        parse_event_rows({"installId": INSTALL, "events": items}, now_ms=NOW,
                         encode_all=encode)
    assert info.value.message == "events[0].properties: nested deeper than 8 levels"
    deep = {"k": nested(1500)}  # deeper than any encoder recurses
    with pytest.raises(ValidationError):
        parse_event_rows({"installId": INSTALL, "events": [event(properties=deep)]},
                         now_ms=NOW, encode_all=encode)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.integers(0, 999), min_size=1, max_size=100),
       st.sampled_from(["2026-11-01T10:00:00", "2026-11-01T10:00:59", "1970-01-01T00:00:00",
                        "2026-02-30T10:00:00", "2026-11-01t10:00:00"]),
       st.integers(-1, 100), st.sampled_from(["", "1", "\n", ".", "Z", "\u0663", "T"]))
def test_times_of_one_second_agree_with_the_reference(millis: list[int], second: str,
                                                      where: int, odd: str) -> None:
    """The one-second path of the usual batch, and texts almost of its shape: a
    character changed (or cut) in one event's text, another second."""
    texts = [f"{second}.{ms:03d}Z" for ms in millis]
    if 0 <= where < len(texts):
        text = texts[where]
        at = where % len(text)
        texts[where] = text[:at] + odd + text[at + 1:]
    items = [event(id=str(uuid.UUID(int=i + 1)), occurredAt=t) for i, t in enumerate(texts)]
    fast = event_columns.fast_rows(items, NOW, encode_all_orjson)
    ref = reference(items, encode_all_orjson)
    if fast is not None:
        assert (fast, ()) == ref
    if where < 0 and "02-30" not in second:  # the usual batch takes the one-second path
        assert event_columns._one_second_times(texts, "\n".join(texts)) is not None
        assert fast is not None


@pytest.mark.parametrize("shape", ["sorted keys", "no optional keys", "extra key",
                                   "upper ids", "mixed layouts"])
def test_every_layout_of_event_keys_gives_the_reference_rows(shape: str) -> None:
    items = [event(id=str(uuid.UUID(int=i + 1)), linkId=None, properties={"i": i})
             for i in range(5)]
    if shape == "sorted keys":
        items = [dict(sorted(e.items())) for e in items]
    elif shape == "no optional keys":
        items = [{k: e[k] for k in ("id", "name", "occurredAt")} for e in items]
    elif shape == "extra key":
        items = [{"extra": [1], **e} for e in items]
    elif shape == "upper ids":
        items = [{**e, "id": e["id"].upper(), "linkId": LINK.upper()} for e in items]
    else:
        items[2] = dict(reversed(items[2].items()))
        del items[3]["linkId"]
    fast = event_columns.fast_rows(items, NOW, encode_all_orjson)
    assert fast is not None and (fast, ()) == reference(items, encode_all_orjson)


def test_events_refused_by_the_caller_are_left_out_in_batch_order() -> None:
    """``refused``: events a rule of the caller refused (web/api_events.py's
    integers past 64 bits) are named with its rejection, whatever path the
    others take, and the rest are kept."""
    second = str(uuid.UUID(int=5))
    earlier = Rejection(0, "events[0].properties", "events[0].properties: the caller's rule")
    body = {"installId": INSTALL, "events": [event(), event(id=second), event(name="")]}
    for fast in (True, False):
        rows = parse_event_rows(body, now_ms=NOW, fast=fast, refused={0: earlier})
        assert rows.ids == (second,)
        assert [(r.index, r.field) for r in rows.rejected] == [
            (0, "events[0].properties"), (2, "events[2].name")]
        assert rows.rejected[0] == earlier
    with pytest.raises(ValidationError) as raised:
        parse_event_rows({"installId": INSTALL, "events": [event()]}, now_ms=NOW,
                         refused={0: earlier})
    assert raised.value.field == "events[0].properties"


@pytest.mark.parametrize(("occurred", "says"), [
    (1_793_527_200, "must be an RFC 3339 date-time string"),
    (None, "must be an RFC 3339 date-time string"),
    ("2026-11-01 10:00:00", "must be an RFC 3339 date-time with seconds and a Z or +hh:mm "
                            "offset, not before 1970"),
    ("1969-12-31T23:59:59Z", "not before 1970"),
])
def test_a_bad_occurred_at_says_what_was_wrong(occurred: object, says: str) -> None:
    body = {"installId": INSTALL, "events": [event(), event(occurredAt=occurred)]}
    (rejection,) = parse_event_rows(body, now_ms=NOW).rejected
    assert rejection.field == "events[1].occurredAt"
    assert says in rejection.message


def test_text_is_what_has_a_utf8_form() -> None:
    assert event_batch.is_text("purchase 😀")
    assert not event_batch.is_text("half an emoji \ud83d")
