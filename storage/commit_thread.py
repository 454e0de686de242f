"""The OS thread the writer commits in, handed each batch directly.

``trio.to_thread.run_sync`` takes a thread from trio's cache, acquires a
capacity limiter, copies the context and reports back through two more
layers for every call. The writer makes one call per commit and never more
than one at a time, so it keeps one thread of its own: a batch goes over a
``queue.SimpleQueue`` and the result comes back with ``run_sync_soon``, which
wakes the trio task that waits for it. On one CPU a round trip costs ~30 µs
against ~47 µs through ``to_thread`` (bench/README.md, session 7), and a
durable request makes one.

The wait cannot be cancelled: the writer waits with its scope shielded, as a
commit that started must finish and report.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar, TypeVarTuple

import outcome
import trio

T = TypeVar("T")
Ts = TypeVarTuple("Ts")
_Job = tuple[Callable[[], Any], Callable[[outcome.Outcome[Any]], None]]


class CommitThread:
    """One worker thread, started by :meth:`start` and ended by :meth:`stop`."""

    def __init__(self, name: str = "svc-writer") -> None:
        self._name = name
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=self._name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        """Let the thread end once the job it runs (if any) reported."""
        if self._thread is not None:
            self._jobs.put(None)
            self._thread = None

    async def run(self, fn: Callable[[*Ts], T], *args: *Ts) -> T:
        """``fn(*args)`` in the thread; its result or its exception here."""
        if self._thread is None:
            raise RuntimeError("the commit thread is not running")
        token = trio.lowlevel.current_trio_token()
        task = trio.lowlevel.current_task()

        def report(result: outcome.Outcome[Any]) -> None:
            token.run_sync_soon(trio.lowlevel.reschedule, task, result)

        self._jobs.put((functools.partial(fn, *args), report))
        return await trio.lowlevel.wait_task_rescheduled(  # type: ignore[no-any-return]
            lambda _: trio.lowlevel.Abort.FAILED)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, report = job
            result = outcome.capture(fn)
            try:
                report(result)
            except trio.RunFinishedError:  # the trio run ended under us: nobody waits
                return
