"""One page per cached folio past LMDB's end of file.

Why. Linux caches a file in folios: single pages, or, on file systems with
large folios (XFS; ext4 since Linux 6.16), runs of pages as large as the write
that created them. When the store grows, a commit writes its new pages side
by side at the end of the file, in one ``writev``, so they are cached in large
folios. Later commits reuse those pages one at a time (LMDB's free list), and
a 4 KiB write into a large folio costs the kernel a walk over every block of
the folio, in the write and again in the flush. On the bench machine (Linux
6.18, ext4), ten random pages and a flush cost 246 µs of CPU in a file written
2 MiB at a time, against 91 µs in one written 4 KiB at a time. In the bench's
store, 96 % of the cached pages of ``data.mdb`` were in large folios
(bench/README.md, session 21).

What. Before each batch the writer calls :meth:`FileAhead.prepare`. When
fewer than ``LOW_PAGES`` pages lie ready past LMDB's last page, it lengthens
the file to ``HIGH_PAGES`` pages past it (``ftruncate``: sparse, no block
allocated, nothing written) and asks the kernel to read the new pages
(``POSIX_FADV_WILLNEED``: a hole is read as zeros, in the kernel, without
copying anything out, 0.9 ms for 768 pages here against 1.35 ms for
``pread``). Its descriptor is marked ``POSIX_FADV_RANDOM``, so that read
caches one page per folio and reads nothing beyond. LMDB's later writes
there fill those folios instead of making large ones. The check costs one
``env.info()`` (under a microsecond); the read happens once every
``HIGH_PAGES - LOW_PAGES`` pages of growth.

Safety. It only reads pages past LMDB's last page and within its map, and
only ever makes the file longer, never shorter. It changes the length while holding LMDB's writer
lock (an empty write transaction), so no commit of this process or another
writes past the old end meanwhile. LMDB reads nothing past its last page:
a backup (a compacted copy) holds only live pages, and the store's used space
is counted from the last page (``LmdbStore.stats``), not from the file's
length. A refusal (an ``OSError`` from the file system, or an LMDB error
taking the lock) turns it off with one warning: it shapes a cache, it holds
no data.

Where the kernel has no large folios for the file system, the read only
warms pages that LMDB is about to write.
"""

from __future__ import annotations

import logging
import os
import sys

import lmdb

LOW_PAGES = 256
HIGH_PAGES = 1024
log = logging.getLogger("svc.storage")


def tail_target(ready_to: int, end: int, map_size: int, page: int) -> int | None:
    """How long to make the file, in bytes, with LMDB's pages ending at
    ``end`` and the file read ahead up to ``ready_to``: ``HIGH_PAGES`` past
    the end (within the map) once fewer than ``LOW_PAGES`` lie ready; None
    when enough lie ready, or when the map is (nearly) full and there is
    nothing past what is ready to prepare."""
    if ready_to - end >= LOW_PAGES * page:
        return None
    target = min(end + HIGH_PAGES * page, map_size)
    return target if target > max(ready_to, end) else None


class FileAhead:
    """Owned by the store's writer: :meth:`prepare` runs in the thread that
    commits, between commits."""

    def __init__(self, env: lmdb.Environment, fd: int) -> None:
        self._env = env
        self._fd = fd
        self._page = int(env.stat()["psize"])
        self._ready_to = 0  # bytes: the file is read (single-page folios) up to here
        self.extensions = 0

    @classmethod
    def open(cls, env: lmdb.Environment) -> FileAhead | None:
        """One for ``env``'s data file, or None where there is nothing to gain
        (not Linux: no ``posix_fadvise``) or the file system refuses (with a
        warning: the store works without it)."""
        if sys.platform != "linux":
            return None
        try:
            fd = os.open(os.path.join(env.path(), "data.mdb"), os.O_RDWR | os.O_CLOEXEC)
        except OSError as e:
            log.warning("not preparing the data file's tail (%s)", e)
            return None
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        except OSError as e:
            os.close(fd)
            log.warning("not preparing the data file's tail (%s)", e)
            return None
        return cls(env, fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def prepare(self) -> None:
        """Make sure ``LOW_PAGES`` pages past LMDB's end are cached one page a folio."""
        if self._fd < 0:
            return
        info = self._env.info()
        end = (int(info["last_pgno"]) + 1) * self._page
        target = tail_target(self._ready_to, end, int(info["map_size"]), self._page)
        if target is None:
            return
        try:
            self._extend(end, target)
        except (OSError, lmdb.Error) as e:
            log.warning("stopped preparing the data file's tail (%s); commits still work", e)
            self.close()

    def _extend(self, end: int, target: int) -> None:
        txn = self._env.begin(write=True)  # LMDB's writer lock: nobody grows the file meanwhile
        try:
            if os.fstat(self._fd).st_size < target:
                os.ftruncate(self._fd, target)
            start = max(self._ready_to, end)
            os.posix_fadvise(self._fd, start, target - start, os.POSIX_FADV_WILLNEED)
            self._ready_to = target
            self.extensions += 1
        finally:
            txn.abort()
