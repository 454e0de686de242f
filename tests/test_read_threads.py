"""Long reads in worker threads (web/read_threads.py): at most N at once, and
the interpreter's switch interval lowered while any runs, put back after."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import trio
import trio.testing

from tests.conftest import App
from web.read_threads import READ_SWITCH_S, ReadThreads


@pytest.fixture(autouse=True)
def usual_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(0.005)
    yield
    sys.setswitchinterval(before)


class Held:
    """A read that says when it started (on the event loop) and ends when released."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.release = threading.Event()
        self.interval = 0.0

    def __call__(self) -> None:
        self.interval = sys.getswitchinterval()
        trio.from_thread.run_sync(self.started.set)
        self.release.wait(10)


async def test_a_read_runs_in_a_thread_with_the_short_interval_then_puts_it_back() -> None:
    reads = ReadThreads()
    seen = await reads.run(lambda: (threading.current_thread() is threading.main_thread(),
                                    sys.getswitchinterval()))
    assert seen == (False, pytest.approx(READ_SWITCH_S))
    assert sys.getswitchinterval() == pytest.approx(0.005) and reads.running == 0


async def test_overlapping_reads_put_it_back_after_the_last_and_wait_for_a_slot() -> None:
    reads = ReadThreads(threads=2)
    held = [Held() for _ in range(3)]
    done = [trio.Event() for _ in range(3)]

    async def one(n: int) -> None:
        await reads.run(held[n])
        done[n].set()

    async with trio.open_nursery() as nursery:
        for n in range(2):
            nursery.start_soon(one, n)
            await held[n].started.wait()
        nursery.start_soon(one, 2)
        await trio.testing.wait_all_tasks_blocked()
        assert not held[2].started.is_set() and reads.running == 2  # the third waits
        held[0].release.set()
        await done[0].wait()
        await held[2].started.wait()
        assert held[2].interval == pytest.approx(READ_SWITCH_S)
        assert sys.getswitchinterval() == pytest.approx(READ_SWITCH_S)  # 1 and 2 still read
        held[1].release.set()
        held[2].release.set()
    assert reads.running == 0 and sys.getswitchinterval() == pytest.approx(0.005)


async def test_two_sets_of_read_threads_share_the_process_interval() -> None:
    """The interval is the process's: overlapping reads of two ReadThreads
    put it back after the last of either, not after the first to end."""
    a, b = ReadThreads(), ReadThreads()
    held_a, held_b = Held(), Held()
    a_done = trio.Event()

    async def read_a() -> None:
        await a.run(held_a)
        a_done.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read_a)
        await held_a.started.wait()
        nursery.start_soon(b.run, held_b)
        await held_b.started.wait()
        held_a.release.set()
        await a_done.wait()
        assert sys.getswitchinterval() == pytest.approx(READ_SWITCH_S)  # b still reads
        held_b.release.set()
    assert sys.getswitchinterval() == pytest.approx(0.005)


async def test_a_failing_read_or_one_cancelled_while_waiting_puts_it_back() -> None:
    reads = ReadThreads(threads=1)

    def damaged() -> None:
        raise ValueError("damaged record")

    with pytest.raises(ValueError):
        await reads.run(damaged)
    assert sys.getswitchinterval() == pytest.approx(0.005) and reads.running == 0
    held = Held()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(reads.run, held)
        await held.started.wait()
        waiting = trio.CancelScope()

        async def wait_for_a_slot() -> None:
            with waiting:
                await reads.run(lambda: None)

        nursery.start_soon(wait_for_a_slot)
        await trio.testing.wait_all_tasks_blocked()  # it waits for the slot
        waiting.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert waiting.cancelled_caught and reads.running == 1
        held.release.set()
    assert sys.getswitchinterval() == pytest.approx(0.005) and reads.running == 0


async def test_under_autojump_the_app_s_long_reads_leave_virtual_time_still(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The mock clock jumps whenever every task waits, a task waiting for a
    worker thread included: a deliveries listing that read for 50 ms let the
    timer's next deadline come (a webhook retry due a minute later fired, a
    flaky test_webhook_next_attempt). Under autojump the app reads in the
    loop's thread, as its store's writer commits there."""
    from storage.webhooks_store import WebhookStore

    real = WebhookStore._recent

    def slow(self: WebhookStore, *args: Any) -> Any:
        time.sleep(0.05)
        return real(self, *args)

    monkeypatch.setattr(WebhookStore, "_recent", slow)
    assert app.services.store.writer.inline
    before = trio.current_time()
    async with app.client("sk_test") as c:
        for _ in range(3):
            assert (await c.get("/v1/webhooks/deliveries")).status_code == 200
        assert (await c.get("/v1/links", params={"q": "x"})).status_code == 200
    assert trio.current_time() == before
