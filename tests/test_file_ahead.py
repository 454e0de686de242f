"""The data file's tail, read ahead of LMDB (storage/file_ahead.py), on real LMDB
and the real page cache.

What must hold: the pages past LMDB's last page are cached before the store
grows into them, and cached one page per folio, so LMDB's later writes do not
make large folios; the file only ever grows, LMDB's own pages are never
touched, and a store with a prepared tail reopens and backs up whole."""

from __future__ import annotations

import ctypes
import hashlib
import logging
import mmap
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import lmdb
import pytest
import trio

from storage.file_ahead import HIGH_PAGES, LOW_PAGES, FileAhead, tail_target
from storage.lmdb_store import LmdbStore
from storage.writer import Op

PAGE = mmap.PAGESIZE
MAP = 64 << 20

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                       ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_libc.mincore.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)


class Mapped:
    """``path``'s bytes [start, end) mapped read-only in this process."""

    def __init__(self, path: Path, start: int, end: int) -> None:
        self.pages = (end - start) // PAGE
        self._fd = os.open(path, os.O_RDONLY)
        addr = _libc.mmap(None, end - start, mmap.PROT_READ, mmap.MAP_SHARED, self._fd, start)
        if addr in (None, ctypes.c_void_p(-1).value):
            os.close(self._fd)
            raise OSError(ctypes.get_errno(), "mmap")
        self.addr = int(addr)

    def resident(self) -> int:
        """How many of the pages the page cache holds (``mincore``)."""
        vec = (ctypes.c_ubyte * self.pages)()
        if _libc.mincore(self.addr, self.pages * PAGE, vec) != 0:
            raise OSError(ctypes.get_errno(), "mincore")
        return sum(b & 1 for b in vec)

    def in_large_folios(self) -> int:
        """How many of the pages sit in a folio of more than one page: each
        page is touched, found in /proc/self/pagemap and looked up in
        /proc/kpageflags (COMPOUND_HEAD or COMPOUND_TAIL)."""
        for i in range(self.pages):
            ctypes.string_at(self.addr + i * PAGE, 1)
        with open("/proc/self/pagemap", "rb") as pm, open("/proc/kpageflags", "rb") as kf:
            pm.seek(self.addr // PAGE * 8)
            entries = struct.unpack(f"<{self.pages}Q", pm.read(self.pages * 8))
            large = 0
            for e in entries:
                pfn = e & ((1 << 55) - 1)
                if not e >> 63 or not pfn:
                    raise PermissionError("no page frame numbers in /proc/self/pagemap")
                kf.seek(pfn * 8)
                flags = struct.unpack("<Q", kf.read(8))[0]
                large += bool(flags >> 15 & 1 or flags >> 16 & 1)
        return large

    def close(self) -> None:
        _libc.munmap(self.addr, self.pages * PAGE)
        os.close(self._fd)


@pytest.fixture
def env(tmp_path: Path) -> Iterator[lmdb.Environment]:
    e = lmdb.open(str(tmp_path), map_size=MAP, readahead=False, metasync=False)
    yield e
    e.close()


def data_file(env: lmdb.Environment) -> Path:
    return Path(env.path()) / "data.mdb"


def lmdb_end(env: lmdb.Environment) -> int:
    return (int(env.info()["last_pgno"]) + 1) * PAGE


def grow(env: lmdb.Environment, pages: int, *, start: int = 0) -> int:
    """Commit about ``pages`` new pages of values in one transaction (LMDB
    writes them side by side at the end of the file); the next ``start``."""
    with env.begin(write=True) as txn:
        for i in range(start, start + pages):
            txn.put(b"k%08d" % i, b"v" * (PAGE - 64))
    return start + pages


def through_writer(store: LmdbStore, ops: Iterable[Op[object]]) -> None:
    """Commit ``ops`` one after another through the store's real writer (its
    own commit thread, which prepares the tail before each batch)."""
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            await nursery.start(store.writer.run)
            for op in ops:
                await store.writer.write(op)
            store.writer.close()

    trio.run(main)


def resident(path: Path, start: int, end: int) -> int:
    m = Mapped(path, start, end)
    try:
        return m.resident()
    finally:
        m.close()


def test_the_pages_past_lmdbs_end_are_cached_before_the_store_grows_into_them(
        env: lmdb.Environment) -> None:
    ahead = FileAhead.open(env)
    assert ahead is not None
    try:
        grow(env, 8)
        ahead.prepare()
        end = lmdb_end(env)
        size = os.path.getsize(data_file(env))
        assert size == end + HIGH_PAGES * PAGE
        assert resident(data_file(env), end, size) == HIGH_PAGES
        # Growing by less than HIGH - LOW pages leaves enough ready: nothing to do.
        n = grow(env, HIGH_PAGES - LOW_PAGES - 64, start=8)
        ahead.prepare()
        assert (ahead.extensions, os.path.getsize(data_file(env))) == (1, size)
        # Past that, the file is prepared again from where it was ready.
        grow(env, 128, start=n)
        ahead.prepare()
        new_end = lmdb_end(env)
        assert ahead.extensions == 2
        assert os.path.getsize(data_file(env)) == new_end + HIGH_PAGES * PAGE
        assert resident(data_file(env), size, new_end + HIGH_PAGES * PAGE) == (
            new_end + HIGH_PAGES * PAGE - size) // PAGE
    finally:
        ahead.close()


def test_the_file_only_grows_and_lmdbs_own_pages_are_untouched(env: lmdb.Environment) -> None:
    grow(env, 300)
    end = lmdb_end(env)
    before = hashlib.sha256(data_file(env).read_bytes()[:end]).digest()
    ahead = FileAhead.open(env)
    assert ahead is not None
    try:
        ahead.prepare()
        assert hashlib.sha256(data_file(env).read_bytes()[:end]).digest() == before
        longer = end + 2 * HIGH_PAGES * PAGE  # longer than it would make it
        os.truncate(data_file(env), longer)
        again = FileAhead.open(env)
        assert again is not None
        again.prepare()
        again.close()
        assert os.path.getsize(data_file(env)) == longer
    finally:
        ahead.close()


def test_a_map_nearly_full_is_prepared_up_to_the_map_and_no_further(tmp_path: Path) -> None:
    small = 2 << 20  # 512 pages: less than HIGH_PAGES past any end
    e = lmdb.open(str(tmp_path), map_size=small)
    ahead = FileAhead.open(e)
    assert ahead is not None
    try:
        ahead.prepare()
        assert os.path.getsize(data_file(e)) == small
        with pytest.raises(lmdb.MapFullError):
            grow(e, 600)
        grow(e, 400)
        ahead.prepare()
        assert os.path.getsize(data_file(e)) == small
    finally:
        ahead.close()
        e.close()


def test_a_store_whose_writer_prepared_its_tail_reopens_and_backs_up_whole(
        tmp_path: Path) -> None:
    """Through the real writer (its own commit thread): a store that grew over
    several prepared tails keeps every record across a reopen and a backup."""
    path = str(tmp_path / "data")
    store = LmdbStore(path, map_size=MAP)
    records = {b"k%06d" % i: os.urandom(900) for i in range(6000)}
    keys = sorted(records)

    def put(chunk: list[bytes]) -> Op[None]:
        def op(txn: lmdb.Transaction) -> None:
            for k in chunk:
                txn.put(k, records[k], db=store.db(b"installs"))
        return op

    try:
        through_writer(store, [put(keys[i:i + 100]) for i in range(0, len(keys), 100)])
        trio.run(store.backup, str(tmp_path / "backup"))
        assert store._ahead is not None and store._ahead.extensions >= 2
        used = store.stats()["used_bytes"]
        assert os.path.getsize(Path(path) / "data.mdb") > used
    finally:
        store.close()
    assert os.path.getsize(tmp_path / "backup" / "data.mdb") <= used  # live pages only
    for where in (path, str(tmp_path / "backup")):
        again = LmdbStore(where, map_size=MAP)
        try:
            with again.read() as txn:
                got = dict(txn.cursor(db=again.db(b"installs")).iternext())
            assert got == records
        finally:
            again.close()


def test_a_refusal_turns_it_off_with_one_warning_and_commits_go_on(
        env: lmdb.Environment, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    ahead = FileAhead.open(env)
    assert ahead is not None

    def refuse(fd: int, length: int) -> None:
        raise OSError(27, "File too large")

    monkeypatch.setattr(os, "ftruncate", refuse)
    with caplog.at_level(logging.WARNING, logger="svc.storage"):
        ahead.prepare()
        ahead.prepare()
    assert [r.getMessage() for r in caplog.records] == [
        "stopped preparing the data file's tail ([Errno 27] File too large); commits still work"]
    assert ahead.extensions == 0
    grow(env, 50)  # the write lock was let go
    ahead.close()


def test_a_file_system_that_refuses_the_advice_leaves_the_store_working(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    def refuse(fd: int, offset: int, length: int, advice: int) -> None:
        raise OSError(29, "Illegal seek")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    with caplog.at_level(logging.WARNING, logger="svc.storage"):
        store = LmdbStore(str(tmp_path), map_size=MAP)
    try:
        assert store._ahead is None
        assert [r.getMessage() for r in caplog.records] == [
            "not preparing the data file's tail ([Errno 29] Illegal seek)"]
        through_writer(store, [lambda txn: txn.put(b"k", b"v", db=store.db(b"installs"))])
        with store.read() as txn:
            assert txn.get(b"k", db=store.db(b"installs")) == b"v"
    finally:
        store.close()


def _large_folios_after_growth(tmp_path: Path, *, prepared: bool) -> tuple[int, int]:
    """Pages in large folios, and pages in all, of what one commit of 512 new
    pages wrote, with or without the tail prepared first."""
    e = lmdb.open(str(tmp_path), map_size=MAP, readahead=False)
    ahead = FileAhead.open(e) if prepared else None
    try:
        grow(e, 4)
        if ahead is not None:
            ahead.prepare()
        start = lmdb_end(e)
        grow(e, 512, start=4)
        m = Mapped(data_file(e), start, lmdb_end(e))
        try:
            return m.in_large_folios(), m.pages
        finally:
            m.close()
    finally:
        if ahead is not None:
            ahead.close()
        e.close()


def test_pages_the_store_grows_into_stay_single_page_folios(tmp_path: Path) -> None:
    """Needs /proc/kpageflags (root) and a file system with large folios to
    show the difference; where either is missing it says so and skips."""
    try:
        control, pages = _large_folios_after_growth(tmp_path / "plain", prepared=False)
    except PermissionError as e:
        pytest.skip(f"page flags are not readable here: {e}")
    if control == 0:
        pytest.skip("this file system caches LMDB's growth one page a folio anyway")
    assert control > pages // 2
    assert _large_folios_after_growth(tmp_path / "prepared", prepared=True) == (0, pages)


@pytest.mark.parametrize(("ready_pages", "end_pages", "map_pages", "target_pages"), [
    (0, 10, 1 << 20, 10 + HIGH_PAGES),  # nothing ready yet
    (10 + LOW_PAGES, 10, 1 << 20, None),  # exactly LOW_PAGES ready: enough
    (10 + LOW_PAGES - 1, 10, 1 << 20, 10 + HIGH_PAGES),  # one fewer: prepare again
    (5, 10, 1 << 20, 10 + HIGH_PAGES),  # LMDB grew past what was ready
    (0, 10, 10 + 20, 10 + 20),  # the map's end comes first
    (30, 10, 10 + 20, None),  # ready up to the map's end: nothing left to prepare
    (29, 10, 10 + 20, 10 + 20),  # one page short of it
    (0, 30, 30, None),  # LMDB fills the map
])
def test_the_tail_is_prepared_to_high_pages_past_the_end_once_fewer_than_low_are_ready(
        ready_pages: int, end_pages: int, map_pages: int, target_pages: int | None) -> None:
    target = tail_target(ready_pages * PAGE, end_pages * PAGE, map_pages * PAGE, PAGE)
    assert target == (None if target_pages is None else target_pages * PAGE)
