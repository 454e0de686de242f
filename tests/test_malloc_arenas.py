"""``svc serve`` caps glibc's malloc arenas at two unless MALLOC_ARENA_MAX is set.

Each case runs in a child process (the cap is process-wide): eight threads
allocate at once, then glibc's ``malloc_stats`` lists the arenas (on stderr,
one ``Arena N:`` line each)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from web import malloc_arenas

ROOT = Path(__file__).resolve().parent.parent
PROBE = """
import ctypes, os, threading
from web import malloc_arenas
print(malloc_arenas.limit(os.environ), flush=True)
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = (ctypes.c_size_t,)
barrier = threading.Barrier(8)
def work():
    libc.malloc(50_000)
    barrier.wait()
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
libc.malloc_stats()
"""

glibc = pytest.mark.skipif(not os.confstr("CS_GNU_LIBC_VERSION"), reason="glibc only")


def probe(**env: str) -> tuple[str, int]:
    environ = {k: v for k, v in os.environ.items() if k != malloc_arenas.ENV} | env
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=ROOT, env=environ,
                          capture_output=True, text=True, timeout=60, check=True)
    arenas = sum(1 for line in done.stderr.splitlines() if line.startswith("Arena "))
    return done.stdout.strip(), arenas


@glibc
def test_capped_at_two_by_default() -> None:
    assert probe() == ("2", 2)


@glibc
def test_the_operators_setting_is_kept() -> None:
    said, arenas = probe(MALLOC_ARENA_MAX="16")
    assert said == "None"
    assert arenas == 9  # the main arena and one for each of the eight threads


@glibc
@pytest.mark.parametrize(("env", "line"), [
    ({}, True), ({malloc_arenas.ENV: "4"}, False)])
def test_serve_caps_them_and_says_so(server_factory: Any, monkeypatch: pytest.MonkeyPatch,
                                     env: dict[str, str], line: bool) -> None:
    monkeypatch.delenv(malloc_arenas.ENV, raising=False)
    server = server_factory(env={"SVC_LOG_LEVEL": "debug", **env}).start()
    server.stop()
    said = "malloc arenas: at most 2 (set MALLOC_ARENA_MAX to choose)" in server.logs()
    assert said is line
