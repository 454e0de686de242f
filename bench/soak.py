"""Does a long-running svc hold its memory and its store steady?
``python -m bench.soak [--minutes N | --quick] [--rate R]``.

Starts a real ``svc serve`` on loopback (port 47400 or the next free one up to
47499, data in ``/tmp/soak-<time>/data``) behind a pretend proxy
(``SVC_CLIENT_IP_HEADER=X-Forwarded-For``, so thousands of client addresses
reach it), bootstraps a project with extra API keys (the ``svc`` CLI, as
bench/service_targets.py does), sets its platforms and probabilistic
matching, creates some hundreds of links over the API, adds two webhook
endpoints (live and test mode) pointing at a local receiver
(bench/soak_receiver.py; plain http to 127.0.0.1 is allowed by the SSRF rules,
svc_engine/ssrf.py ``plain_http_allowed``), then drives the mixed load of
bench/soak_load.py for ``--minutes`` (default 8; ``--quick``: 1) at about
``--rate`` requests a second, plus a few dashboard sign-ins a second with
wrong passwords.

Every ``--interval`` seconds (10) it samples the server: ``/proc/PID/status``
(RssAnon, VmRSS, RssFile, Threads), its open descriptors, ``/metrics``
(``svc_store_used_bytes``: LMDB's high-water mark; webhook deliveries ready,
deadlines held, writes), the length and allocated blocks of ``data.mdb``, and
the store's live pages (every B-tree's pages, read in a short read
transaction of the harness's own: the high-water mark less the free pages).

The run has three phases (bench/soak_verdict.py): warm-up (20 %), the same
keys (to 55 %), fresh keys (to the end). At the end it prints the samples
as a table and the verdict: anonymous RSS growth from the end of warm-up to
the end, extrapolated to an hour, its fitted slopes with known keys (two
halves) and with new keys, the fresh phase's growth set against what the
service's bounded per-key tables could gain from its new keys (an entry of
each measured first, in this process, by bench/soak_calibrate.py), what is
left per new client address, descriptors and threads, and the store's growth
per write. Samples, counts and the verdict also go to ``<out>/soak.json``;
the server's log to ``<out>/server.log``. The data dir is removed at the end
unless ``--keep``.

``--rejudge <out>/soak.json`` prints a saved run's table and verdict again
(this checkout's rules). ``--tracemalloc`` runs the server under tracemalloc
(bench/soak_trace.py) and prints which code holds what each phase gained: a
diagnosis (the server runs several times slower), not a measurement. With
``--bound N`` as well, the traced server holds its two per-address tables
(the client rate limiter, 100,000 addresses; the sign-in throttle, 50,000
entries) to N entries each, and the verdict counts them at that bound: a
traced run serves too few requests for its fresh phase to fill the real
bounds, so what grows past a small bound is what no bound holds.

What an 8-minute run at 200 requests a second can and cannot say: a bounded
table fills at the rate its keys arrive, so one whose bound is larger than
the keys of a run (the client rate limiter's 100,000 addresses) looks like
growth within the run; the calibration is what tells it from an unbounded
one. Load shedding (SVC_MAX_LAG_MS) and the per-key limit stay at their
defaults; their 503 and 429 answers are counted, not failures.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Set as AbstractSet
from pathlib import Path
from typing import Any

import attrs
import httpx
import lmdb
import trio

from bench import soak_calibrate, soak_trace, soak_verdict
from bench.server import RunningServer, start_server, stop_server, wait_ready
from bench.soak_load import CURRENCIES, KeySpace, Load, Tenant

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
PORTS = range(47400, 47500)
METRICS_TOKEN = "soak-metrics-token-0123456789"
BURST_READS = 3
BURST_GAP_S = 0.1
PLATFORMS = {"ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
                     "teamId": "ABCDE12345", "scheme": "shop"},
             "android": {"packageName": "com.example.shop"},
             "web": {"fallbackUrl": "https://example.com/"}}
SETTINGS = {"probabilisticMatching": True, "probabilisticIpMatching": True}
WEBHOOK_EVENTS = ["click", "open", "install", "conversion"]
METRIC_FIELDS = {"svc_store_used_bytes": "store_used", "svc_store_writes_total": "writes",
                 "svc_store_commits_total": "commits",
                 "svc_webhook_deliveries_ready": "ready",
                 "svc_webhook_deliveries_in_flight": "wh_in_flight",
                 "svc_webhook_deliveries_created_total": "wh_created",
                 "svc_webhook_delivered_total": "wh_delivered",
                 "svc_webhook_failed_attempts_total": "wh_failed",
                 "svc_timer_deadlines_held": "timer_held",
                 "svc_http_connections": "connections",
                 "svc_http_requests_shed_total": "shed",
                 "svc_store_write_queue": "write_queue",
                 "svc_webhook_body_cache_bytes": "body_cache",
                 "svc_store_decode_cache_bytes": "decode_cache"}


def free_port(start: int, skip: AbstractSet[int] = frozenset()) -> int:
    for port in range(start, PORTS.stop):
        if port in skip:
            continue
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise SystemExit(f"soak: no free port in {start}..{PORTS.stop - 1}")


def cli(data: Path, env: dict[str, str], *args: str) -> dict[str, Any]:
    out = subprocess.run([sys.executable, "-m", "web.cli", *args, "--data", str(data),
                          *(["--json"] if args[0] == "bootstrap" else [])],
                         capture_output=True, text=True, check=True, timeout=120, cwd=REPO_ROOT,
                         env={**os.environ, **env})
    result: dict[str, Any] = json.loads(out.stdout)
    return result


# -- sampling -----------------------------------------------------------------------------


def proc_status(pid: int) -> dict[str, int]:
    out: dict[str, int] = {}
    names = {"RssAnon": "rss_anon", "VmRSS": "vm_rss", "RssFile": "rss_file",
             "RssShmem": "rss_shmem", "VmHWM": "vm_hwm", "Threads": "threads"}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in names:
            parts = value.split()
            out[names[key]] = int(parts[0]) * (1024 if len(parts) > 1 else 1)
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def parse_metrics(text: str) -> dict[str, float]:
    """The unlabelled samples of METRIC_FIELDS, and labelled ones summed."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        if name in METRIC_FIELDS:
            field = METRIC_FIELDS[name]
            out[field] = out.get(field, 0.0) + float(value)
    return out


