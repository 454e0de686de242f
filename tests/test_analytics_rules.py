"""Pure analytics rules (svc_engine/analytics.py) and the fast paths of the
events parser, checked against the slower reference implementations they
replaced."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.analytics import (
    BREAKDOWNS,
    HANDOFF_METHOD,
    CounterRow,
    DayRange,
    funnel,
    metric_summary,
    parse_day_range,
    parse_top,
    revenue_summary,
    summary_funnel,
)
from svc_engine.errors import ValidationError
from svc_engine.events import Metric
from svc_engine.ids import is_uuid
from svc_engine.sdk_requests import parse_timestamp_ms

NOW = 1_790_000_000_000  # 2026-09-21T...Z


def test_day_range_defaults_to_thirty_days_ending_today() -> None:
    r = parse_day_range(None, None, now_ms=NOW)
    assert r.last == "2026-09-21" and len(r.days()) == 30 and r.first == "2026-08-23"
    assert r.end_ms - r.start_ms == 30 * 86_400_000
    # a `to` in early 1970 alone: the default start stops at the epoch, no error
    early = parse_day_range(None, "1970-01-05", now_ms=NOW)
    assert (early.first, early.last) == ("1970-01-01", "1970-01-05")


@pytest.mark.parametrize(("first", "last", "field"), [
    ("2026-02-30", None, "from"), ("2026-1-01", None, "from"), (None, "soon", "to"),
    ("2026-09-10", "2026-09-01", "from"), ("1969-12-31", "1970-01-01", "from"),
    ("2025-01-01", "2026-01-02", "from"),
    # a `to` before the epoch, even where the default start cannot be counted back (year 1)
    (None, "0001-01-01", "to"), (None, "0001-01-29", "to"), (None, "1969-12-31", "to"),
    ("0001-01-01", "0001-01-02", "to"),
])
def test_day_range_refusals(first: str | None, last: str | None, field: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_day_range(first, last, now_ms=NOW)
    assert e.value.field == field


def test_day_range_limits() -> None:
    assert len(parse_day_range("2025-01-01", "2026-01-01", now_ms=NOW).days()) == 366
    assert parse_day_range("2000-01-01", "2026-01-01", now_ms=NOW, max_days=None).first == \
        "2000-01-01"
    one = DayRange("2026-03-01", "2026-03-01")
    assert one.days() == ["2026-03-01"] and one.to_json() == {"from": "2026-03-01",
                                                             "to": "2026-03-01"}


def test_metric_summary_adds_up() -> None:
    rows = [("2026-01-01", "total", "", 3), ("2026-01-01", "platform", "ios", 2),
            ("2026-01-01", "platform", "android", 1), ("2026-01-02", "total", "", 1),
            ("2026-01-02", "platform", "ios", 1), ("2026-01-02", "country", "SE", 1),
            ("2026-01-01", "country", "SE", 1), ("2026-01-01", "country", "unknown", 2),
            ("2026-01-02", "referrer", "direct", 1), ("2026-01-01", "referrer", "a.example", 3),
            ("2026-01-02", "bogus", "x", 9)]
    s = metric_summary(Metric.CLICKS, rows, ["2026-01-01", "2026-01-02", "2026-01-03"])
    assert s == {"total": 4, "byDay": {"2026-01-01": 3, "2026-01-02": 1, "2026-01-03": 0},
                 "byPlatform": {"ios": 3, "android": 1}, "byCountry": {"SE": 2, "unknown": 2},
                 "byReferrer": {"a.example": 3, "direct": 1}}
    assert list(s["byPlatform"]) == ["ios", "android"]  # largest first


def test_installs_and_opens_extras() -> None:
    days = ["2026-01-01"]
    installs = metric_summary(Metric.INSTALLS, [
        ("2026-01-01", "total", "", 3), ("2026-01-01", "confidence", "unattributed", 2),
        ("2026-01-01", "confidence", "deterministic", 1)], days)
    assert installs["unattributed"] == 2
    all_matched = metric_summary(Metric.INSTALLS, [
        ("2026-01-01", "total", "", 1), ("2026-01-01", "confidence", "deterministic", 1)], days)
    assert all_matched["unattributed"] == 0
    opens = metric_summary(Metric.OPENS, [
        ("2026-01-01", "total", "", 2), ("2026-01-01", "method", "authenticated_handoff", 1),
        ("2026-01-01", "method", "app_link", 1)], days)
    assert opens["handoff"] == {"total": 1, "byDay": {"2026-01-01": 1}}


def test_revenue_sums_exactly_per_currency() -> None:
    rows: list[CounterRow] = [
        ("2026-01-01", "currency", "USD", "0.1"), ("2026-01-02", "currency", "USD", "0.2"),
            ("2026-01-01", "currency", "EUR", "-3"), ("2026-01-01", "currency", "SEK", "bad"),
            ("2026-01-01", "total", "", 5),
            ("2026-01-01", "platform", "ios", "7"),  # another dimension's row: not revenue
            ("2026-01-01", "currency", "GBP", 4)]  # a damaged counter: not an amount
    assert revenue_summary(rows) == {"EUR": "-3", "USD": "0.3"}


def test_funnel_order_and_zeroes() -> None:
    got = funnel({Metric.CLICKS: 5, Metric.CONVERSIONS: 1})
    assert list(got.items()) == [("clicks", 5), ("installs", 0), ("opens", 0),
                                 ("conversions", 1)]


def test_a_summary_funnel_is_its_totals() -> None:
    summary = {m.value: {"total": n} for m, n in
               ((Metric.CLICKS, 9), (Metric.OPENS, 2), (Metric.INSTALLS, 3),
                (Metric.CONVERSIONS, 1))}
    assert list(summary_funnel(summary).items()) == [
        ("clicks", 9), ("installs", 3), ("opens", 2), ("conversions", 1)]


def reference_largest_first(counts: dict[str, int]) -> list[tuple[str, int]]:
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


_ROWS = st.lists(st.tuples(
    st.sampled_from(["2026-01-01", "2026-01-02", "2025-12-31"]),
    st.sampled_from(["total", "platform", "country", "referrer", "method", "confidence",
                     "name", "bogus"]),
    st.text(alphabet="ab\u00e9", max_size=3) | st.just(HANDOFF_METHOD),
    st.integers(min_value=-3, max_value=1 << 65) | st.sampled_from(["1.5", ""])), max_size=60)


@given(_ROWS, st.sampled_from([Metric.CLICKS, Metric.OPENS, Metric.INSTALLS,
                               Metric.CONVERSIONS]))
def test_breakdowns_are_largest_first_ties_by_value(rows: list[CounterRow],
                                                     metric: Metric) -> None:
    """The bucketed sort of ``_largest_first`` orders as sorting by
    ``(-count, value)`` did, ties and all."""
    s = metric_summary(metric, rows, ["2026-01-01", "2026-01-02"])
    for dimension, name in BREAKDOWNS[metric].items():
        counts: dict[str, int] = {}
        for _, dim, value, amount in rows:
            if dim == dimension:
                counts[value] = counts.get(value, 0) + (amount if isinstance(amount, int) else 0)
        assert list(s[name].items()) == reference_largest_first(counts)
    assert s["total"] == sum(a for _, d, _, a in rows if d == "total" and isinstance(a, int))


@given(_ROWS, st.sampled_from([Metric.CLICKS, Metric.OPENS, Metric.INSTALLS,
                               Metric.CONVERSIONS]), st.integers(min_value=1, max_value=4))
def test_top_keeps_the_largest_and_says_what_it_left_out(rows: list[CounterRow],
                                                          metric: Metric, top: int) -> None:
    """``top`` keeps what the full ranking lists first; the omitted values and
    their count are the rest of it, so the breakdown still adds up."""
    full = metric_summary(metric, rows, ["2026-01-01"])
    cut = metric_summary(metric, rows, ["2026-01-01"], top=top)
    assert cut["total"] == full["total"] and cut["byDay"] == full["byDay"]
    omitted = {}
    for name in BREAKDOWNS[metric].values():
        ranked = list(full[name].items())
        assert list(cut[name].items()) == ranked[:top]
        if len(ranked) > top:
            omitted[name] = {"values": len(ranked) - top,
                             "count": sum(n for _, n in ranked[top:])}
    assert cut["omitted"] == omitted
    assert "omitted" not in full


@pytest.mark.parametrize("raw,top", [(None, None), ("", None), ("1", 1), ("1000", 1000),
                                     ("007", 7)])
def test_parse_top(raw: str | None, top: int | None) -> None:
    assert parse_top(raw) == top


@pytest.mark.parametrize("raw", ["0", "1001", "-1", "+5", "2.5", "ten", "\u0665", " 5",
                                 "00001", "9" * 5000])
def test_parse_top_refusals(raw: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_top(raw)
    assert e.value.field == "top"


@pytest.mark.parametrize("step", [1, 2, 3, 5, 8192])
def test_long_breakdowns_sort_in_steps_as_one_sort_would(
        step: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """No single call sorts more than ``SORT_STEP`` values or merges more than
    two runs (the GIL is kept for the whole of one call); the order is a
    plain sort's."""
    import random

    from svc_engine import analytics

    monkeypatch.setattr(analytics, "SORT_STEP", step)
    rng = random.Random(step)
    for n in (0, 1, 2, 3, 7, 16, 17, 40, 333):
        values = [rng.choice(["a", "b", "ab", "\u00e9", ""]) + str(rng.randrange(50))
                  for _ in range(n)]
        assert analytics._sorted_in_steps(list(values)) == sorted(values)
        counts = {v: rng.randrange(1, 4) for v in values}
        assert list(analytics._largest_first(counts).items()) == \
            reference_largest_first(counts)


