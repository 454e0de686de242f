"""A level-triggered wake-up: producers ``notify()`` without blocking, one
consumer ``wait()``s until something was notified since it last woke."""

from __future__ import annotations

import trio


class Wakeup:
    def __init__(self) -> None:
        self._event = trio.Event()

    def notify(self) -> None:
        self._event.set()

    async def wait(self) -> None:
        await self._event.wait()
        self._event = trio.Event()
