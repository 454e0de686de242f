"""Memory held by the service: ``python -m bench.memory [--quick]``.

RSS of ``svc serve`` (from ``/proc/<pid>/status``: anonymous memory, which
is the process's own heap, and file-backed pages, mostly LMDB's memory map)
in two experiments, each on a data dir filled beforehand with the service's
own storage code (``bench/bulk_data.py``):

- per active project: 1,000 projects (quick: 100); RSS after one SDK init on
  the first project (its ProjectActor starts), then after one init on every
  project (1,000 actors, their caches), then after a second round.
  Per project = (RSS after all - RSS after one) / (projects - 1).
- per click-window entry: the same app with 0 and with 100,000 (quick:
  10,000) iPhone taps in its probabilistic window; RSS after start, then after
  three iOS first launches (each reads its candidate taps), with their latency.
  Per entry = (RSS with entries - RSS without) / entries.

The server is pinned to CPU 1 when possible; rate limits are off.
"""

from __future__ import annotations

import argparse
import datetime
import json
import random
import shlex
import shutil
import sys
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx
import trio

from bench import bulk_data, report_sections
from bench.harness import OUT_DIR, plan_pinning
from bench.server import RunningServer, free_port, start_server, stop_server, wait_ready
from storage.lmdb_store import LmdbStore
from svc_engine.settings import DeferredSettings

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
PUBLIC_URL = "http://bench.svc.test"
ENV = {"SVC_PUBLIC_URL": PUBLIC_URL, "SVC_RATE_LIMIT_PER_KEY": "0",
       "SVC_MAX_LAG_MS": "0", "SVC_RATE_LIMIT_PER_CLIENT": "0",
       "SVC_COUNTRY_HEADER": "CF-IPCountry"}
SDK = {"x-svc-sdk": "flutter/0.2.0", "content-type": "application/json"}
SIZES = {"full": (1000, 100_000), "quick": (100, 10_000)}
LAUNCHES = 3
WINDOW_SPAN_MS = 100 * 60_000


def rss(pid: int) -> dict[str, int]:
    """VmRSS, RssAnon, RssFile and RssShmem of ``pid`` in bytes."""
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
            out[key] = int(value.split()[0]) * 1024
    return out


def _serve(data: Path, workdir: Path, label: str, cpus: str | None) -> RunningServer:
    port = free_port()
    server = start_server([sys.executable, "-m", "web.cli", "serve", "--port", str(port),
                           "--data", str(data)], port=port, cwd=REPO_ROOT, env=ENV,
                          cpus=cpus, log_path=workdir / f"server-{label}.log")
    wait_ready(server, "/healthz", timeout_s=60)
    return server


def _init_body(platform: str) -> dict[str, object]:
    return {"installId": str(uuid.uuid4()), "isFirstLaunch": True, "sdkVersion": "0.2.0",
            "platform": platform, "osVersion": "26.1" if platform == "ios" else "14"}


def _settle() -> None:
    time.sleep(0.5)


def projects_experiment(workdir: Path, count: int, cpus: str | None) -> dict[str, object]:
    data = workdir / "projects"
    store = LmdbStore(str(data))
    try:
        first = bulk_data.bootstrap(store, PUBLIC_URL)
        tenants = [first, *bulk_data.create_projects(store, first.org_id, count - 1)]
    finally:
        store.close()
    server = _serve(data, workdir, "projects", cpus)
    try:
        started = rss(server.pid)

        async def init_all(batch: list[bulk_data.Tenant]) -> None:
            async with httpx.AsyncClient(base_url=server.base_url, timeout=30) as c:
                async def worker(first: int) -> None:
                    for t in batch[first::16]:
                        r = await c.post("/v1/sdk/init", json=_init_body("android"), headers={
                            **SDK, "authorization": f"Bearer {t.keys['pk_live']}"})
                        r.raise_for_status()

                async with trio.open_nursery() as n:
                    for i in range(min(16, len(batch))):
                        n.start_soon(worker, i)

        trio.run(init_all, tenants[:1])
        _settle()
        one = rss(server.pid)
        t0 = time.perf_counter()
        trio.run(init_all, tenants[1:])
        first_round = time.perf_counter() - t0
        _settle()
        every = rss(server.pid)
        trio.run(init_all, tenants)
        _settle()
        again = rss(server.pid)
    finally:
        stop_server(server)
        shutil.rmtree(data, ignore_errors=True)
    per = {k: (every[k] - one[k]) / (count - 1) for k in one}
    return {"projects": count, "rss_started": started, "rss_one_active": one,
            "rss_all_active": every, "rss_second_round": again,
            "first_round_s": first_round, "per_project_bytes": per}


