"""Hostile clients against the real process: huge headers, slow clients,
connection floods, oversized and malformed bodies, bad Host and Authorization
headers. Each gets a clean 4xx or a closed connection; the service keeps
serving everyone else."""

from __future__ import annotations

import os
import socket
import ssl
import time
from typing import Any

import httpx
import pytest
import trustme

from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e


def _port(srv: ServerProcess) -> int:
    return int(srv.url.rsplit(":", 1)[1])


def _raw(srv: ServerProcess, payload: bytes, *, wait: float = 3.0) -> bytes:
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=wait) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
        except TimeoutError:
            pass
    return b"".join(chunks)


def _healthy(srv: ServerProcess, within: float = 3) -> None:
    """/healthz answers 200 within ``within`` seconds (asked again and again:
    each answer paces the next question, nothing sleeps)."""
    deadline = time.monotonic() + within
    with srv.client() as c:
        while True:
            status = c.get("/healthz").status_code
            if status == 200 or time.monotonic() > deadline:
                break
    assert status == 200


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """One server for the tests that change nothing lasting."""
    base = tmp_path_factory.mktemp("hostile")
    srv = ServerProcess(str(base / "data"), log_dir=str(base)).start()
    yield srv
    srv.kill()


def test_huge_headers_are_refused(shared: ServerProcess) -> None:
    srv = shared
    big = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    answer = _raw(srv, big)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 4")
    _healthy(srv)


@pytest.mark.parametrize("auth", ["Bearer " + "x" * 10_000, "Bearer sk_test_\x00\x01",
                                  "Bearer pk_test_" + "é" * 32, "Digest abc"])
def test_malformed_authorization(shared: ServerProcess, auth: str) -> None:
    srv = shared
    request = (b"GET /v1/deferred/settings HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
               b"Authorization: "
               + auth.encode("utf-8") + b"\r\n\r\n")
    answer = _raw(srv, request)
    assert answer.startswith((b"HTTP/1.1 400", b"HTTP/1.1 401")) or answer == b""
    _healthy(srv)


@pytest.mark.parametrize("host", [b"", b"\xff\xfe", b"a" * 5000, b"evil.example:99999",
                                  b"[::1", b"x y", b":", b":80", b".", b"..:1", b"a" * 600])
def test_odd_host_headers(shared: ServerProcess, host: bytes) -> None:
    """A host that is no name (``Host: :80`` is empty once its port is cut:
    LMDB refused the empty key, a 500) falls back to the default domain, on
    taps and on the association files."""
    srv = shared
    for path in (b"/someslug", b"/.well-known/assetlinks.json",
                 b"/.well-known/apple-app-site-association"):
        answer = _raw(srv, b"GET " + path + b" HTTP/1.1\r\nConnection: close\r\nHost: "
                      + host + b"\r\n\r\n")
        assert answer == b"" or answer.split(b" ")[1][:1] in (b"2", b"4"), (path, answer[:80])
    _healthy(srv)
    assert "unhandled error" not in srv.logs()


def test_invalid_utf8_and_bad_idempotency_keys(shared: ServerProcess) -> None:
    srv = shared
    with srv.client("sk_test") as c:
        r = c.patch("/v1/deferred/settings", content=b'{"iosLandingPage": "\xff"}')
        assert r.status_code == 400
        r = c.patch("/v1/deferred/settings", json={}, headers={"idempotency-key": "a b"})
        assert r.status_code == 400
        r = c.patch("/v1/deferred/settings", json={},
                    headers={"idempotency-key": "k" * 256})
        assert r.status_code == 400
        r = c.post("/v1/sdk/links", content=b"[" * 200_000)
        assert r.status_code in (400, 403)
    _healthy(srv)


