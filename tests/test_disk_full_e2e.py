"""A full disk, for real: the server runs with a file-size limit (RLIMIT_FSIZE,
which the kernel enforces on every write, as it does a full file system), so
its data file cannot grow past it. Writes then get 503 ``storage_unavailable``
with ``Retry-After``, reads and redirects go on, the log holds one traceback
a burst of failures (not one a request), and once the limit is lifted writes work again with nothing
lost, across a restart too."""

from __future__ import annotations

import http.server
import json
import resource
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, ClassVar

import httpx
import pytest

from tests.server_process import ServerProcess, scraped
from web.http import STORAGE_UNAVAILABLE

pytestmark = pytest.mark.e2e

TOKEN = "scrape-token-0123456789"
LIMIT = 12 << 20  # bytes any file of the server may reach; the store starts near 2 MiB
INF = resource.RLIM_INFINITY


def _file_size_limited(limit: int) -> tuple[str, ...]:
    """A command prefix that starts the server with a soft file-size limit (the
    hard one stays unlimited, so the test can lift it). Python ignores
    SIGXFSZ, so a write past the limit fails with EFBIG instead of killing."""
    script = ("import os, resource, sys; "
              f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, resource.RLIM_INFINITY)); "
              "os.execv(sys.argv[1], sys.argv[1:])")
    return (sys.executable, "-c", script)


def _events(n: int) -> list[dict[str, Any]]:
    return [{"id": str(uuid.uuid4()), "name": "purchase", "occurredAt": "2026-11-27T06:00:00Z",
             "properties": {"note": "x" * 400}} for _ in range(n)]


def test_a_full_disk_refuses_writes_with_503_and_loses_nothing(
        server_factory: type[ServerProcess]) -> None:
    srv = server_factory(env={"SVC_METRICS_TOKEN": TOKEN, "SVC_RATE_LIMIT_PER_KEY": "0",
                              "SVC_RATE_LIMIT_PER_CLIENT": "0"},
                         wrap=_file_size_limited(LIMIT)).start()
    assert srv.proc is not None
    install = str(uuid.uuid4())
    with srv.client("pk_test") as sdk, srv.client("sk_test") as server:
        link = server.post("/v1/links", json={"path": "/before", "slug": "before"},
                           headers={"idempotency-key": "link-before"})
        assert link.status_code == 201
        assert sdk.post("/v1/sdk/init", headers={"idempotency-key": "init-1"}, json={
            "installId": install, "isFirstLaunch": True, "sdkVersion": "1.0.0",
            "platform": "android"}).status_code == 200

        accepted = 0
        refused = None
        for i in range(200):  # ~50 KB a batch: the limit is reached well before the end
            body = {"installId": install, "events": _events(100)}
            r = sdk.post("/v1/sdk/events", headers={"idempotency-key": f"fill-{i}"}, json=body)
            if r.status_code != 200:
                refused = (i, r, body)
                break
            accepted += r.json()["accepted"]
        assert refused is not None, "the data file never reached its size limit"
        i, r, body = refused
        assert accepted > 0
        assert r.status_code == 503, r.text
        assert r.headers["retry-after"] == "5"
        assert r.json() == {"error": {"code": "storage_unavailable",
                                      "message": STORAGE_UNAVAILABLE}}

        # more writes that need room are refused the same way. One may still fit
        # now and then in pages the store had freed (CI saw one do so): it is
        # stored, ends that burst of failures and the next refusal starts
        # another. Room is not made anew, so refusals soon come in a row.
        statuses = [503]
        in_a_row = 0
        for j in range(60):
            during = sdk.post("/v1/sdk/events", headers={"idempotency-key": f"during-{j}"},
                              json={"installId": install, "events": _events(100)})
            assert during.status_code in (200, 503), during.text
            if during.status_code == 503:
                assert during.headers["retry-after"] == "5"
                assert during.json()["error"]["code"] == "storage_unavailable"
            statuses.append(during.status_code)
            in_a_row = in_a_row + 1 if during.status_code == 503 else 0
            if in_a_row == 10:
                break
        assert in_a_row == 10, statuses
        bursts = sum(1 for k, s in enumerate(statuses)
                     if s == 503 and (k == 0 or statuses[k - 1] == 200))
        assert server.get(f"/v1/links/{link.json()['id']}").status_code == 200
        redirect = httpx.get(f"{srv.url}/before", follow_redirects=False)
        assert redirect.status_code in (200, 302), redirect.status_code
        assert scraped(srv.url, TOKEN, "svc_store_failed_commits") >= statuses.count(503)
        logs = srv.logs()
        # one traceback a burst, not one a request; a burst that starts within 10 s of
        # the last one's end continues it (storage/writer.py FailureLog): no traceback
        tracebacks = logs.count("a commit failed, so the store takes no writes")
        assert 1 <= tracebacks <= bursts, statuses
        assert logs.count("Traceback") == tracebacks
        assert "StorageUnavailable on" not in logs  # and no error line a request

        # room again: the SDK's retry of the refused batch (same key, same
        # events) is stored whole: the refusal had stored none of it
        resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE, (INF, INF))
        retry = sdk.post("/v1/sdk/events", headers={"idempotency-key": f"fill-{i}"}, json=body)
        assert retry.status_code == 200, retry.text
        assert retry.json() == {"accepted": 100, "duplicates": 0, "rejected": []}
        after = server.post("/v1/links", json={"path": "/after", "slug": "after"},
                            headers={"idempotency-key": "link-after"})
        assert after.status_code == 201, after.text
        assert "commits succeed again" in srv.logs()

    assert srv.stop() == 0
    again = server_factory(srv.data_dir, env={"SVC_METRICS_TOKEN": TOKEN},
                           bootstrap=False).start()
    again.info = srv.info
    with again.client("sk_test") as server:
        for slug in ("before", "after"):
            r = server.get("/v1/links", params={"q": slug})
            assert r.status_code == 200
            assert any(x["slug"] == slug for x in r.json()["data"]), (slug, r.text[:300])
    with again.client("pk_test") as sdk:  # the retry's answer was kept, byte for byte
        replay = sdk.post("/v1/sdk/events", headers={"idempotency-key": f"fill-{i}"}, json=body)
        assert replay.status_code == 200
        assert replay.content == retry.content


