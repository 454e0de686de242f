"""The WebhookActor's ready queues and the attempts in flight (no I/O, no decisions).

A delivery whose attempt is due waits in its endpoint's ready queue. The queues
are served round-robin (an endpoint whose delivery just started goes to the
back) while fewer than ``senders`` attempts are in flight in all, fewer than
``per_project`` for the endpoint's project, and fewer than the endpoint's
allowance: ``per_endpoint``, or one while the endpoint hangs (its last
attempt timed out, ``answered``; the allowance doubles back with each
attempt that did not). So a few hung endpoints hold a few senders (one
each), not all of them (4 endpoints of 8 each were 32 of 32), and one
project's endpoints leave senders to the others. (An endpoint that answers,
however slowly, keeps its allowance: holding it to one could leave it
further behind than its events come.) A delivery is *busy* from
the moment it is queued until its attempt is reported (or it is dropped): it
is never queued twice.

Memory is bounded: an endpoint's ready queue holds at most ``ready_cap``
deliveries (READY_PER_ENDPOINT). ``add`` refuses a delivery when the queue is
full; the caller leaves it in the store, and the endpoint has *overflowed*
(``leave`` records the same for a due delivery the owner does not offer:
at a restart or a turn on, one whose organization's plan lacks webhooks).
The queue remembers, per overflowed endpoint, only the id from which its store
must be read back: the smallest id refused, or where the last read-back
stopped. Oldest (smallest id) first: while an endpoint has overflowed, ``add``
also refuses a delivery newer than that id (a new event waits behind the
backlog), and takes one older (a retry come due) while there is room. When
the endpoint's queue runs down to a quarter of ``ready_cap``,
``refills_due`` names it (once, until ``refill_ended``); the owner reads its
due deliveries back oldest first (``take_back``, up to ``room``: three
quarters of the cap, the last quarter is left to retries) and says where it
stopped (``refilled``; at the end of the store the overflow is over). A
manual attempt (``front``) is never refused here; its owner refuses one
when ``manual_waiting`` says ``MANUAL_WAITING`` of the endpoint wait
already (a Send test a second to a hung endpoint would otherwise grow its
queue past the cap without end). Dropping or forgetting an
endpoint forgets its overflow (turning it on brings its waiting deliveries
back through ``add`` and ``leave``, oldest first). Delivery ids compare as
the store orders them (canonical lowercase UUIDs).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator

from svc_engine.webhook_delivery import Delivery

MANUAL_WAITING = 20
"""Manual attempts (Send test, Retry, Resend) an endpoint may have waiting
to start; its owner refuses more (409)."""

READY_PER_ENDPOINT = 1_000
"""Due deliveries held in memory per endpoint (a few hundred bytes each); the
rest of a backlog waits in the store (a hung endpoint with events coming
costs the data directory, not memory)."""


class SendQueue:
    def __init__(self, senders: int, per_endpoint: int,
                 ready_cap: int = READY_PER_ENDPOINT, per_project: int | None = None) -> None:
        if ready_cap < 1:
            raise ValueError("a ready queue holds at least one delivery")
        self._senders = senders
        self._per_endpoint = per_endpoint
        # three quarters of the senders by default: the rest is left to other projects
        self._per_project = per_project if per_project is not None else max(
            1, senders - senders // 4)
        self._allowance: dict[str, int] = {}  # endpoint id -> below per_endpoint (hung)
        self._project_in_flight: dict[str, int] = {}
        self._project_of_sending: dict[str, str] = {}  # delivery id -> project id
        self._manual: dict[str, set[str]] = {}  # endpoint id -> manual attempts waiting
        self._ready_cap = ready_cap
        self._refill_at = ready_cap // 4
        self._refill_to = ready_cap - ready_cap // 4
        self._ready: dict[str, deque[Delivery]] = {}
        self._busy: set[str] = set()
        # delivery id -> (the delivery as stored, its Sending state)
        self._sending: dict[str, tuple[Delivery, Delivery]] = {}
        self._in_flight: dict[str, int] = {}  # per endpoint
        # endpoint id -> the delivery id to read its store from (module docstring)
        self._overflow: dict[str, str] = {}
        self._refilling: set[str] = set()  # named by refills_due, not ended yet
        # endpoint id -> the latest attempt time of a delivery it refused
        self._refused_due: dict[str, int] = {}
        self.running = 0
        """Attempts handed to senders and not yet reported."""

    @property
    def ready_count(self) -> int:
        return sum(len(q) for q in self._ready.values())

    def ready_of(self, endpoint_id: str) -> int:
        """Deliveries in one endpoint's ready queue."""
        queue = self._ready.get(endpoint_id)
        return len(queue) if queue is not None else 0

    @property
    def overflowed(self) -> int:
        """Endpoints with due deliveries left in the store."""
        return len(self._overflow)

    def is_busy(self, delivery_id: str) -> bool:
        return delivery_id in self._busy

    def add(self, d: Delivery, *, front: bool = False) -> bool:
        """Queue ``d`` (``front``: a manual attempt, first and never refused).
        False: refused (the queue is full, or ``d`` is newer than deliveries
        the endpoint has waiting in the store); the caller leaves ``d`` in the
        store, to be read back (``refills_due``)."""
        first = self._overflow.get(d.endpoint_id)
        if front or (self.ready_of(d.endpoint_id) < self._ready_cap
                     and (first is None or d.id < first)):
            self._push(d, front)
            return True
        self.leave(d)
        return False

    def leave(self, d: Delivery) -> None:
        """``d`` is due and stays in the store, to be read back (``refills_due``),
        as if ``add`` had refused it. ``add`` calls it; so does the owner for
        a due delivery it does not offer (at a restart or a turn on, while
        the organization's plan lacks webhooks)."""
        first = self._overflow.get(d.endpoint_id)
        if first is None or d.id < first:
            self._overflow[d.endpoint_id] = d.id
        if d.next_attempt_at_ms is not None:
            self._refused_due[d.endpoint_id] = max(
                self._refused_due.get(d.endpoint_id, d.next_attempt_at_ms), d.next_attempt_at_ms)

    def due_by(self, endpoint_id: str, now_ms: int) -> int:
        """The time up to which a read-back takes deliveries as due: ``now_ms``,
        or later if the endpoint refused a delivery due later (the wall clock
        stepped back since): a refused delivery has no deadline left."""
        return max(now_ms, self._refused_due.get(endpoint_id, now_ms))

    def take_back(self, d: Delivery) -> None:
        """Queue ``d``, read back from the store by the owner (who keeps
        within ``room``)."""
        self._push(d, False)

    def manual_waiting(self, endpoint_id: str) -> int:
        """Manual attempts (``front``) of the endpoint not started yet."""
        return len(self._manual.get(endpoint_id, ()))

    def _push(self, d: Delivery, front: bool) -> None:
        queue = self._ready.setdefault(d.endpoint_id, deque())
        if front:
            self._manual.setdefault(d.endpoint_id, set()).add(d.id)
            queue.appendleft(d)
        else:
            queue.append(d)
        self._busy.add(d.id)

    def room(self, endpoint_id: str) -> int:
        """Deliveries a read-back may queue for the endpoint (up to three
        quarters of the cap)."""
        return max(self._refill_to - self.ready_of(endpoint_id), 0)

    def refills_due(self) -> list[str]:
        """Overflowed endpoints whose ready queue ran low and that are not
        being refilled; each is now being refilled until ``refill_ended``."""
        due = [e for e in self._overflow
               if e not in self._refilling and self.ready_of(e) <= self._refill_at]
        self._refilling.update(due)
        return due

    def overflow_from(self, endpoint_id: str) -> str | None:
        """The delivery id to read the endpoint's store from (None: it has not
        overflowed)."""
        return self._overflow.get(endpoint_id)

    def refilled(self, endpoint_id: str, go_on_from: str | None) -> None:
        """A read-back (begun at ``overflow_from``, in the same turn) stopped
        at ``go_on_from``; None: it read the store to its end, the endpoint
        has no overflow left."""
        if go_on_from is None:
            self._overflow.pop(endpoint_id, None)
            self._refused_due.pop(endpoint_id, None)
        elif endpoint_id in self._overflow:
            self._overflow[endpoint_id] = go_on_from

    def refill_ended(self, endpoint_id: str) -> None:
        """The read-back asked for by ``refills_due`` is over (done or failed)."""
        self._refilling.discard(endpoint_id)

    def startable(self, project_of: Callable[[str], str | None] = lambda _: None,
                  ) -> Iterator[Delivery]:
        """Take ready deliveries, round-robin, while the caps allow; the caller
        starts each (``started``) or gives it up (``release``) before the next.
        ``project_of``: an endpoint's project (None: not known, no project cap)."""
        while self._ready and self.running < self._senders:
            took = False
            for endpoint_id in list(self._ready):
                if self.running >= self._senders:
                    return
                if self._in_flight.get(endpoint_id, 0) >= self._allowance.get(
                        endpoint_id, self._per_endpoint):
                    continue
                project = project_of(endpoint_id)
                if (project is not None
                        and self._project_in_flight.get(project, 0) >= self._per_project):
                    continue
                queue = self._ready.pop(endpoint_id)
                d = queue.popleft()
                if queue:
                    self._ready[endpoint_id] = queue  # to the back: round-robin
                if (manual := self._manual.get(endpoint_id)) is not None:
                    manual.discard(d.id)
                    if not manual:
                        del self._manual[endpoint_id]
                took = True
                yield d
            if not took:
                return

    def started(self, stored: Delivery, sending: Delivery, project: str | None = None) -> None:
        self._sending[stored.id] = (stored, sending)
        self._in_flight[stored.endpoint_id] = self._in_flight.get(stored.endpoint_id, 0) + 1
        if project is not None:
            self._project_of_sending[stored.id] = project
            self._project_in_flight[project] = self._project_in_flight.get(project, 0) + 1
        self.running += 1

    def answered(self, endpoint_id: str, *, hung: bool) -> None:
        """An attempt of the endpoint ended: ``hung`` (it timed out) leaves the
        endpoint one attempt in flight; any other doubles its allowance back
        towards ``per_endpoint``."""
        if hung:
            self._allowance[endpoint_id] = 1
        elif endpoint_id in self._allowance:
            grown = self._allowance[endpoint_id] * 2
            if grown >= self._per_endpoint:
                del self._allowance[endpoint_id]
            else:
                self._allowance[endpoint_id] = grown

    def allowance(self, endpoint_id: str) -> int:
        """Attempts the endpoint may have in flight now."""
        return self._allowance.get(endpoint_id, self._per_endpoint)

    def release(self, d: Delivery) -> None:
        """``d`` was taken but not started."""
        self._busy.discard(d.id)

    def finished(self, delivery_id: str, endpoint_id: str) -> tuple[Delivery, Delivery] | None:
        """An attempt was reported: (as stored, Sending), or None if forgotten."""
        self._busy.discard(delivery_id)
        self.running -= 1
        _count_down(self._in_flight, endpoint_id)
        project = self._project_of_sending.pop(delivery_id, None)
        if project is not None:
            _count_down(self._project_in_flight, project)
        return self._sending.pop(delivery_id, None)

    def drop_ready(self, endpoint_id: str) -> deque[Delivery]:
        """Take an endpoint's whole ready queue away (no longer busy), and
        forget its overflow."""
        self._overflow.pop(endpoint_id, None)
        self._refused_due.pop(endpoint_id, None)
        self._manual.pop(endpoint_id, None)
        queue = self._ready.pop(endpoint_id, deque())
        for d in queue:
            self._busy.discard(d.id)
        return queue

    def forget(self, endpoint_id: str) -> list[Delivery]:
        """An endpoint went away: drop its ready queue; its attempts in flight
        (returned, Sending) will be reported and ignored."""
        self.drop_ready(endpoint_id)
        self._allowance.pop(endpoint_id, None)
        gone = [s for d, s in self._sending.values() if d.endpoint_id == endpoint_id]
        for d in gone:
            del self._sending[d.id]
        return gone


def _count_down(counts: dict[str, int], key: str) -> None:
    left = counts.get(key, 1) - 1
    if left > 0:
        counts[key] = left
    else:
        counts.pop(key, None)
