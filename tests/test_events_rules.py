"""Custom event rules (SPEC.md "SDK event (custom event)", "Custom events"):
deduplication by client id, revenue, analytics counter keys."""

from __future__ import annotations

import decimal
import functools
from decimal import Decimal

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.decode import RecordError
from svc_engine.event_batch import parse_events_batch
from svc_engine.events import (
    PROJECT_SCOPE,
    SdkEvent,
    add_amount,
    click_keys,
    conversion_keys,
    exact_sum,
    exact_total,
    install_keys,
    open_keys,
    revenue,
    revenue_keys,
    split_duplicates,
    utc_day,
)
from svc_engine.keys import Mode

INSTALL = "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab"
LINK = "aaaaaaaa-0000-4000-8000-000000000001"
E1 = "00000000-0000-4000-8000-000000000001"
E2 = "00000000-0000-4000-8000-000000000002"
E3 = "00000000-0000-4000-8000-000000000003"
NOV22 = 1_795_305_600_000  # 2026-11-22T00:00:00Z
NOW = NOV22 + 12 * 3600 * 1000


@attrs.frozen
class Ev:
    id: str
    tag: str = ""


# --- deduplication ---------------------------------------------------------------------


@pytest.mark.parametrize(("batch", "stored", "kept", "dropped"), [
    ([Ev(E1), Ev(E2)], set(), [Ev(E1), Ev(E2)], 0),
    ([Ev(E1, "first"), Ev(E1, "second")], set(), [Ev(E1, "first")], 1),  # inside one batch
    ([Ev(E1), Ev(E2)], {E1}, [Ev(E2)], 1),  # the batch was sent before
    ([Ev(E1), Ev(E2), Ev(E1)], {E1, E2}, [], 3),
    ([Ev(E3), Ev(E1), Ev(E3), Ev(E2)], {E2}, [Ev(E3), Ev(E1)], 2),
    ([], {E1}, [], 0),
])
def test_split_duplicates(batch: list[Ev], stored: set[str], kept: list[Ev],
                          dropped: int) -> None:
    assert split_duplicates(batch, stored) == (tuple(kept), dropped)


def test_parsed_batch_sent_twice_is_deduplicated() -> None:
    body = {"installId": INSTALL, "events": [
        {"id": E1, "name": "a", "occurredAt": "2026-11-22T10:00:00Z"},
        {"id": E1.upper(), "name": "a", "occurredAt": "2026-11-22T10:00:00Z"},
        {"id": E2, "name": "b", "occurredAt": "2026-11-22T10:00:00Z"},
    ]}
    first, dup = split_duplicates(parse_events_batch(body, now_ms=NOW).events, set())
    assert [e.id for e in first] == [E1, E2] and dup == 1
    again, dup = split_duplicates(parse_events_batch(body, now_ms=NOW).events,
                                  {e.id for e in first})
    assert again == () and dup == 3


@given(st.lists(st.sampled_from([E1, E2, E3, "x", "y"]), max_size=20),
       st.sets(st.sampled_from([E1, E2, "x"])))
def test_property_split_duplicates(ids: list[str], stored: set[str]) -> None:
    batch = [Ev(i, str(n)) for n, i in enumerate(ids)]
    new, dropped = split_duplicates(batch, stored)
    new_ids = [e.id for e in new]
    assert len(set(new_ids)) == len(new_ids)
    assert set(new_ids) == set(ids) - stored
    assert dropped == len(ids) - len(new)
    assert all(e == next(b for b in batch if b.id == e.id) for e in new)  # first one wins


# --- revenue ---------------------------------------------------------------------------


