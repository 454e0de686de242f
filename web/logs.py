"""Logging setup. Access lines carry method, path, status and time only:
never the client address, the query string, the user agent or the referrer."""

from __future__ import annotations

import logging
import sys
import time

import trio

access = logging.getLogger("svc.access")


class _Handler(logging.StreamHandler):  # type: ignore[type-arg]
    """stderr, with buffered access lines written first to keep the order."""

    def emit(self, record: logging.LogRecord) -> None:
        flush_access()
        super().emit(record)


def setup(level: str = "info") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_svc", False) for h in root.handlers):
        handler = _Handler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        handler._svc = True  # type: ignore[attr-defined]  # marks our handler for reuse
        root.addHandler(handler)
    root.setLevel(level.upper())


_stamp_second = -1
_stamp = ""
_pending: list[str] = []
FLUSH_LINES = 64


_INVITE_SEGMENT = "/invite/"
"""What precedes a secret in a path (``/dashboard/invite/<token>``): all
after it is logged as ``<token>``, wherever it is (a request for
``/dashboard//invite/<token>`` is logged before the dashboard redirects it
to the tidy path)."""


def loggable(path: str) -> str:
    """A request's decoded path as a log line may carry it: an invitation's
    token (it opens an account) as ``<token>``, unprintable characters (a
    decoded ``%0a`` would forge a line, ``%00`` break one) escaped."""
    secret = path.find(_INVITE_SEGMENT)
    if secret >= 0:
        path = path[:secret + len(_INVITE_SEGMENT)] + "<token>"
    if not path.isprintable():
        path = path.encode("unicode_escape").decode("ascii")
    return path


def access_line(method: str, path: str, status: int, ms: float) -> None:
    """One access line in the format of the other log lines, buffered: lines
    are written to stderr together, when 64 are waiting, when the second
    changes, and by ``flush_access`` (called every 0.25 s by the server and on
    shutdown). The logging module's per-record machinery, then a write per
    line, cost several per cent of a redirect (bench/README.md)."""
    global _stamp_second, _stamp
    if not access.isEnabledFor(logging.INFO):
        return
    path = loggable(path)
    now = time.time()
    second = int(now)
    if second != _stamp_second:
        flush_access()
        _stamp_second = second
        _stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
    _pending.append(f"{_stamp},{int(now * 1000) % 1000:03d} INFO svc.access "
                    f"{method} {path} {status} {ms:.1f}ms\n")
    if len(_pending) >= FLUSH_LINES:
        flush_access()


async def flush_periodically(interval_s: float = 0.25) -> None:
    try:
        while True:
            await trio.sleep(interval_s)
            flush_access()
    finally:
        flush_access()


def flush_access() -> None:
    if _pending:
        sys.stderr.write("".join(_pending))
        _pending.clear()
