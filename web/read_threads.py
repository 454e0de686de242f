"""Where the service's long reads run: worker threads, a few at a time.

A read that may take longer than a tap's whole answer (an analytics range of
a busy project, a filtered scan, an export's page) runs in a worker thread
(``Services.off_loop``), so the event loop that serves every redirect and SDK
call goes on meanwhile. LMDB read transactions may be used from any thread
(py-lmdb opens the environment with MDB_NOTLS).

The thread still runs Python, and CPython lets a thread keep the interpreter
until another has asked for it for a whole switch interval (5 ms by
default): each time the loop wakes while a read's thread holds the
interpreter, its next answer waits up to that long. So while any read runs,
:class:`ReadThreads` sets the interval to ``READ_SWITCH_S`` and puts the
previous one back when the last read ends. Measured (bench/README.md,
session 29) on a 1.2 GB store, a served link tapped every 5 ms beside a
looping 3-day clicks export, on a machine busy with other work: redirect
p50 / p90 / p99 2.1-3.3 / 5.6-7.5 / 10.7-14.3 ms at 5 ms, 1.8-1.9 / 4.3-4.5 /
8.0-8.6 at 1 ms, 1.3-1.4 / 3.7-4.2 / 7.3-8.0 at 0.5 ms; each export took
about a fifth longer (10-13 s against 9.4-10.6): a download waits a little
longer so that taps do not. Nothing else changes the interval; the store's
writer thread also sees it lowered while a read runs.

``inline=True`` reads in the event loop's thread instead, as the store's
writer commits there with its own ``inline``: tests under trio's
``autojump_clock`` use both, since the mock clock jumps whenever every task
waits, a task waiting for a worker thread included, so virtual time leapt
ahead (a webhook retry due a minute later fired) while a listing read.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

import trio

T = TypeVar("T")

READ_THREADS = 2
"""Long reads that run at once; more wait their turn."""

READ_SWITCH_S = 0.0005
"""The interpreter's switch interval while a long read runs (seconds)."""


class _ShortSwitch:
    """The process's switch interval at ``READ_SWITCH_S`` while any read of
    any :class:`ReadThreads` runs (the interval is the interpreter's, one per
    process, so the count is too), the one before put back after the last.
    Used from the event loop's thread only."""

    def __init__(self) -> None:
        self.held = 0
        self._before = 0.0

    def enter(self, switch_s: float) -> None:
        if self.held == 0:
            self._before = sys.getswitchinterval()
            sys.setswitchinterval(switch_s)
        self.held += 1

    def leave(self) -> None:
        self.held -= 1
        if self.held == 0:
            sys.setswitchinterval(self._before)


_SHORT_SWITCH = _ShortSwitch()


class ReadThreads:
    """At most ``threads`` long reads at once, each holding a slot for as long
    as it reads (``async with``: a caller that begins a read transaction
    first takes a slot, so a read waiting its turn holds no LMDB reader
    slot), and the switch interval short while any slot is held."""

    def __init__(self, threads: int = READ_THREADS, switch_s: float = READ_SWITCH_S, *,
                 inline: bool = False) -> None:
        self._inline = inline
        self._limiter = trio.CapacityLimiter(threads)
        self._switch_s = switch_s
        self._held = 0

    @property
    def running(self) -> int:
        return self._held

    async def __aenter__(self) -> None:
        await self._limiter.acquire()
        _SHORT_SWITCH.enter(self._switch_s)
        self._held += 1

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        tb: TracebackType | None) -> None:
        self._held -= 1
        _SHORT_SWITCH.leave()
        self._limiter.release()

    async def run(self, read: Callable[[], T]) -> T:
        """``read()`` in a worker thread, once a slot is free (waited for
        even when cancelled: a thread cannot be stopped part way)."""
        async with self:
            return await self.in_thread(read)

    async def in_thread(self, read: Callable[[], T]) -> T:
        """``read()`` in a worker thread (in this one when ``inline``), the
        caller holding a slot."""
        if self._inline:
            await trio.lowlevel.checkpoint()
            return read()
        return await trio.to_thread.run_sync(read)
