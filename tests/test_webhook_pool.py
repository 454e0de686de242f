"""The sender tasks (actors/webhook_pool.py): reports come back in batches
through one posted call; an attempt that raises is a failed attempt and the
sender lives on; a full mailbox is retried."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio
import trio.testing

from actors.clock import TrioWallClock
from actors.webhook_pool import RETRY_POST_S, SenderPool
from actors.webhook_sender import AttemptReport, SendJob
from svc_engine.errors import Overloaded
from svc_engine.webhook_retry import CONNECTION_ERROR


def _job(n: int) -> SendJob:
    return SendJob(f"d{n}", "e", "https://hooks.example/in", "whsec_x", "click", b"{}")


class Owner:
    """Runs posted calls later, like a mailbox; can refuse posts (full)."""

    def __init__(self) -> None:
        self.posted: list[Callable[[], Any]] = []
        self.refuse = 0
        self.batches: list[list[str]] = []

    def post(self, fn: Callable[[], Any]) -> None:
        if self.refuse:
            self.refuse -= 1
            raise Overloaded("full")
        self.posted.append(fn)

    def run_posted(self) -> None:
        posted, self.posted = self.posted, []
        for fn in posted:
            fn()

    def take(self, reports: list[AttemptReport]) -> None:
        self.batches.append([r.job.delivery_id for r in reports])


class Attempts:
    def __init__(self) -> None:
        self.release = trio.Event()

    async def attempt(self, job: SendJob) -> AttemptReport:
        await self.release.wait()
        if job.delivery_id == "d2":
            raise RuntimeError("a bug")
        return AttemptReport(job, 1, 2, 204, None, "")


async def test_reports_come_back_in_one_call_and_a_raising_attempt_is_a_failure(
        autojump_clock: trio.testing.MockClock) -> None:
    owner, attempts = Owner(), Attempts()
    pool = SenderPool(4, TrioWallClock(), owner.post)
    async with trio.open_nursery() as n:
        await n.start(pool.run, attempts, owner.take)
        for i in range(4):
            pool.send_nowait(_job(i))
        attempts.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert len(owner.posted) == 1  # one call for all four
        owner.run_posted()
        assert [sorted(b) for b in owner.batches] == [["d0", "d1", "d2", "d3"]]
        pool.send_nowait(_job(5))
        await trio.testing.wait_all_tasks_blocked()
        owner.run_posted()  # the senders live on, a new report makes a new call
        assert owner.batches[-1] == ["d5"]
        n.cancel_scope.cancel()


async def test_a_failed_attempt_report_names_the_bug(
        autojump_clock: trio.testing.MockClock) -> None:
    owner, attempts = Owner(), Attempts()
    attempts.release.set()
    reports: list[AttemptReport] = []
    pool = SenderPool(1, TrioWallClock(), owner.post)
    async with trio.open_nursery() as n:
        await n.start(pool.run, attempts, reports.extend)
        pool.send_nowait(_job(2))
        await trio.testing.wait_all_tasks_blocked()
        owner.run_posted()
        n.cancel_scope.cancel()
    [report] = reports
    assert (report.status, report.error) == (None, CONNECTION_ERROR)
    assert report.detail == "internal error: RuntimeError"


async def test_a_full_mailbox_is_retried(autojump_clock: trio.testing.MockClock) -> None:
    owner, attempts = Owner(), Attempts()
    attempts.release.set()
    owner.refuse = 2
    pool = SenderPool(2, TrioWallClock(), owner.post)
    async with trio.open_nursery() as n:
        await n.start(pool.run, attempts, owner.take)
        start = trio.current_time()
        pool.send_nowait(_job(0))
        pool.send_nowait(_job(1))
        while not owner.posted:
            await trio.sleep(RETRY_POST_S / 2)
        assert trio.current_time() - start >= 2 * RETRY_POST_S
        owner.run_posted()
        n.cancel_scope.cancel()
    assert [sorted(b) for b in owner.batches] == [["d0", "d1"]]
