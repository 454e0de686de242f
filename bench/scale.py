"""The service on a big store: ``python -m bench.scale [--lite | --quick] [--keep]``.

1. Build: a data dir with L links and C clicks (full: 1,000,000 and
   10,000,000; ``--lite``, which ``make bench`` runs: 100,000 and 500,000;
   ``--quick``: 20,000 and 200,000), written with the service's own storage
   code in large transactions (``bench/bulk_data.py``), the clicks in time
   order over 30 days, most of them on a few popular links. Reported: build
   rates, ``data.mdb`` size (apparent and on disk) and entries per database.
2. Ready to serve after a restart: ``svc serve`` started on that data dir
   (pinned to CPU 1 when possible), timed from the spawn to the first
   ``/healthz`` answer and to the first redirect of a stored link; three
   starts each on the big store and on an empty one, medians reported. The
   page cache is warm (the store was just written), as after a process
   restart, not a machine reboot.
3. Redirect latency on the big store: the harness's ``redirect-desktop``
   measurement (wrk at c32, then c1; full phases at full scale, quick phases
   otherwise) over 10,000 slugs drawn at random from all the links.

Nothing is extrapolated: each scale reports what it measured. The data dir
(several GB at full scale) is deleted afterwards unless ``--keep``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import shlex
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import attrs
import httpx

from bench import bulk_data, report_sections
from bench.harness import FULL as FULL_PROFILE
from bench.harness import OUT_DIR, ensure_wrk, measure_target, plan_pinning
from bench.harness import QUICK as QUICK_PROFILE
from bench.server import free_port, start_server, stop_server
from bench.service_targets import DESKTOP_UA
from bench.target import Target
from storage.lmdb_store import LmdbStore

BENCH_DIR = Path(__file__).resolve().parent
REPO_ROOT = BENCH_DIR.parent
PUBLIC_URL = "http://bench.svc.test"
DOMAIN = "bench.svc.test"
SIZES = {"full": (1_000_000, 10_000_000), "lite": (100_000, 500_000),
         "quick": (20_000, 200_000)}
DAY_MS = 86_400_000
ENV = {"SVC_PUBLIC_URL": PUBLIC_URL, "SVC_RATE_LIMIT_PER_KEY": "0",
       "SVC_MAX_LAG_MS": "0", "SVC_RATE_LIMIT_PER_CLIENT": "0"}  # the default map
STARTS = 3
SAMPLE_SLUGS = 10_000


def section_for(size: str) -> str:
    return "scale" if size == "full" else "scale_lite"


def build(data: Path, links: int, clicks: int, seed: int = 7) -> tuple[dict[str, object],
                                                                        list[str]]:
    """Fill ``data``; returns the build figures and a sample of slugs."""
    rng = random.Random(seed)
    store = LmdbStore(str(data))  # the service's default map, as a fresh install has
    try:
        t0 = time.perf_counter()
        tenant = bulk_data.bootstrap(store, PUBLIC_URL)
        t1 = time.perf_counter()
        made = bulk_data.write_links(store, tenant, DOMAIN, links, rng)
        t2 = time.perf_counter()
        now = bulk_data._now()
        bulk_data.write_clicks(store, made, clicks, rng, start_ms=now - 30 * DAY_MS,
                               span_ms=30 * DAY_MS)
        t3 = time.perf_counter()
        entries = {}
        with store.env.begin() as txn:
            for name in (b"links", b"slugs", b"links_by_project", b"clicks", b"counters"):
                entries[name.decode()] = int(txn.stat(store.db(name))["entries"])
        sample = [made[rng.randrange(len(made))].slug for _ in range(SAMPLE_SLUGS)]
    finally:
        store.close()
    st = os.stat(data / "data.mdb")
    return {"links": links, "clicks": clicks, "bootstrap_s": t1 - t0, "links_s": t2 - t1,
            "clicks_s": t3 - t2, "links_per_s": links / (t2 - t1),
            "clicks_per_s": clicks / (t3 - t2), "data_mdb_bytes": st.st_size,
            "data_mdb_disk_bytes": st.st_blocks * 512, "entries": entries}, sample


def time_start(data: Path, workdir: Path, slug: str | None, cpus: str | None,
               label: str) -> dict[str, float | None]:
    """Seconds from spawning ``svc serve`` to its first /healthz answer and (with
    ``slug``) to its first redirect."""
    port = free_port()
    spawned = time.perf_counter()
    server = start_server([sys.executable, "-m", "web.cli", "serve", "--port", str(port),
                           "--data", str(data)], port=port, cwd=REPO_ROOT, env=ENV,
                          cpus=cpus, log_path=workdir / f"start-{label}.log")
    health = redirect = None
    try:
        with httpx.Client(base_url=server.base_url, timeout=5, headers={
                "user-agent": DESKTOP_UA}) as c:
            deadline = spawned + 60
            while time.perf_counter() < deadline and server.process.poll() is None:
                try:
                    if c.get("/healthz").status_code == 200:
                        health = time.perf_counter() - spawned
                        break
                except httpx.TransportError:
                    time.sleep(0.005)
            if health is not None and slug is not None:
                r = c.get(f"/{slug}")
                if r.status_code == 302:
                    redirect = time.perf_counter() - spawned
    finally:
        stop_server(server)
    return {"healthz_s": health, "first_redirect_s": redirect}


def starts(data: Path, workdir: Path, slug: str | None, cpus: str | None,
           label: str) -> dict[str, object]:
    runs = [time_start(data, workdir, slug, cpus, f"{label}-{i}") for i in range(STARTS)]

    def median(key: str) -> float | None:
        values = [v for r in runs if (v := r[key]) is not None]
        return statistics.median(values) if len(values) == len(runs) else None

    return {"runs": runs, "healthz_s": median("healthz_s"),
            "first_redirect_s": median("first_redirect_s")}


def redirect_load(data: Path, sample: list[str], quick: bool, size: str) -> dict[str, object]:
    def prepare(base_url: str, workdir: Path) -> None:
        (workdir / "slugs.txt").write_text("".join(f"/{s}\n" for s in sample))

    target = Target(name=f"scale-redirect-{size}",
                    description="GET /<slug> on the big store, desktop, click recorded",
                    server=("{python}", "-m", "web.cli", "serve", "--port", "{port}",
                            "--data", str(data)),
                    env=tuple(ENV.items()), ready_path="/healthz",
                    paths_file="{workdir}/slugs.txt",
                    headers=(("user-agent", DESKTOP_UA), ("cf-ipcountry", "SE")),
                    prepare=prepare)
    # one path on its own: no paired baseline
    profile = attrs.evolve(QUICK_PROFILE if quick else FULL_PROFILE, paired_s=0)
    result = measure_target(target, profile, plan_pinning())
    out: dict[str, object] = {"profile": profile.describe()}
    for name in ("loaded", "unloaded"):
        phase = getattr(result, name)
        out[name] = {"connections": phase.connections, "rps": phase.load.rps,
                     "p50_ms": phase.load.p50_ms, "p99_ms": phase.load.p99_ms,
                     "errors": phase.load.errors, "cpu_us_per_request": phase.cpu_us_per_request,
                     "other_load": phase.other_load}
    return out


def run(size: str, *, keep: bool = False, command: str = "") -> dict[str, object]:
    ensure_wrk()
    links, clicks = SIZES[size]
    workdir = OUT_DIR / f"scale-{size}"
    if workdir.exists():
        shutil.rmtree(workdir)
    data, empty = workdir / "data", workdir / "empty"
    data.mkdir(parents=True)
    started = time.monotonic()
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    built, sample = build(data, links, clicks)
    pinning = plan_pinning()
    cpus = "1" if pinning.enabled else None
    big = starts(data, workdir, sample[0], cpus, "big")
    LmdbStore(str(empty)).close()
    small = starts(empty, workdir, None, cpus, "empty")
    latency = redirect_load(data, sample, size != "full", size)
    if not keep:
        shutil.rmtree(data, ignore_errors=True)
    return {"started_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "command": command, "size": size, "load_average": load, "pinning": pinning.note,
            "build": built, "start_big": big, "start_empty": small, "redirect": latency,
            "elapsed_s": time.monotonic() - started}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.scale",
                                     description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--lite", action="store_true", help="100k links, 500k clicks")
    group.add_argument("--quick", action="store_true", help="20k links, 200k clicks")
    parser.add_argument("--keep", action="store_true", help="keep the data dir")
    parser.add_argument("--readme", type=Path, default=BENCH_DIR / "README.md")
    parser.add_argument("--no-readme", action="store_true")
    args = parser.parse_args(argv)
    size = "lite" if args.lite else "quick" if args.quick else "full"
    given = sys.argv[1:] if argv is None else list(argv)
    data = run(size, keep=args.keep,
               command=shlex.join([".venv/bin/python", "-m", "bench.scale", *given]))
    out = OUT_DIR / f"scale-{size}.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    section = section_for(size)
    text = report_sections.render(section, data)
    if not args.no_readme:
        report_sections.update_readme(args.readme, {section: text})
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
