"""AnalyticsStore on a real store (storage/analytics_store.py): the answers
match the plain range-scan reading it replaced, on generated counters with a
long tail of referrer hosts and damaged values, and a funnel reads only the
days' ``total`` counters (entries read are counted through a wrapped
``store.read``)."""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import random
from collections.abc import Iterator
from typing import Any

import cbor2
import pytest

from storage import counters, layout
from storage.analytics_store import AnalyticsStore
from storage.lmdb_store import LmdbStore
from svc_engine import events as ev
from svc_engine.analytics import (
    BREAKDOWNS,
    HANDOFF_METHOD,
    CounterRow,
    DayRange,
    revenue_summary,
    summary_funnel,
)
from svc_engine.events import PROJECT_SCOPE, Metric
from svc_engine.keys import Mode

PROJECT = "00000000-0000-4000-8000-0000000000aa"
OTHER_PROJECT = "00000000-0000-4000-8000-0000000000bb"
LINKS = ("00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002")
FIRST = dt.date(2026, 3, 1)
DAYS = 12
DAY_MS = 86_400_000


def day_ms(i: int) -> int:
    return (FIRST + dt.timedelta(days=i) - dt.date(1970, 1, 1)).days * DAY_MS


def span(first: int, last: int) -> DayRange:
    return DayRange((FIRST + dt.timedelta(days=first)).isoformat(),
                    (FIRST + dt.timedelta(days=last)).isoformat())


def fill(store: LmdbStore, seed: int) -> None:
    """Clicks (a long tail of referrer hosts), opens (some handoffs), installs
    (some unattributed), conversions with revenue, in two modes and a second
    project; then a few damaged counters, as a range read may meet them."""
    rng = random.Random(seed)
    db = store.db(b"counters")
    with store.env.begin(write=True) as txn:
        for project, mode in ((PROJECT, "live"), (PROJECT, "test"), (OTHER_PROJECT, "live")):
            for i in range(-1, DAYS + 1):  # and a day either side of every range
                for _ in range(rng.randrange(5, 60)):
                    at = day_ms(i) + rng.randrange(DAY_MS)
                    link = rng.choice(LINKS)
                    host = (rng.choice((None, "t.co", "news.example")) if rng.random() < 0.3
                            else f"h{rng.randrange(400)}.x")
                    counters.increment(txn, db, project, mode, ev.click_keys(
                        link_id=link, at_ms=at, platform=rng.choice(("ios", "android", "web")),
                        country=rng.choice((None, "SE", "US")), referrer_host=host),
                        by=rng.choice((1, 1, 1, 30, 70_000)))  # counts of every CBOR width
                    if rng.random() < 0.3:
                        counters.increment(txn, db, project, mode, ev.open_keys(
                            link_id=link, at_ms=at, platform="ios",
                            method=rng.choice((HANDOFF_METHOD, "universal_link"))))
                    if rng.random() < 0.3:
                        counters.increment(txn, db, project, mode, ev.install_keys(
                            link_id=rng.choice((link, None)), at_ms=at, platform="android",
                            confidence=rng.choice(("deterministic", "unattributed")),
                            method=rng.choice(("install_referrer", None))))
                    if rng.random() < 0.2:
                        lid = rng.choice((link, None))
                        counters.increment(txn, db, project, mode, ev.conversion_counter_keys(
                            link_id=lid, at_ms=at, name=rng.choice(("buy", "join"))))
                        counters.add_decimal(txn, db, project, mode, ev.revenue_counter_keys(
                            link_id=lid, at_ms=at, currency=rng.choice(("USD", "EUR"))),
                            decimal.Decimal(rng.randrange(-500, 5000)) / 100)
        damaged = {("clicks", LINKS[0], span(2, 2).first, "referrer", "bool.x"): True,
                   ("clicks", LINKS[0], span(3, 3).first, "total", ""): 2.5,
                   ("clicks", PROJECT_SCOPE, span(3, 3).first, "referrer", "big.x"): 1 << 64,
                   ("opens", LINKS[0], span(4, 4).first, "total", ""): -3,
                   ("installs", LINKS[0], span(5, 5).first, "total", ""): "7"}
        for key, value in damaged.items():
            txn.put(counters.counter_key(PROJECT, "live", key), cbor2.dumps(value), db=db)


# -- the reading this store replaced: a range scan, every row through cbor2 ---------------


