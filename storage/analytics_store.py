"""Analytics queries: range scans of the counters, never of raw events.

A counter key is project | mode | metric NUL scope NUL day NUL dimension NUL
value (storage/counters.py), so one metric of one scope (a link, or "*" for
the project) over a range of days is one ordered key range. A summary reads
five such ranges (clicks, opens, installs, conversions, revenue); a funnel
reads the ``total`` rows of four. Cost grows with the days and distinct
dimension values in the range, not with the number of events.
"""

from __future__ import annotations

from typing import Any

import cbor2

from storage import layout
from storage.lmdb_store import LmdbStore
from svc_engine.analytics import (
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
        prefix = layout.scope(project_id, mode.value) + f"{metric.value}\x00{scope}\x00".encode()
        start = prefix + days.first.encode()
        end = prefix + days.last.encode() + b"\x01"  # past every key of the last day
        out: list[CounterRow] = []
        with self.store.read() as txn:
            cur = txn.cursor(db=self._counters)
            ok = cur.set_range(start)
            while ok:
                key = bytes(cur.key())
                if key >= end:
                    break
                parts = key[len(prefix):].decode().split("\x00", 2)
                if len(parts) == 3:  # day, dimension, value
                    value = cbor2.loads(bytes(cur.value()))
                    if isinstance(value, int | str) and not isinstance(value, bool):
                        out.append((parts[0], parts[1], parts[2], value))
                ok = cur.next()
        return out

    def summary(self, project_id: str, mode: Mode, days: DayRange,
                link_id: str | None = None) -> dict[str, Any]:
        """Clicks, opens (with handoff opens), installs and conversions (with
        revenue per currency) of the project, or of one link, over ``days``."""
        scope = link_id or PROJECT_SCOPE
        day_list = days.days()

        def of(metric: Metric) -> dict[str, Any]:
            rows = self.rows(project_id, mode, metric, scope, days)
            return metric_summary(metric, rows, day_list)

        conversions = of(Metric.CONVERSIONS)
        conversions["revenue"] = revenue_summary(
            self.rows(project_id, mode, Metric.REVENUE, scope, days))
        opens = of(Metric.OPENS)
        return {**days.to_json(), "mode": mode.value, "linkId": link_id,
                "clicks": of(Metric.CLICKS), "opens": opens,
                "handoffOpens": opens.pop("handoff"), "installs": of(Metric.INSTALLS),
                "conversions": conversions}

    def funnel(self, project_id: str, mode: Mode, link_id: str,
               days: DayRange) -> dict[str, Any]:
        totals = {}
        for metric in (Metric.CLICKS, Metric.INSTALLS, Metric.OPENS, Metric.CONVERSIONS):
            rows = self.rows(project_id, mode, metric, link_id, days)
            totals[metric] = sum(n for _, dim, _, n in rows if dim == "total"
                                 and isinstance(n, int))
        return {**days.to_json(), "mode": mode.value, "linkId": link_id, **funnel(totals)}
