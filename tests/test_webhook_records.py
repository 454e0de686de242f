"""Endpoint records: creation and edit validation, which events an endpoint
accepts (SPEC: Webhook event types rules 1 and 5; endpoint state table), and
round trips of the stored records."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import endpoint_health
from svc_engine.decode import RecordError
from svc_engine.endpoint_health import HealthState
from svc_engine.errors import ValidationError
from svc_engine.keys import Mode
from svc_engine.webhook_delivery import Attempt, Delivery, DeliveryStatus
from svc_engine.webhook_endpoint import SUBSCRIBABLE_EVENTS, EndpointFields
from svc_engine.webhook_envelope import iso_utc_ms
from svc_engine.webhook_records import (
    Endpoint,
    WebhookEvent,
    accepts,
    apply_edit,
    new_endpoint,
    off_if_due,
    parse_create,
    record_outcome,
    rotate_secret,
    turn_off,
    turn_on,
)
from svc_engine.webhook_views import delivery_json, endpoint_json

PID = "6f1c3a52-8f7e-4c1b-9a55-0c2d3e4f5a6b"
EID = "0b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e6f"
SECRET = "whsec_" + "A" * 44
T0 = 1_790_000_000_000
HOUR = 3_600_000


def _endpoint(events: tuple[str, ...] = SUBSCRIBABLE_EVENTS) -> Endpoint:
    fields = EndpointFields("https://example.com/hook", None, events)
    return new_endpoint(EID, PID, Mode.TEST, fields, SECRET, T0)


# -- create and edit ------------------------------------------------------------------

@pytest.mark.parametrize("body,field", [
    ({}, "url"),
    ({"url": "http://example.com/hook"}, "url"),
    ({"url": "ftp://example.com/hook"}, "url"),
    ({"url": "https://user:pw@example.com/"}, "url"),
    ({"url": "https://example.com", "description": "x" * 201}, "description"),
    ({"url": "https://example.com", "events": []}, "events"),
    ({"url": "https://example.com", "events": ["click", "test"]}, "events"),
    ({"url": "https://example.com", "events": "click"}, "events"),
    ({"url": "https://example.com", "secret": "whsec_x"}, "secret"),
])
def test_create_refusals_name_the_field(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as e:
        parse_create(body)
    assert e.value.field == field


@pytest.mark.parametrize("url", ["https://example.com/hook", "http://localhost:9000/h",
                                 "http://127.0.0.1/h", "http://[::1]:8080/h"])
def test_create_accepts_https_and_plain_http_to_local_hosts(url: str) -> None:
    fields = parse_create({"url": url, "description": "  mine  "})
    assert fields.url == url and fields.description == "mine"
    assert fields.events == SUBSCRIBABLE_EVENTS  # all four by default


def test_create_body_must_be_an_object() -> None:
    with pytest.raises(ValidationError):
        parse_create(["https://example.com"])


def test_new_endpoint_is_active_with_no_deliveries_yet() -> None:
    e = _endpoint()
    assert e.health.state is endpoint_health.HealthState.ACTIVE
    assert e.health.last_success_at_ms is None
    assert e.accepting_since_ms == e.created_at_ms == T0


def test_edit_changes_only_given_fields() -> None:
    e = _endpoint()
    edited = apply_edit(e, {"events": ["install", "click"], "description": "d"}, T0 + 5)
    assert edited.events == ("click", "install") and edited.description == "d"
    assert edited.url == e.url and edited.updated_at_ms == T0 + 5
    assert apply_edit(edited, {"events": None}, T0 + 6).events == SUBSCRIBABLE_EVENTS
    assert apply_edit(edited, {"description": None}, T0 + 7).description is None
    assert apply_edit(e, {}, T0 + 8) is e


@pytest.mark.parametrize("body", [{"url": "http://example.com"}, {"events": []},
                                  {"status": "Off"}, {"description": 3}])
def test_edit_refusals(body: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        apply_edit(_endpoint(), body, T0)


def test_rotation_replaces_the_secret() -> None:
    rotated = rotate_secret(_endpoint(), "whsec_" + "B" * 44, T0 + 1)
    assert rotated.secret == "whsec_" + "B" * 44 and rotated.updated_at_ms == T0 + 1


# -- which events an endpoint gets ------------------------------------------------------

def test_only_subscribed_types_and_test_always() -> None:
    e = _endpoint(("install",))
    assert accepts(e, "install", T0)
    assert not accepts(e, "click", T0)
    assert accepts(e, "test", T0)


def test_past_events_are_never_replayed() -> None:
    e = _endpoint()
    assert not accepts(e, "click", T0 - 1)
    assert accepts(e, "click", T0)


def test_events_while_off_are_never_queued_but_earlier_ones_wait() -> None:
    off = turn_off(_endpoint(), T0 + HOUR)
    assert accepts(off, "click", T0 + HOUR - 1)  # happened before it went Off
    assert not accepts(off, "click", T0 + HOUR)
    assert not accepts(off, "click", T0 + 2 * HOUR)
    on = turn_on(off, T0 + 3 * HOUR)
    assert on.health.state is endpoint_health.HealthState.ACTIVE
    assert not accepts(on, "click", T0 + 2 * HOUR)  # while Off: never
    assert accepts(on, "click", T0 + 3 * HOUR)


def test_turn_on_resets_the_count_and_is_a_no_op_when_not_off() -> None:
    e = _endpoint()
    for i in range(3):
        e = record_outcome(e, False, T0 + i)
    assert e.health.consecutive_failures == 3
    assert turn_on(e, T0 + 10) is e
    on = turn_on(turn_off(e, T0 + 11), T0 + 12)
    assert on.health.consecutive_failures == 0 and on.health.streak_started_at_ms is None


def test_automatically_off_endpoint_keeps_earlier_events() -> None:
    e = _endpoint()
    for i in range(20):
        e = record_outcome(e, False, T0 + i * 2 * HOUR)  # 38 hours of failures
    assert e.is_off and e.health.off_reason == endpoint_health.OFF_AUTOMATIC
    off_at = e.health.off_at_ms
    assert off_at is not None
    assert accepts(e, "open", off_at - 1) and not accepts(e, "open", off_at)


# -- records --------------------------------------------------------------------------

@given(st.lists(st.sampled_from(SUBSCRIBABLE_EVENTS), min_size=1, unique=True),
       st.one_of(st.none(), st.text(max_size=200)), st.booleans(), st.integers(0, 40))
def test_endpoint_round_trips(events: list[str], description: str | None, off: bool,
                              failures: int) -> None:
    e = attrs.evolve(_endpoint(tuple(events)), description=description)
    for i in range(failures):
        e = record_outcome(e, i % 7 == 6, T0 + i * HOUR)
    if off:
        e = turn_off(e, T0 + 99)
    assert Endpoint.from_map(e.to_map()) == e


@pytest.mark.parametrize("events", [[1], ["click", None], "click", None])
def test_an_endpoint_record_needs_a_list_of_event_names(events: object) -> None:
    with pytest.raises(RecordError):
        Endpoint.from_map({**_endpoint().to_map(), "events": events})


def test_off_if_due_changes_only_an_endpoint_the_rule_turned_off() -> None:
    """Twenty failures, the first more than 24 hours ago and none since: Off
    as of the moment the 24 hours passed; before that, the very same record."""
    e = _endpoint()
    for i in range(20):
        e = record_outcome(e, False, T0 + i * 60_000)
    assert off_if_due(e, T0 + 24 * HOUR) is e
    healthy = _endpoint()
    assert off_if_due(healthy, T0 + 99 * HOUR) is healthy
    off = off_if_due(e, T0 + 30 * HOUR)
    assert off.health.state is HealthState.OFF and off.updated_at_ms == T0 + 30 * HOUR
    assert off.health.off_at_ms == T0 + 24 * HOUR + 1


def test_event_round_trips() -> None:
    ev = WebhookEvent(EID, "click", PID, Mode.LIVE, T0, b'{"a":1}', 3)
    assert WebhookEvent.from_map(ev.to_map()) == ev


def test_json_view_hides_the_secret_in_lists() -> None:
    e = _endpoint()
    assert "secret" not in endpoint_json(e, with_secret=False)
    shown = endpoint_json(turn_off(e, T0 + 1), with_secret=True)
    assert shown["secret"] == SECRET and shown["status"] == "Off"
    assert shown["health"]["offBy"] == "manual" and shown["health"]["offAt"]
    assert shown["health"]["offReason"] == "Turned off by a team member"
    assert endpoint_json(e, with_secret=False)["health"]["offReason"] is None  # null, not ""
    said = endpoint_json(turn_off(e, T0 + 1, "Turned off by ana@example.com"), with_secret=False)
    assert said["health"]["offReason"] == "Turned off by ana@example.com"


def test_json_view_times_a_failing_streak_from_its_first_failure() -> None:
    """SPEC: Failing shows the count of consecutive failures and when the
    streak began (not the last success, not the latest failure)."""
    e = record_outcome(_endpoint(), True, T0 - HOUR)
    for i in range(3):
        e = record_outcome(e, False, T0 + i * HOUR)
    health = endpoint_json(e, with_secret=False)["health"]
    assert health["consecutiveFailures"] == 3
    assert health["failingSince"] == iso_utc_ms(T0)
    assert health["lastSuccessAt"] == iso_utc_ms(T0 - HOUR)


def test_json_view_of_a_delivery_times_each_attempt_by_its_start() -> None:
    """SPEC's delivery fields: each attempt's time and duration, and the last
    attempt: the start of the newest one, not the delivery's creation."""
    attempts = tuple(Attempt(number=n, trigger="scheduled", started_at_ms=T0 + (n - 1) * 60_010,
                             duration_ms=250, status_code=500, kind="http_status",
                             error="HTTP 500") for n in (1, 2))
    d = Delivery(id=EID, endpoint_id=EID, event_id=PID, event_type="click", mode=Mode.TEST,
                 status=DeliveryStatus.RETRYING, created_at_ms=T0 - 500, attempts=attempts,
                 next_attempt_at_ms=T0 + 400_000)
    view = delivery_json(d, _endpoint(), None)
    assert [a["startedAt"] for a in view["attemptLog"]] == [iso_utc_ms(T0),
                                                           iso_utc_ms(T0 + 60_010)]
    assert [a["durationMs"] for a in view["attemptLog"]] == [250, 250]
    assert view["lastAttemptAt"] == iso_utc_ms(T0 + 60_010)
    assert view["createdAt"] == iso_utc_ms(T0 - 500)
    assert view["response"] == {"status": 500, "body": "", "truncated": False}
    unanswered = attrs.evolve(d, attempts=(attrs.evolve(attempts[0], status_code=None,
                                                        kind="connection_error"),))
    assert delivery_json(unanswered, _endpoint(), None)["response"] is None