READ_MAP_SIZE = 1 << 40


def open_reader(data: Path) -> lmdb.Environment:
    """A read-only environment of the store, its map ``READ_MAP_SIZE``."""
    return lmdb.open(str(data), readonly=True, lock=True, max_dbs=256, subdir=True,
                     map_size=READ_MAP_SIZE)


def live_bytes(data: Path) -> int:
    """The store's live pages in bytes: the two meta pages and every page of
    every B-tree (branch, leaf, overflow), read in a read-only environment of
    our own, opened for the read and closed (a long-open one would have to
    follow the map's growth). Its map is 1 TiB of address space, far past any
    soak's store: LMDB refuses a read (``MapResizedError``) when the store has
    outgrown the reader's map, and a map as large as the file when opened
    (py-lmdb's default) was outgrown now and then in sessions 30 and 31's
    soaks, even when re-read at the size the writer recorded (three refusals
    in a row, the store growing ~0.5 MiB a second)."""
    env = open_reader(data)
    try:
        return count_live_bytes(env)
    finally:
        env.close()


def count_live_bytes(env: lmdb.Environment) -> int:
    """:func:`live_bytes` in an open environment."""
    with env.begin() as txn:
        main = txn.stat()
        psize = main["psize"]
        pages = 2 + main["branch_pages"] + main["leaf_pages"] + main["overflow_pages"]
        for name in [bytes(k) for k, _ in txn.cursor()]:
            try:
                db = env.open_db(name, txn=txn, create=False)
            except lmdb.Error:
                continue
            st = txn.stat(db)
            pages += st["branch_pages"] + st["leaf_pages"] + st["overflow_pages"]
    return int(pages * psize)