@pytest.mark.parametrize(("properties", "found"), [
    ({"revenue": 9.99, "currency": "EUR"}, ("EUR", Decimal("9.99"))),
    ({"revenue": 1999, "currency": "JPY"}, ("JPY", Decimal(1999))),
    ({"revenue": 0, "currency": "USD"}, ("USD", Decimal(0))),
    ({"revenue": -5.5, "currency": "USD"}, ("USD", Decimal("-5.5"))),  # a refund
    ({"revenue": 1e12, "currency": "USD"}, ("USD", Decimal("1e12"))),
    ({"revenue": 1e-7, "currency": "USD"}, ("USD", Decimal("1e-7"))),
    ({"revenue": 1e-18, "currency": "USD"}, ("USD", Decimal("1e-18"))),
    ({"revenue": 1e-19, "currency": "USD"}, None),  # more places than a sum keeps exactly
    ({"revenue": 1e-70, "currency": "USD"}, None),
    ({"revenue": 1e12 + 1, "currency": "USD"}, None),
    ({"revenue": -1e12, "currency": "USD"}, ("USD", Decimal("-1e12"))),  # a refund's edge
    ({"revenue": -1e12 - 1, "currency": "USD"}, None),  # the cap is on the magnitude
    ({"revenue": -10**15, "currency": "USD"}, None),
    ({"revenue": float("inf"), "currency": "USD"}, None),
    ({"revenue": float("nan"), "currency": "USD"}, None),
    ({"revenue": True, "currency": "USD"}, None),  # a boolean is not a number
    ({"revenue": "9.99", "currency": "USD"}, None),
    ({"revenue": None, "currency": "USD"}, None),
    ({"revenue": 9.99}, None),
    ({"revenue": 9.99, "currency": "usd"}, None),
    ({"revenue": 9.99, "currency": "US"}, None),
    ({"revenue": 9.99, "currency": "USDT"}, None),
    ({"revenue": 9.99, "currency": "ÜSD"}, None),
    ({"revenue": 9.99, "currency": 840}, None),
    ({}, None),
])
def test_revenue(properties: dict[str, object], found: tuple[str, Decimal] | None) -> None:
    assert revenue(properties) == found


def test_revenue_sums_without_float_drift() -> None:
    total = "0"
    for amount in (0.1, 0.2):
        found = revenue({"revenue": amount, "currency": "USD"})
        assert found is not None
        total = add_amount(total, found[1])
    assert total == "0.3"
    assert 0.1 + 0.2 != 0.3  # what the float sum would have given
    # the finest amount kept, added to the largest, stays exact
    tiny, big = revenue({"revenue": 1e-18, "currency": "USD"}), Decimal(10) ** 21
    assert tiny is not None
    assert add_amount(str(big), tiny[1]) == "1000000000000000000000.000000000000000001"


_AMOUNTS = st.lists(st.one_of(
    st.integers(min_value=-10**12, max_value=10**12),
    st.decimals(min_value=-10**12, max_value=10**12, allow_nan=False, allow_infinity=False,
                places=None)), max_size=120)


@given(_AMOUNTS)
def test_exact_total_adds_as_exact_sum_does_one_by_one(amounts: list[int | Decimal]) -> None:
    """The batch's one ``sum`` under the 60-digit context gives what adding each
    amount with exact_sum gives, digit for digit, and leaves the thread's
    context as it was."""
    before = decimal.getcontext().prec
    expected = functools.reduce(exact_sum, amounts, Decimal(0))
    total = exact_total(amounts)
    assert str(total) == str(expected)
    assert decimal.getcontext().prec == before


def test_exact_total_keeps_sixty_digits() -> None:
    total = exact_total([Decimal("123456789012.5"), Decimal("1.5e-17")])
    assert str(total) == "123456789012.500000000000000015"
    assert Decimal("123456789012.5") + Decimal("1.5e-17") != total  # the 28-digit default


@pytest.mark.parametrize(("total", "amount", "after"), [
    ("0", Decimal("1e-7"), "0.0000001"),
    ("12.50", Decimal("0.5"), "13.00"),
    ("999999999999.99", Decimal("0.01"), "1000000000000.00"),
    ("5", Decimal("-7.25"), "-2.25"),
    ("1" + "0" * 40, Decimal(1), "1" + "0" * 39 + "1"),
])
def test_add_amount(total: str, amount: Decimal, after: str) -> None:
    assert add_amount(total, amount) == after


@given(st.lists(st.decimals(min_value=-10**12, max_value=10**12, places=2), max_size=50))
def test_property_add_amount_is_exact(amounts: list[Decimal]) -> None:
    total = "0"
    for a in amounts:
        total = add_amount(total, a)
    assert Decimal(total) == sum(amounts, Decimal(0))
    assert "E" not in total and "e" not in total


# --- counter keys ----------------------------------------------------------------------


@pytest.mark.parametrize(("ms", "day"), [
    (0, "1970-01-01"), (86_399_999, "1970-01-01"), (86_400_000, "1970-01-02"),
    (NOV22, "2026-11-22"), (NOV22 - 1, "2026-11-21"), (NOV22 + 86_399_999, "2026-11-22"),
    (-1, "1969-12-31"),
])
def test_utc_day(ms: int, day: str) -> None:
    assert utc_day(ms) == day


