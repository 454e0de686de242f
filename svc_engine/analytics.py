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
"""

from __future__ import annotations

import datetime as dt
import decimal
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import attrs

from svc_engine.errors import ValidationError
from svc_engine.events import Metric, add_amount, utc_day

MAX_RANGE_DAYS = 366
DEFAULT_RANGE_DAYS = 30
HANDOFF_METHOD = "authenticated_handoff"

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


@attrs.frozen
class DayRange:
    """Whole UTC days from ``first`` to ``last``, both included (``YYYY-MM-DD``)."""

    first: str
    last: str

    @property
    def start_ms(self) -> int:
        return _day_ms(self.first)

    @property
    def end_ms(self) -> int:
        """The first millisecond after the range."""
        return _day_ms(self.last) + 86_400_000

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
    start = (_parse_day(first, "from") if first  # the default: 30 days, none before 1970
             else max(end - dt.timedelta(days=DEFAULT_RANGE_DAYS - 1), dt.date(1970, 1, 1)))
    if start > end:
        raise ValidationError("from: must not be after to", field="from")
    if start < dt.date(1970, 1, 1):
        raise ValidationError("from: must not be before 1970-01-01", field="from")
    if max_days is not None and (end - start).days + 1 > max_days:
        raise ValidationError(f"from: the range covers at most {max_days} days", field="from")
    return DayRange(start.isoformat(), end.isoformat())


def metric_summary(metric: Metric, rows: Iterable[CounterRow],
                   days: Sequence[str]) -> dict[str, Any]:
    """``{"total", "byDay", <breakdowns>}`` of one metric (not revenue)."""
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
    out.update({name: _largest_first(counts) for name, counts in by.items()})
    if metric is Metric.INSTALLS:
        out["unattributed"] = by["byConfidence"].get("unattributed", 0)
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
    return {step.value: totals.get(step, 0)
            for step in (Metric.CLICKS, Metric.INSTALLS, Metric.OPENS, Metric.CONVERSIONS)}


def _largest_first(counts: Mapping[str, int]) -> dict[str, int]:
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _parse_day(text: str, field: str) -> dt.date:
    if not _DAY.fullmatch(text):
        raise ValidationError(f"{field}: must be a date, YYYY-MM-DD", field=field)
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise ValidationError(f"{field}: not a calendar date", field=field) from None


def _day_ms(day: str) -> int:
    return (dt.date.fromisoformat(day) - dt.date(1970, 1, 1)).days * 86_400_000