# --- the parser's fast paths match their references -----------------------------------


def reference_is_uuid(value: object, *, v4: bool = False) -> bool:
    if not isinstance(value, str) or len(value) != 36:
        return False
    try:
        u = uuid.UUID(value)
    except ValueError:
        return False
    return str(u) == value.lower() and (not v4 or u.version == 4)


def reference_timestamp_ms(text: str) -> int | None:
    import re

    found = re.fullmatch(r"(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
                         r"(?:([Zz])|([+-])(\d{2}):(\d{2}))", text, re.A)
    if found is None:
        return None
    y, mo, d, h, mi, s, frac, zulu, sign, oh, om = found.groups()
    try:
        offset = dt.timedelta(0) if zulu else dt.timedelta(hours=int(oh), minutes=int(om))
        tz = dt.timezone(-offset if sign == "-" else offset)
        micros = int((frac or "").ljust(6, "0")[:6])
        when = dt.datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micros, tzinfo=tz)
        ms = (when - dt.datetime(1970, 1, 1, tzinfo=dt.UTC)) // dt.timedelta(milliseconds=1)
    except (ValueError, OverflowError):
        return None
    return ms if ms >= 0 else None


HEX = "0123456789abcdefABCDEF"
uuid_like = st.one_of(
    st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()),
    st.text(alphabet=HEX + "-xg{} ", min_size=30, max_size=40),
    st.builds(lambda u, i, c: str(u)[:i] + c + str(u)[i + 1:], st.uuids(),
              st.integers(0, 35), st.sampled_from(list(HEX + "-_g "))))


