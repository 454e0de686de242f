"""Logging setup. Access lines carry method, path, status and time only:
never the client address, the query string, the user agent or the referrer."""

from __future__ import annotations

import logging
import sys

access = logging.getLogger("svc.access")


def setup(level: str = "info") -> None:
    root = logging.getLogger()
    if not any(getattr(h, "_svc", False) for h in root.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        handler._svc = True  # type: ignore[attr-defined]  # marks our handler for reuse
        root.addHandler(handler)
    root.setLevel(level.upper())


def access_line(method: str, path: str, status: int, ms: float) -> None:
    if access.isEnabledFor(logging.INFO):
        access.info("%s %s %d %.1fms", method, path, status, ms)
