"""Acknowledged events survive a crash: the real service process takes a
stream of event batches from several clients, is killed with SIGKILL in the
middle of it, restarts on the same data, and holds every acknowledged event
exactly once (the export, the dedup index and the analytics agree). Batches
that were in flight when it died are sent again, as the SDK would: each is
then stored exactly once too."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import httpx
import orjson
import pytest

from tests.deferred_helpers import SDK, init_body, new_install
from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e
ENV = {"SVC_RATE_LIMIT_PER_KEY": "0", "SVC_ACCESS_LOG": "0"}
SENDERS = 4
ACKED_BEFORE_KILL = 40  # batches


def batch_body(install: str, start_ms: int) -> bytes:
    when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(start_ms / 1000))
    events = [{"id": str(uuid.uuid4()), "name": f"e{i % 4}", "occurredAt": f"{when}.{i:03d}Z",
               "properties": {"i": i, "revenue": 1, "currency": "EUR"}} for i in range(100)]
    return orjson.dumps({"installId": install, "events": events})


class Stream:
    """Senders posting batches until the server dies; what was acknowledged."""

    def __init__(self, srv: ServerProcess, keys: dict[str, str], install: str) -> None:
        self.srv, self.keys, self.install = srv, keys, install
        self.acked: list[tuple[str, bytes]] = []  # (idempotency key, body)
        self.in_flight: list[tuple[str, bytes]] = []
        self.lock = threading.Lock()
        self.enough = threading.Event()

    def sender(self) -> None:
        headers = {"authorization": f"Bearer {self.keys['pk_test']}",
                   "content-type": "application/json", **SDK}
        with httpx.Client(base_url=self.srv.url, headers=headers, timeout=10) as c:
            while True:
                key, body = str(uuid.uuid4()), batch_body(self.install, int(time.time() * 1000))
                try:
                    r = c.post("/v1/sdk/events", content=body, headers={"idempotency-key": key})
                except httpx.HTTPError:
                    with self.lock:
                        self.in_flight.append((key, body))
                    return
                assert r.status_code == 200, r.text
                assert r.json() == {"accepted": 100, "duplicates": 0, "rejected": []}
                with self.lock:
                    self.acked.append((key, body))
                    if len(self.acked) >= ACKED_BEFORE_KILL:
                        self.enough.set()


def ids_of(body: bytes) -> list[str]:
    return [e["id"] for e in orjson.loads(body)["events"]]


def test_sigkill_during_a_stream_of_acknowledged_batches(
        server_factory: type[ServerProcess]) -> None:
    first = server_factory(env=ENV).start()
    keys: dict[str, str] = first.info["keys"]
    install = new_install()
    with first.client("pk_test", **SDK) as c:
        assert c.post("/v1/sdk/init", json=init_body(install, "android")).status_code == 200
    stream = Stream(first, keys, install)
    threads = [threading.Thread(target=stream.sender, daemon=True) for _ in range(SENDERS)]
    for t in threads:
        t.start()
    assert stream.enough.wait(60), "the server did not acknowledge enough batches"
    first.kill()  # SIGKILL while the senders are mid-request
    for t in threads:
        t.join(20)
        assert not t.is_alive()
    assert len(stream.acked) >= ACKED_BEFORE_KILL
    assert len(stream.in_flight) == SENDERS  # every sender was cut off mid-stream

    second = server_factory(env=ENV, bootstrap=False).start()
    second.info = {"keys": keys}
    acked_ids = [i for _, body in stream.acked for i in ids_of(body)]
    with second.client("pk_test", **SDK) as c:
        # an acknowledged batch sent again under a new key: all duplicates
        key, body = stream.acked[0]
        r = c.post("/v1/sdk/events", content=body, headers={"idempotency-key": "again"})
        assert r.json() == {"accepted": 0, "duplicates": 100, "rejected": []}
        # the same one under its own key: the stored answer, replayed
        r = c.post("/v1/sdk/events", content=body, headers={"idempotency-key": key})
        assert r.json() == {"accepted": 100, "duplicates": 0, "rejected": []}
        assert r.headers["idempotent-replayed"] == "true"
        # the batches cut off by the kill, retried as the SDK does: stored once
        retried_ids: list[str] = []
        for key, body in stream.in_flight:
            r = c.post("/v1/sdk/events", content=body, headers={"idempotency-key": key})
            assert r.status_code == 200 and r.json()["accepted"] in (0, 100)
            retried_ids += ids_of(body)
    with second.client("sk_test") as c:
        r = c.get("/v1/export/conversions", params={"from": "2000-01-01"})
        assert r.status_code == 200
        exported = [orjson.loads(line)["id"] for line in r.text.splitlines()]
        summary: dict[str, Any] = c.get("/v1/analytics/summary").json()
    assert len(exported) == len(set(exported))  # nothing twice
    assert set(exported) == set(acked_ids) | set(retried_ids)  # every acknowledged one, once
    assert len(acked_ids) == len(set(acked_ids))
    conversions = summary["conversions"]
    assert conversions["total"] == len(exported)  # counters committed with the events
    assert conversions["revenue"] == {"EUR": str(len(exported))}
    assert sum(conversions["byName"].values()) == len(exported)
    assert second.stop() == 0
