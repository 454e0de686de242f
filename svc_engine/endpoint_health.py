"""The webhook endpoint health state machine.

Theory of operation
-------------------
Health follows every attempt made to the endpoint, across all of its
deliveries, in the order the owner records them. Every attempt counts:
scheduled retries, manual Retry and Resend, and Send test.

::

    Active --failure--> Failing --failure (>= 20 in a row, first > 24 h ago)--> Off
      ^                    |
      +-----success--------+
    any --turn_off--> Off (manual)          Off --turn_on--> Active (count reset)

* **Active**: the last attempt succeeded, or there was none yet. Shows the
  last success time or 'No deliveries yet' (``last_success_at_ms`` None).
* **Failing**: the most recent attempt failed; one failure is enough. Shows
  ``consecutive_failures`` and ``streak_started_at_ms`` (the first failure of
  the streak). Any success ends the streak and returns to Active.
* **Off**: turned off by a team member (``off_reason`` ``manual``) or
  automatically (``automatic``, with ``off_detail`` in words). While Off the
  owner queues no new events for the endpoint and starts no attempts.

Automatic turn off: at least 20 consecutive failed attempts whose first is
more than 24 hours old (strictly: ``now - streak start > 24 h``; exactly
24 h is not enough). ``record_failure`` checks it as each failure arrives;
``evaluate`` checks it for the passage of time alone, for an owner that wants
to apply the rule without waiting for another attempt. A streak that reaches
20 failures within its first 24 hours meets the rule later with no failure to
judge it: ``off_check_at`` names that moment (streak start + 24 h + 1 ms),
once a streak, for the owner to set a deadline, and ``off_since_due`` turns it
Off as of then.

Attempts still in flight when the endpoint goes Off are recorded normally
(the counters move) but never change the Off state. ``turn_on`` resets the
failure count and returns to Active; turning on an endpoint that is not Off
changes nothing.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import RecordError, opt_int, opt_str, req_int, req_str

AUTO_OFF_FAILURES = 20
AUTO_OFF_STREAK_MS = 24 * 3_600_000

OFF_MANUAL = "manual"
OFF_AUTOMATIC = "automatic"


class HealthState(enum.StrEnum):
    ACTIVE = "Active"
    FAILING = "Failing"
    OFF = "Off"


@attrs.frozen
class EndpointHealth:
    VERSION = 1

    state: HealthState = HealthState.ACTIVE
    last_success_at_ms: int | None = None
    consecutive_failures: int = 0
    streak_started_at_ms: int | None = None
    off_reason: str | None = None
    off_detail: str = ""
    off_at_ms: int | None = None

    def to_map(self) -> dict[str, Any]:
        return {
            "v": self.VERSION,
            "state": self.state.value,
            "last_success_at_ms": self.last_success_at_ms,
            "consecutive_failures": self.consecutive_failures,
            "streak_started_at_ms": self.streak_started_at_ms,
            "off_reason": self.off_reason,
            "off_detail": self.off_detail,
            "off_at_ms": self.off_at_ms,
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> EndpointHealth:
        if req_int(m, "v") != cls.VERSION:
            raise RecordError(f"endpoint health record version {m['v']} is not {cls.VERSION}")
        return cls(
            state=HealthState(req_str(m, "state")),
            last_success_at_ms=opt_int(m, "last_success_at_ms"),
            consecutive_failures=req_int(m, "consecutive_failures"),
            streak_started_at_ms=opt_int(m, "streak_started_at_ms"),
            off_reason=opt_str(m, "off_reason"),
            off_detail=req_str(m, "off_detail"),
            off_at_ms=opt_int(m, "off_at_ms"),
        )


def record_success(health: EndpointHealth, at_ms: int) -> EndpointHealth:
    """A 2xx attempt: the streak ends (Failing or Active to Active)."""
    after = attrs.evolve(
        health,
        last_success_at_ms=max(at_ms, health.last_success_at_ms or at_ms),
        consecutive_failures=0,
        streak_started_at_ms=None,
    )
    if health.state is HealthState.OFF:
        return after
    return attrs.evolve(after, state=HealthState.ACTIVE)


def record_failure(health: EndpointHealth, at_ms: int) -> EndpointHealth:
    """A failed attempt: Active or Failing to Failing, or Off once the rule holds."""
    started = health.streak_started_at_ms
    after = attrs.evolve(
        health,
        consecutive_failures=health.consecutive_failures + 1,
        streak_started_at_ms=at_ms if started is None else min(started, at_ms),
    )
    if health.state is HealthState.OFF:
        return after
    return evaluate(attrs.evolve(after, state=HealthState.FAILING), at_ms)


def should_turn_off(health: EndpointHealth, now_ms: int) -> bool:
    """The automatic rule: >= 20 failures in a row, the first more than 24 h before now."""
    return (
        health.state is not HealthState.OFF
        and health.consecutive_failures >= AUTO_OFF_FAILURES
        and health.streak_started_at_ms is not None
        and now_ms - health.streak_started_at_ms > AUTO_OFF_STREAK_MS
    )


def evaluate(health: EndpointHealth, now_ms: int) -> EndpointHealth:
    """Apply the automatic turn-off rule at ``now_ms``."""
    if not should_turn_off(health, now_ms):
        return health
    return attrs.evolve(
        health,
        state=HealthState.OFF,
        off_reason=OFF_AUTOMATIC,
        off_detail=(
            f"Turned off automatically after {health.consecutive_failures} failed attempts"
            " in a row over more than 24 hours"
        ),
        off_at_ms=now_ms,
    )


def off_check_at(before: EndpointHealth, after: EndpointHealth) -> int | None:
    """When the automatic rule will hold with no further failure, if the
    attempt that took ``before`` to ``after`` brought the streak to
    ``AUTO_OFF_FAILURES`` while it was still 24 hours young; None otherwise
    (once a streak: only the failure that reaches the count names it)."""
    if (after.state is not HealthState.FAILING or after.streak_started_at_ms is None
            or after.consecutive_failures < AUTO_OFF_FAILURES
            or before.consecutive_failures >= AUTO_OFF_FAILURES):
        return None
    return after.streak_started_at_ms + AUTO_OFF_STREAK_MS + 1


def off_since_due(health: EndpointHealth, now_ms: int) -> EndpointHealth:
    """The automatic rule applied between attempts: a streak that reached 20
    failures within 24 hours is judged again only by the next failure, so
    when none came after the 24 hours passed, the endpoint is Off as of the
    moment they did (streak start + 24 h + 1 ms: an event after it is not
    queued). Unchanged when the rule does not hold at ``now_ms``."""
    if not should_turn_off(health, now_ms):
        return health
    assert health.streak_started_at_ms is not None  # should_turn_off says so
    return evaluate(health, health.streak_started_at_ms + AUTO_OFF_STREAK_MS + 1)


def turn_off(health: EndpointHealth, at_ms: int, detail: str = "") -> EndpointHealth:
    """A team member turns the endpoint off (from any state)."""
    return attrs.evolve(
        health,
        state=HealthState.OFF,
        off_reason=OFF_MANUAL,
        off_detail=detail or "Turned off by a team member",
        off_at_ms=at_ms,
    )


def turn_on(health: EndpointHealth) -> EndpointHealth:
    """Off to Active, with the failure count reset; a no-op in other states."""
    if health.state is not HealthState.OFF:
        return health
    return attrs.evolve(
        health,
        state=HealthState.ACTIVE,
        consecutive_failures=0,
        streak_started_at_ms=None,
        off_reason=None,
        off_detail="",
        off_at_ms=None,
    )


def accepts_events(health: EndpointHealth) -> bool:
    """Whether new events are queued for the endpoint (not while Off)."""
    return health.state is not HealthState.OFF