def test_click_keys() -> None:
    day = "2026-11-22"
    assert click_keys(link_id=LINK, at_ms=NOW, platform="ios", country="DE",
                      referrer_host="news.example") == (
        ("clicks", LINK, day, "total", ""),
        ("clicks", LINK, day, "platform", "ios"),
        ("clicks", LINK, day, "country", "DE"),
        ("clicks", LINK, day, "referrer", "news.example"),
        ("clicks", PROJECT_SCOPE, day, "total", ""),
        ("clicks", PROJECT_SCOPE, day, "platform", "ios"),
        ("clicks", PROJECT_SCOPE, day, "country", "DE"),
        ("clicks", PROJECT_SCOPE, day, "referrer", "news.example"),
    )
    keys = click_keys(link_id=LINK, at_ms=NOW, platform="desktop", country=None)
    assert ("clicks", LINK, day, "country", "unknown") in keys
    assert ("clicks", LINK, day, "referrer", "direct") in keys


def test_open_keys() -> None:
    keys = open_keys(link_id=LINK, at_ms=NOV22, platform="android", method="app_link")
    assert ("opens", LINK, "2026-11-22", "method", "app_link") in keys
    assert ("opens", PROJECT_SCOPE, "2026-11-22", "platform", "android") in keys
    assert len(keys) == 6


def test_install_keys_unattributed_counts_for_the_project_only() -> None:
    assert install_keys(link_id=None, at_ms=NOV22 - 1, platform="ios",
                        confidence="unattributed", method=None) == (
        ("installs", PROJECT_SCOPE, "2026-11-21", "total", ""),
        ("installs", PROJECT_SCOPE, "2026-11-21", "platform", "ios"),
        ("installs", PROJECT_SCOPE, "2026-11-21", "confidence", "unattributed"),
        ("installs", PROJECT_SCOPE, "2026-11-21", "method", "none"),
    )
    keys = install_keys(link_id=LINK, at_ms=NOV22, platform="android",
                        confidence="deterministic", method="install_referrer")
    assert {k[1] for k in keys} == {LINK, PROJECT_SCOPE}
    assert ("installs", LINK, "2026-11-22", "method", "install_referrer") in keys


def sdk_event(**over: object) -> SdkEvent:
    fields: dict[str, object] = {
        "id": E1, "name": "purchase", "properties": {"revenue": 4.5, "currency": "EUR"},
        "link_id": LINK, "occurred_at_ms": NOV22 - 1000, "received_at_ms": NOW,
        "install_id": INSTALL, "mode": Mode.LIVE}
    fields.update(over)
    return SdkEvent(**fields)  # type: ignore[arg-type]


def test_conversion_keys_use_the_day_it_occurred() -> None:
    assert conversion_keys(sdk_event()) == (
        ("conversions", LINK, "2026-11-21", "total", ""),
        ("conversions", LINK, "2026-11-21", "name", "purchase"),
        ("conversions", PROJECT_SCOPE, "2026-11-21", "total", ""),
        ("conversions", PROJECT_SCOPE, "2026-11-21", "name", "purchase"),
    )
    assert {k[1] for k in conversion_keys(sdk_event(link_id=None))} == {PROJECT_SCOPE}


def test_revenue_keys() -> None:
    assert revenue_keys(sdk_event()) == ((
        ("revenue", LINK, "2026-11-21", "currency", "EUR"),
        ("revenue", PROJECT_SCOPE, "2026-11-21", "currency", "EUR"),
    ), Decimal("4.5"))
    assert revenue_keys(sdk_event(properties={"revenue": 4.5})) is None
    assert revenue_keys(sdk_event(link_id=None)) == (
        (("revenue", PROJECT_SCOPE, "2026-11-21", "currency", "EUR"),), Decimal("4.5"))


# --- the stored record -----------------------------------------------------------------


def test_sdk_event_from_input_and_round_trip() -> None:
    body = {"installId": INSTALL, "events": [
        {"id": E1, "name": "purchase", "properties": {"revenue": 4.5, "currency": "EUR"},
         "linkId": LINK, "occurredAt": "2026-11-21T23:59:59Z"}]}
    (inp,) = parse_events_batch(body, now_ms=NOW).events
    ev = SdkEvent.from_input(inp, install_id=INSTALL, mode=Mode.LIVE, received_at_ms=NOW)
    assert ev == sdk_event()
    m = ev.to_map()
    assert m["v"] == 1 and m["mode"] == "live"
    assert SdkEvent.from_map(m) == ev


@pytest.mark.parametrize("properties", [None, [], "x"])
def test_sdk_event_from_bad_map(properties: object) -> None:
    with pytest.raises(RecordError):
        SdkEvent.from_map(sdk_event().to_map() | {"properties": properties})
