"""Crash safety: the real service under a mixed load is killed with SIGKILL at
random moments several times and restarted on the same data dir. Afterwards
every acknowledged write is present exactly once, no token or handoff was used
twice, and the store opens clean. ``make soak`` runs it longer (SVC_SOAK=1)."""

from __future__ import annotations

import http.server
import os
import random
import threading
import time
from collections import Counter

import cbor2
import pytest
import trio

from storage import layout
from storage.codec import decode
from storage.lmdb_store import LmdbStore
from svc_engine.settings import DeferredSettings
from tests.crash_load import Ledger, Worker
from tests.server_process import ServerProcess

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
SOAK = os.environ.get("SVC_SOAK") == "1"
ROUNDS = 12 if SOAK else 3
WORKERS = 6 if SOAK else 4
ENV = {"SVC_RATE_LIMIT_PER_KEY": "0", "SVC_RATE_LIMIT_PER_CLIENT": "0",
       "SVC_WEBHOOK_RETRY_SCALE": "0.001"}  # test only: retries in milliseconds
WAITING = ("Queued", "Sending", "Retrying")


class Receiver(http.server.ThreadingHTTPServer):
    """A webhook receiver on loopback that remembers every webhook-id it saw;
    it answers 500 to one request in five so retries happen too."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", "0")))
        wid = self.headers["webhook-id"]
        with self.server.lock:
            self.server.seen[wid] += 1
            fail = sum(self.server.seen.values()) % 5 == 0
        self.send_response(500 if fail else 200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_sigkill_under_mixed_load_loses_and_repeats_nothing(
        server_factory: type[ServerProcess]) -> None:
    seed = random.randrange(1 << 30)
    rng = random.Random(seed)
    print(f"crash-safety seed {seed}")
    receiver = Receiver()
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    srv = server_factory(env=ENV).start()
    keys, project_id = srv.info["keys"], srv.info["projectId"]
    with srv.client("sk_live") as c:
        c.patch("/v1/platforms", json={"android": {"packageName": "com.example.app"}})
        hook = c.post("/v1/webhooks/endpoints", json={
            "url": f"http://127.0.0.1:{receiver.server_address[1]}/hook",
            "events": ["install", "conversion", "open"]})
        assert hook.status_code == 201, hook.text
    ledger, stop, url = Ledger(), threading.Event(), [srv.url]
    workers = [Worker(ledger, keys, url, seed + i, stop, settings_writer=(i == 0))
               for i in range(WORKERS)]
    for w in workers:
        w.start()
    try:
        for _ in range(ROUNDS):
            time.sleep(rng.uniform(0.8, 2.5))
            srv.kill()  # mid-flight: requests are in every stage of handling
            info = srv.info
            srv = server_factory(srv.data_dir, bootstrap=False, env=ENV).start()
            srv.info = info
            url[0] = srv.url
        time.sleep(1.0)
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    # Let the last deliveries settle (retries run in milliseconds here).
    deadline = time.monotonic() + 30
    with srv.client("sk_live") as c:
        while time.monotonic() < deadline:
            waiting = [d for status in WAITING for d in c.get(
                "/v1/webhooks/deliveries", params={"status": status}).json()["data"]]
            if not waiting:
                break
            time.sleep(0.2)
    srv.stop()
    receiver.shutdown()
    receiver.server_close()
    assert not ledger.errors, ledger.errors[:5]
    assert ledger.links and ledger.installs and ledger.token_wins and ledger.events
    trio.run(_check, srv.data_dir, ledger, project_id, receiver)
    assert "Traceback" not in srv.logs()


async def _check(data_dir: str, ledger: Ledger, project_id: str, receiver: Receiver) -> None:
    store = LmdbStore(data_dir, map_size=1 << 30)
    try:
        scope = layout.scope(project_id, "live")
        with store.read() as txn:
            for link_id in ledger.links:
                assert txn.get(layout.uid(link_id), db=store.db(b"links")) is not None, link_id
            for install in ledger.installs:
                assert txn.get(scope + layout.uid(install), db=store.db(b"installs")), install
            stored_events: Counter[bytes] = Counter(
                bytes(k)[-16:] for k in txn.cursor(db=store.db(b"events")).iternext(
                    values=False) if bytes(k).startswith(scope))
            for event_id in ledger.events:
                assert stored_events[layout.uid(event_id)] == 1, event_id
            assert all(n == 1 for n in stored_events.values())
            if ledger.window_minutes is not None:
                raw = txn.get(layout.uid(project_id), db=store.db(b"settings"))
                assert raw is not None
                settings = decode(DeferredSettings, bytes(raw))
                assert settings.probabilistic_window_minutes == ledger.window_minutes
        # every delivery ended Delivered or Failed, under the id the receiver saw
        deliveries = [cbor2.loads(v) for _, v in store.scan(b"deliveries", b"")]
        assert deliveries, "the load produced webhook deliveries"
        for d in deliveries:
            assert d["status"] in ("Delivered", "Failed"), d["status"]
            if d["status"] == "Delivered":
                assert receiver.seen[d["id"]] >= 1, d["id"]
        assert set(receiver.seen) <= {d["id"] for d in deliveries}
        # single use held through every crash
        assert max(ledger.token_wins.values()) <= 1, ledger.token_wins
        assert any(ledger.token_wins.values())
        assert all(n <= 1 for n in ledger.claims.values()), ledger.claims
    finally:
        store.close()


def test_backup_during_load_holds_every_write_acknowledged_before_it(
        server_factory: type[ServerProcess], tmp_path: os.PathLike[str]) -> None:
    import copy
    import subprocess
    import sys

    srv = server_factory(env=ENV).start()
    keys, project_id = srv.info["keys"], srv.info["projectId"]
    ledger, stop, url = Ledger(), threading.Event(), [srv.url]
    workers = [Worker(ledger, keys, url, 7 + i, stop) for i in range(3)]
    for w in workers:
        w.start()
    try:
        time.sleep(1.5)
        with ledger.lock:  # everything acknowledged before the backup starts
            before = copy.deepcopy({"links": ledger.links, "installs": ledger.installs,
                                    "events": ledger.events})
        dest = os.path.join(str(tmp_path), "backup")
        done = subprocess.run([sys.executable, "-m", "web.cli", "backup", dest, "--data",
                               srv.data_dir], capture_output=True, text=True, timeout=60,
                              check=False)
        assert done.returncode == 0, done.stderr
        time.sleep(0.5)
    finally:
        stop.set()
        for w in workers:
            w.join(10)
    srv.stop()
    assert before["links"] and before["installs"]
    check = Ledger()
    check.links, check.installs, check.events = (before["links"], before["installs"],
                                                 before["events"])

    async def verify() -> None:
        store = LmdbStore(dest, map_size=1 << 30)
        try:
            scope = layout.scope(project_id, "live")
            with store.read() as txn:
                for link_id in check.links:
                    assert txn.get(layout.uid(link_id), db=store.db(b"links")) is not None
                for install in check.installs:
                    assert txn.get(scope + layout.uid(install), db=store.db(b"installs"))
                ids = {bytes(k)[-16:] for k in txn.cursor(db=store.db(b"events")).iternext(
                    values=False)}
                assert all(layout.uid(e) in ids for e in check.events)
        finally:
            store.close()

    trio.run(verify)
