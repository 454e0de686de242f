"""``svc webhooks listen``: the sample receiver, as a real process on a real port.
It verifies each request (5-minute tolerance, any v1 entry, raw body), prints
the event as one JSON line and answers 401 to a bad signature or timestamp."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import trio

from actors.clock import SystemClock
from storage.lmdb_store import LmdbStore
from svc_engine import signing
from tests.conftest import running_app
from tests.webhook_receiver_fixture import add_endpoint, emit, make_ca, webhook_config

pytestmark = pytest.mark.e2e

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
OTHER = "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD"
ROOT = Path(__file__).resolve().parent.parent


class Listener:
    def __init__(self, proc: subprocess.Popen[str], url: str) -> None:
        self.proc = proc
        self.url = url

    def line(self) -> dict[str, object]:
        assert self.proc.stdout is not None
        value: dict[str, object] = json.loads(self.proc.stdout.readline())
        return value


@contextmanager
def _start(secret: str) -> Iterator[Listener]:
    proc = subprocess.Popen([sys.executable, "-m", "web.cli", "webhooks", "listen",
                             "--secret", secret, "--port", "0"], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        m = re.search(r"listening on (http://\S+)", first)
        assert m, first
        yield Listener(proc, m.group(1))
    finally:
        proc.kill()
        proc.communicate(timeout=10)


@pytest.fixture
def listener() -> Iterator[Listener]:
    with _start(SECRET) as started:
        yield started


def _post(url: str, body: bytes, headers: dict[str, str]) -> httpx.Response:
    return httpx.post(url + "/hook", content=body, headers=headers, timeout=10)


def test_verified_delivery_is_printed_and_answered_200(listener: Listener) -> None:
    # Verified over the raw bytes as sent (SPEC: before parsing), which no
    # re-encoding of the parsed JSON gives back: spaces, UTF-8 text.
    body = '{"id": "e-1", "type": "conversion", "data": {"name": "café"}}'.encode()
    now = int(time.time())
    headers = signing.build_headers([OTHER, SECRET], "msg_1", now, body, "click")
    r = _post(listener.url, body, headers)
    assert r.status_code == 200
    assert listener.line() == {"webhookId": "msg_1", "timestamp": now,
                               "event": json.loads(body)}


@pytest.mark.parametrize("change,reason", [
    ("secret", "no_matching_signature"),
    ("body", "no_matching_signature"),
    ("old", "timestamp_too_old"),
    ("new", "timestamp_too_new"),
    ("missing", "missing_header"),
])
def test_bad_signature_or_timestamp_is_401(listener: Listener, change: str,
                                           reason: str) -> None:
    body = b'{"a":1}'
    now = int(time.time())
    stamp = {"old": now - 400, "new": now + 400}.get(change, now)
    headers = signing.build_headers(OTHER if change == "secret" else SECRET, "msg_2", stamp,
                                    body, "open")
    if change == "missing":
        del headers["webhook-signature"]
    r = _post(listener.url, b'{"a":2}' if change == "body" else body, headers)
    assert r.status_code == 401 and r.json()["error"] == reason
    # Within the 5-minute tolerance either way is accepted.
    ok = signing.build_headers(SECRET, "msg_3", now - 290, body, "open")
    assert _post(listener.url, body, ok).status_code == 200


def test_a_taken_port_is_one_line_not_a_traceback() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "web.cli", "webhooks", "listen", "--secret",
                               SECRET, "--port", str(port)], capture_output=True, text=True,
                              timeout=60)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        f"svc: cannot listen on 127.0.0.1:{port}: Address already in use (choose another --port)"]


def test_only_post_is_accepted(listener: Listener) -> None:
    assert httpx.get(listener.url + "/hook", timeout=10).status_code == 405


def test_a_bad_secret_is_refused_at_start() -> None:
    out = subprocess.run([sys.executable, "-m", "web.cli", "webhooks", "listen",
                          "--secret", "whsec_short", "--port", "0"], cwd=ROOT,
                         capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2 and "validation_error" in out.stderr


async def test_the_service_delivers_to_the_listener(store: LmdbStore, data_dir: str,
                                                    tmp_path: Path) -> None:
    clock = SystemClock()  # the listener checks timestamps against the real clock
    async with running_app(store, webhook_config(data_dir, make_ca(tmp_path)[1]),
                           clock) as app:
        endpoint = await add_endpoint(app, "http://127.0.0.1:9/placeholder")
        with _start(endpoint["secret"]) as listener:
            async with app.client("sk_test") as c:
                r = await c.patch(f"/v1/webhooks/endpoints/{endpoint['id']}",
                                  json={"url": listener.url + "/hook"})
                assert r.status_code == 200
            event = await emit(app, "conversion", data={"name": "signup"})
            line = await trio.to_thread.run_sync(listener.line)
    assert line["event"] == {"id": event.id, "type": "conversion",
                             "createdAt": line["event"]["createdAt"],  # type: ignore[index]
                             "projectId": app.project_id, "env": "test",
                             "data": {"name": "signup"}}
