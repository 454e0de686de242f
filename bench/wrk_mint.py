"""State a target's requests consume, made by real requests before the load.

Some paths consume what they find: an Android first launch uses up the
token its tap minted, an iOS launch matched by network hash uses up that
network's tap, a handoff claim clears the user's pending handoffs. To measure
them on the path that does the work, ``prepare`` hooks first make that state
through the service itself, with wrk as the client (fast, pinned to CPU 0):
``mint`` runs a Lua script until its ``response`` hook has counted enough
answers (``wrk.thread:stop()``), or a time limit passes.

The load scripts then walk the minted items one per request, with
``SEQUENCE_LUA`` (``sequence_lua``): the position is saved to a file every
16 requests and each wrk run (warm-up, loaded, unloaded are separate
processes) starts 64 past the last saved one, so no item is used twice.
``coverage_note`` reads that file after the run and says how many requests
found a fresh item.

Position k names item ``shuffled(1..n)[k]``: the items are walked in a fixed
shuffled order, not in the order they were minted. Production launches
consume taps and tokens made minutes to hours apart, so a batch of them
lands on leaves all over the store's trees; items consumed in minting order
sit side by side in every tree keyed by time (the window's entries, the
tokens), and a batch of 32 would share a few leaves. With tokens stored in
issue order, that best case made the Android launch with a token look about
10 % faster at c32 than production would see it (session 15 in
bench/README.md).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

from bench.server import BenchFailed
from bench.wrk import lua_string

LOAD_SECONDS_ENV = "BENCH_LOAD_SECONDS"
SKIP = 64

# Every write the SDK sends carries a fresh Idempotency-Key (SPEC, "Endpoints"),
# so every load script's writes do too: the service then records each answer
# for replays, as it does for the SDK. The keys are random UUID-shaped strings
# from a generator of their own (xorshift32 seeded from /dev/urandom), so the
# scripts' math.random sequences, seeded for reproducible picks, are untouched
# and every wrk process (warm-up, loaded, unloaded) sends keys never seen.
HEADERS_LUA = """
-- wrk.format sends only the headers table it is given: wrk.headers and ``extra``
local function with_headers(extra)
  local h = {}
  for k, v in pairs(wrk.headers) do h[k] = v end
  for k, v in pairs(extra) do h[k] = v end
  return h
end
"""

IDEM_LUA = HEADERS_LUA + """
local bit = require("bit")
local idem_state
do
  local f = assert(io.open("/dev/urandom", "rb"))
  local b = f:read(4)
  f:close()
  idem_state = bit.bor(((b:byte(1) * 256 + b:byte(2)) * 256 + b:byte(3)) * 256 + b:byte(4), 1)
end
local function idem_next()
  local x = idem_state
  x = bit.bxor(x, bit.lshift(x, 13))
  x = bit.bxor(x, bit.rshift(x, 17))
  x = bit.bxor(x, bit.lshift(x, 5))
  idem_state = x
  return bit.tohex(x, 8)
end
local function idem_key()
  local a, b, c, d = idem_next(), idem_next(), idem_next(), idem_next()
  return a .. "-" .. b:sub(1, 4) .. "-4" .. b:sub(6, 8) .. "-" .. c:sub(1, 4) .. "-"
    .. c:sub(5, 8) .. d
end
-- the headers of a write: wrk.headers, a new Idempotency-Key and ``extra``
local function write_headers(extra)
  local h = with_headers(extra or {})
  h["Idempotency-Key"] = idem_key()
  return h
end
"""

SEQUENCE_LUA = """
local seq_file = @POSFILE@
local seq_pos = 0
do
  local f = io.open(seq_file, "r")
  if f then seq_pos = (tonumber(f:read("*l")) or 0) + @SKIP@; f:close() end
end
local seq_order = {}
for line in io.lines(@ORDERFILE@) do
  if #line > 0 then seq_order[#seq_order + 1] = tonumber(line) end
