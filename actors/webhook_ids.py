"""Ids for the WebhookActor's records, from the injected randomness.

Randomness is drawn from the source a kilobyte at a time rather than 16 bytes
per id (a dispatched batch makes hundreds of ids). Endpoints and events get
random (version 4) UUIDs; deliveries get time-ordered ones
(``webhook_delivery.new_delivery_id``), so a batch's deliveries sit together in
the store's indexes.
"""

from __future__ import annotations

from collections.abc import Callable

from actors.clock import Clock
from svc_engine.ids import new_id
from svc_engine.webhook_delivery import new_delivery_id

CHUNK = 1024
"""Random bytes drawn at once."""


class IdSource:
    def __init__(self, random: Callable[[int], bytes], clock: Clock) -> None:
        self._random = random
        self._clock = clock
        self._pool = b""
        self._at = 0

    def random(self, n: int) -> bytes:
        """``n`` random bytes (from the pool; never handed out twice)."""
        at = self._at
        if at + n > len(self._pool):
            self._pool, at = self._random(max(n, CHUNK)), 0
        self._at = at + n
        return self._pool[at:at + n]

    def new_id(self) -> str:
        return new_id(self.random(16))

    def new_delivery_id(self) -> str:
        return new_delivery_id(self._clock.now_ms(), self.random(10))
