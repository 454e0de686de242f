"""Waiting for the harness to ask a baseline server to stop."""

from __future__ import annotations

import signal

import trio


async def wait_for_termination() -> None:
    """Return once SIGTERM or SIGINT arrives, so the server can shut down cleanly."""
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for _ in signals:
            return