end
-- the next item's number (1..n): the next position, through the shuffled order
local function seq_next()
  seq_pos = seq_pos + 1
  if seq_pos % 16 == 0 then
    local f = io.open(seq_file, "w")
    if f then f:write(tostring(seq_pos)); f:close() end
  end
  return seq_order[(seq_pos - 1) % #seq_order + 1]
end
"""

IP_LUA = """
local function seq_ip(i)
  return string.format("10.%d.%d.%d", math.floor(i / 65536) % 256,
                       math.floor(i / 256) % 256, i % 256)
end
"""

COUNT_LUA = """
local mint_want, mint_got, mint_done = @WANT@, 0, false
local function mint_count(ok)
  if ok then mint_got = mint_got + 1 end
  if mint_got >= mint_want and not mint_done then
    mint_done = true
    local f = io.open(@DONEFILE@, "w")
    if f then f:write(tostring(mint_got)); f:close() end
    wrk.thread:stop()
  end
end
"""


def load_seconds(default: int = 15) -> int:
    """Seconds of load the harness will put on the target (all phases), from the
    environment the harness sets; ``default`` when run otherwise."""
    try:
        return max(1, int(os.environ.get(LOAD_SECONDS_ENV, default)))
    except ValueError:
        return default


ORDER_SEED = 15


def shuffled(items: list[str], seed: int = ORDER_SEED) -> list[str]:
    """``items`` in a fixed shuffled order: the order a load script consumes them in."""
    out = list(items)
    random.Random(seed).shuffle(out)
    return out


def order_file(path: Path, n: int) -> Path:
    """Write 1..n, shuffled, one a line, for a script that names its items by number."""
    path.write_text("".join(f"{i}\n" for i in shuffled([str(i) for i in range(1, n + 1)])))
    return path


def sequence_lua(pos_file: Path, items: int) -> str:
    """``seq_next()`` for a load script walking ``items`` minted items: each
    call gives the next one's number (1..items) in the shuffled order, written
    beside ``pos_file`` (``order.txt``); positions are saved to ``pos_file``."""
    order = order_file(pos_file.with_name("order.txt"), items)
    return (SEQUENCE_LUA.replace("@POSFILE@", lua_string(str(pos_file)))
            .replace("@ORDERFILE@", lua_string(str(order)))
            .replace("@SKIP@", str(SKIP)))


def count_lua(want: int, done_file: Path) -> str:
    """``mint_count(ok)`` for the ``response`` hook: after ``want`` good answers it
    writes ``done_file`` and stops the thread (wrk itself would wait out ``-d``;
    ``mint`` ends it when the file appears)."""
    return (COUNT_LUA.replace("@WANT@", str(want))
            .replace("@DONEFILE@", lua_string(str(done_file))))


def done_file(workdir: Path, name: str) -> Path:
    return workdir / f"mint-{name}.done"


def mint(base_url: str, script: str, workdir: Path, name: str, *, connections: int = 32,
         limit_s: int = 60) -> float:
    """Run ``script`` against ``base_url`` until it writes ``done_file(workdir, name)``
    (see ``count_lua``) or ``limit_s`` passes; returns the seconds it took."""
    path = workdir / f"mint-{name}.lua"
    path.write_text(script)
    marker = done_file(workdir, name)
    marker.unlink(missing_ok=True)
    argv = ["wrk", "-t1", f"-c{connections}", f"-d{limit_s}s", "--timeout=10s", "-s",
            str(path), base_url + "/"]
    if _two_cpus():
        argv = ["taskset", "-c", "0", *argv]
    started = time.monotonic()
    with (workdir / f"mint-{name}.txt").open("w") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            while proc.poll() is None and not marker.exists():
                if time.monotonic() - started > limit_s + 30:
                    break
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # wrk prints its summary and exits
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(10)
    if not marker.exists():
        raise BenchFailed(f"minting {name} did not finish within {limit_s}s: see "
                          f"{workdir / f'mint-{name}.txt'}")
    return time.monotonic() - started


def _two_cpus() -> bool:
    return {0, 1} <= os.sched_getaffinity(0)


def lines_in(path: Path) -> int:
    try:
        return sum(1 for line in path.read_text().splitlines() if line.strip())
    except OSError:
        return 0


def coverage_note(pos_file: Path, minted: int, item: str, fallback: str) -> str:
    """How many requests found a fresh ``item`` (from the last saved position)."""
    try:
        last = int(pos_file.read_text().strip() or 0)
    except (OSError, ValueError):
        return f"{minted:,} {item}s minted; the position file was not written"
    if last <= minted:
        return (f"{minted:,} {item}s minted, requests used positions up to about {last:,}: "
                f"every request found a fresh {item}")
    return (f"{minted:,} {item}s minted, requests used positions up to about {last:,}: "
            f"about {last - minted:,} requests (beyond the minted ones) {fallback}")