@attrs.define(eq=False)
class Sampler:
    server: RunningServer
    data: Path
    load: Load
    keys: KeySpace
    started: float
    total_s: float
    samples: list[dict[str, Any]] = attrs.field(init=False, factory=list)
    live_errors: int = attrs.field(init=False, default=0)
    _last_requests: int = attrs.field(init=False, default=0)
    _last_t: float = attrs.field(init=False, default=0.0)
    metrics_errors: int = attrs.field(init=False, default=0)

    async def sample(self, client: httpx.AsyncClient) -> dict[str, Any]:
        t = time.monotonic() - self.started
        s: dict[str, Any] = {"t": round(t, 1), "phase": self.keys.phase}
        # A dashboard sign-in holds 64 MiB for argon2 while its password is
        # checked (in a worker thread, mmapped and given back after): memory is
        # read with no sign-in of ours in flight, and the lowest of a burst of
        # reads is taken (the highest is kept too).
        async with self.load.signin_lock:
            await trio.sleep(BURST_GAP_S)
            reads = []
            for i in range(BURST_READS):
                if i:
                    await trio.sleep(BURST_GAP_S)
                reads.append(proc_status(self.server.pid))
        s.update(min(reads, key=lambda r: r["rss_anon"]))
        s["rss_anon_max"] = max(r["rss_anon"] for r in reads)
        s["vm_hwm"] = max(r.get("vm_hwm", 0) for r in reads)
        for _ in range(5):  # /metrics is shed (503) like any request when the loop lags
            try:
                r = await client.get("/metrics",
                                     headers={"authorization": f"Bearer {METRICS_TOKEN}"})
            except httpx.HTTPError:
                r = None
            if r is not None and r.status_code == 200:
                s.update(parse_metrics(r.text))
                break
            self.metrics_errors += 1
            await trio.sleep(0.2)
        mdb = self.data / "data.mdb"
        with contextlib.suppress(OSError):
            st = mdb.stat()
            s["file_bytes"] = st.st_size
            s["file_alloc"] = st.st_blocks * 512
        try:
            s["live_bytes"] = await trio.to_thread.run_sync(live_bytes, self.data)
        except lmdb.Error as e:
            s["live_error"] = str(e)
            self.live_errors += 1
        dt = t - self._last_t
        s["req_rate"] = (self.load.stats.requests - self._last_requests) / dt if dt > 0 else 0
        self._last_requests, self._last_t = self.load.stats.requests, t
        s["requests"] = self.load.stats.requests
        s["addresses"] = len(self.keys.ever.get("addresses", ()))
        s["user_agents"] = len(self.keys.ever.get("user_agents", ()))
        self.samples.append(s)
        return s

    async def run(self, until: float, interval: float) -> None:
        async with httpx.AsyncClient(base_url=self.server.base_url, timeout=10) as client:
            next_at = time.monotonic()
            while True:
                s = await self.sample(client)
                print(f"  t={s['t']:6.0f}s {s['phase']:6} anon {s['rss_anon'] / 2**20:7.1f} MiB "
                      f"rss {s['vm_rss'] / 2**20:7.1f} MiB fds {s['fds']:4} thr {s['threads']:3} "
                      f"store {s.get('store_used', 0) / 2**20:7.1f} MiB live "
                      f"{s.get('live_bytes', 0) / 2**20:7.1f} MiB {s['req_rate']:5.0f} req/s "
                      f"ready {s.get('ready', '-')} {s.get('live_error', '')}", flush=True)
                next_at += interval
                if next_at > until:
                    return
                await trio.sleep(max(0.0, next_at - time.monotonic()))

# -- setup --------------------------------------------------------------------------------


async def configure(base_url: str, boot: dict[str, Any], sk_extra: str, pk_extra: list[str],
                    links_live: int, links_test: int, receiver_port: int
                    ) -> tuple[Tenant, dict[str, str]]:
    keys = boot["keys"]
    tenant = Tenant(base_url=base_url, project_id=boot["projectId"],
                    pk={"live": [keys["pk_live"], *pk_extra], "test": [keys["pk_test"]]},
                    sk={"live": [keys["sk_live"], sk_extra], "test": [keys["sk_test"]]},
                    links={"live": [], "test": []}, owner_email=boot["owner"]["email"])
    secrets: dict[str, str] = {}
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as c:
        for mode in ("live", "test"):
            auth = {"authorization": f"Bearer {tenant.sk[mode][0]}"}
            (await c.patch("/v1/platforms", json=PLATFORMS, headers=auth)).raise_for_status()
            (await c.patch("/v1/deferred/settings", json=SETTINGS, headers=auth)
             ).raise_for_status()
            r = await c.post("/v1/webhooks/endpoints", headers=auth, json={
                "url": f"http://127.0.0.1:{receiver_port}/hooks/{mode}",
                "events": WEBHOOK_EVENTS, "description": f"soak receiver ({mode})"})
            if r.status_code != 201:
                raise SystemExit(f"soak: webhook endpoint refused: {r.status_code} {r.text}")
            secrets[mode] = r.json()["secret"]

        async def make(mode: str, count: int, first: int) -> None:
            auth = {"authorization": f"Bearer {tenant.sk[mode][0]}"}
            for i in range(first, count, 8):
                body = {"path": f"/product/{i}", "campaign": CAMPAIGNS_SETUP[i % 4],
                        "channel": "setup", "params": {"sku": str(i)},
                        "ogTitle": f"Product {i}"}
                if i % 5 == 0:
                    body["webFallbackUrl"] = f"https://example.com/p/{i}"
                for _ in range(100):  # the per-key limit (100/s) answers 429 to a burst
                    r = await c.post("/v1/links", json=body, headers=auth)
                    if r.status_code not in (429, 503):
                        break
                    await trio.sleep(float(r.headers.get("retry-after", "1")))
                r.raise_for_status()
                tenant.links[mode].append(r.json())

        async with trio.open_nursery() as n:
            for first in range(8):
                n.start_soon(make, "live", links_live, first)
                n.start_soon(make, "test", links_test, first)
    return tenant, secrets


