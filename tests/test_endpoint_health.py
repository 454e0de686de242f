"""The endpoint health state machine (svc_engine.endpoint_health), after SPEC's table."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import endpoint_health as eh
from svc_engine.decode import RecordError

H = eh.HealthState
HOUR = 3_600_000
DAY = 24 * HOUR
T0 = 1_700_000_000_000


def _failures(health: eh.EndpointHealth, times: list[int]) -> eh.EndpointHealth:
    for t in times:
        health = eh.record_failure(health, t)
    return health


def test_new_endpoint_is_active_with_no_deliveries_yet() -> None:
    health = eh.EndpointHealth()
    assert health.state is H.ACTIVE
    assert health.last_success_at_ms is None
    assert eh.accepts_events(health)


def test_one_failure_makes_it_failing_and_starts_the_streak() -> None:
    health = eh.record_failure(eh.EndpointHealth(), T0)
    assert (health.state, health.consecutive_failures, health.streak_started_at_ms) == (
        H.FAILING,
        1,
        T0,
    )
    health = eh.record_failure(health, T0 + 5)
    assert (health.consecutive_failures, health.streak_started_at_ms) == (2, T0)


def test_success_ends_the_streak() -> None:
    failing = _failures(eh.EndpointHealth(), [T0, T0 + 1, T0 + 2])
    health = eh.record_success(failing, T0 + 3)
    assert health == eh.EndpointHealth(state=H.ACTIVE, last_success_at_ms=T0 + 3)
    again = eh.record_success(health, T0 + 10)
    assert again.last_success_at_ms == T0 + 10
    older = eh.record_success(again, T0 + 4)  # a late report never moves it back
    assert older.last_success_at_ms == T0 + 10


def _spread(count: int, first: int, last: int) -> list[int]:
    if count == 1:
        return [first]
    return [first + (last - first) * i // (count - 1) for i in range(count)]


@pytest.mark.parametrize(
    ("count", "span_ms", "state"),
    [
        (19, DAY + 1, H.FAILING),  # 19 failures are never enough
        (19, 30 * DAY, H.FAILING),
        (20, DAY, H.FAILING),  # first failure exactly 24 h old: not "more than"
        (20, DAY + 1, H.OFF),
        (21, DAY + 1, H.OFF),
        (20, DAY - 1, H.FAILING),
        (200, HOUR, H.FAILING),  # many quick failures are not sustained
    ],
)
def test_automatic_turn_off_edges(count: int, span_ms: int, state: H) -> None:
    health = _failures(eh.EndpointHealth(), _spread(count, T0, T0 + span_ms))
    assert health.state is state
    assert health.consecutive_failures == count
    if state is H.OFF:
        assert health.off_reason == eh.OFF_AUTOMATIC
        assert health.off_at_ms == T0 + span_ms
        assert "failed attempts in a row" in health.off_detail
        assert not eh.accepts_events(health)


def test_the_twentieth_failure_turns_it_off_once_the_first_is_old_enough() -> None:
    health = _failures(eh.EndpointHealth(), _spread(19, T0, T0 + HOUR))
    assert eh.record_failure(health, T0 + DAY).state is H.FAILING
    assert eh.record_failure(health, T0 + DAY + 1).state is H.OFF


def test_evaluate_applies_the_rule_when_only_time_passes() -> None:
    health = _failures(eh.EndpointHealth(), _spread(20, T0, T0 + HOUR))
    assert health.state is H.FAILING
    assert eh.evaluate(health, T0 + DAY) == health
    assert not eh.should_turn_off(health, T0 + DAY)
    assert eh.should_turn_off(health, T0 + DAY + 1)
    off = eh.evaluate(health, T0 + DAY + 1)
    assert (off.state, off.off_reason, off.off_at_ms) == (H.OFF, eh.OFF_AUTOMATIC, T0 + DAY + 1)
    nineteen = _failures(eh.EndpointHealth(), _spread(19, T0, T0 + HOUR))
    assert eh.evaluate(nineteen, T0 + 365 * DAY) == nineteen


def test_off_since_due_dates_the_turn_off_to_when_the_rule_held() -> None:
    health = _failures(eh.EndpointHealth(), _spread(20, T0, T0 + HOUR))
    assert eh.off_since_due(health, T0 + DAY) is health
    off = eh.off_since_due(health, T0 + 3 * DAY)
    assert (off.state, off.off_reason, off.off_at_ms) == (H.OFF, eh.OFF_AUTOMATIC, T0 + DAY + 1)
    nineteen = _failures(eh.EndpointHealth(), _spread(19, T0, T0 + HOUR))
    assert eh.off_since_due(nineteen, T0 + 365 * DAY) is nineteen
    assert eh.off_since_due(off, T0 + 365 * DAY) is off


def test_a_success_resets_the_count_before_the_threshold() -> None:
    health = _failures(eh.EndpointHealth(), _spread(19, T0, T0 + DAY))
    health = eh.record_success(health, T0 + DAY + 1)
    health = _failures(health, _spread(19, T0 + DAY + 2, T0 + 3 * DAY))
    assert health.state is H.FAILING
    assert health.consecutive_failures == 19
    assert health.streak_started_at_ms == T0 + DAY + 2


def test_out_of_order_failure_reports_keep_the_earliest_streak_start() -> None:
    health = _failures(eh.EndpointHealth(), [T0 + 10, T0 + 5])
    assert health.streak_started_at_ms == T0 + 5


@pytest.mark.parametrize(
    "start",
    [
        eh.EndpointHealth(),
        _failures(eh.EndpointHealth(), [T0]),
        _failures(eh.EndpointHealth(), _spread(20, T0, T0 + 2 * DAY)),
    ],
    ids=["active", "failing", "off-automatic"],
)
def test_turn_off_from_any_state(start: eh.EndpointHealth) -> None:
    off = eh.turn_off(start, T0 + 3 * DAY)
    assert (off.state, off.off_reason, off.off_at_ms) == (H.OFF, eh.OFF_MANUAL, T0 + 3 * DAY)
    assert off.off_detail == "Turned off by a team member"
    assert eh.turn_off(start, T0, "maintenance").off_detail == "maintenance"
    assert not eh.accepts_events(off)


def test_turn_on_resets_the_failure_count() -> None:
    off = _failures(eh.EndpointHealth(last_success_at_ms=T0 - 1), _spread(25, T0, T0 + 2 * DAY))
    assert off.state is H.OFF
    on = eh.turn_on(off)
    assert on == eh.EndpointHealth(state=H.ACTIVE, last_success_at_ms=T0 - 1)
    assert eh.accepts_events(on)
    # A fresh streak is needed before the next automatic turn off.
    assert eh.record_failure(on, T0 + 3 * DAY).state is H.FAILING


def test_turn_on_is_a_no_op_unless_off() -> None:
    failing = _failures(eh.EndpointHealth(), [T0])
    assert eh.turn_on(failing) is failing
    active = eh.EndpointHealth()
    assert eh.turn_on(active) is active


def test_attempts_finishing_while_off_never_change_the_off_state() -> None:
    off = eh.turn_off(_failures(eh.EndpointHealth(), [T0]), T0 + 1)
    after_failure = eh.record_failure(off, T0 + 2)
    assert after_failure.state is H.OFF
    assert after_failure.off_reason == eh.OFF_MANUAL
    assert after_failure.consecutive_failures == 2
    after_success = eh.record_success(off, T0 + 3)
    assert after_success.state is H.OFF
    assert (after_success.consecutive_failures, after_success.last_success_at_ms) == (0, T0 + 3)


def test_round_trip_and_version() -> None:
    health = eh.turn_off(_failures(eh.EndpointHealth(last_success_at_ms=1), [T0]), T0 + 1)
    assert eh.EndpointHealth.from_map(health.to_map()) == health
    with pytest.raises(RecordError):
        eh.EndpointHealth.from_map(health.to_map() | {"v": 0})
    with pytest.raises(RecordError):
        eh.EndpointHealth.from_map(health.to_map() | {"consecutive_failures": None})


events = st.lists(
    st.tuples(st.sampled_from(["ok", "fail"]), st.integers(min_value=0, max_value=6 * HOUR)),
    max_size=120,
)


@given(events)
def test_never_off_with_fewer_than_twenty_failures_and_model_agrees(
    steps: list[tuple[str, int]],
) -> None:
    health = eh.EndpointHealth()
    now = T0
    run: list[int] = []  # times of the current run of failures (the model)
    for kind, gap in steps:
        now += gap
        before = health
        if kind == "ok":
            health = eh.record_success(health, now)
            run = []
        else:
            health = eh.record_failure(health, now)
            run.append(now)
        assert health.consecutive_failures == len(run)
        if health.state is H.OFF:
            assert len(run) >= eh.AUTO_OFF_FAILURES
            assert now - run[0] > eh.AUTO_OFF_STREAK_MS
            assert health.off_reason == eh.OFF_AUTOMATIC
            return
        model_off = len(run) >= 20 and now - run[0] > DAY
        assert not model_off, attrs.asdict(before)
        assert health.state is (H.FAILING if run else H.ACTIVE)
        assert health.to_map() == eh.EndpointHealth.from_map(health.to_map()).to_map()


def test_the_turn_off_moment_is_named_once_a_streak_when_it_reaches_20_young() -> None:
    """``off_check_at``: the failure that brings a streak under 24 h old to 20
    names the moment the rule will hold (start + 24 h + 1 ms); the failures
    before and after it, a streak reaching 20 when already older, and an
    endpoint turned off by hand name none. At that moment ``off_since_due``
    turns it Off; a success in between leaves nothing to turn off."""
    before = _failures(eh.EndpointHealth(), _spread(19, T0, T0 + 20 * HOUR))
    assert eh.off_check_at(eh.EndpointHealth(), before) is None
    twentieth = eh.record_failure(before, T0 + 21 * HOUR)
    at = eh.off_check_at(before, twentieth)
    assert at == T0 + DAY + 1
    assert eh.off_check_at(twentieth, eh.record_failure(twentieth, T0 + 22 * HOUR)) is None
    assert eh.off_since_due(twentieth, at - 1) is twentieth
    off = eh.off_since_due(twentieth, at)
    assert (off.state, off.off_reason, off.off_at_ms) == (H.OFF, eh.OFF_AUTOMATIC, at)
    healed = eh.record_success(twentieth, T0 + 23 * HOUR)
    assert eh.off_since_due(healed, at) is healed
    late = eh.record_failure(before, T0 + DAY + 5)  # the 20th, the first 24 h old: Off now
    assert late.state is H.OFF and eh.off_check_at(before, late) is None
    by_hand = eh.turn_off(before, T0 + 20 * HOUR)
    assert eh.off_check_at(by_hand, eh.record_failure(by_hand, T0 + 21 * HOUR)) is None
