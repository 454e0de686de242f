"""The OutboxDispatcher (actors/webhook_dispatch.py) outlives a store that
cannot write: a refused tick is tried again every second, logged once when
the refusals start and once when they end, and never ends the service."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from actors.signal import Wakeup
from actors.webhook_dispatch import OutboxDispatcher
from actors.webhooks import TickResult
from svc_engine.errors import StoreFull


class RefusingActor:
    """Its ticks 2 to 4 are refused by the store."""

    def __init__(self) -> None:
        self.ticks = 0

    async def tick(self) -> TickResult:
        self.ticks += 1
        if 2 <= self.ticks <= 4:
            raise StoreFull("the store is full (test)")
        # tick 5 dispatches one delivery; parked for a while, then idle
        return TickResult(int(self.ticks == 5), self.ticks < 6)


class EmptyOutbox:
    def read_outbox(self, n: int) -> list[object]:
        return []


async def test_a_refused_tick_is_tried_again_every_second(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    actor = RefusingActor()
    dispatcher = OutboxDispatcher(actor, EmptyOutbox(), Wakeup())  # type: ignore[arg-type]
    with trio.move_on_after(10):
        await dispatcher.run()
    assert actor.ticks == 6  # every second while refused or parked, then only polls
    stats = dispatcher.statistics()
    assert (stats.ticks, stats.failed_ticks, stats.dispatched) == (6, 3, 1)
    warnings = [r.getMessage() for r in caplog.records if r.name == "svc.webhooks"]
    assert len(warnings) == 2
    assert "the store cannot write" in warnings[0] and "writes again" in warnings[1]