def window_experiment(workdir: Path, entries: int, cpus: str | None) -> dict[str, object]:
    settings = DeferredSettings(probabilistic_matching=True)
    results: dict[str, dict[str, Any]] = {}
    for label, n in (("without", 0), ("with", entries)):
        data = workdir / f"window-{label}"
        store = LmdbStore(str(data))
        try:
            tenant = bulk_data.bootstrap(store, PUBLIC_URL, settings)
            links = bulk_data.write_links(store, tenant, "bench.svc.test", 1000,
                                          random.Random(3))
            t0 = time.perf_counter()
            if n:
                bulk_data.write_clicks(store, links, n, random.Random(5),
                                       start_ms=bulk_data._now() - WINDOW_SPAN_MS,
                                       span_ms=WINDOW_SPAN_MS, window=True)
            written_s = time.perf_counter() - t0
        finally:
            store.close()
        server = _serve(data, workdir, f"window-{label}", cpus)
        try:
            _settle()
            idle = rss(server.pid)
            latencies = []
            with httpx.Client(base_url=server.base_url, timeout=120, headers={
                    **SDK, "authorization": f"Bearer {tenant.keys['pk_live']}",
                    "cf-ipcountry": "SE"}) as c:
                for _ in range(LAUNCHES):
                    t = time.perf_counter()
                    c.post("/v1/sdk/init", json=_init_body("ios")).raise_for_status()
                    latencies.append(time.perf_counter() - t)
            _settle()
            after = rss(server.pid)
        finally:
            stop_server(server)
            shutil.rmtree(data, ignore_errors=True)
        results[label] = {"entries": n, "write_s": written_s, "rss_idle": idle,
                          "rss_after_launches": after, "launch_s": latencies}
    per_idle = {k: (results["with"]["rss_idle"][k] - results["without"]["rss_idle"][k])
                / entries for k in results["with"]["rss_idle"]}
    per_after = {k: (results["with"]["rss_after_launches"][k]
                     - results["without"]["rss_after_launches"][k]) / entries
                 for k in results["with"]["rss_after_launches"]}
    return {"entries": entries, "launches": LAUNCHES, "runs": results,
            "per_entry_idle_bytes": per_idle, "per_entry_after_launch_bytes": per_after}


def run(*, quick: bool, command: str = "") -> dict[str, object]:
    projects, entries = SIZES["quick" if quick else "full"]
    workdir = OUT_DIR / "memory"
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    pinning = plan_pinning()
    cpus = "1" if pinning.enabled else None
    started = time.monotonic()
    return {"started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command, "pinning": pinning.note,
            "projects": projects_experiment(workdir, projects, cpus),
            "window": window_experiment(workdir, entries, cpus),
            "elapsed_s": time.monotonic() - started}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.memory",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100 projects, 10k entries")
    parser.add_argument("--readme", type=Path, default=BENCH_DIR / "README.md")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    data = run(quick=args.quick,
               command=shlex.join([".venv/bin/python", "-m", "bench.memory", *given]))
    (OUT_DIR / "memory.json").write_text(json.dumps(data, indent=2) + "\n")
    text = report_sections.render("memory", data)
    if not args.no_readme:
        report_sections.update_readme(args.readme, {"memory": text})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
