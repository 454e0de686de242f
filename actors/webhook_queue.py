"""The WebhookActor's ready queues and the attempts in flight (no I/O, no decisions).

A delivery whose attempt is due waits in its endpoint's ready queue. The queues
are served round-robin (an endpoint whose delivery just started goes to the
back) while fewer than ``senders`` attempts are in flight in all and fewer than
``per_endpoint`` for that endpoint, so one slow endpoint cannot hold every
sender. A delivery is *busy* from the moment it is queued until its attempt is
reported (or it is dropped): it is never queued twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from svc_engine.webhook_delivery import Delivery


class SendQueue:
    def __init__(self, senders: int, per_endpoint: int) -> None:
        self._senders = senders
        self._per_endpoint = per_endpoint
        self._ready: dict[str, deque[Delivery]] = {}
        self._busy: set[str] = set()
        # delivery id -> (the delivery as stored, its Sending state)
        self._sending: dict[str, tuple[Delivery, Delivery]] = {}
        self._in_flight: dict[str, int] = {}  # per endpoint
        self.running = 0
        """Attempts handed to senders and not yet reported."""

    @property
    def ready_count(self) -> int:
        return sum(len(q) for q in self._ready.values())

    def is_busy(self, delivery_id: str) -> bool:
        return delivery_id in self._busy

    def add(self, d: Delivery, *, front: bool = False) -> None:
        queue = self._ready.setdefault(d.endpoint_id, deque())
        if front:
            queue.appendleft(d)
        else:
            queue.append(d)
        self._busy.add(d.id)

    def startable(self) -> Iterator[Delivery]:
        """Take ready deliveries, round-robin, while the caps allow; the caller
        starts each (``started``) or gives it up (``release``) before the next."""
        while self._ready and self.running < self._senders:
            took = False
            for endpoint_id in list(self._ready):
                if self.running >= self._senders:
                    return
                if self._in_flight.get(endpoint_id, 0) >= self._per_endpoint:
                    continue
                queue = self._ready.pop(endpoint_id)
                d = queue.popleft()
                if queue:
                    self._ready[endpoint_id] = queue  # to the back: round-robin
                took = True
                yield d
            if not took:
                return

    def started(self, stored: Delivery, sending: Delivery) -> None:
        self._sending[stored.id] = (stored, sending)
        self._in_flight[stored.endpoint_id] = self._in_flight.get(stored.endpoint_id, 0) + 1
        self.running += 1

    def release(self, d: Delivery) -> None:
        """``d`` was taken but not started."""
        self._busy.discard(d.id)

    def finished(self, delivery_id: str, endpoint_id: str) -> tuple[Delivery, Delivery] | None:
        """An attempt was reported: (as stored, Sending), or None if forgotten."""
        self._busy.discard(delivery_id)
        self.running -= 1
        left = self._in_flight.get(endpoint_id, 1) - 1
        if left > 0:
            self._in_flight[endpoint_id] = left
        else:
            self._in_flight.pop(endpoint_id, None)
        return self._sending.pop(delivery_id, None)

    def drop_ready(self, endpoint_id: str) -> deque[Delivery]:
        """Take an endpoint's whole ready queue away (no longer busy)."""
        queue = self._ready.pop(endpoint_id, deque())
        for d in queue:
            self._busy.discard(d.id)
        return queue

    def forget(self, endpoint_id: str) -> list[Delivery]:
        """An endpoint went away: drop its ready queue; its attempts in flight
        (returned, Sending) will be reported and ignored."""
        self.drop_ready(endpoint_id)
        gone = [s for d, s in self._sending.values() if d.endpoint_id == endpoint_id]
        for d in gone:
            del self._sending[d.id]
        return gone
