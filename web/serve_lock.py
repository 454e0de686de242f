"""One ``svc serve`` per data directory.

LMDB lets several processes write one store safely, but a serving process
also owns state in memory: the webhook dispatcher reading the outbox, the
timer firing retries and housekeeping, the project actors. Two processes
serving one data directory would each deliver every webhook and run every
job. So ``svc serve`` holds an exclusive ``flock`` on ``serve.lock`` in the
data directory while it runs; a second one exits at once with a one-line
message naming the first one's process ID. The lock dies with its process
(even under SIGKILL), so it is never stale. Other commands (``svc backup``,
``svc keys``, ``svc doctor``...) do not take it: they may run beside the
service, as README.md says.
"""

from __future__ import annotations

import fcntl
import os
from typing import IO

from storage.lmdb_store import unreachable

LOCK_NAME = "serve.lock"


class DataDirBusy(Exception):
    """Another process serves this data directory."""


def is_served(data_dir: str) -> bool:
    """Whether a ``svc serve`` holds the data directory now (a shared lock
    attempt meets its exclusive one; taken and let go at once otherwise)."""
    try:
        f = open(os.path.join(data_dir, LOCK_NAME))  # noqa: SIM115 - closed below
    except OSError:
        return False  # no lock file: never served
    with f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f.fileno(), fcntl.LOCK_UN)
        return False


def hold(data_dir: str) -> IO[str]:
    """Take the data directory's serve lock; keep the returned file open
    for as long as the process serves (closing it releases the lock)."""
    try:  # owner only, as the store's own files (storage/lmdb_store.py)
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        fd = os.open(os.path.join(data_dir, LOCK_NAME), os.O_RDWR | os.O_CREAT | os.O_APPEND,
                     0o600)
    except OSError as e:
        raise unreachable(data_dir, e) from None
    f = os.fdopen(fd, "a+")
    try:
        fcntl.flock(f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        holder = f.read().strip() or "unknown"
        f.close()
        raise DataDirBusy(f"another svc serve (pid {holder}) is serving {data_dir}; "
                          "stop it first, or give this one another --data") from None
    f.seek(0)
    f.truncate()
    f.write(f"{os.getpid()}\n")
    f.flush()
    return f