@given(uuid_like, st.booleans())
def test_is_uuid_matches_the_uuid_module(value: str, v4: bool) -> None:
    assert is_uuid(value, v4=v4) == reference_is_uuid(value, v4=v4)


def test_is_uuid_examples() -> None:
    assert is_uuid("6F1C6B1E-3C1A-4B7E-9D2A-0C5B8F3E2A10", v4=True)
    assert not is_uuid("6f1c6b1e-3c1a-4b7e-7d2a-0c5b8f3e2a10", v4=True)  # variant 0xxx
    assert is_uuid("6f1c6b1e-3c1a-1b7e-9d2a-0c5b8f3e2a10")
    assert not is_uuid("6f1c6b1e3c1a4b7e9d2a0c5b8f3e2a10") and not is_uuid(None)


def _digits(n: int, lo: int = 0, hi: int | None = None) -> st.SearchStrategy[str]:
    top = hi if hi is not None else 10 ** n - 1
    return st.integers(lo, top).map(lambda v: str(v).zfill(n))


timestamps = st.builds(
    lambda y, mo, d, h, mi, s, frac, tz: f"{y}-{mo}-{d}T{h}:{mi}:{s}{frac}{tz}",
    _digits(4, 0, 9999), _digits(2, 0, 13), _digits(2, 0, 32), _digits(2, 0, 25),
    _digits(2, 0, 61), _digits(2, 0, 61),
    st.one_of(st.just(""), st.integers(1, 9).flatmap(lambda n: _digits(n).map(lambda x: "." + x))),
    st.one_of(st.just("Z"), st.builds(lambda sg, a, b: f"{sg}{a}:{b}", st.sampled_from("+-"),
                                      _digits(2, 0, 30), _digits(2, 0, 99))))


