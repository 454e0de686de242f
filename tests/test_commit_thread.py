"""The writer's own commit thread (storage/commit_thread.py)."""

from __future__ import annotations

import threading

import lmdb
import pytest
import trio

from storage.commit_thread import CommitThread
from storage.lmdb_store import LmdbStore


async def test_a_job_runs_in_the_thread_and_its_result_comes_back() -> None:
    worker = CommitThread("test-commit")
    worker.start()
    try:
        assert await worker.run(lambda: threading.current_thread().name) == "test-commit"
        assert await worker.run(lambda: 6 * 7) == 42
    finally:
        worker.stop()


async def test_an_exception_in_the_job_is_raised_to_the_caller() -> None:
    worker = CommitThread()
    worker.start()

    def broken() -> None:
        raise KeyError("lost")

    try:
        with pytest.raises(KeyError, match="lost"):
            await worker.run(broken)
        assert await worker.run(lambda: "still serving") == "still serving"
    finally:
        worker.stop()


async def test_the_wait_outlasts_a_cancel_and_reports() -> None:
    worker = CommitThread()
    worker.start()
    started, release = threading.Event(), threading.Event()
    got: list[str] = []

    def slow() -> str:
        started.set()
        release.wait(10)
        return "committed"

    async def waiter() -> None:
        got.append(await worker.run(slow))

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.to_thread.run_sync(started.wait, 10)
            nursery.cancel_scope.cancel()  # the job started: its caller still gets the result
            release.set()
        assert got == ["committed"]
    finally:
        worker.stop()


async def test_stop_ends_the_thread_and_run_needs_a_start() -> None:
    worker = CommitThread("test-stop")
    with pytest.raises(RuntimeError):
        await worker.run(lambda: None)
    worker.start()
    await worker.run(lambda: None)
    (thread,) = [t for t in threading.enumerate() if t.name == "test-stop"]
    worker.stop()
    thread.join(10)
    assert not thread.is_alive()


async def test_the_writer_commits_in_its_thread_and_stops_it(store: LmdbStore) -> None:
    seen: list[str] = []

    def op(txn: lmdb.Transaction) -> None:
        seen.append(threading.current_thread().name)
        txn.put(b"k", b"v", db=store.db(b"meta"))

    await store.writer.write(op)
    assert seen == ["svc-writer"]
    assert store.meta("k") == b"v"
