"""Analytics answers built from counter rows (sans-IO).

The counters (``svc_engine.events``: ``(metric, scope, day, dimension,
value)``) are kept incrementally by whatever records a click, open, install or
conversion, so a query reads one ordered range of counters per metric and
never a raw event. Storage hands this module the rows of a metric and scope
for a range of days, ``(day, dimension, value, amount)``; this module adds
them up into the JSON the API answers.

Every breakdown adds up to its ``total``: each recorded event increments the
``total`` counter of its day and exactly one value of every dimension of its
metric. Breakdowns list every value seen in the range, largest first.

Decisions where SPEC.md is silent:

- A range is whole UTC days, ``from`` and ``to`` both included, as
  ``YYYY-MM-DD``. Without ``to`` it ends today (UTC); without ``from`` it
  covers 30 days. Analytics ranges are at most 366 days (``byDay`` lists every
  day); exports have no cap.
- Clicks break down by day, platform, country (``unknown`` when the country
  was not known) and referrer host (``direct`` without a referrer); opens by
  day, platform and method, with handoff opens (method
  ``authenticated_handoff``) also given on their own; installs by day,
  platform, confidence and method (``none`` when unattributed), with the
  unattributed installs counted in the project's totals only (they have no
  link); conversions by day and name, and revenue per currency as decimal
  strings summed exactly.
- ``top=N`` (1 to 1000; absent: every value) keeps each breakdown's ``N``
  largest values (ties by value) and says what it left out in ``omitted``:
  ``{<breakdown>: {"values", "count"}}`` for each breakdown cut, so the kept
  values and the omitted count still add up to the total. A link's
  referrer hosts can be tens of thousands of values (a megabyte of JSON);
  the dashboard ranks its own few.
"""

from __future__ import annotations

import datetime as dt
import decimal
import heapq
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from svc_engine.errors import ValidationError
from svc_engine.events import Metric, add_amount, utc_day

MAX_RANGE_DAYS = 366
DEFAULT_RANGE_DAYS = 30
HANDOFF_METHOD = "authenticated_handoff"
DAY_MS = 86_400_000
MAX_TOP = 1000
FUNNEL_STEPS = (Metric.CLICKS, Metric.INSTALLS, Metric.OPENS, Metric.CONVERSIONS)

CounterRow = tuple[str, str, str, int | str]
"""``(day, dimension, value, amount)``: one stored counter."""

_DAY = re.compile(r"\d{4}-\d{2}-\d{2}", re.A)

# metric -> {dimension stored in the counter key: name of its breakdown in the answer}
BREAKDOWNS: Mapping[Metric, Mapping[str, str]] = {
    Metric.CLICKS: {"platform": "byPlatform", "country": "byCountry",
                    "referrer": "byReferrer"},
    Metric.OPENS: {"platform": "byPlatform", "method": "byMethod"},
    Metric.INSTALLS: {"platform": "byPlatform", "confidence": "byConfidence",
                      "method": "byMethod"},
    Metric.CONVERSIONS: {"name": "byName"},
}


EPOCH_DAY = dt.date(1970, 1, 1)
"""The first day a range may cover (the store's times count from it)."""


@attrs.frozen
class DayRange:
    """Whole UTC days from ``first`` to ``last``, both included (``YYYY-MM-DD``)."""

    first: str
    last: str

    @property
    def start_ms(self) -> int:
        return day_start_ms(self.first)

    @property
    def end_ms(self) -> int:
        """The first millisecond after the range."""
        return day_start_ms(self.last) + DAY_MS

    def days(self) -> list[str]:
        first = dt.date.fromisoformat(self.first)
        count = (dt.date.fromisoformat(self.last) - first).days + 1
        return [(first + dt.timedelta(days=i)).isoformat() for i in range(count)]

    def to_json(self) -> dict[str, str]:
        return {"from": self.first, "to": self.last}


def parse_day_range(first: str | None, last: str | None, *, now_ms: int,
                    max_days: int | None = MAX_RANGE_DAYS) -> DayRange:
    """The ``from`` and ``to`` query parameters as a :class:`DayRange`."""
    end = _parse_day(last, "to") if last else dt.date.fromisoformat(utc_day(now_ms))
    if end < EPOCH_DAY:  # before the default start is counted back (year 1 has no 30 days before)
        raise ValidationError("to: must not be before 1970-01-01", field="to")
    start = (_parse_day(first, "from") if first  # the default: 30 days, none before 1970
             else max(end - dt.timedelta(days=DEFAULT_RANGE_DAYS - 1), EPOCH_DAY))
    if start > end:
        raise ValidationError("from: must not be after to", field="from")
    if start < EPOCH_DAY:
        raise ValidationError("from: must not be before 1970-01-01", field="from")
    if max_days is not None and (end - start).days + 1 > max_days:
        raise ValidationError(f"from: the range covers at most {max_days} days", field="from")
    return DayRange(start.isoformat(), end.isoformat())


def parse_top(raw: str | None) -> int | None:
    """The ``top`` query parameter: None when absent or empty, else a whole
    number from 1 to ``MAX_TOP``."""
    if not raw:
        return None
    if len(raw) > 4 or not raw.isascii() or not raw.isdigit() or not 1 <= int(raw) <= MAX_TOP:
        raise ValidationError(f"top: a whole number from 1 to {MAX_TOP}", field="top")
    return int(raw)