class _Hooks(http.server.BaseHTTPRequestHandler):
    """A webhook receiver on loopback: answers 204 and keeps each body's event id."""

    seen: ClassVar[list[str]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["content-length"]))
        self.seen.append(json.loads(body)["data"]["eventId"])
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass


def _until(check: Callable[[], bool], seconds: float, what: str) -> None:
    """Wait (polling a real process's state) until ``check`` holds."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_a_full_disk_with_a_webhook_endpoint_keeps_serving_and_sends_every_event(
        server_factory: type[ServerProcess]) -> None:
    """Events for an endpoint fill the disk: a dispatch the store refuses
    (its deliveries need more room than the events did) leaves the events in
    the outbox and the service serving; once there is room, every accepted
    event reaches the receiver once."""
    _Hooks.seen = []
    receiver = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hooks)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    srv = server_factory(env={"SVC_RATE_LIMIT_PER_KEY": "0", "SVC_RATE_LIMIT_PER_CLIENT": "0"},
                         wrap=_file_size_limited(LIMIT)).start()
    assert srv.proc is not None
    install = str(uuid.uuid4())
    accepted: list[str] = []
    try:
        with srv.client("pk_test") as sdk, srv.client("sk_test") as server:
            made = server.post("/v1/webhooks/endpoints", json={
                "url": f"http://127.0.0.1:{receiver.server_address[1]}/hook",
                "events": ["conversion"]})
            assert made.status_code == 201, made.text
            assert sdk.post("/v1/sdk/init", json={
                "installId": install, "isFirstLaunch": True, "sdkVersion": "1.0.0",
                "platform": "android"}).status_code == 200
            refused_in_a_row = 0
            for i in range(400):
                events = _events(100)
                r = sdk.post("/v1/sdk/events", headers={"idempotency-key": f"fill-{i}"},
                             json={"installId": install, "events": events})
                assert r.status_code in (200, 503), r.text
                if r.status_code == 200:
                    accepted += [e["id"] for e in events]
                    refused_in_a_row = 0
                else:
                    refused_in_a_row += 1
                    if refused_in_a_row == 10:
                        break
            assert refused_in_a_row == 10, "the data file never reached its size limit"
            _until(lambda: "the store cannot write" in srv.logs(), 10,
                   "no dispatch was refused")
            assert srv.proc.poll() is None, srv.logs()[-2000:]  # still serving
            assert sdk.get("/healthz").status_code == 200
            resource.prlimit(srv.proc.pid, resource.RLIMIT_FSIZE, (INF, INF))
            _until(lambda: len(set(_Hooks.seen)) >= len(accepted), 60,
                   "not every accepted event was delivered")
        assert sorted(set(_Hooks.seen)) == sorted(accepted)
        assert "the store writes again" in srv.logs()
    finally:
        receiver.shutdown()
        receiver.server_close()
        if srv.proc.poll() is None:
            assert srv.stop() == 0
