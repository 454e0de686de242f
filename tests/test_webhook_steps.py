"""The owner's pure steps: fanning an event out to endpoints, and applying an
attempt's answer to the delivery and the endpoint's health."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import attrs
import pytest

from svc_engine.keys import Mode
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.webhook_delivery import DeliveryStatus, begin_attempt
from svc_engine.webhook_endpoint import SUBSCRIBABLE_EVENTS, EndpointFields
from svc_engine.webhook_records import Endpoint, new_endpoint, turn_off
from svc_engine.webhook_steps import Answer, apply_answer, fan_out

PID = "6f1c3a52-8f7e-4c1b-9a55-0c2d3e4f5a6b"
OTHER_PID = "7a2d4b63-9f8e-4d2c-8b66-1d3e4f5a6b7c"
EVENT_ID = "0b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e6f"
T0 = 1_790_000_000_000
SECRET = "whsec_" + "A" * 44


def _ids() -> Any:
    counter = itertools.count(1)
    return lambda: str(uuid.UUID(int=next(counter)))


def _endpoint(n: int, project: str = PID, mode: Mode = Mode.TEST,
              events: tuple[str, ...] = SUBSCRIBABLE_EVENTS) -> Endpoint:
    fields = EndpointFields(f"https://{n}.example.com/", None, events)
    return new_endpoint(str(uuid.UUID(int=1000 + n)), project, mode, fields, SECRET, T0)


def _event(type_: str = "click", mode: str = "test", at: int = T0 + 5,
           data: Any = None) -> OutboxEvent:
    return OutboxEvent(EVENT_ID, EventType(type_), PID, mode, at,
                       data if data is not None else {"k": "v"})


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def test_fan_out_to_every_matching_endpoint_with_one_shared_body() -> None:
    endpoints = [_endpoint(1), _endpoint(2, events=("install",)), _endpoint(3),
                 _endpoint(4, mode=Mode.LIVE), _endpoint(5, project=OTHER_PID),
                 turn_off(_endpoint(6), T0 + 1)]
    fan = fan_out(_event(), endpoints, T0 + 9, _ids(), _encode)
    assert fan is not None
    assert [d.endpoint_id for d in fan.deliveries] == [endpoints[0].id, endpoints[2].id]
    assert fan.event.refs == 2 and fan.event.id == EVENT_ID
    assert {d.id for d in fan.deliveries} == {str(uuid.UUID(int=1)), str(uuid.UUID(int=2))}
    assert all(d.status is DeliveryStatus.QUEUED and d.next_attempt_at_ms == T0 + 9
               and d.created_at_ms == T0 + 9 and d.event_type == "click"
               for d in fan.deliveries)
    body = json.loads(fan.event.body)
    assert body == {"id": EVENT_ID, "type": "click", "createdAt": "2026-09-21T14:13:20.005Z",
                    "projectId": PID, "env": "test", "data": {"k": "v"}}


@pytest.mark.parametrize("event", [
    _event("open"),  # not subscribed (the endpoint below takes installs and clicks)
    _event(at=T0 - 1),  # before the endpoint was added
    _event(mode="staging"),  # not a mode
    _event(data={"bad": {1, 2}}),  # not JSON-encodable
])
def test_nothing_to_send(event: OutboxEvent) -> None:
    assert fan_out(event, [_endpoint(1, events=("install", "click"))], T0 + 9, _ids(),
                   _encode) is None


def _sending(endpoint: Endpoint) -> Any:
    fan = fan_out(_event(), [endpoint], T0, _ids(), _encode)
    assert fan is not None
    return begin_attempt(fan.deliveries[0])


def test_success_delivers_and_ends_the_streak() -> None:
    e = _endpoint(1)
    d = _sending(e)
    after, health = apply_answer(d, e, Answer(T0, T0 + 40, 204, None))
    assert after.status is DeliveryStatus.DELIVERED and after.attempts[0].duration_ms == 40
    assert health.health.last_success_at_ms == T0 + 40


def test_the_measured_duration_judges_the_answer_not_the_wall_times() -> None:
    e = _endpoint(1)
    after, _ = apply_answer(_sending(e), e, Answer(T0, T0 + 60_000, 204, None, elapsed_ms=5))
    assert after.status is DeliveryStatus.DELIVERED
    after, _ = apply_answer(_sending(e), e, Answer(T0, T0 + 5, 204, None, elapsed_ms=10_001))
    assert after.status is DeliveryStatus.RETRYING and after.attempts[0].kind == "timeout"


@pytest.mark.parametrize("answer,kind,next_ms", [
    (Answer(T0, T0 + 10, 500, None), "http_status", T0 + 10 + 60_000),
    (Answer(T0, T0 + 10, 503, None), "http_status", T0 + 10 + 60_000),
    (Answer(T0, T0 + 10, 429, None), "http_status", T0 + 10 + 60_000),
    (Answer(T0, T0 + 10_000, None, "timeout", "no answer"), "timeout", T0 + 70_000),
    (Answer(T0, T0 + 10_001, 200, None), "timeout", T0 + 70_001),  # a late 2xx
    (Answer(T0, T0, None, "blocked_address", "10.0.0.1: private"), "blocked_address",
     T0 + 60_000),
])
def test_failures_schedule_the_next_attempt(answer: Answer, kind: str, next_ms: int) -> None:
    e = _endpoint(1)
    after, health = apply_answer(_sending(e), e, answer)
    assert after.status is DeliveryStatus.RETRYING and after.next_attempt_at_ms == next_ms
    assert after.attempts[0].kind == kind
    if answer.detail:
        assert after.attempts[0].error == answer.detail
    assert health.health.consecutive_failures == 1
    assert health.health.streak_started_at_ms == answer.finished_at_ms


def test_retry_scale_shrinks_only_the_wait() -> None:
    e = _endpoint(1)
    after, _ = apply_answer(_sending(e), e, Answer(T0, T0 + 10, 500, None), 0.001)
    assert after.next_attempt_at_ms == T0 + 10 + 60
    assert attrs.evolve(after, next_attempt_at_ms=None).attempts[0].kind == "http_status"


@pytest.mark.parametrize("bad", [
    {"at": 10**17},  # past the envelope's last representable time: ValidationError
    {"data": {"when": object()}},  # nothing JSON can carry: TypeError from the encoder
], ids=["time", "data"])
def test_an_event_no_envelope_can_carry_is_skipped_not_raised(bad: dict[str, Any]) -> None:
    """Such an event fans out to nothing: raising would stop the dispatcher at
    it, and every later event would wait behind it."""
    endpoints = [_endpoint(1)]
    assert fan_out(_event(**bad), endpoints, T0 + 9, _ids(), _encode) is None
    assert fan_out(_event(), endpoints, T0 + 9, _ids(), _encode) is not None


def test_the_sender_s_detail_names_an_error_only() -> None:
    """An attempt's error text is the sender's detail when the attempt failed
    without an answer, and the classified one otherwise: a detail given with
    an HTTP answer, or an error without one, does not replace it."""
    e = _endpoint(1)
    after, _ = apply_answer(_sending(e), e, Answer(T0, T0 + 10, 500, None, "ignored"))
    assert after.attempts[0].error == "HTTP 500"
    after, _ = apply_answer(_sending(e), e, Answer(T0, T0 + 10, None, "tls_error", ""))
    assert after.attempts[0].kind == "tls_error" and after.attempts[0].error
    after, _ = apply_answer(_sending(e), e, Answer(T0, T0 + 10, None, "tls_error", "bad cert"))
    assert after.attempts[0].error == "bad cert"