def test_slow_body_gets_408_and_others_are_served(server_factory: type[ServerProcess]) -> None:
    srv = server_factory(env={"SVC_BODY_TIMEOUT": "1"}).start()
    key = srv.info["keys"]["sk_test"]
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=5) as s:
        s.sendall(b"PATCH /v1/deferred/settings HTTP/1.1\r\nHost: x\r\n"
                  b"Authorization: Bearer " + key.encode() + b"\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        _healthy(srv)  # the slow client blocks nobody
        answer = b""
        while b"request_timeout" not in answer:
            data = s.recv(65536)
            if not data:
                break
            answer += data
    assert answer.startswith(b"HTTP/1.1 408"), answer[:60]
    assert b"request_timeout" in answer


def test_slow_bodies_do_not_fill_the_in_flight_cap(server_factory: type[ServerProcess]
                                                   ) -> None:
    """The cap bounds the work done at once; a request waiting for its body
    is not counted, so slow bodies (API and dashboard, two each) against a
    cap of 2 turn nobody away (they once made every request, /healthz too,
    503 until their timeout)."""
    srv = server_factory(env={"SVC_MAX_IN_FLIGHT": "2", "SVC_BODY_TIMEOUT": "20"}).start()
    key = srv.info["keys"]["pk_test"]
    slow = [socket.create_connection(("127.0.0.1", _port(srv)), timeout=5) for _ in range(4)]
    api = (b"POST /v1/sdk/init HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
           b"Authorization: Bearer " + key.encode() + b"\r\n"
           b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n")
    dashboard = (b"POST /dashboard/sign-in HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                 b"Content-Type: application/x-www-form-urlencoded\r\n"
                 b"Content-Length: 1000\r\n\r\n")
    try:
        # One after another: each handler asks for its body ("100 Continue"
        # says it waits) before the next arrives. Sent at once, two could
        # both be counted before either reached its body, which the cap
        # rightly refuses.
        for s, head in zip(slow, (api, api, dashboard, dashboard), strict=True):
            s.sendall(head)
            assert s.recv(100).startswith(b"HTTP/1.1 100 ")
            s.sendall(b"{")
        with srv.client("sk_test") as c:
            for _ in range(5):
                assert c.get("/healthz").status_code == 200
                assert c.get("/v1/deferred/settings").status_code == 200
                assert c.get("/no-such-slug").status_code == 404
    finally:
        for s in slow:
            s.close()


def test_slowloris_headers_are_cut_off(shared: ServerProcess) -> None:
    srv = shared
    with socket.create_connection(("127.0.0.1", _port(srv)), timeout=10) as s:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        started = time.monotonic()
        closed = False
        while time.monotonic() - started < 9:
            try:
                s.sendall(b"X-Drip: 1\r\n")
            except OSError:
                closed = True
                break
            try:
                s.settimeout(1)
                if s.recv(1024) == b"":
                    closed = True
                    break
            except TimeoutError:
                continue
    assert closed, "a client dripping headers must be disconnected"
    _healthy(srv)


def test_connection_flood_is_capped(server_factory: type[ServerProcess]) -> None:
    srv = server_factory(env={"SVC_MAX_CONNECTIONS": "8"}).start()
    held = [socket.create_connection(("127.0.0.1", _port(srv))) for _ in range(8)]
    try:
        for s in held:  # each is served (so counted) and kept alive
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            assert s.recv(65536).startswith(b"HTTP/1.1 200")
        answer = _raw(srv, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in answer
    finally:
        for s in held:
            s.close()
    # A closed connection gives its slot back at once.
    _healthy(srv, within=3)


def test_per_client_rate_limit(server_factory: type[ServerProcess]) -> None:
    srv = server_factory(env={"SVC_RATE_LIMIT_PER_CLIENT": "5"}).start()
    with srv.client() as c:
        codes = [c.get("/v1/deferred/settings").status_code for _ in range(20)]
        assert 429 in codes and codes[0] == 401
        r = next(c.get("/v1/deferred/settings") for _ in range(1))
        if r.status_code == 429:
            assert int(r.headers["retry-after"]) >= 1
        assert c.get("/healthz").status_code == 200  # only the API is limited


def test_https_with_trustme_and_hsts_on_the_dashboard(server_factory: type[ServerProcess],
                                                      tmp_path: Any) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost")
    certfile, keyfile = os.path.join(tmp_path, "cert.pem"), os.path.join(tmp_path, "key.pem")
    cert.private_key_and_cert_chain_pem.write_to_path(certfile)
    cert.private_key_pem.write_to_path(keyfile)
    srv = server_factory(extra_args=("--certfile", certfile, "--keyfile", keyfile)).start()
    assert srv.url.startswith("https://")
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    with httpx.Client(base_url=srv.url, verify=ctx) as c:
        assert c.get("/healthz").status_code == 200
        dash = c.get("/dashboard", follow_redirects=False)
        assert dash.headers.get("strict-transport-security", "").startswith("max-age=")
        cookies = dash.headers.get_list("set-cookie")  # SECURITY.md: Secure over HTTPS
        assert cookies and all("; Secure" in v and "HttpOnly" in v for v in cookies), cookies
    with pytest.raises(httpx.ConnectError), httpx.Client(base_url=srv.url) as c:
        c.get("/healthz")  # an untrusted certificate is refused by a default client


def test_a_range_on_the_dashboard_is_ignored(shared: ServerProcess) -> None:
    """A suffix range (``bytes=-5``) made Quart fail (500, a traceback in the
    log); the dashboard answers every range with the whole file (RFC 9110
    14.2 lets a server ignore Range)."""
    srv = shared
    with srv.client() as c:
        whole = c.get("/dashboard/static/dashboard.css")
        for value in ("bytes=-5", "bytes=0-4", "bytes=5-", "bytes=9999999-"):
            r = c.get("/dashboard/static/dashboard.css", headers={"range": value})
            assert (r.status_code, r.content) == (200, whole.content), value
            assert c.head("/dashboard/static/dashboard.css",
                          headers={"range": value}).status_code == 200
    assert "Traceback" not in srv.logs() and "AssertionError" not in srv.logs()


def test_a_client_resetting_a_dashboard_answer_is_no_error(shared: ServerProcess) -> None:
    """A client gone mid-answer (a reset while the dashboard's task group
    writes) is not the application failing: nothing is logged as an error."""
    srv = shared
    for _ in range(5):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2048)
        s.connect(("127.0.0.1", _port(srv)))
        s.sendall(b"GET /dashboard/static/dashboard.css HTTP/1.1\r\nHost: x\r\n\r\n")
        s.recv(100)  # the answer has begun
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
        s.close()  # a reset, with most of the answer unsent
    _healthy(srv)
    assert "application failed" not in srv.logs() and "Traceback" not in srv.logs()
