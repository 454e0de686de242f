"""Signed webhook deliveries per second to a local receiver (standalone; prints JSON).

    .venv/bin/python -m bench.webhooks_bench [--events N] [--seconds S]
                                             [--concurrency C] [--tls]

Two numbers, each over a receiver in its own process that reads the body and
answers 204 (trio + h11, the sample receiver's HTTP part), pinned to CPU 0
while this process is pinned to CPU 1 when ``taskset`` and two CPUs exist:

- ``sender``: the outbound path alone: ``HttpSender.attempt`` (sign with
  Standard Webhooks v1, address guard, the trio + h11 client with its
  keep-alive pool, capped read) from C concurrent tasks for S seconds:
  attempts per second, latency and CPU per attempt.
- ``end_to_end``: the whole service in-process (real LMDB in a temp dir, the
  WebhookActor with its 32 senders, the dispatcher, the timer): N events are
  appended to the outbox in batches, as the redirector does, and the clock
  runs until every delivery is Delivered: deliveries per second, including
  fan-out, the state writes (Queued, then the result with the endpoint's
  health; a scheduled attempt's Sending is shown from memory, not written),
  and how many synced commits they took.

Plain http to 127.0.0.1 by default (like reading/perf-ceiling.md 2.5);
``--tls`` uses HTTPS with a trustme certificate, adding handshakes and crypto.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import ssl
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import trio

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = json.dumps({"id": "0b8e7d6c-5a4b-4c3d-8e2f-1a0b9c8d7e6f", "type": "click",
                   "createdAt": "2026-01-01T00:00:00.000Z",
                   "projectId": "6f1c3a52-8f7e-4c1b-9a55-0c2d3e4f5a6b", "env": "live",
                   "data": {"linkId": "9b9c8d7e-0000-4000-8000-000000000000",
                            "url": "https://svc.example/abc123", "domain": "svc.example",
                            "slug": "abc123", "campaign": "spring", "channel": "mail",
                            "platform": "ios", "country": "DE",
                            "referrerHost": "news.example", "clickedAt":
                                "2026-01-01T00:00:00.000Z"}}).encode()


# -- the receiver process ----------------------------------------------------------------

async def _sink(port_file: str, cert: str | None, key: str | None) -> None:
    from web.webhook_receiver import Received, Reply, serve_connection

    async def handle(req: Received) -> Reply:
        return 204, [], b""

    async def on_connection(stream: trio.abc.Stream) -> None:
        await serve_connection(stream, handle)

    if cert and key:
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        ctx.load_cert_chain(cert, key)
        listeners: Any = await trio.open_ssl_over_tcp_listeners(0, ctx, host="127.0.0.1")
        port = listeners[0].transport_listener.socket.getsockname()[1]
    else:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = listeners[0].socket.getsockname()[1]
    with open(port_file + ".tmp", "w") as f:
        f.write(str(port))
    os.replace(port_file + ".tmp", port_file)
    await trio.serve_listeners(on_connection, listeners)


def _pin(cpu: int) -> list[str]:
    if shutil.which("taskset") and (os.cpu_count() or 1) >= 2:
        return ["taskset", "-c", str(cpu)]
    return []


def _start_sink(workdir: str, tls: bool) -> tuple[subprocess.Popen[bytes], int, str | None]:
    cert = key = ca_path = None
    if tls:
        import trustme

        ca = trustme.CA()
        leaf = ca.issue_cert("localhost", "127.0.0.1")
        cert, key, ca_path = (os.path.join(workdir, n) for n in ("c.pem", "k.pem", "ca.pem"))
        leaf.cert_chain_pems[0].write_to_path(cert)
        leaf.private_key_pem.write_to_path(key)
        ca.cert_pem.write_to_path(ca_path)
    port_file = os.path.join(workdir, "port")
    args = [*_pin(0), sys.executable, "-m", "bench.webhooks_bench", "--sink", port_file]
    if cert and key:
        args += ["--cert", cert, "--key", key]
    proc = subprocess.Popen(args)
    deadline = time.monotonic() + 20
    while not os.path.exists(port_file):
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError("the receiver did not start")
        time.sleep(0.02)
    with open(port_file) as f:
        return proc, int(f.read()), ca_path


# -- the two measurements -------------------------------------------------------------------

async def _sender_only(url: str, ca_path: str | None, seconds: float,
                       concurrency: int) -> dict[str, Any]:
    from actors.clock import SystemClock
    from actors.webhook_sender import HttpSender, SendJob

    latencies: list[float] = []
    failures = 0
    async with HttpSender(SystemClock(), ca_bundle=ca_path) as sender:
        job = SendJob("msg_bench", "e", url, SECRET, "click", BODY)
        for _ in range(50):  # warm up: connections, TLS sessions
            await sender.attempt(job)
        end = time.perf_counter() + seconds
        cpu0 = time.process_time()

        async def worker() -> None:
            nonlocal failures
            while time.perf_counter() < end:
                t = time.perf_counter()
                report = await sender.attempt(job)
                latencies.append(time.perf_counter() - t)
                if report.status != 204:
                    failures += 1

        start = time.perf_counter()
        async with trio.open_nursery() as n:
            for _ in range(concurrency):
                n.start_soon(worker)
        wall = time.perf_counter() - start
        cpu = time.process_time() - cpu0
    latencies.sort()
    return {"posts_per_s": round(len(latencies) / wall),
            "p50_ms": round(statistics.median(latencies) * 1000, 2),
            "p99_ms": round(latencies[int(len(latencies) * 0.99)] * 1000, 2),
            "cpu_us_per_post": round(cpu / len(latencies) * 1e6), "attempts": len(latencies),
            "failed": failures, "concurrency": concurrency}


async def _end_to_end(url: str, ca_path: str | None, events: int) -> dict[str, Any]:
    from actors.clock import SystemClock
    from storage.lmdb_store import LmdbStore
    from svc_engine.config import Config
    from svc_engine.ids import new_id
    from svc_engine.keys import Mode
    from svc_engine.outbox import EventType, OutboxEvent
    from web import tenancy
    from web.assembly import start_services
    from web.services import system_random

    data = tempfile.mkdtemp(prefix="svc-webhooks-bench-")
    store = LmdbStore(data, map_size=1 << 30)
    clock = SystemClock()
    config = Config(data_dir=data, webhook_ca_bundle=ca_path, log_level="warning")
    try:
        async with trio.open_nursery() as root:
            await root.start(store.writer.run)
            info = await tenancy.bootstrap(store, config.base_url, system_random,
                                           clock.now_ms())
            project_id = str(info["projectId"])
            async with trio.open_nursery() as n:
                services = await start_services(n, config, store, clock, b"s" * 32)
                actor = services.webhooks
                assert actor is not None
                from actors import webhook_admin
                from svc_engine.webhook_endpoint import validate_endpoint

                await webhook_admin.create_endpoint(actor, project_id, Mode.LIVE,
                                                    validate_endpoint(url), None)
                payload = json.loads(BODY)["data"]
                commits0 = store.writer.statistics().batches
                start = time.perf_counter()
                cpu0 = time.process_time()
                for first in range(0, events, 256):
                    batch = [OutboxEvent(new_id(system_random(16)), EventType.CLICK,
                                         project_id, "live", clock.now_ms(), payload)
                             for _ in range(min(256, events - first))]

                    def append(txn: Any, batch: list[OutboxEvent] = batch) -> None:
                        for event in batch:
                            store.append_outbox(txn, event)

                    await store.write(append)
                    services.outbox_wakeup.notify()
                with trio.fail_after(600):
                    while actor.statistics().delivered < events:
                        await trio.sleep(0.01)
                wall = time.perf_counter() - start
                cpu = time.process_time() - cpu0
                commits = store.writer.statistics().batches - commits0
                stats = actor.statistics()
                n.cancel_scope.cancel()
            store.writer.close()
    finally:
        store.close()
        shutil.rmtree(data, ignore_errors=True)
    return {"deliveries_per_s": round(events / wall), "events": events,
            "seconds": round(wall, 2), "cpu_us_per_delivery": round(cpu / events * 1e6),
            "failed_attempts": stats.failed_attempts, "senders": 32, "commits": commits,
            "report_calls": stats.report_calls}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--events", type=int, default=5000)
    p.add_argument("--seconds", type=float, default=5.0)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--tls", action="store_true")
    p.add_argument("--sink", help=argparse.SUPPRESS)
    p.add_argument("--cert", help=argparse.SUPPRESS)
    p.add_argument("--key", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.sink:
        trio.run(_sink, args.sink, args.cert, args.key)
        return
    if _pin(1):
        os.sched_setaffinity(0, {1})
    with tempfile.TemporaryDirectory() as workdir:
        sink, port, ca_path = _start_sink(workdir, args.tls)
        try:
            url = f"{'https://localhost' if args.tls else 'http://127.0.0.1'}:{port}/hook"
            sender = trio.run(_sender_only, url, ca_path, args.seconds, args.concurrency)
            e2e = trio.run(_end_to_end, url, ca_path, args.events)
        finally:
            sink.kill()
            sink.wait(10)
    print(json.dumps({
        "benchmark": "webhooks", "tls": args.tls, "pinned": bool(_pin(1)),
        "python": platform.python_version(), "body_bytes": len(BODY),
        "sender": sender, "end_to_end": e2e}, indent=2))


if __name__ == "__main__":
    main()
