"""The single LMDB writer, with group commit.

Theory of operation: LMDB allows one write transaction at a time. All writes of
the process are functions ``op(txn) -> result`` sent to one writer task over a
bounded channel. The writer takes whatever is waiting (at most ``max_batch``),
runs the ops in one transaction and commits it once, all in the writer's own
thread (storage/commit_thread.py).
While that thread commits, new ops queue up, so under load batches grow by
themselves and the fsync cost is shared; when idle an op is committed at once
(no artificial delay). An op that raises aborts only its own writes; its
caller gets the error, the others commit. If the parent commit fails (map full,
disk full, a failing device) every op of the batch fails with
``StorageUnavailable`` (503 to a caller) and nothing of it is visible; the
writer goes on, and the next batch commits once the cause is gone. Such
failures come in bursts (every write fails until the disk has room), so
they are logged once with the traceback and then as one line a
``FAILURE_LOG_S`` with how many commits failed since (:class:`FailureLog`).
An op whose own writes find the map full fails alone (``StoreFull``, also
503) and counts in the same burst.

Ops rarely raise, so a batch first runs every op directly in that
transaction. Only when an op raises is that attempt aborted and the batch
run again with a child transaction per op, so the op that raises loses only
its own writes (a child transaction copies each page its op touches: about
a tenth of a first launch's instructions, too much to pay every time). So
an op must be a function of the transaction it is given (every op in
storage/ is: it reads, decides and writes through ``txn``): it may run
twice, and only the second run's writes are kept.

Callers that must not lose their write await ``Pending.wait()``, which returns
only after the commit reached the disk (see "Durability" below).

Under load (the batch just committed held ``BUSY_BATCH`` ops or more) the
writer waits ``GROUP_WINDOW_S`` before taking the next batch, so that more
ops share one synced commit: a synced commit costs about 150 µs of CPU
whatever its size, which at thousands of writes a second is most of the
writer's time. When idle, ops are committed at once, so unloaded latency does
not change.

Durability. The environment is opened with ``metasync=False``: a commit
writes its pages, flushes them (fdatasync), then writes the meta page that
makes the commit current without flushing it, which keeps the store intact
but lets a power loss undo the last commit (LMDB's MDB_NOMETASYNC). A batch
holding an op that someone may wait for is flushed once more after its
commit (``env.sync``) before any of its ops is reported done, so ``wait()``
still means "on disk". A batch made only of lazy ops (``submit(op,
lazy=True)``: a click recorded behind a redirect, which nobody waits for)
skips that second flush; the next commit's flush carries its meta page. One
flush less is 25-45 µs of kernel CPU a commit on this kind of machine, and
with an unpreemptible kernel the next request waits for it. Should that
second flush fail, the batch's ops get a storage error although their
commit is visible (as when a disk fails after the commit).

An op may ask, through :func:`after_commit`, for a function to be called in
the event loop's thread once its batch has committed (after the second
flush, when there is one): the outbox dispatcher's wake-up, asked for by the
ops that queue an outbox event, since the event is not readable before the
commit, and an op that queues none wakes nobody. Each function is called
once per batch however many ops ask, and never for an op that raised.

Before each batch the writer lets ``ahead`` (storage/file_ahead.py) make
sure the pages past the end of LMDB's file are cached one page per folio, so
that the pages the store grows into stay cheap to rewrite.

``inline=True`` commits in the event loop's thread instead. Tests under trio's
``autojump_clock`` use it: the mock clock jumps whenever every task waits,
including while a worker thread commits, which would make virtual time leap
during a write.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Callable
from typing import Any, Generic, TypeVar

import attrs
import lmdb
import trio

from storage import counters
from storage.commit_thread import CommitThread
from storage.file_ahead import FileAhead
from svc_engine.errors import InternalError, StorageUnavailable, StoreFull, SvcError

T = TypeVar("T")
Op = Callable[[lmdb.Transaction], T]
Outcome = tuple[Any, BaseException | None]
BUSY_BATCH = 4
GROUP_WINDOW_S = 0.002
FAILURE_LOG_S = 10.0
_MAP_FULL = "the data store is full; the operator must raise SVC_MAP_SIZE"
log = logging.getLogger("svc.storage")


def in_one(ops: list[Op[Any]]) -> Op[None]:
    """One op doing ``ops`` in order: all of them commit, or (one raising)
    none does."""

    def op(txn: lmdb.Transaction) -> None:
        for each in ops:
            each(txn)

    return op


class Pending(Generic[T]):
    """A write that was queued; ``wait()`` returns its result once committed."""

    __slots__ = ("_done", "_error", "_result", "lazy", "op")

    def __init__(self, op: Op[T], *, lazy: bool = False) -> None:
        self.op = op
        self.lazy = lazy
        self._done = trio.Event()
        self._result: Any = None
        self._error: BaseException | None = None

    @property
    def done(self) -> bool:
        return self._done.is_set()

    @property
    def failed(self) -> bool:
        return self._done.is_set() and self._error is not None

    def _finish(self, result: Any, error: BaseException | None) -> None:
        self._result, self._error = result, error
        self._done.set()

    async def wait(self) -> T:
        await self._done.wait()
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[no-any-return]


@attrs.define
class WriterStats:
    batches: int = 0
    ops: int = 0
    failed_ops: int = 0
    failed_commits: int = 0  # commits (or an op's write) the store refused: StorageUnavailable
    largest_batch: int = 0
    queued: int = 0


class FailureLog:
    """Logs a burst of failed commits as one traceback, then one line a
    ``every_s`` (``clock`` seconds) saying how many failed since, and one
    when a commit succeeds again. Commits failing again within ``every_s``
    of that (a full map takes small commits and refuses larger ones: they
    alternate) continue the burst rather than start one: no traceback, and
    the recovery is said once ``every_s`` has passed since the last line
    (21 tracebacks and 20 recoveries were logged in 1.2 s). Owned by the
    writer's commit thread; ``count`` (every failed commit so far) is read
    by ``statistics()``."""

    def __init__(self, clock: Callable[[], float], every_s: float = FAILURE_LOG_S) -> None:
        self._clock = clock
        self._every_s = every_s
        self._failing = False
        self._since_line = 0  # failures not yet reported
        self._total = 0  # failures in this burst
        self._again = 0  # times commits failed again soon after succeeding, in this burst
        self._last_line = 0.0
        self._ended = -float("inf")  # when commits last succeeded after failing
        self._unsaid = False  # commits succeed again, not logged yet (alternating)
        self.count = 0

    def failed(self, error: BaseException, remedy: str) -> None:
        now = self._clock()
        self.count += 1
        self._total += 1
        self._since_line += 1
        if not self._failing:
            self._failing = True
            if now - self._ended >= self._every_s:  # a new burst
                self._last_line, self._since_line, self._total, self._again = now, 0, 1, 0
                self._unsaid = False
                log.error("a commit failed, so the store takes no writes (%s); %s",
                          type(error).__name__, remedy, exc_info=error)
                return
            self._again += 1
        if now - self._last_line >= self._every_s:
            log.error("%d more commits failed in the last %.0f s (%s: %s); %s",
                      self._since_line, now - self._last_line, type(error).__name__,
                      error, remedy)
            self._last_line, self._since_line = now, 0

    def succeeded(self) -> None:
        if self._failing:
            now = self._clock()
            self._failing = False
            self._ended = now
            if self._again and now - self._last_line < self._every_s:
                self._unsaid = True  # alternating: said by a commit once every_s has passed
                return
            self._recovered(now)
        elif self._unsaid and (now := self._clock()) - self._last_line >= self._every_s:
            self._recovered(now)

    def _recovered(self, now: float) -> None:
        again = (f" (they failed again {self._again} times after succeeding)"
                 if self._again else "")
        log.warning("commits succeed again, after %d failed%s", self._total, again)
        self._last_line, self._total, self._since_line, self._again = now, 0, 0, 0
        self._unsaid = False


class Writer:
    def __init__(self, env: lmdb.Environment, *, capacity: int = 4096, max_batch: int = 1024,
                 inline: bool = False, sync: Callable[[], object] | None = None,
                 ahead: FileAhead | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self._env = env
        self._failures = FailureLog(clock)
        self._ahead = ahead
        self._inline = inline
        self._sync = sync if sync is not None else lambda: env.sync(True)
        self._send, self._recv = trio.open_memory_channel[Pending[Any]](capacity)
        self._max_batch = max_batch
        self._stats = WriterStats()
        self._closed = False
        self._thread = CommitThread()

    @property
    def inline(self) -> bool:
        """Commits in the event loop's thread (module docstring); the long
        reads follow it (web/read_threads.py), for the same tests."""
        return self._inline

    def statistics(self) -> WriterStats:
        self._stats.queued = self._send.statistics().current_buffer_used
        self._stats.failed_commits = self._failures.count
        return attrs.evolve(self._stats)

    async def submit(self, op: Op[T], *, lazy: bool = False) -> Pending[T]:
        """Queue ``op`` (waiting for room if the queue is full); do not wait for
        commit. ``lazy``: nobody will wait for it, so its commit need not be
        flushed twice (see the module's docstring)."""
        if self._closed:
            raise InternalError("the store is closing")
        p: Pending[T] = Pending(op, lazy=lazy)
        await self._send.send(p)
        return p

    def submit_nowait(self, op: Op[T], *, lazy: bool = False) -> Pending[T]:
        """Queue ``op`` or raise ``trio.WouldBlock`` when the queue is full."""
        if self._closed:
            raise InternalError("the store is closing")
        p: Pending[T] = Pending(op, lazy=lazy)
        self._send.send_nowait(p)
        return p

    async def write(self, op: Op[T]) -> T:
        """Queue ``op`` and wait until it is durable."""
        return await (await self.submit(op)).wait()

    def close(self) -> None:
        """Stop taking ops; ``run`` returns after committing what is queued."""
        self._closed = True
        self._send.close()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        if not self._inline:
            self._thread.start()
        task_status.started()
        try:
            await self._run_batches()
        finally:
            self._thread.stop()

    async def _run_batches(self) -> None:
        async with self._recv:
            while True:
                try:
                    first = await self._recv.receive()
                except trio.EndOfChannel:
                    return
                batch = [first]
                while len(batch) < self._max_batch:
                    try:
                        batch.append(self._recv.receive_nowait())
                    except (trio.WouldBlock, trio.EndOfChannel):
                        break
                # Shielded: a batch that started committing finishes, so a
                # cancelled service never leaves acknowledged writers waiting.
                with trio.CancelScope(shield=True):
                    if self._inline:
                        outcomes, after = self._commit(batch)
                        await trio.lowlevel.checkpoint()
                    else:
                        outcomes, after = await self._thread.run(self._commit, batch)
                for p, (result, error) in zip(batch, outcomes, strict=True):
                    p._finish(result, error)
                for fn in after:
                    try:
                        fn()
                    except Exception:
                        log.exception("a function to call after a commit failed")
                self._stats.batches += 1
                self._stats.ops += len(batch)
                self._stats.failed_ops += sum(1 for _, e in outcomes if e is not None)
                self._stats.largest_batch = max(self._stats.largest_batch, len(batch))
                if not self._inline and len(batch) >= BUSY_BATCH:
                    await trio.sleep(GROUP_WINDOW_S)  # busy: let the next batch grow

    def _commit(self, batch: list[Pending[Any]]) -> tuple[list[Outcome], list[Callable[[], None]]]:
        """Each op's outcome, and what the batch's ops asked to call after it."""
        if self._ahead is not None:
            self._ahead.prepare()
        try:
            try:
                done = self._run(batch, isolated=False)
            except _OpRaised:
                done = self._run(batch, isolated=True)
                if any(isinstance(error, StorageUnavailable) for _, error in done[0]):
                    return done  # a write found the map full: the burst goes on
        except lmdb.MapFullError as e:
            return self._all_failed(batch, self._map_full(e))
        except lmdb.Error as e:
            self._failures.failed(e, "is the data dir's disk full or failing? Writes work "
                                     "again once it has room (`svc doctor --data DIR`)")
            return self._all_failed(batch, StorageUnavailable(f"storage error: {e}"))
        self._failures.succeeded()
        return done

    def _map_full(self, e: lmdb.MapFullError) -> StoreFull:
        """A commit, or one op's write, found the map full: logged as part of
        the burst (one traceback, not one a write)."""
        self._failures.failed(e, "the LMDB map is full: raise SVC_MAP_SIZE and restart "
                                 "(see README)")
        return StoreFull(_MAP_FULL)

    def _op_error(self, e: BaseException) -> BaseException:
        """What the caller of an op that raised gets."""
        if isinstance(e, lmdb.MapFullError):
            return self._map_full(e)
        if isinstance(e, Exception) and not isinstance(e, SvcError):
            log.error("write op failed", exc_info=e)
        return e

    @staticmethod
    def _all_failed(batch: list[Pending[Any]],
                    error: StorageUnavailable) -> tuple[list[Outcome], list[Callable[[], None]]]:
        return [(None, error)] * len(batch), []

    def _run(self, batch: list[Pending[Any]], *,
             isolated: bool) -> tuple[list[Outcome], list[Callable[[], None]]]:
        """One attempt at the batch in one transaction. Not ``isolated``:
        every op writes straight into it, and the first op that raises aborts
        the attempt (``_OpRaised``). ``isolated``: each op in a child
        transaction, so one that raises loses only its own writes."""
        outcomes: list[Outcome] = []
        counter_batch, token = counters.begin_batch()
        after = _AfterCommit()
        after_token = _AFTER.set(after)
        try:
            with self._env.begin(write=True) as txn:
                for p in batch:
                    if not isolated:
                        try:
                            outcomes.append((p.op(txn), None))
                        except BaseException as e:
                            raise _OpRaised from e  # aborts this attempt's transaction
                        counter_batch.keep_op()
                        after.keep_op()
                        continue
                    child = self._env.begin(write=True, parent=txn)
                    try:
                        result = p.op(child)
                    except BaseException as e:  # handed to that op's caller
                        child.abort()
                        counter_batch.drop_op()
                        after.drop_op()
                        outcomes.append((None, self._op_error(e)))
                    else:
                        child.commit()
                        counter_batch.keep_op()
                        after.keep_op()
                        outcomes.append((result, None))
                counter_batch.flush(txn)
            if not all(p.lazy for p in batch):
                self._sync()  # the meta page too: see "Durability" above
        finally:
            counters.end_batch(token)
            _AFTER.reset(after_token)
        return outcomes, list(after.kept)


class _AfterCommit:
    """What the ops of one batch asked to call after its commit, kept aside
    per op (as counter deltas are) so an op that raises asks for nothing."""

    def __init__(self) -> None:
        self.kept: dict[Callable[[], None], None] = {}  # ordered, each once
        self._op: list[Callable[[], None]] = []

    def add(self, fn: Callable[[], None]) -> None:
        self._op.append(fn)

    def keep_op(self) -> None:
        self.kept.update(dict.fromkeys(self._op))
        self._op.clear()

    def drop_op(self) -> None:
        self._op.clear()


_AFTER: contextvars.ContextVar[_AfterCommit | None] = contextvars.ContextVar(
    "svc_after_commit", default=None)


def after_commit(fn: Callable[[], None]) -> None:
    """From inside an op: call ``fn`` in the event loop's thread once the op's
    batch has committed (see the module's docstring). An op run outside the
    writer (a transaction of its own) asks for nothing."""
    after = _AFTER.get()
    if after is not None:
        after.add(fn)


class _OpRaised(Exception):
    """An op raised during a batch's first attempt (its cause is the error)."""
