"""Logging setup. Access lines carry method, path, status and time only:
never the client address, the query string, the user agent or the referrer."""

from __future__ import annotations

import logging
import sys
import time

access = logging.getLogger("svc.access")


def setup(level: str = "info") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_svc", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        handler._svc = True  # type: ignore[attr-defined]  # marks our handler for reuse
        root.addHandler(handler)
    root.setLevel(level.upper())


_stamp_second = -1
_stamp = ""


def access_line(method: str, path: str, status: int, ms: float) -> None:
    """One access line, written straight to stderr in the format of the other
    log lines. The logging module's per-record machinery cost about 7 % of a
    redirect (bench/README.md); this costs a string format and one write."""
    global _stamp_second, _stamp
    if not access.isEnabledFor(logging.INFO):
        return
    now = time.time()
    second = int(now)
    if second != _stamp_second:
        _stamp_second = second
        _stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(second))
    sys.stderr.write(f"{_stamp},{int(now * 1000) % 1000:03d} INFO svc.access "
                     f"{method} {path} {status} {ms:.1f}ms\n")
