"""Display formats of events: times to the second (UTC) and device names.

``install(env)`` adds them to the Jinja environment as filters ``clock``,
``stamp``, ``iso`` and ``device``; the view modules that use them call it
(it may run more than once).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from svc_engine.links import LAST_MS

PLATFORM_NAMES = {"ios": "iOS", "android": "Android", "desktop": "Desktop", "other": "Other"}


def utc(ms: int) -> datetime:
    """The UTC time of ``ms``; one past year 9999 (an expiry stored before
    input was bounded) as the last there is, so no page fails on it."""
    return datetime.fromtimestamp(min(ms, LAST_MS) / 1000, UTC)


def clock(ms: int, now_ms: int | None = None) -> str:
    """``05:18:59``; on another day than ``now_ms`` ``21 Nov, 05:18:59``."""
    t = utc(ms)
    if now_ms is not None and t.date() == utc(now_ms).date():
        return f"{t:%H:%M:%S}"
    return f"{t.day} {t:%b}, {t:%H:%M:%S}"


def stamp(ms: int) -> str:
    """``22 Nov 2026, 05:18:59 UTC``."""
    t = utc(ms)
    return f"{t.day} {t:%b %Y, %H:%M:%S} UTC"


def iso(ms: int) -> str:
    return f"{utc(ms):%Y-%m-%dT%H:%M:%SZ}"


def device(platform: str, os_major: int | None = None) -> str:
    """``iOS 17``, ``Android 14``, ``Desktop``."""
    name = PLATFORM_NAMES.get(platform, platform)
    return f"{name} {os_major}" if os_major is not None and platform != "desktop" else name


def install(env: Any) -> None:
    env.filters.update(clock=clock, stamp=stamp, iso=iso, device=device)
