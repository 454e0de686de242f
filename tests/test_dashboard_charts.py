"""The server-side charts' geometry (web/dashboard/charts.py), pure."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from web.dashboard.charts import (
    AXIS_SPACE,
    PLOT_TOP,
    bar_rows,
    column_chart,
    funnel_steps,
    nice_step,
    short_number,
)


@pytest.mark.parametrize(("peak", "step"), [
    (0, 1), (1, 1), (4, 1), (5, 2), (8, 2), (9, 5), (20, 5), (21, 10), (40, 10),
    (41, 20), (87, 50), (100, 50), (101, 50), (201, 100), (999, 500), (12_345, 5_000),
])
def test_nice_steps(peak: int, step: int) -> None:
    assert nice_step(peak) == step


@given(st.integers(min_value=0, max_value=10**9))
def test_gridlines_cover_the_peak_in_at_most_five_lines(peak: int) -> None:
    step = nice_step(peak)
    top = max(step, -(-peak // step) * step)
    assert top >= peak and top // step <= 4
    assert str(step).strip("0") in ("1", "2", "5")


def test_short_numbers() -> None:
    assert [short_number(n) for n in (0, 999, 1000, 1234, 25_000, 2_500_000, 3 * 10**9)] == [
        "0", "999", "1k", "1.2k", "25k", "2.5M", "3B"]
    # each unit starts at its own boundary, and a number the unit below
    # would show as 1000 of it ("1000k") is shown in the next
    assert [short_number(n) for n in (999_949, 999_950, 999_999, 1_000_000, -1_000_000)] == [
        "999.9k", "1M", "1M", "1M", "-1M"]
    assert [short_number(n) for n in (999_949_999, 999_950_000, 10**9, 999_999)] == [
        "999.9M", "1B", "1B", "1M"]
    assert [short_number(n) for n in (999, 1000)] == ["999", "1k"]  # no decimal below 1k


def test_columns_fill_the_width_and_scale_to_the_top_gridline() -> None:
    points = [(f"2026-03-{d:02d}", v) for d, v in zip(range(1, 11), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9],
                                                       strict=True)]
    c = column_chart(points, height=200)
    assert c.total == 45 and c.peak == 9 and c.baseline == 200 - AXIS_SPACE
    assert [g.value for g in c.grid] == [0, 5, 10]
    plot = c.baseline - PLOT_TOP
    assert c.grid[-1].y == PLOT_TOP and c.grid[0].y == c.baseline
    for col, (_, v) in zip(c.columns, points, strict=True):
        assert col.height == pytest.approx(plot * v / 10)
        assert col.y + col.height == pytest.approx(c.baseline)
    first, last = c.columns[0], c.columns[-1]
    assert first.x > 0 and last.x + last.width < 100
    assert last.x + last.width + first.x == pytest.approx(100)      # symmetric gaps
    assert first.label == "1 Mar 2026"


def test_a_small_peak_has_a_gridline_a_unit_up_to_its_top() -> None:
    c = column_chart([("2026-03-01", 3), ("2026-03-02", 1)])
    assert [g.value for g in c.grid] == [0, 1, 2, 3] and c.grid[-1].y == PLOT_TOP


def test_day_labels_keep_both_ends_and_thin_out_the_middle() -> None:
    points = [(f"2026-01-{d:02d}", 1) for d in range(1, 31)]
    chart = column_chart(points, max_labels=6)
    labels = chart.labels
    assert [(lb.text, lb.anchor, lb.x) for lb in (labels[0], labels[-1])] == [
        ("1 Jan", "start", 0.0), ("30 Jan", "end", 100.0)]
    assert len(labels) == 6 and all(lb.anchor == "middle" for lb in labels[1:-1])
    assert [lb.minor for lb in labels] == [False, True, False, True, False, False]
    by_label = {col.label.removesuffix(" 2026"): col for col in chart.columns}
    for lb in labels[1:-1]:  # a middle label sits under the middle of its column
        col = by_label[lb.text]
        assert lb.x == pytest.approx(col.x + col.width / 2), lb.text
    assert len(column_chart(points[:3]).labels) == 3
    assert column_chart([]).columns == () and column_chart([]).labels == ()


def test_bars_rank_and_group_the_rest() -> None:
    rows = bar_rows({"US": 50, "DE": 30, "FR": 10, "JP": 5, "BR": 5, "none": 0}, limit=3,
                    names={"US": "United States"})
    assert [(r.label, r.value) for r in rows] == [("United States", 50), ("DE", 30),
                                                 ("Other", 20)]
    assert rows[0].width == 100 and rows[1].width == 60
    assert sum(r.share for r in rows) == pytest.approx(100)
    assert bar_rows({}) == [] and bar_rows({"x": 0}) == []
    with pytest.raises(ValueError):
        bar_rows({"x": 1}, limit=0)
    ties = bar_rows({"b": 1, "a": 1})
    assert [r.label for r in ties] == ["a", "b"]


def reference_bar_rows(counts: dict[str, int], limit: int) -> list[tuple[str, int]]:
    ranked = sorted(((k, v) for k, v in counts.items() if v > 0), key=lambda kv: (-kv[1], kv[0]))
    if len(ranked) > limit:
        ranked = [*ranked[:limit - 1], ("Other", sum(v for _, v in ranked[limit - 1:]))]
    return ranked


@given(st.dictionaries(st.text(alphabet="abc", max_size=3), st.integers(-2, 40), max_size=40),
       st.integers(1, 10))
def test_bars_name_the_same_largest_as_a_full_sort(counts: dict[str, int], limit: int) -> None:
    """Only the values that may be named are sorted (a link's referrer hosts
    are a long tail); the bars are those of sorting them all."""
    rows = bar_rows(counts, limit=limit)
    assert [(r.label, r.value) for r in rows] == reference_bar_rows(counts, limit)


def test_bars_of_a_long_tail() -> None:
    tail = {f"h{i}.example": 1 + i % 3 for i in range(20_000)}
    tail.update({"direct": 900, "t.co": 900, "a.example": 40})
    rows = bar_rows(tail)
    assert [(r.label, r.value) for r in rows] == reference_bar_rows(tail, 8)
    assert rows[-1].label == "Other" and sum(r.value for r in rows) == sum(tail.values())


def test_funnel_is_relative_to_the_first_step() -> None:
    steps = funnel_steps([("Clicks", 200), ("Installs", 50), ("Opens", 250), ("Conversions", 0)])
    assert [s.of_first for s in steps] == [100, 25, 125, 0]
    assert [s.width for s in steps] == [80, 20, 100, 0]
    assert funnel_steps([("Clicks", 0), ("Installs", 3)])[1].of_first is None