@given(timestamps)
def test_timestamps_match_the_datetime_reference(text: str) -> None:
    assert parse_timestamp_ms(text) == reference_timestamp_ms(text)


@pytest.mark.parametrize("text", [
    "1970-01-01T00:00:00Z", "1970-01-01T00:00:00.0009Z", "1969-12-31T23:59:59.9995Z",
    "1970-01-01T01:00:00+01:00", "2024-02-29T23:59:59.999999999-23:59", "2023-02-29T00:00:00Z",
    "9999-12-31T23:59:59-23:59", "0001-01-01T00:00:00+05:00", "2026-01-01T24:00:00Z",
    "2026-01-01T10:00:60Z", "2026-01-01T10:00:00+24:00", "2026-01-01T10:00:00+05:75",
])
def test_timestamp_edges_match(text: str) -> None:
    assert parse_timestamp_ms(text) == reference_timestamp_ms(text)


amounts = st.one_of(st.booleans(), st.integers(-10**13, 10**13),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from([0.1, 0.2, 9.99, 1, 1.0, True, 0.0, -0.0]), st.text(max_size=3))
currencies = st.one_of(st.sampled_from(["USD", "EUR", "usd", "US", ""]), st.integers())


@given(st.lists(st.tuples(currencies, amounts), max_size=30))
def test_remembered_revenue_matches_the_rule(pairs: list[tuple[object, object]]) -> None:
    from storage.event_records import _revenue
    from svc_engine.events import revenue

    for currency, amount in pairs * 2:  # the second pass is answered from memory
        properties = {"currency": currency, "revenue": amount}
        assert _revenue(properties) == revenue(properties)
        found = _revenue(properties)
        if found is not None:  # the same decimal, not just an equal one (1 vs 1.0 vs True)
            assert str(found[1]) == str(revenue(properties)[1])  # type: ignore[index]


def test_a_range_s_days_and_milliseconds() -> None:
    r = DayRange("2026-02-27", "2026-03-02")
    assert r.days() == ["2026-02-27", "2026-02-28", "2026-03-01", "2026-03-02"]
    assert r.start_ms == 1_772_150_400_000  # 2026-02-27T00:00:00Z
    assert r.end_ms == r.start_ms + 4 * 86_400_000
    assert DayRange("1970-01-01", "1970-01-01").start_ms == 0
    assert DayRange("1970-01-02", "1970-01-02").days() == ["1970-01-02"]
