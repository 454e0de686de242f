"""Bounded mailboxes with request/reply.

An actor owns its state and runs one task that takes calls from its mailbox
one at a time. A call is a function (sync or async) run *inside* the actor's
task, so only that task ever touches the state. ``call`` waits for room in the
mailbox (push-back when the actor is behind) and then for the reply.

If the function raises an ``SvcError`` the caller gets it. Anything else is a
bug: the caller gets ``ActorFailed`` (answered as 500 internal_error), and the
actor's ``on_failure`` hook runs (ProjectActor reloads its state from the
store) before the next call. If the actor's task itself ends, every queued
call fails with ``ActorFailed``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from svc_engine.errors import ActorFailed, Overloaded, SvcError

T = TypeVar("T")
log = logging.getLogger("svc.actors")


class _Call:
    __slots__ = ("done", "error", "fn", "result")

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn
        self.done = trio.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def finish(self, result: Any, error: BaseException | None) -> None:
        self.result, self.error = result, error
        self.done.set()


@attrs.define
class MailboxStats:
    handled: int = 0
    failed: int = 0
    queued: int = 0
    capacity: int = 0


class Mailbox:
    def __init__(self, name: str, capacity: int = 1024) -> None:
        self.name = name
        self._send, self._recv = trio.open_memory_channel[_Call](capacity)
        self._stats = MailboxStats(capacity=capacity)
        self._closed = False

    def statistics(self) -> MailboxStats:
        self._stats.queued = self._send.statistics().current_buffer_used
        return attrs.evolve(self._stats)

    async def call(self, fn: Callable[[], T] | Callable[[], Awaitable[T]]) -> T:
        """Run ``fn`` in the actor's task and return its result."""
        if self._closed:
            # Stopped by a shutdown that cancels the caller too: end with that.
            await trio.lowlevel.checkpoint_if_cancelled()
            raise ActorFailed(f"{self.name} is stopped")
        c = _Call(fn)
        try:
            await self._send.send(c)
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            raise ActorFailed(f"{self.name} is stopped") from None
        await c.done.wait()
        if c.error is not None:
            raise c.error
        return c.result  # type: ignore[no-any-return]

    def call_nowait(self, fn: Callable[[], Any]) -> None:
        """Fire and forget, never blocking (used by the timer and senders, which
        send up the graph). Raises ``Overloaded`` when the mailbox is full."""
        if self._closed:
            return
        try:
            self._send.send_nowait(_Call(fn))
        except trio.WouldBlock:
            raise Overloaded(f"{self.name} mailbox is full") from None
        except (trio.ClosedResourceError, trio.BrokenResourceError):
            return

    async def serve(self, on_failure: Callable[[], Awaitable[None]] | None = None) -> None:
        """The actor's loop: run calls one at a time until cancelled."""
        try:
            async for c in self._recv:
                try:
                    result = c.fn()
                    if isinstance(result, Awaitable):
                        result = await result
                except SvcError as e:
                    c.finish(None, e)
                except Exception as e:
                    self._stats.failed += 1
                    log.exception("%s failed handling a call; reloading", self.name)
                    c.finish(None, ActorFailed(f"{self.name} failed: {type(e).__name__}"))
                    if on_failure is not None:
                        await on_failure()
                else:
                    c.finish(result, None)
                self._stats.handled += 1
        finally:
            self.close()

    def close(self) -> None:
        """Stop taking calls; fail every call still queued."""
        if self._closed:
            return
        self._closed = True
        self._send.close()
        while True:
            try:
                c = self._recv.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            c.finish(None, ActorFailed(f"{self.name} stopped"))