def reference_rows(store: LmdbStore, project_id: str, mode: Mode, metric: Metric, scope: str,
                   days: DayRange) -> list[CounterRow]:
    prefix = layout.scope(project_id, mode.value) + f"{metric.value}\x00{scope}\x00".encode()
    end = prefix + days.last.encode() + b"\x01"
    out: list[CounterRow] = []
    with store.env.begin() as txn:
        cur = txn.cursor(db=store.db(b"counters"))
        ok = cur.set_range(prefix + days.first.encode())
        while ok:
            key = bytes(cur.key())
            if key >= end:
                break
            parts = key[len(prefix):].decode().split("\x00", 2)
            if len(parts) == 3:
                value = cbor2.loads(bytes(cur.value()))
                if isinstance(value, int | str) and not isinstance(value, bool):
                    out.append((parts[0], parts[1], parts[2], value))
            ok = cur.next()
    return out


def reference_metric_summary(metric: Metric, rows: list[CounterRow],
                             days: list[str]) -> dict[str, Any]:
    names = BREAKDOWNS[metric]
    total = 0
    by_day = dict.fromkeys(days, 0)
    by: dict[str, dict[str, int]] = {name: {} for name in names.values()}
    handoff_by_day = dict.fromkeys(days, 0)
    for day, dimension, value, amount in rows:
        n = amount if isinstance(amount, int) else 0
        if dimension == "total":
            total += n
            if day in by_day:
                by_day[day] += n
        elif dimension in names:
            target = by[names[dimension]]
            target[value] = target.get(value, 0) + n
            if metric is Metric.OPENS and dimension == "method" and value == HANDOFF_METHOD \
                    and day in handoff_by_day:
                handoff_by_day[day] += n
    out: dict[str, Any] = {"total": total, "byDay": by_day}
    out.update({name: dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
                for name, counts in by.items()})
    if metric is Metric.INSTALLS:
        out["unattributed"] = by["byConfidence"].get("unattributed", 0)
    if metric is Metric.OPENS:
        out["handoff"] = {"total": sum(handoff_by_day.values()), "byDay": handoff_by_day}
    return out


def reference_summary(store: LmdbStore, project_id: str, mode: Mode, days: DayRange,
                      link_id: str | None) -> dict[str, Any]:
    scope = link_id or PROJECT_SCOPE

    def of(metric: Metric) -> dict[str, Any]:
        return reference_metric_summary(
            metric, reference_rows(store, project_id, mode, metric, scope, days), days.days())

    conversions = of(Metric.CONVERSIONS)
    conversions["revenue"] = revenue_summary(
        reference_rows(store, project_id, mode, Metric.REVENUE, scope, days))
    opens = of(Metric.OPENS)
    return {**days.to_json(), "mode": mode.value, "linkId": link_id,
            "clicks": of(Metric.CLICKS), "opens": opens,
            "handoffOpens": opens.pop("handoff"), "installs": of(Metric.INSTALLS),
            "conversions": conversions}


def reference_funnel(store: LmdbStore, project_id: str, mode: Mode, link_id: str,
                     days: DayRange) -> dict[str, Any]:
    totals = {m.value: sum(n for _, dim, _, n in
                           reference_rows(store, project_id, mode, m, link_id, days)
                           if dim == "total" and isinstance(n, int))
              for m in (Metric.CLICKS, Metric.INSTALLS, Metric.OPENS, Metric.CONVERSIONS)}
    return {**days.to_json(), "mode": mode.value, "linkId": link_id, **totals}


# -- counting what a query reads ------------------------------------------------------------


