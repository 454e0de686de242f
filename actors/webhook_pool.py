"""The WebhookActor's sender tasks: take a job, attempt it, hand the report back.

``SenderPool.run`` starts ``size`` tasks that take ``SendJob``s from one
channel (filled by the actor with ``send_nowait``; it never holds more jobs
than there are senders) and run ``Attempter.attempt``. An attempt that raises
is a bug, not a remote fault: it is logged and reported as a failed attempt,
so the delivery is retried and no sender dies.

Reports go back up the graph without blocking: each is appended to a list,
and only the first report after the owner last took the list posts a call
(``call_nowait``); that call takes every report that arrived by the time it
runs. Under load one call thus applies many results. A full mailbox is
retried every 10 ms by the one sender that posts; the others keep appending.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import trio

from actors.clock import Clock
from actors.webhook_sender import AttemptReport, SendJob
from svc_engine.errors import Overloaded
from svc_engine.webhook_retry import CONNECTION_ERROR

log = logging.getLogger("svc.webhooks")
RETRY_POST_S = 0.01


class Attempter(Protocol):
    async def attempt(self, job: SendJob) -> AttemptReport: ...


class SenderPool:
    def __init__(self, size: int, clock: Clock,
                 post: Callable[[Callable[[], Any]], None]) -> None:
        """``post(fn)`` asks the owner to run ``fn`` (the owner's ``call_nowait``)."""
        self.size = size
        self._clock = clock
        self._post = post
        self._jobs_send, self._jobs_recv = trio.open_memory_channel[SendJob](size)
        self._reports: list[AttemptReport] = []
        self._posted = False
        self._take: Callable[[list[AttemptReport]], None] = lambda reports: None

    def send_nowait(self, job: SendJob) -> None:
        """Hand ``job`` to a free sender (the caller keeps at most ``size`` out)."""
        self._jobs_send.send_nowait(job)

    async def run(self, attempter: Attempter, take: Callable[[list[AttemptReport]], None], *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run the senders; ``take(reports)`` is called in the owner's task."""
        self._take = take
        async with trio.open_nursery() as nursery:
            for _ in range(self.size):
                nursery.start_soon(self._sender, attempter)
            task_status.started()

    async def _sender(self, attempter: Attempter) -> None:
        async for job in self._jobs_recv:
            try:
                report = await attempter.attempt(job)
            except Exception as e:  # a bug must not stop the senders: a failed attempt
                log.exception("webhook attempt of %s failed unexpectedly", job.delivery_id)
                now = self._clock.now_ms()
                report = AttemptReport(job, now, now, None, CONNECTION_ERROR,
                                       f"internal error: {type(e).__name__}")
            self._reports.append(report)
            if not self._posted:
                self._posted = True
                while True:
                    try:
                        self._post(self._hand_over)
                        break
                    except Overloaded:
                        await trio.sleep(RETRY_POST_S)

    def _hand_over(self) -> None:
        reports, self._reports = self._reports, []
        self._posted = False
        self._take(reports)
