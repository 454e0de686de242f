"""The WebhookActor's ready queues (actors/webhook_queue.py): round-robin across
endpoints under the two caps, busy from queued to reported, dropping and
forgetting an endpoint. Pure: no event loop."""

from __future__ import annotations

import pytest

from actors.webhook_queue import SendQueue
from svc_engine import webhook_delivery as wd
from svc_engine.keys import Mode


def _d(n: int, endpoint: str) -> wd.Delivery:
    return wd.new_delivery(f"d{n}", endpoint, f"e{n}", "click", Mode.LIVE, 1000 + n)


def _start_all(q: SendQueue) -> list[str]:
    started = []
    for d in q.startable():
        q.started(d, wd.begin_attempt(d))
        started.append(d.id)
    return started


def test_endpoints_take_turns_until_the_senders_are_full() -> None:
    q = SendQueue(senders=5, per_endpoint=8)
    for n in range(4):
        q.add(_d(n, "a"))
    for n in range(4, 8):
        q.add(_d(n, "b"))
    assert _start_all(q) == ["d0", "d4", "d1", "d5", "d2"]
    assert q.running == 5 and q.ready_count == 3
    assert _start_all(q) == []  # every sender busy


def test_one_endpoint_holds_at_most_per_endpoint_senders() -> None:
    q = SendQueue(senders=10, per_endpoint=2)
    for n in range(5):
        q.add(_d(n, "slow"))
    q.add(_d(9, "other"))
    assert _start_all(q) == ["d0", "d9", "d1"]
    assert q.finished("d0", "slow") is not None
    assert _start_all(q) == ["d2"]


def test_front_goes_first_and_a_delivery_is_busy_until_reported() -> None:
    q = SendQueue(senders=1, per_endpoint=1)
    q.add(_d(1, "a"))
    q.add(_d(2, "a"), front=True)
    assert q.is_busy("d1") and q.is_busy("d2")
    assert _start_all(q) == ["d2"]
    stored, sending = q.finished("d2", "a") or (None, None)
    assert stored is not None and stored.status is wd.DeliveryStatus.QUEUED
    assert sending is not None and sending.status is wd.DeliveryStatus.SENDING
    assert not q.is_busy("d2") and q.is_busy("d1") and q.running == 0


def test_a_released_delivery_is_not_busy_and_takes_no_sender() -> None:
    q = SendQueue(senders=1, per_endpoint=1)
    q.add(_d(1, "a"))
    q.add(_d(2, "a"))
    taken = q.startable()
    first = next(taken)
    q.release(first)
    second = next(taken)
    assert (first.id, second.id) == ("d1", "d2")
    assert not q.is_busy("d1") and q.running == 0


def test_dropping_and_forgetting_an_endpoint() -> None:
    q = SendQueue(senders=4, per_endpoint=4)
    for n in range(3):
        q.add(_d(n, "a"))
    q.add(_d(7, "b"))
    d0 = next(q.startable())
    q.started(d0, wd.begin_attempt(d0))  # in flight
    dropped = q.drop_ready("b")
    assert [d.id for d in dropped] == ["d7"] and not q.is_busy("d7")
    gone = q.forget("a")
    assert [d.id for d in gone] == ["d0"] and gone[0].status is wd.DeliveryStatus.SENDING
    assert q.ready_count == 0 and not q.is_busy("d1")
    # The forgotten attempt's report still frees its sender, and is ignored.
    assert q.finished("d0", "a") is None and q.running == 0


def test_busy_endpoints_keep_taking_turns_as_senders_free_up() -> None:
    """Five endpoints with a backlog, 32 senders, 8 each at most: as attempts
    end and senders free up, the endpoints keep taking turns (the one just
    served goes to the back), so none waits while the others' backlogs drain
    (README: hung or busy receivers cannot hold the senders others need)."""
    from collections import Counter, deque

    q = SendQueue(senders=32, per_endpoint=8)
    endpoints = [f"ep{i}" for i in range(5)]
    for n in range(1_500):
        q.add(_d(n, endpoints[n // 300]))
    flying: deque[wd.Delivery] = deque()
    starts: Counter[str] = Counter()

    def take() -> None:
        for d in q.startable():
            q.started(d, wd.begin_attempt(d))
            flying.append(d)
            starts[d.endpoint_id] += 1

    take()
    for _ in range(400):  # the oldest attempt ends, and its sender is free again
        done = flying.popleft()
        q.finished(done.id, done.endpoint_id)
        q.answered(done.endpoint_id, hung=False)
        take()
    assert set(starts) == set(endpoints)
    assert min(starts.values()) >= 0.9 * max(starts.values()), starts


def test_a_ready_queue_of_one_holds_one_and_none_is_refused() -> None:
    q = SendQueue(senders=1, per_endpoint=1, ready_cap=1)
    assert q.add(_d(1, "a")) and not q.add(_d(2, "a"))
    assert q.ready_of("a") == 1
    with pytest.raises(ValueError, match="at least one"):
        SendQueue(senders=1, per_endpoint=1, ready_cap=0)


def test_manual_attempts_waiting_are_counted_down_as_each_starts() -> None:
    q = SendQueue(senders=1, per_endpoint=1)
    for n in (1, 2):
        assert q.add(_d(n, "a"), front=True)
    assert q.manual_waiting("a") == 2
    assert _start_all(q) == ["d2"]  # the later one went to the front
    assert q.manual_waiting("a") == 1
    q.finished("d2", "a")
    assert _start_all(q) == ["d1"] and q.manual_waiting("a") == 0
