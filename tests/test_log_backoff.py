"""When a run of failures is logged (svc_engine/log_backoff.py): the 1st,
then 2, 4, 8 … more apart, never more than 1,024 apart."""

from __future__ import annotations

from svc_engine.log_backoff import LogBackoff


def _logged_at(failures: int, cap: int | None = None) -> list[int]:
    backoff, out = LogBackoff(), []
    for count in range(1, failures + 1):
        after = backoff.after(count) if cap is None else backoff.after(count, cap)
        if after is not None:
            out.append(count)
            backoff = after
    return out


def test_lines_double_apart_up_to_1024() -> None:
    assert _logged_at(5000) == [1, 3, 7, 15, 31, 63, 127, 255, 511, 1023,
                                2047, 3071, 4095]


def test_the_record_says_where_it_is() -> None:
    assert LogBackoff().after(1) == LogBackoff(logged_at=1, lines=1)
    assert LogBackoff(logged_at=1, lines=1).after(2) is None
    assert LogBackoff(logged_at=1, lines=1).after(3) == LogBackoff(logged_at=3, lines=2)
    assert LogBackoff(logged_at=1023, lines=10).after(2046) is None
    assert LogBackoff(logged_at=1023, lines=10).after(2047) == LogBackoff(2047, 10)


def test_a_smaller_cap() -> None:
    assert _logged_at(20, cap=2) == [1, 3, 7, 11, 15, 19]
