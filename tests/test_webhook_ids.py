"""Ids of the WebhookActor's records (actors/webhook_ids.py): randomness drawn a
kilobyte at a time and never handed out twice; delivery ids ordered by time."""

from __future__ import annotations

import uuid

from actors.webhook_ids import CHUNK, IdSource
from svc_engine.ids import new_id
from svc_engine.webhook_delivery import new_delivery_id


class StepClock:
    def __init__(self) -> None:
        self.ms = 1_800_000_000_000

    def now_ms(self) -> int:
        self.ms += 1
        return self.ms

    def trio_time_for(self, wall_ms: int) -> float:
        raise NotImplementedError


class Counting:
    """A randomness source that numbers its bytes, so reuse would show."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self._next = 0

    def __call__(self, n: int) -> bytes:
        self.calls.append(n)
        out = bytes((self._next + i) % 251 for i in range(n))
        self._next += n
        return out


def test_bytes_come_from_the_pool_in_order_and_never_twice() -> None:
    source = Counting()
    ids = IdSource(source, StepClock())
    drawn = b"".join(ids.random(16) for _ in range(CHUNK // 16 + 1))
    assert source.calls == [CHUNK, CHUNK]
    assert drawn == bytes(i % 251 for i in range(CHUNK + 16))
    assert len(ids.random(2 * CHUNK)) == 2 * CHUNK  # a large draw is one call
    assert source.calls[-1] == 2 * CHUNK


def test_random_ids_are_v4_and_delivery_ids_v7_in_time_order() -> None:
    ids = IdSource(Counting(), StepClock())
    assert {uuid.UUID(ids.new_id()).version for _ in range(5)} == {4}
    made = [ids.new_delivery_id() for _ in range(50)]
    assert {uuid.UUID(i).version for i in made} == {7}
    assert made == sorted(made) and len(set(made)) == 50


def test_an_id_takes_16_bytes_and_a_delivery_id_10() -> None:
    clock = StepClock()
    ids = IdSource(Counting(), clock)
    assert ids.new_id() == new_id(bytes(range(16)))
    assert ids.new_delivery_id() == new_delivery_id(clock.ms, bytes(range(16, 26)))
    assert ids.random(1) == bytes([26])