class _Cursor:
    def __init__(self, cur: Any, seen: list[int]) -> None:
        self._cur = cur
        self._seen = seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)

    def set_range(self, key: bytes) -> bool:
        self._seen[0] += 1
        return bool(self._cur.set_range(key))

    def next(self) -> bool:
        self._seen[0] += 1
        return bool(self._cur.next())

    def iternext(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        for item in self._cur.iternext(*args, **kwargs):
            self._seen[0] += 1
            yield item


class _Txn:
    def __init__(self, txn: Any, seen: list[int]) -> None:
        self._txn = txn
        self._seen = seen

    def __getattr__(self, name: str) -> Any:
        return getattr(self._txn, name)

    def get(self, *args: Any, **kwargs: Any) -> Any:
        self._seen[0] += 1
        return self._txn.get(*args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> _Cursor:
        return _Cursor(self._txn.cursor(*args, **kwargs), self._seen)


def count_reads(store: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """``[entries]``: how many entries the store's read transactions have
    positioned on or fetched since (a get, a cursor step, an iterated item)."""
    seen = [0]
    real = store.read

    @contextlib.contextmanager
    def read() -> Iterator[Any]:
        with real() as txn:
            yield _Txn(txn, seen)

    monkeypatch.setattr(store, "read", read)
    return seen


@pytest.fixture
def filled(tmp_path: Any, request: pytest.FixtureRequest) -> Iterator[LmdbStore]:
    store = LmdbStore(str(tmp_path / "data"), map_size=64 << 20)
    fill(store, request.param)
    yield store
    store.close()


RANGES = [(0, DAYS - 1), (0, 0), (3, 7), (DAYS - 1, DAYS - 1), (-3, -2), (DAYS + 5, DAYS + 9)]


@pytest.mark.parametrize("filled", [1, 2, 3], indirect=True)
def test_summaries_and_rows_match_the_plain_range_scan(filled: LmdbStore) -> None:
    analytics = AnalyticsStore(filled)
    for first, last in RANGES:
        days = span(first, last)
        for project, mode in ((PROJECT, Mode.LIVE), (PROJECT, Mode.TEST),
                              (OTHER_PROJECT, Mode.LIVE)):
            for link_id in (None, *LINKS):
                got = analytics.summary(project, mode, days, link_id)
                want = reference_summary(filled, project, mode, days, link_id)
                assert got == want
                # the same order too: every breakdown is largest first, ties by value
                assert repr(got) == repr(want)
                # unranked (the link page ranks only what it shows): the same counts
                assert analytics.summary(project, mode, days, link_id, ranked=False) == want
            for metric in Metric:
                assert analytics.rows(project, mode, metric, LINKS[0], days) == \
                    reference_rows(filled, project, mode, metric, LINKS[0], days)
    whole = analytics.summary(PROJECT, Mode.LIVE, span(0, DAYS - 1))
    assert "bool.x" not in whole["clicks"]["byReferrer"]          # a damaged counter: skipped
    assert whole["clicks"]["byReferrer"]["big.x"] == 1 << 64         # a CBOR bignum: read
    assert len(whole["clicks"]["byReferrer"]) > 150                 # the long tail is there


@pytest.mark.parametrize("filled", [1, 2, 3], indirect=True)
def test_a_funnel_reads_only_the_day_totals_and_adds_up_the_same(
        filled: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    analytics = AnalyticsStore(filled)
    seen = count_reads(filled, monkeypatch)
    for first, last in RANGES:
        days = span(first, last)
        for project, mode in ((PROJECT, Mode.LIVE), (PROJECT, Mode.TEST)):
            for link_id in LINKS:
                want = reference_funnel(filled, project, mode, link_id, days)
                rows = sum(len(reference_rows(filled, project, mode, m, link_id, days))
                           for m in (Metric.CLICKS, Metric.INSTALLS, Metric.OPENS,
                                     Metric.CONVERSIONS))
                seen[0] = 0
                got = analytics.funnel(project, mode, link_id, days)
                assert got == want and list(got) == list(want)
                # one exact get per day and step, not the days' breakdown rows
                assert seen[0] == 4 * len(days.days())
                if first == 0 and last == DAYS - 1:
                    assert seen[0] < rows / 4
                # the link page takes the funnel from its summary's totals
                summary = analytics.summary(project, mode, days, link_id)
                assert summary_funnel(summary) == {k: want[k] for k in
                                                   ("clicks", "installs", "opens", "conversions")}


@pytest.mark.parametrize("filled", [1], indirect=True)
def test_a_summary_reads_each_row_once_in_one_transaction(
        filled: LmdbStore, monkeypatch: pytest.MonkeyPatch) -> None:
    analytics = AnalyticsStore(filled)
    days = span(0, DAYS - 1)
    rows = sum(len(reference_rows(filled, PROJECT, Mode.LIVE, m, PROJECT_SCOPE, days))
               for m in Metric)
    opened = []
    real = filled.read

    @contextlib.contextmanager
    def read() -> Iterator[Any]:
        opened.append(1)
        with real() as txn:
            yield txn

    monkeypatch.setattr(filled, "read", read)
    seen = count_reads(filled, monkeypatch)
    analytics.summary(PROJECT, Mode.LIVE, days)
    assert rows <= seen[0] <= rows + 2 * len(Metric)  # each range: a seek, its rows, one past
    assert len(opened) == 1                          # one snapshot for the five metrics


def test_read_amount_is_what_cbor2_reads() -> None:
    for value in (0, 1, 23, 24, 255, 256, 65_535, 65_536, (1 << 32) - 1, 1 << 32,
                  (1 << 64) - 1, 1 << 64, -1, -(1 << 70), "12.50", "-0.1", ""):
        assert counters.read_amount(cbor2.dumps(value)) == value
    for damaged in (True, False, None, 2.5, [1], {"a": 1}, b"7"):
        assert counters.read_amount(cbor2.dumps(damaged)) is None
    assert counters.read_amount(bytes((0x18, 5))) == 5  # not the shortest form: still read
