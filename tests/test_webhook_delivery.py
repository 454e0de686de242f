"""The delivery state machine (svc_engine.webhook_delivery), after SPEC's table."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import webhook_delivery as wd
from svc_engine.decode import RecordError
from svc_engine.errors import Conflict, InternalError
from svc_engine.keys import Mode
from svc_engine.webhook_retry import Outcome, classify_response

S = wd.DeliveryStatus
MIN = 60_000
HOUR = 60 * MIN
T0 = 1_700_000_000_000

OK = classify_response(200, None, 120)
FAIL = classify_response(500, None, 120)
TIMEOUT = classify_response(None, "timeout", 10_000)


def _new(now: int = T0) -> wd.Delivery:
    return wd.new_delivery("dlv-1", "ep-1", "evt-1", "click", Mode.LIVE, now)


def _attempt(d: wd.Delivery, outcome: Outcome, at: int, took: int = 0, **kw: Any) -> wd.Delivery:
    if d.status is not S.SENDING:
        d = wd.begin_attempt(d)
    return wd.record_attempt(d, outcome, started_at_ms=at, finished_at_ms=at + took, **kw)


def test_new_delivery_is_queued_and_due_now() -> None:
    d = _new()
    assert d.status is S.QUEUED
    assert d.next_attempt_at_ms == T0
    assert wd.is_due(d, T0)
    assert not wd.is_due(d, T0 - 1)


def test_walk_every_retry_then_failed() -> None:
    d = _new()
    starts = []
    while d.status is not S.FAILED:
        assert d.next_attempt_at_ms is not None
        at = d.next_attempt_at_ms
        assert wd.is_due(d, at) and not wd.is_due(d, at - 1)
        starts.append(at - T0)
        d = _attempt(d, FAIL, at)
        assert d.status in (S.RETRYING, S.FAILED)
    assert starts == [
        0,
        1 * MIN,
        6 * MIN,
        36 * MIN,
        2 * HOUR + 36 * MIN,
        8 * HOUR + 36 * MIN,
        20 * HOUR + 36 * MIN,
    ]
    assert d.next_attempt_at_ms is None
    assert [a.number for a in d.attempts] == [1, 2, 3, 4, 5, 6, 7]
    assert all(a.trigger == wd.SCHEDULED and a.error == "HTTP 500" for a in d.attempts)
    assert not wd.is_due(d, T0 + 100 * HOUR)


def test_success_on_the_third_attempt() -> None:
    d = _attempt(_new(), TIMEOUT, T0, took=10_000)
    assert (d.status, d.next_attempt_at_ms) == (S.RETRYING, T0 + 10_000 + MIN)
    d = _attempt(d, FAIL, T0 + 70_000, took=30)
    d = _attempt(d, OK, T0 + 400_000, took=120, response_body=b"thanks")
    assert d.status is S.DELIVERED
    assert d.next_attempt_at_ms is None
    last = d.last_attempt
    assert last is not None
    assert (last.number, last.status_code, last.duration_ms) == (3, 200, 120)
    assert last.delivered and last.error is None and last.response_body == "thanks"


def test_response_body_is_capped_and_decoded() -> None:
    body = b"x" * (wd.RESPONSE_BODY_LIMIT + 1)
    d = _attempt(_new(), FAIL, T0, response_body=body)
    attempt = d.attempts[0]
    assert attempt.response_body == "x" * wd.RESPONSE_BODY_LIMIT
    assert attempt.response_truncated
    exact = _attempt(_new(), FAIL, T0, response_body=b"y" * wd.RESPONSE_BODY_LIMIT)
    assert not exact.attempts[0].response_truncated
    bad = _attempt(_new(), FAIL, T0, response_body=b"\xff\xfeok")
    assert bad.attempts[0].response_body == "\ufffd\ufffdok"


def test_an_attempt_s_duration_is_never_negative() -> None:
    """The wall clock stepped back during the attempt: 0 ms, not a negative."""
    assert _attempt(_new(), FAIL, T0, took=-1_500).attempts[0].duration_ms == 0
    assert _attempt(_new(), FAIL, T0, took=250).attempts[0].duration_ms == 250


def _failed() -> wd.Delivery:
    d = _new()
    while d.status is not S.FAILED:
        assert d.next_attempt_at_ms is not None
        d = _attempt(d, FAIL, d.next_attempt_at_ms)
    return d


def _delivered() -> wd.Delivery:
    return _attempt(_new(), OK, T0)


def test_retry_from_failed_sends_immediately_and_can_succeed() -> None:
    d = wd.retry(_failed())
    assert (d.status, d.next_trigger, d.next_attempt_at_ms) == (S.SENDING, wd.MANUAL, None)
    d = _attempt(d, OK, T0 + 30 * HOUR)
    assert d.status is S.DELIVERED
    assert d.last_attempt is not None and d.last_attempt.trigger == wd.MANUAL
    assert d.last_attempt.number == 8
    assert d.next_trigger == wd.SCHEDULED


def test_failed_manual_attempt_is_not_retried_automatically() -> None:
    d = _attempt(wd.retry(_failed()), FAIL, T0 + 30 * HOUR)
    assert (d.status, d.next_attempt_at_ms) == (S.FAILED, None)
    d = _attempt(wd.resend(_delivered()), FAIL, T0 + HOUR)
    assert (d.status, d.next_attempt_at_ms) == (S.FAILED, None)
    assert d.scheduled_attempts == 1


def test_resend_from_delivered_keeps_the_id() -> None:
    original = _delivered()
    d = _attempt(wd.resend(original), OK, T0 + HOUR)
    assert d.status is S.DELIVERED
    assert d.id == original.id
    assert [a.trigger for a in d.attempts] == [wd.SCHEDULED, wd.MANUAL]


def _in_every_state() -> dict[S, wd.Delivery]:
    queued = _new()
    return {
        S.QUEUED: queued,
        S.SENDING: wd.begin_attempt(queued),
        S.DELIVERED: _delivered(),
        S.RETRYING: _attempt(queued, FAIL, T0),
        S.FAILED: _failed(),
    }


@pytest.mark.parametrize("state", list(S))
def test_manual_actions_only_from_their_state(state: S) -> None:
    d = _in_every_state()[state]
    assert d.status is state
    if state is S.FAILED:
        assert wd.retry(d).status is S.SENDING
    else:
        with pytest.raises(Conflict):
            wd.retry(d)
    if state is S.DELIVERED:
        assert wd.resend(d).status is S.SENDING
    else:
        with pytest.raises(Conflict):
            wd.resend(d)


@pytest.mark.parametrize("state", list(S))
def test_owner_misuse_is_an_internal_error(state: S) -> None:
    d = _in_every_state()[state]
    if state in (S.QUEUED, S.RETRYING):
        assert wd.begin_attempt(d).status is S.SENDING
    else:
        with pytest.raises(InternalError):
            wd.begin_attempt(d)
    if state is not S.SENDING:
        with pytest.raises(InternalError):
            wd.record_attempt(d, OK, started_at_ms=T0, finished_at_ms=T0)


def test_requeue_interrupted() -> None:
    sending = wd.begin_attempt(_new())
    assert wd.requeue_interrupted(sending, T0 + 5) == attrs.evolve(
        sending, status=S.QUEUED, next_attempt_at_ms=T0 + 5
    )
    retrying = wd.begin_attempt(_attempt(_new(), FAIL, T0))
    back = wd.requeue_interrupted(retrying, T0 + MIN)
    assert (back.status, back.next_attempt_at_ms) == (S.RETRYING, T0 + MIN)
    failed = _failed()
    assert wd.requeue_interrupted(wd.retry(failed), T0 + 30 * HOUR) == failed
    delivered = _delivered()
    assert wd.requeue_interrupted(wd.resend(delivered), T0 + HOUR) == delivered
    done = _delivered()
    assert wd.requeue_interrupted(done, T0) is done


def test_history_expires_after_thirty_days() -> None:
    d = _delivered()
    assert not wd.is_expired(d, T0 + 30 * 24 * HOUR - 1)
    assert wd.is_expired(d, T0 + 30 * 24 * HOUR)


def _plain(value: object) -> bool:
    if isinstance(value, dict):
        return all(isinstance(k, str) and _plain(v) for k, v in value.items())
    if isinstance(value, list):
        return all(_plain(v) for v in value)
    return value is None or isinstance(value, str | int | bool)


steps = st.lists(
    st.sampled_from(["ok", "fail", "timeout", "retry", "resend", "interrupt"]), max_size=14
)


@given(steps)
def test_random_walks_keep_invariants_and_round_trip(actions: list[str]) -> None:
    d = _new()
    now = T0
    for action in actions:
        now += 1_000
        if action == "retry" and d.status is S.FAILED:
            d = wd.retry(d)
        elif action == "resend" and d.status is S.DELIVERED:
            d = wd.resend(d)
        elif action == "interrupt" and d.status is S.SENDING:
            d = wd.requeue_interrupted(d, now)
        elif action in ("ok", "fail", "timeout") and d.status not in (S.DELIVERED, S.FAILED):
            outcome = {"ok": OK, "fail": FAIL, "timeout": TIMEOUT}[action]
            now = max(now, d.next_attempt_at_ms or now)
            d = _attempt(d, outcome, now)
        waiting = d.status in (S.QUEUED, S.RETRYING)
        assert (d.next_attempt_at_ms is not None) is waiting
        assert d.scheduled_attempts <= 7
        last = d.last_attempt
        if d.status is S.DELIVERED:
            assert last is not None and last.delivered
        if d.status in (S.FAILED, S.RETRYING):
            assert last is not None and not last.delivered
        mapped = d.to_map()
        assert _plain(mapped)
        assert wd.Delivery.from_map(mapped) == d


@pytest.mark.parametrize(
    "change",
    [
        {"v": 2},
        {"v": None},
        {"status": "Lost"},
        {"mode": "prod"},
        {"attempts": None},
        {"attempts": [{"number": 1}]},
        {"created_at_ms": "0"},
        {"next_attempt_at_ms": 1.5},
    ],
)
def test_from_map_rejects_bad_records(change: dict[str, Any]) -> None:
    mapped = _delivered().to_map() | change
    with pytest.raises(ValueError):  # RecordError, or the enum's ValueError
        wd.Delivery.from_map(mapped)
    assert issubclass(RecordError, ValueError)


# -- delivery ids ---------------------------------------------------------------------

@given(st.integers(0, (1 << 48) - 1), st.binary(min_size=10, max_size=10))
def test_a_delivery_id_is_a_uuid_v7_carrying_its_time(now: int, random10: bytes) -> None:
    text = wd.new_delivery_id(now, random10)
    u = uuid.UUID(text)
    assert str(u) == text  # canonical lower-case form
    assert u.version == 7 and u.variant == uuid.RFC_4122
    assert int.from_bytes(u.bytes[:6], "big") == now
    # 74 bits of the randomness survive: 4 after the version, 8, 6 after the variant, 56
    b = u.bytes
    assert b[6] & 0x0F == random10[0] & 0x0F and b[7] == random10[1]
    assert b[8] & 0x3F == random10[2] & 0x3F and b[9:] == random10[3:]


@given(st.lists(st.integers(0, (1 << 48) - 1), min_size=2, max_size=20),
       st.binary(min_size=10, max_size=10))
def test_delivery_ids_sort_by_time(times: list[int], random10: bytes) -> None:
    ids = [wd.new_delivery_id(t, random10) for t in sorted(times)]
    assert ids == sorted(ids)


@pytest.mark.parametrize(("now", "random10"), [(-1, bytes(10)), (1 << 48, bytes(10)),
                                               (T0, bytes(9))])
def test_a_delivery_id_needs_a_time_in_range_and_ten_random_bytes(
        now: int, random10: bytes) -> None:
    with pytest.raises(ValueError):
        wd.new_delivery_id(now, random10)
