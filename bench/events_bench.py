"""Events batches of 100: accepted events per second against a parse-only baseline.

Two targets, run by the harness (bench/harness.py) in the same run:

- ``events-batch-100``: ``POST /v1/sdk/events`` with 100 events per request,
  fresh event ids in every request (so every event is stored, counted and
  durable before the answer), each request from one of 1000 registered
  installs picked at random (as from many devices), the default config
  except the rate limits (``SVC_RATE_LIMIT_PER_KEY=0``,
  ``SVC_RATE_LIMIT_PER_CLIENT=0``);
- ``events-parse-only``: the same requests to ``POST /v1/bench/parse-only``,
  which only decodes the body with orjson and answers ``{"accepted": N}``
  (served only with ``SVC_BENCH_ENDPOINTS=1``, set for both targets so the two
  servers are configured alike).

Accepted events per second = req/s x 100. Run both (and the two baselines)::

    .venv/bin/python -m bench.events_bench [--quick]

which runs ``python -m bench.harness --only events-batch-100 --only
events-parse-only`` (rewriting bench/README.md) and prints events per second
and the ratio of the two.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path

import httpx

from bench import wrk_mint
from bench.target import Target

EVENTS = "events-batch-100"
PARSE_ONLY = "events-parse-only"
PER_REQUEST = 100
INSTALLS = 1000
SERVER = ("{python}", "-m", "web.cli", "serve", "--port", "{port}", "--data", "{workdir}/data")
ENV = (("SVC_RATE_LIMIT_PER_KEY", "0"), ("SVC_RATE_LIMIT_PER_CLIENT", "0"),
       ("SVC_MAX_LAG_MS", "0"), ("SVC_BENCH_ENDPOINTS", "1"))
HEADERS = (("content-type", "application/json"), ("x-svc-sdk", "flutter/0.2.0"))
NAMES = ("purchase", "add_to_cart", "view_item", "signup")

# One event: about 200 bytes, like a real purchase event; ids are filled per request.
EVENT_LUA = """
math.randomseed(os.time() * 1000 + math.floor(os.clock() * 1000))
local r = math.random
local function uuid4()
  return string.format("%04x%04x-%04x-4%03x-%04x-%04x%04x%04x", r(0, 65535), r(0, 65535),
    r(0, 65535), r(0, 4095), r(32768, 49151), r(0, 65535), r(0, 65535), r(0, 65535))
end
local names = {"purchase", "add_to_cart", "view_item", "signup"}
local installs = {}
for line in io.lines("@INSTALLS@") do installs[#installs + 1] = line end
-- occurredAt moves with the clock (second resolution, a fresh millisecond part),
-- as events from many devices do: stored events append to the time-ordered index.
local function occurred()
  return os.date("!%Y-%m-%dT%H:%M:%S", os.time()) .. string.format(".%03dZ", r(0, 999))
end
local function batch()
  local parts = {}
  for i = 1, @COUNT@ do
    parts[i] = string.format('{"id":"%s","name":"%s","properties":{"revenue":%d.99,' ..
      '"currency":"USD","sku":"SKU-%d","qty":2,"source":"bench"},"linkId":null,' ..
      '"occurredAt":"%s"}', uuid4(), names[(i % 4) + 1], i % 50, i, occurred())
  end
  local install = installs[r(#installs)]
  return '{"installId":"' .. install .. '","events":[' .. table.concat(parts, ",") .. ']}'
end
request = function()
  return wrk.format("POST", "@PATH@", write_headers(), batch())
end
"""


def bootstrap(workdir: Path) -> dict[str, str]:
    out = subprocess.run([sys.executable, "-m", "web.cli", "bootstrap", "--data",
                          str(workdir / "data"), "--json"], capture_output=True, text=True,
                         check=True, timeout=60)
    keys: dict[str, str] = json.loads(out.stdout)["keys"]
    return keys


def sample_body(install: str, occurred: str) -> bytes:
    events = [{"id": str(uuid.uuid4()), "name": NAMES[i % 4],
               "properties": {"revenue": i % 50 + 0.99, "currency": "USD", "sku": f"SKU-{i}",
                              "qty": 2, "source": "bench"},
               "linkId": None, "occurredAt": occurred} for i in range(1, PER_REQUEST + 1)]
    return json.dumps({"installId": install, "events": events}).encode()


def prepare_for(path: str) -> Callable[[str, Path], dict[str, str]]:
    """Bootstrap, register ``INSTALLS`` installs (each request is one install's
    batch, as from many devices) and write the Lua script and a sample body."""

    def prepare(base_url: str, workdir: Path) -> dict[str, str]:
        keys = bootstrap(workdir)
        auth = {"authorization": f"Bearer {keys['pk_live']}"}
        installs = [str(uuid.uuid4()) for _ in range(INSTALLS)]
        with httpx.Client(base_url=base_url, timeout=30, headers={**dict(HEADERS), **auth}) as c:
            for install in installs:
                c.post("/v1/sdk/init", json={"installId": install, "isFirstLaunch": True,
                                             "sdkVersion": "0.2.0", "platform": "android",
                                             "osVersion": "14"}).raise_for_status()
        (workdir / "installs.txt").write_text("".join(f"{i}\n" for i in installs))
        occurred = time.strftime("%Y-%m-%dT%H:%M:%S.123Z", time.gmtime())
        (workdir / "events.lua").write_text(
            wrk_mint.IDEM_LUA + EVENT_LUA.replace("@COUNT@", str(PER_REQUEST))
            .replace("@PATH@", path).replace("@INSTALLS@", str(workdir / "installs.txt")))
        (workdir / "events-body.json").write_bytes(sample_body(installs[0], occurred))
        return auth

    return prepare


def _target(name: str, description: str, path: str) -> Target:
    return Target(name=name, description=description, server=SERVER, env=ENV,
                  ready_path="/healthz", paths=(path,), method="POST", expect_status=200,
                  headers=HEADERS, body_file="{workdir}/events-body.json",
                  lua_script="{workdir}/events.lua", prepare=prepare_for(path))


EVENTS_TARGETS: tuple[Target, ...] = (
    _target(EVENTS, "POST /v1/sdk/events, 100 new events a request (validated, deduplicated, "
            "stored, counted, durable before the answer); events/s = 100 x req/s",
            "/v1/sdk/events"),
    _target(PARSE_ONLY, "POST /v1/bench/parse-only, the same bodies, orjson decode only "
            "(SVC_BENCH_ENDPOINTS=1): the events path's baseline", "/v1/bench/parse-only"),
)


def main(argv: Sequence[str] | None = None) -> int:
    from bench import harness

    args = list(sys.argv[1:] if argv is None else argv)
    status = harness.main([*args, "--only", EVENTS, "--only", PARSE_ONLY])
    if status != 0:
        return status
    results = json.loads((harness.OUT_DIR / "results.json").read_text())
    rps = {r["name"]: r["loaded"]["load"]["rps"] for r in results["results"]}
    for name in (EVENTS, PARSE_ONLY):
        print(f"{name}: {rps[name] * PER_REQUEST:,.0f} events/s ({rps[name]:,.0f} req/s)")
    print(f"stored / parse-only: {rps[EVENTS] / rps[PARSE_ONLY]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
