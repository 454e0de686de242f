"""Analytics queries: reads of the counters, never of raw events.

A counter key is project | mode | metric NUL scope NUL day NUL dimension NUL
value (storage/counters.py), so one metric of one scope (a link, or "*" for
the project) over a range of days is one ordered key range. A summary reads
five such ranges (clicks, opens, installs, conversions, revenue), in one read
transaction. A funnel reads no range: only the ``total`` counter of each day
of four metrics, by its exact key (four gets a day). Cost grows with the days
and distinct dimension values in the range, not with the number of events.

A link or project with a long tail of referrer hosts has as many click rows a
day as hosts: 150,000 rows over 90 days is a few hundred milliseconds of
Python, so the service runs these reads off the event loop
(``Services.off_loop``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, cast

import lmdb

from storage import counters, layout
from storage.lmdb_store import LmdbStore
from svc_engine.analytics import (
    FUNNEL_STEPS,
    CounterRow,
    DayRange,
    funnel,
    metric_summary,
    revenue_summary,
)
from svc_engine.events import PROJECT_SCOPE, Metric
from svc_engine.keys import Mode


class AnalyticsStore:
    def __init__(self, store: LmdbStore) -> None:
        self.store = store
        self._counters = store.db(b"counters")

    def rows(self, project_id: str, mode: Mode, metric: Metric, scope: str,
             days: DayRange) -> list[CounterRow]:
        """Every counter of ``metric`` and ``scope`` on the days of ``days``."""
        with self.store.read() as txn:
            return list(self._scan(txn, project_id, mode, metric, scope, days))

    def _scan(self, txn: lmdb.Transaction, project_id: str, mode: Mode, metric: Metric,
              scope: str, days: DayRange) -> Iterator[CounterRow]:
        """The rows of :meth:`rows`, in key order, as they are read."""
        prefix = layout.scope(project_id, mode.value) + f"{metric.value}\x00{scope}\x00".encode()
        end = prefix + days.last.encode() + b"\x01"  # past every key of the last day
        # store.read() opens with buffers=False: keys and values are bytes
        cur = cast("lmdb.Cursor[bytes]", txn.cursor(db=self._counters))
        if not cur.set_range(prefix + days.first.encode()):
            return
        skip = len(prefix)
        amounts: dict[bytes, int | str | None] = {}  # most counters hold one of a few values
        for key, raw in cur.iternext():
            if key >= end:
                break
            parts = key[skip:].decode().split("\x00", 2)
            if len(parts) != 3:  # day, dimension, value
                continue
            try:
                amount = amounts[raw]
            except KeyError:
                amount = amounts[raw] = counters.read_amount(raw)
            if amount is not None:
                yield parts[0], parts[1], parts[2], amount

    def summary(self, project_id: str, mode: Mode, days: DayRange,
                link_id: str | None = None, *, ranked: bool = True,
                top: int | None = None) -> dict[str, Any]:
        """Clicks, opens (with handoff opens), installs and conversions (with
        revenue per currency) of the project, or of one link, over ``days``.
        ``ranked`` False leaves the breakdowns unsorted, ``top`` keeps each
        one's largest values (``metric_summary``)."""
        scope = link_id or PROJECT_SCOPE
        day_list = days.days()
        with self.store.read() as txn:
            def of(metric: Metric) -> dict[str, Any]:
                rows = self._scan(txn, project_id, mode, metric, scope, days)
                return metric_summary(metric, rows, day_list, ranked=ranked, top=top)

            clicks = of(Metric.CLICKS)
            opens = of(Metric.OPENS)
            installs = of(Metric.INSTALLS)
            conversions = of(Metric.CONVERSIONS)
            conversions["revenue"] = revenue_summary(
                self._scan(txn, project_id, mode, Metric.REVENUE, scope, days))
        return {**days.to_json(), "mode": mode.value, "linkId": link_id,
                "clicks": clicks, "opens": opens,
                "handoffOpens": opens.pop("handoff"), "installs": installs,
                "conversions": conversions}

    def funnel(self, project_id: str, mode: Mode, link_id: str,
               days: DayRange) -> dict[str, Any]:
        """Clicks, installs, opens and conversions of a link over ``days``: the
        sums of the days' ``total`` counters, read by key (a range scan would
        read every breakdown row of the days too)."""
        day_list = days.days()
        totals = {}
        with self.store.read() as txn:
            for metric in FUNNEL_STEPS:
                total = 0
                for day in day_list:
                    raw = txn.get(counters.counter_key(
                        project_id, mode.value, (metric.value, link_id, day, "total", "")),
                        db=self._counters)
                    amount = counters.read_amount(bytes(raw)) if raw is not None else None
                    if isinstance(amount, int):
                        total += amount
                totals[metric] = total
        return {**days.to_json(), "mode": mode.value, "linkId": link_id, **funnel(totals)}