CAMPAIGNS_SETUP = ("spring", "summer", "autumn", "winter")


# -- the run ------------------------------------------------------------------------------


async def drive(load: Load, sampler: Sampler, keys: KeySpace, total_s: float,
                interval: float, trace: bool) -> None:
    started = sampler.started
    end = started + total_s
    bounds = soak_verdict.phase_bounds(total_s)

    async def phases() -> None:
        for phase in soak_verdict.PHASES:
            at = started + bounds[phase][0]
            await trio.sleep(max(0.0, at - time.monotonic()))
            keys.set_phase(phase)
            print(f"-- phase {phase} at t={time.monotonic() - started:.0f}s", flush=True)
            if trace and phase != "warmup":
                os.kill(sampler.server.pid, signal.SIGUSR1)  # bench/soak_trace.py dumps

    async with trio.open_nursery() as n:
        n.start_soon(phases)
        n.start_soon(load.run, end)
        n.start_soon(sampler.run, end, interval)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=8.0)
    p.add_argument("--quick", action="store_true", help="about one minute")
    p.add_argument("--rate", type=float, default=200.0, help="requests a second (about)")
    p.add_argument("--workers", type=int, default=32)
    p.add_argument("--signin-rate", type=float, default=2.0,
                   help="dashboard sign-ins with a wrong password a second")
    p.add_argument("--interval", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--links", type=int, default=300, help="live links made at setup")
    p.add_argument("--port", type=int, default=PORTS.start)
    p.add_argument("--out", type=Path, default=None, help="default /tmp/soak-<time>")
    p.add_argument("--keep", action="store_true", help="keep the data dir")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tracemalloc", action="store_true",
                   help="diagnosis: run the server under tracemalloc (bench/soak_trace.py) and "
                        "print which code holds the memory gained in each phase (slow)")
    p.add_argument("--bound", type=int, default=None, metavar="N",
                   help="with --tracemalloc: hold the client rate limiter and the sign-in "
                        "throttle to N entries each, so that a traced run's fresh phase "
                        "passes their bounds (bench/soak_trace.py SOAK_TRACE_BOUND)")
    p.add_argument("--rejudge", type=Path, default=None, metavar="SOAK_JSON",
                   help="print the table and verdict of a saved run's soak.json; run nothing")
    args = p.parse_args(argv)
    if args.rejudge is not None:
        return rejudge(args.rejudge)
    if args.bound is not None and (not args.tracemalloc or args.bound < 1):
        raise SystemExit("soak: --bound N (N >= 1) is a diagnosis of --tracemalloc runs")
    minutes = 1.0 if args.quick else args.minutes
    interval = min(args.interval, 5.0) if args.quick else args.interval
    total_s = minutes * 60
    out = args.out or Path(f"/tmp/soak-{time.strftime('%Y%m%d-%H%M%S')}")
    if not str(out.resolve()).startswith("/tmp/soak"):
        raise SystemExit("soak: --out must be under /tmp/soak*")
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data"
    port = free_port(args.port)
    receiver_port = free_port(port + 1)
    public_url = f"http://127.0.0.1:{port}"
    env = {"SVC_PUBLIC_URL": public_url, "SVC_CLIENT_IP_HEADER": "X-Forwarded-For",
           "SVC_COUNTRY_HEADER": "CF-IPCountry", "SVC_METRICS_TOKEN": METRICS_TOKEN}
    print(f"soak: {minutes:g} min at ~{args.rate:g} req/s, server on {public_url}, "
          f"receiver on :{receiver_port}, out {out}", flush=True)

    tables = soak_calibrate.calibrate()  # before the server runs: no CPU taken from it
    if args.bound is not None:
        tables = soak_calibrate.held_to(tables, args.bound)
    boot = cli(data, env, "bootstrap")
    project = boot["projectId"]
    pk_extra = [cli(data, env, "keys", "create", "--project", project, "--kind", "publishable",
                    "--mode", "live", "--name", f"soak-pk-{i}")["key"] for i in range(2)]
    sk_extra = cli(data, env, "keys", "create", "--project", project, "--kind", "secret",
                   "--mode", "live", "--name", "soak-sk")["key"]

    entry = ["-m", "bench.soak_trace"] if args.tracemalloc else ["-m", "web.cli"]
    server_env = {**env, "SOAK_TRACE_DIR": str(out)} if args.tracemalloc else env
    if args.bound is not None:
        server_env["SOAK_TRACE_BOUND"] = str(args.bound)
    server = start_server([sys.executable, *entry, "serve", "--port", str(port),
                           "--data", str(data)], port=port, cwd=REPO_ROOT, env=server_env,
                          cpus=None, log_path=out / "server.log")
    receiver: subprocess.Popen[bytes] | None = None
    sampler: Sampler | None = None
    result: dict[str, Any] = {}
    try:
        wait_ready(server, "/healthz", timeout_s=60)
        t0 = time.monotonic()
        tenant, secrets = trio.run(configure, public_url, boot, sk_extra, pk_extra, args.links,
                                   max(20, args.links // 5), receiver_port)
        print(f"soak: set up {len(tenant.links['live'])} + {len(tenant.links['test'])} links, "
              f"2 webhook endpoints in {time.monotonic() - t0:.1f}s", flush=True)
        receiver = subprocess.Popen(
            [sys.executable, "-m", "bench.soak_receiver", "--port", str(receiver_port),
             "--secret", secrets["live"], "--secret-test", secrets["test"],
             "--stats", str(out / "receiver.json")],
            cwd=REPO_ROOT, stdin=subprocess.DEVNULL, stdout=(out / "receiver.log").open("wb"),
            stderr=subprocess.STDOUT)
        rng = random.Random(args.seed)
        keys = KeySpace(random.Random(args.seed + 1))
        load = Load(tenant, keys, rate=args.rate, workers=args.workers,
                    signin_rate=args.signin_rate, rng=rng)
        sampler = Sampler(server, data, load, keys, time.monotonic(), total_s)
        trio.run(drive, load, sampler, keys, total_s, interval, args.tracemalloc)
        time.sleep(2)
        final = trio.run(_final_sample, sampler)
        final["phase"] = "end"
        result = report(sampler.samples, total_s, keys, load, out, tables)
        if args.tracemalloc:
            result["tracemalloc"] = trace_report(server, out)
    finally:
        if sampler is not None and (sampler.metrics_errors or sampler.live_errors):
            print(f"soak: sampling: {sampler.metrics_errors} /metrics reads not answered 200, "
                  f"{sampler.live_errors} live-page reads failed")
        status, clean = stop_server(server, grace_s=30)
        print(f"soak: server stopped with status {status} ({'clean' if clean else 'NOT clean'})")
        if receiver is not None:
            receiver.send_signal(signal.SIGTERM)
            try:
                receiver.wait(timeout=10)
            except subprocess.TimeoutExpired:
                receiver.kill()
                receiver.wait()
        with contextlib.suppress(OSError, ValueError):
            result["receiver"] = json.loads((out / "receiver.json").read_text())
            print(f"soak: webhook receiver: {result['receiver']}")
        result["server_exit"] = {"status": status, "clean": clean}
        (out / "soak.json").write_text(json.dumps(result, indent=1, default=str))
        if not args.keep:
            shutil.rmtree(data, ignore_errors=True)
    return 0


def trace_report(server: RunningServer, out: Path) -> list[str]:
    """Take the last tracemalloc dump and print what grew in each phase."""
    os.kill(server.pid, signal.SIGUSR1)
    deadline = time.monotonic() + 300
    while not (out / "trace-003.json").exists() and time.monotonic() < deadline:
        time.sleep(0.5)
    dumps = sorted(out.glob("trace-*.json"))
    lines: list[str] = []
    for (a, b), label in zip(itertools.pairwise(dumps),
                             ("same keys (end of warm-up -> end of same)",
                              "fresh keys (end of same -> end)"), strict=False):
        lines.append(f"tracemalloc, {label}:")
        lines.extend("  " + line for line in
                     soak_trace.diff(json.loads(a.read_text()), json.loads(b.read_text())))
    print("\n".join(lines))
    return lines


async def _final_sample(sampler: Sampler) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=sampler.server.base_url, timeout=10) as client:
        return await sampler.sample(client)


def judge(samples: list[dict[str, Any]], total_s: float,
          keys_by_phase: dict[str, dict[str, int]], before: dict[str, int],
          tables: list[soak_calibrate.Table]) -> soak_verdict.Verdict:
    fills = soak_calibrate.expected_fill(tables, keys_by_phase["fresh"], before)
    explained = [(t.name, added, b) for t, added, b in fills]
    return soak_verdict.verdict(samples, total_s, keys_by_phase, explained)


def print_verdict(v: soak_verdict.Verdict, tables: list[soak_calibrate.Table]) -> None:
    print("bytes an entry, measured in this process with the service's code "
          "(bench/soak_calibrate.py):")
    for t in tables:
        print(f"  {t.bytes_per_entry:7.0f} B  {t.name} (bound {t.bound})")
    print()
    print("verdict:")
    for line in v.lines:
        print(f"  {line}")
    keyed = (("GROWS" if v.grows_with_keys else "does not grow") + " with distinct keys "
             "beyond the bounded tables") if v.steady else "growth with keys not judged"
    print(f"  => {'STEADY' if v.steady else 'NOT STEADY'} with known keys; {keyed}")


def rejudge(path: Path) -> int:
    """The table and verdict of a saved run (its soak.json), with this
    checkout's verdict rules and a fresh calibration."""
    saved = json.loads(path.read_text())
    by_phase = saved["keys_by_phase"]
    before = saved.get("keys_before") or {  # older files: the pool's keys, reused
        k: max(by_phase["warmup"].get(k, 0), by_phase["same"].get(k, 0))
        for k in set(by_phase["warmup"]) | set(by_phase["same"])}
    tables = soak_calibrate.calibrate()
    print(soak_verdict.table(saved["samples"]))
    print()
    print_verdict(judge(saved["samples"], saved["total_s"], by_phase, before, tables), tables)
    return 0


def report(samples: list[dict[str, Any]], total_s: float, keys: KeySpace, load: Load,
           out: Path, tables: list[soak_calibrate.Table]) -> dict[str, Any]:
    keys_by_phase = {ph: keys.distinct(ph) for ph in soak_verdict.PHASES}
    known = ("warmup", "same")  # the keys the bounded tables may hold already
    kinds = {k for p in known for k in keys.seen.get(p, {})}
    before = {k: len(set().union(*(keys.seen.get(p, {}).get(k, set()) for p in known)))
              for k in kinds}
    v = judge(samples, total_s, keys_by_phase, before, tables)
    stats = load.stats
    print()
    print(soak_verdict.table(samples))
    print()
    print(f"requests: {stats.requests} ({stats.requests / total_s:.0f}/s), "
          f"status classes {stats.status_classes()}, ops skipped (workers busy) {stats.skipped}, "
          f"mean latency {1000 * stats.latency_s / max(1, stats.requests):.1f} ms")
    by_op: dict[str, dict[int, int]] = {}
    for (op, status), n in sorted(stats.statuses.items()):
        by_op.setdefault(op, {})[status] = n
    print("by op: " + "; ".join(f"{op} {d}" for op, d in by_op.items()))
    for phase in soak_verdict.PHASES:
        print(f"distinct keys, {phase}: " + ", ".join(
            f"{k} {n}" for k, n in sorted(keys_by_phase[phase].items())))
    print("distinct keys, whole run: " + ", ".join(
        f"{k} {len(s)}" for k, s in sorted(keys.ever.items())))
    if stats.errors:
        print(f"client errors: {dict(stats.errors.most_common(10))}")
    if stats.unexpected:
        print("unexpected answers (first few):")
        for line in stats.unexpected[:10]:
            print(f"  {line}")
    print()
    print_verdict(v, tables)
    return {"samples": samples, "total_s": total_s, "keys_by_phase": keys_by_phase,
            "keys_before": before,
            "requests": stats.requests, "statuses": {f"{op} {s}": n for (op, s), n
                                                      in stats.statuses.items()},
            "skipped": stats.skipped, "errors": dict(stats.errors),
            "unexpected": stats.unexpected, "verdict": list(v.lines), "steady": v.steady,
            "grows_with_keys": v.grows_with_keys, "per_key_bytes": v.per_key_bytes,
            "unexplained_per_key": v.unexplained_per_key,
            "calibration": [attrs.asdict(t) for t in tables],
            "currencies_known": list(CURRENCIES)}


if __name__ == "__main__":
    sys.exit(main())