def metric_summary(metric: Metric, rows: Iterable[CounterRow], days: Sequence[str], *,
                   ranked: bool = True, top: int | None = None) -> dict[str, Any]:
    """``{"total", "byDay", <breakdowns>}`` of one metric (not revenue). With
    ``ranked`` False the breakdowns are left in no order, for a caller that
    ranks only the few values it shows (sorting a long tail of referrer
    hosts is most of the work, and a single call that keeps the GIL). With
    ``top`` each breakdown keeps its ``top`` largest (ranked) and ``omitted``
    says what the others were (:func:`top_values`)."""
    names = BREAKDOWNS[metric]
    total = 0
    by_day = dict.fromkeys(days, 0)
    # dimension -> its counts; one lookup a row (a range holds many rows)
    by: dict[str, dict[str, int]] = {dimension: {} for dimension in names}
    opens = metric is Metric.OPENS
    handoff_by_day = dict.fromkeys(days, 0)
    for day, dimension, value, amount in rows:
        n = amount if isinstance(amount, int) else 0
        if dimension == "total":
            total += n
            if day in by_day:
                by_day[day] += n
            continue
        target = by.get(dimension)
        if target is None:
            continue
        target[value] = target.get(value, 0) + n
        if opens and dimension == "method" and value == HANDOFF_METHOD and day in handoff_by_day:
            handoff_by_day[day] += n
    out: dict[str, Any] = {"total": total, "byDay": by_day}
    if top is not None:
        omitted: dict[str, dict[str, int]] = {}
        for dimension, name in names.items():
            out[name], left = top_values(by[dimension], top)
            if left is not None:
                omitted[name] = left
        out["omitted"] = omitted
    else:
        out.update({name: _largest_first(by[dimension]) if ranked else by[dimension]
                    for dimension, name in names.items()})
    if metric is Metric.INSTALLS:
        out["unattributed"] = by["confidence"].get("unattributed", 0)
    if metric is Metric.OPENS:
        out["handoff"] = {"total": sum(handoff_by_day.values()), "byDay": handoff_by_day}
    return out


def revenue_summary(rows: Iterable[CounterRow]) -> dict[str, str]:
    """Revenue per currency over the range, as exact decimal strings."""
    totals: dict[str, str] = {}
    for _day, dimension, currency, amount in rows:
        if dimension != "currency" or not isinstance(amount, str):
            continue
        try:
            totals[currency] = add_amount(totals.get(currency, "0"), decimal.Decimal(amount))
        except decimal.InvalidOperation:
            continue  # never written; a damaged counter must not break the answer
    return dict(sorted(totals.items()))


def funnel(totals: Mapping[Metric, int]) -> dict[str, int]:
    """A link's funnel: clicks, installs, opens and conversions in the range."""
    return {step.value: totals.get(step, 0) for step in FUNNEL_STEPS}


def summary_funnel(summary: Mapping[str, Any]) -> dict[str, int]:
    """The funnel of a link's summary (``AnalyticsStore.summary``): the totals
    it already holds, the numbers ``AnalyticsStore.funnel`` reads for the same
    range."""
    return funnel({step: summary[step.value]["total"] for step in FUNNEL_STEPS})


def top_values(counts: Mapping[str, int], top: int
               ) -> tuple[dict[str, int], dict[str, int] | None]:
    """The ``top`` largest of ``counts``, largest first (ties by value), and
    what the rest add up to, ``{"values", "count"}`` (None when nothing was
    left out): a long tail is never sorted, only its ``top`` largest picked."""
    if len(counts) <= top:
        return _largest_first(counts), None
    kept = heapq.nsmallest(top, counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return dict(kept), {"values": len(counts) - top,
                        "count": sum(counts.values()) - sum(n for _, n in kept)}


def _largest_first(counts: Mapping[str, int]) -> dict[str, int]:
    """``counts`` ordered by count, largest first, ties by value: as sorting by
    ``(-count, value)``, but a long tail of values seen as often (referrer
    hosts seen once) sorts as plain strings (:func:`_sorted_in_steps`)."""
    by_count: dict[int, list[str]] = {}
    for value, n in counts.items():
        same = by_count.get(n)
        if same is None:
            by_count[n] = [value]
        else:
            same.append(value)
    out: dict[str, int] = {}
    for n in sorted(by_count, reverse=True):
        ordered = _sorted_in_steps(by_count[n])
        for i in range(0, len(ordered), SORT_STEP):
            out.update(dict.fromkeys(ordered[i:i + SORT_STEP], n))
    return out


SORT_STEP = 8192
"""Values sorted or merged by one call. A summary is computed in a worker
thread, but one C call keeps the GIL however long it takes: sorting 100,000
referrer hosts at once would hold the event loop for tens of milliseconds."""


def _sorted_in_steps(values: list[str]) -> list[str]:
    """``sorted(values)``, by runs of ``SORT_STEP`` values merged two at a
    time (each merge is one sort of two sorted runs, linear), so no single
    call does more than a linear pass over the values."""
    if len(values) <= SORT_STEP:
        return sorted(values)
    runs = [sorted(values[i:i + SORT_STEP]) for i in range(0, len(values), SORT_STEP)]
    while len(runs) > 1:
        merged = []
        for i in range(0, len(runs) - 1, 2):
            pair = runs[i] + runs[i + 1]
            pair.sort()  # two ascending runs: timsort merges them
            merged.append(pair)
        if len(runs) % 2:
            merged.append(runs[-1])
        runs = merged
    return runs[0]


def _parse_day(text: str, field: str) -> dt.date:
    if not _DAY.fullmatch(text):
        raise ValidationError(f"{field}: must be a date, YYYY-MM-DD", field=field)
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"{field}: not a calendar date", field=field) from None


def day_start_ms(day: str) -> int:
    """The first millisecond of a UTC day ``YYYY-MM-DD`` (ValueError if it is none)."""
    return (dt.date.fromisoformat(day) - dt.date(1970, 1, 1)).days * DAY_MS
