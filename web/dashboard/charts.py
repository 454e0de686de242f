"""Charts as numbers for inline SVG, drawn on the server (no JavaScript).

The templates (``charts.html``) draw what these functions compute. Horizontal
positions are percentages of the chart's width and vertical ones are pixels,
so an ``<svg width="100%">`` stretches to its card on any screen while its
text keeps its real size (SVG lengths may be percentages of the viewport; no
``viewBox`` scaling, which would shrink the labels on a phone).

- :func:`column_chart`: one column per day with "nice" gridlines (1, 2 or 5
  times a power of ten), labels on at most ``max_labels`` days.
- :func:`bar_rows`: a ranked list (countries, referrer hosts, methods): the
  largest values, the rest summed as "Other", bars scaled to the largest.
- :func:`funnel_steps`: clicks, installs, opens, conversions, each with its
  share of the first step.

Every chart is also given to the page as a table (the accessible fallback).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import date

import attrs

from svc_engine.analytics import top_values

HEIGHT = 200
PLOT_TOP = 20          # room for the top gridline's label
AXIS_SPACE = 24        # below the plot: day labels
GAP_SHARE = 0.25       # of each column's slot left empty


@attrs.frozen
class Column:
    key: str          # the day, YYYY-MM-DD
    label: str        # "3 Mar 2025"
    value: int
    x: float          # left edge, % of the width
    width: float      # % of the width
    y: float          # top, px
    height: float     # px


@attrs.frozen
class Gridline:
    value: int
    y: float
    label: str


@attrs.frozen
class AxisLabel:
    x: float          # % of the width
    text: str
    anchor: str       # SVG text-anchor: start, middle or end
    minor: bool = False  # every other label between the ends: left out on narrow screens


@attrs.frozen
class ColumnChart:
    height: int
    baseline: float   # y of the zero line, px
    columns: tuple[Column, ...]
    grid: tuple[Gridline, ...]
    labels: tuple[AxisLabel, ...]
    total: int
    peak: int


@attrs.frozen
class BarRow:
    label: str
    value: int
    width: float      # % of the largest value
    share: float      # % of the total


@attrs.frozen
class FunnelStep:
    label: str
    value: int
    width: float      # % of the largest step
    of_first: float | None  # % of the first step; None when the first is 0


def nice_step(peak: int, lines: int = 4) -> int:
    """The gridline step: the smallest 1, 2 or 5 times 10**k that covers ``peak``
    with at most ``lines`` steps (at least 1)."""
    if peak <= lines:
        return 1
    raw = peak / lines
    power = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if m * power >= raw:
            return int(m * power)
    return int(10 * power)  # unreachable: 10 * power >= raw always


def short_number(n: int) -> str:
    """1234 -> "1.2k", 2_500_000 -> "2.5M". A unit starts where the one
    below would round to 1000 of it: 999_950 is "1M", not "1000k" (half the
    last decimal shown below, ``limit // 20_000``, short of the unit)."""
    for limit, suffix in ((1_000_000_000, "B"), (1_000_000, "M"), (1_000, "k")):
        if abs(n) >= limit - limit // 20_000:
            text = f"{n / limit:.1f}".removesuffix(".0")
            return text + suffix
    return str(n)


def day_label(day: str, *, year: bool = False) -> str:
    d = date.fromisoformat(day)
    return f"{d.day} {d:%b %Y}" if year else f"{d.day} {d:%b}"


def column_chart(points: Sequence[tuple[str, int]], *, height: int = HEIGHT,
                 max_labels: int = 6) -> ColumnChart:
    """Columns for ``(day, value)`` points, oldest first."""
    baseline = float(height - AXIS_SPACE)
    plot = baseline - PLOT_TOP
    peak = max((v for _, v in points), default=0)
    step = nice_step(peak)
    top = max(step, math.ceil(peak / step) * step)
    grid = tuple(Gridline(v, baseline - plot * v / top, short_number(v))
                 for v in range(0, top + 1, step))
    n = len(points)
    slot = 100 / n if n else 100.0
    columns = []
    for i, (day, value) in enumerate(points):
        h = plot * value / top
        columns.append(Column(day, day_label(day, year=True), value,
                              x=i * slot + slot * GAP_SHARE / 2, width=slot * (1 - GAP_SHARE),
                              y=baseline - h, height=h))
    picked = (range(n) if n <= max_labels else
              sorted({round(i * (n - 1) / (max_labels - 1)) for i in range(max_labels)}))
    labels = []
    for rank, i in enumerate(picked):
        anchor = "start" if i == 0 else "end" if i == n - 1 else "middle"
        x = 0.0 if i == 0 else 100.0 if i == n - 1 else (i + 0.5) * slot
        labels.append(AxisLabel(x, day_label(points[i][0]), anchor,
                                minor=anchor == "middle" and rank % 2 == 1))
    return ColumnChart(height, baseline, tuple(columns), grid, tuple(labels),
                       total=sum(v for _, v in points), peak=peak)


def bar_rows(counts: Mapping[str, int], *, limit: int = 8, other: str = "Other",
             names: Mapping[str, str] | None = None) -> list[BarRow]:
    """The ``limit`` largest values (ties by label), the rest as ``other``:
    the ``limit - 1`` largest and ``other`` when there are more
    (``analytics.top_values``: a long tail, a link's referrer hosts, is
    summed, not sorted)."""
    if limit < 1:
        raise ValueError("bar_rows shows at least one bar")
    positive = {k: v for k, v in counts.items() if v > 0}
    kept, left = top_values(positive, limit - 1 if len(positive) > limit else limit)
    ranked = [*kept.items(), *([(other, left["count"])] if left is not None else [])]
    total = sum(v for _, v in ranked)
    largest = max((v for _, v in ranked), default=0)
    label = names or {}
    return [BarRow(label.get(k, k), v, 100 * v / largest if largest else 0.0,
                   100 * v / total if total else 0.0) for k, v in ranked]


def funnel_steps(steps: Sequence[tuple[str, int]]) -> list[FunnelStep]:
    largest = max((v for _, v in steps), default=0)
    first = steps[0][1] if steps else 0
    return [FunnelStep(label, value, 100 * value / largest if largest else 0.0,
                       100 * value / first if first else None) for label, value in steps]
