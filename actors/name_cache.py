"""What webhook host names resolved to, kept for a short while.

Every webhook attempt needs the addresses of its endpoint's host. Asking the
system resolver each time costs a worker thread and a DNS query per delivery:
at 2,000 deliveries a second to one endpoint, 2,000 queries a second to
whatever resolver the machine uses. ``NameCache`` keeps each answer for
``ttl_ms`` (30 s by default, the JVM's default positive DNS cache, since
``getaddrinfo`` does not say the record's own TTL) and has one lookup per name
in flight: attempts that need a name already being looked up wait for that
lookup instead of starting their own.

Safety is unchanged: the cache holds raw answers, and the guard
(actors/webhook_sender.py) judges the answer on every attempt and dials only
the addresses it judged, so there is still no second lookup between check and
connect for DNS rebinding to exploit. A name that moves is followed within
``ttl_ms``. Failed lookups are not kept (the next attempt asks again), but
attempts waiting on a lookup that fails share its error. A lookup cancelled
(its attempt's deadline) hands the name to the next waiter, which looks it up
itself. At most ``capacity`` names are kept; the oldest answer goes first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import attrs
import trio

from actors.clock import Clock

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
DNS_CACHE_MS = 30_000
CAPACITY = 4096


@attrs.frozen
class _Answer:
    addresses: tuple[str, ...]
    until_ms: int


class _Lookup:
    """One lookup in flight; waiters read its outcome once ``done`` is set."""

    __slots__ = ("addresses", "done", "error")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.addresses: tuple[str, ...] | None = None
        self.error: OSError | None = None


class NameCache:
    def __init__(self, resolver: Resolver, clock: Clock, *, ttl_ms: int = DNS_CACHE_MS,
                 capacity: int = CAPACITY) -> None:
        self._resolve = resolver
        self._clock = clock
        self._ttl_ms = ttl_ms
        self._capacity = capacity
        self._answers: dict[tuple[str, int], _Answer] = {}
        self._lookups: dict[tuple[str, int], _Lookup] = {}

    def __len__(self) -> int:
        return len(self._answers)

    async def addresses(self, host: str, port: int) -> tuple[str, ...]:
        """The addresses ``host`` resolves to (as the resolver gave them)."""
        key = (host, port)
        while True:
            answer = self._answers.get(key)
            if answer is not None:
                if answer.until_ms > self._clock.now_ms():
                    return answer.addresses
                del self._answers[key]
            lookup = self._lookups.get(key)
            if lookup is None:
                return await self._look_up(key)
            await lookup.done.wait()
            if lookup.error is not None:
                raise lookup.error
            if lookup.addresses is not None:
                return lookup.addresses
            # The lookup was cancelled: look again (this waiter may lead).

    async def _look_up(self, key: tuple[str, int]) -> tuple[str, ...]:
        lookup = _Lookup()
        self._lookups[key] = lookup
        try:
            addresses = tuple(await self._resolve(*key))
            lookup.addresses = addresses
        except OSError as e:
            lookup.error = e
            raise
        finally:
            del self._lookups[key]
            lookup.done.set()
        if self._ttl_ms > 0:
            self._keep(key, _Answer(addresses, self._clock.now_ms() + self._ttl_ms))
        return addresses

    def _keep(self, key: tuple[str, int], answer: _Answer) -> None:
        # Every answer is kept equally long, so the oldest kept is the first to
        # expire: dropping it first never drops a fresher one.
        while len(self._answers) >= self._capacity:
            del self._answers[next(iter(self._answers))]
        self._answers[key] = answer
