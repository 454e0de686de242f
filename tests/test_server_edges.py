"""The server's edges no other test reaches (web/server.py, web/main.py,
web/network_keyring.py, storage/file_ahead.py).

What must hold: the accept loop goes on past a client that gave up in the
queue (at once) and past running out of descriptors (logged, after a pause);
a peer gone before its address is read, a TLS handshake that fails and one
that never comes each close that connection only, the last within the
keep-alive timeout; a held-up event loop sheds new requests and says so once
every ten seconds, and only when it shed; ``web.main.serve`` calls its
``on_ready`` with the addresses it listens on, awaiting it while it serves;
a network-keys file that cannot be written leaves the keys serving from
memory; the data file's tail is not prepared where it cannot be (not Linux,
a refused open), and the store works."""

from __future__ import annotations

import errno
import json
import logging
import os
import socket
import ssl
import struct
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
import trustme

from storage.lmdb_store import LmdbStore
from svc_engine.network_keys import EPOCH_MS, NetworkKeys
from tests.test_file_ahead import MAP, through_writer
from tests.test_network_keys import FixedClock, counter
from tests.test_server import App, Client, get, listening
from web.network_keyring import FILE_NAME, NetworkKeyring
from web.server import LAG_REPORT_S, HttpServer, ServerSettings

ROOT = Path(__file__).resolve().parent.parent

# -- the accept loop ----------------------------------------------------------------------


class _FlakyAccept:
    """A listening socket whose next accepts fail with ``errors`` (one each),
    as the kernel's would: then it accepts as the real one does."""

    def __init__(self, real: socket.socket, errors: list[int]) -> None:
        self._real = real
        self._errors = errors

    def accept(self) -> tuple[socket.socket, Any]:
        if self._errors:
            code = self._errors.pop(0)
            raise OSError(code, os.strerror(code))
        return self._real.accept()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextmanager
def accepts_failing(monkeypatch: pytest.MonkeyPatch, errors: list[int]) -> Iterator[None]:
    """Servers started meanwhile listen on sockets whose accepts fail with ``errors``."""
    real_open = trio.open_tcp_listeners

    async def open_flaky(port: int, *, host: str | None = None,
                         backlog: int | None = None) -> list[trio.SocketListener]:
        listeners = await real_open(port, host=host, backlog=backlog)
        for ln in listeners:
            sock: Any = ln.socket
            sock._sock = _FlakyAccept(sock._sock, errors)
        return listeners

    monkeypatch.setattr(trio, "open_tcp_listeners", open_flaky)
    yield
    monkeypatch.undo()


async def _one_request(nursery: trio.Nursery, server: HttpServer) -> tuple[bytes, float]:
    """``GET /x`` on a new connection: the answer's body and how long it took."""
    async with listening(nursery, server) as (connect, stop):
        start = trio.current_time()
        c = await connect()
        await c.stream.send_all(get("/x"))
        _head, body = await c.response()
        took = trio.current_time() - start
        stop.set()
    return body, took


async def test_a_client_gone_while_queued_does_not_hold_up_the_next(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "svc.server")
    server = HttpServer(App(), ServerSettings(host="127.0.0.1", port=0))
    with accepts_failing(monkeypatch, [errno.ECONNABORTED, errno.EPROTO]):
        async with trio.open_nursery() as nursery:
            body, took = await _one_request(nursery, server)
    assert body == b"path=/x query="
    assert took < 0.1  # the next connection at once, not after a pause
    assert "accept failed" not in caplog.text


async def test_running_out_of_descriptors_is_logged_and_accepting_resumes_after_a_pause(
        autojump_clock: trio.testing.MockClock, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "svc.server")
    server = HttpServer(App(), ServerSettings(host="127.0.0.1", port=0))
    with accepts_failing(monkeypatch, [errno.EMFILE] * 3):
        async with trio.open_nursery() as nursery:
            body, took = await _one_request(nursery, server)
    assert body == b"path=/x query="  # the connection waited in the queue, then was served
    assert 0.3 <= took < 1  # 0.1 s between tries, not a loop spinning on the error
    assert [r.getMessage() for r in caplog.records] == [
        "accept failed: [Errno 24] Too many open files"] * 3


async def test_a_peer_gone_before_its_address_is_read_ends_only_its_connection(
        nursery: trio.Nursery) -> None:
    app = App()
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, max_connections=4))
    port = int(server_port(await nursery.start(server.serve, trio.Event())))
    # Connected and reset before the server runs again: it accepts a socket
    # whose peer is already gone (getpeername: ENOTCONN).
    gone = socket.create_connection(("127.0.0.1", port))
    gone.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    gone.close()
    c = Client(await trio.open_tcp_stream("127.0.0.1", port))
    await c.stream.send_all(get("/after"))
    assert (await c.response())[1] == b"path=/after query="
    await trio.aclose_forcefully(c.stream)
    await _every_connection_gone(server)
    assert [s["path"] for s in app.scopes] == ["/after"]
    nursery.cancel_scope.cancel()


async def _every_connection_gone(server: HttpServer) -> None:
    """Wait (5 s at most) until the server has handed back every connection's
    slot: it learns of a close from the kernel, not from this task."""
    with trio.fail_after(5):
        while server.limiter.borrowed_tokens:
            await trio.sleep(0.01)


def server_port(binds: list[str]) -> str:
    return binds[0].rsplit(":", 1)[1]


# -- TLS ----------------------------------------------------------------------------------


def _tls_server(tmp_path: Path, app: App, **settings: Any
                ) -> tuple[HttpServer, ssl.SSLContext]:
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    certfile, keyfile = str(tmp_path / "c.pem"), str(tmp_path / "k.pem")
    cert.private_key_and_cert_chain_pem.write_to_path(certfile)
    cert.private_key_pem.write_to_path(keyfile)
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, certfile=certfile,
                                            keyfile=keyfile, **settings))
    ctx = ssl.create_default_context()
    ca.configure_trust(ctx)
    return server, ctx


@pytest.mark.parametrize("sent", [get("/plain"), b""])  # plain HTTP; a close at once
async def test_a_failed_tls_handshake_closes_that_connection_only(
        nursery: trio.Nursery, tmp_path: Path, sent: bytes) -> None:
    app = App()
    server, ctx = _tls_server(tmp_path, app)
    port = int(server_port(await nursery.start(server.serve, trio.Event())))
    raw = await trio.open_tcp_stream("127.0.0.1", port)
    bad = Client(raw)
    if sent:
        await bad.stream.send_all(sent)
        await bad.expect_close()  # no answer: the connection is closed
    else:
        await raw.send_eof()  # gone before a byte of the handshake
    tcp = await trio.open_tcp_stream("127.0.0.1", port)
    good = Client(trio.SSLStream(tcp, ctx, server_hostname="127.0.0.1"))
    await good.stream.send_all(get("/tls"))
    assert (await good.response())[1] == b"path=/tls query="
    await trio.aclose_forcefully(good.stream)
    await trio.aclose_forcefully(bad.stream)
    await _every_connection_gone(server)
    assert [s["path"] for s in app.scopes] == ["/tls"]
    nursery.cancel_scope.cancel()


async def test_a_tls_handshake_that_never_comes_is_closed_after_the_keep_alive_timeout(
        autojump_clock: trio.testing.MockClock, tmp_path: Path) -> None:
    server, _ctx = _tls_server(tmp_path, App(), keep_alive_s=5.0)
    async with trio.open_nursery() as nursery:
        port = int(server_port(await nursery.start(server.serve, trio.Event())))
        silent = Client(await trio.open_tcp_stream("127.0.0.1", port))
        start = trio.current_time()
        with trio.fail_after(60):
            with pytest.raises(EOFError):
                await silent._more()
        assert trio.current_time() - start == pytest.approx(5.0, abs=0.01)
        await trio.testing.wait_all_tasks_blocked()
        assert server.limiter.borrowed_tokens == 0
        await trio.aclose_forcefully(silent.stream)
        nursery.cancel_scope.cancel()


# -- the event loop's delay ---------------------------------------------------------------


async def test_a_held_up_loop_sheds_new_requests_and_says_so_once_every_ten_seconds(
        autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "svc.server")
    app = App()
    server = HttpServer(app, ServerSettings(host="127.0.0.1", port=0, max_lag_s=0.01))

    async def request(path: str) -> tuple[int, dict[bytes, bytes], bytes]:
        client_end, server_end = trio.testing.memory_stream_pair()
        async with trio.open_nursery() as conn:
            conn.start_soon(server.serve_stream, server_end, ("10.0.0.1", 1), None)
            c = Client(client_end)
            await c.stream.send_all(get(path, b"connection: close\r\n"))
            head, body = await c.response()
            await trio.aclose_forcefully(client_end)
        return head.status_code, dict(head.headers), body

    def overload_warnings() -> list[str]:
        return [r.getMessage() for r in caplog.records if "overloaded" in r.getMessage()]

    async with trio.open_nursery() as nursery:
        stop = trio.Event()
        await nursery.start(server.serve, stop)
        assert (await request("/calm"))[0] == 200
        # The loop held up 20 ms at a time (a task computing without yielding):
        # each probe wakes 15 ms late.
        for _ in range(8):
            autojump_clock.jump(0.02)
            await trio.sleep(0)
            await trio.sleep(0)
        status, headers, body = await request("/held")
        assert status == 503 and headers[b"retry-after"] == b"1" and b"overloaded" in body
        assert overload_warnings() == []  # said once the ten seconds are over
        await trio.sleep(LAG_REPORT_S)  # the loop free again: probes on time
        assert overload_warnings() == [
            "overloaded: 1 requests answered 503 in the last 10 s "
            "(event-loop delay over 10 ms)"]
        assert (await request("/free"))[0] == 200
        await trio.sleep(2 * LAG_REPORT_S)  # nothing shed: nothing more said
        assert len(overload_warnings()) == 1
        stop.set()
    assert [s["path"] for s in app.scopes] == ["/calm", "/free"]


# -- web.main.serve's on_ready ------------------------------------------------------------

_SERVE = """
import json, os, signal, sys
import trio
from svc_engine.config import load
from web.main import serve

async def main() -> None:
    seen = {}

    async def asked(binds):
        seen["binds"] = binds
        host, port = binds[0].removeprefix("http://").rsplit(":", 1)
        stream = await trio.open_tcp_stream(host, int(port))
        await stream.send_all(b"GET /healthz HTTP/1.1\\r\\nhost: t\\r\\n"
                              b"connection: close\\r\\n\\r\\n")
        answer = b""
        while chunk := await stream.receive_some(65536):
            answer += chunk
        seen["answer"] = answer.split(b"\\r\\n")[0].decode()
        os.kill(os.getpid(), signal.SIGTERM)

    def told(binds):
        seen["binds"] = binds
        os.kill(os.getpid(), signal.SIGTERM)

    stop = trio.Event()

    def told_to_stop(binds):
        seen["binds"] = binds
        stop.set()  # a caller's own event, not a signal

    config = load(os.environ, {"data_dir": sys.argv[1], "port": 0, "host": "127.0.0.1"})
    if sys.argv[2] == "stop":
        await serve(config, stop=stop, on_ready=told_to_stop)
    else:
        await serve(config, on_ready=asked if sys.argv[2] == "async" else told)
    print("SEEN " + json.dumps(seen), flush=True)

trio.run(main)
"""


@pytest.mark.parametrize("kind", ["async", "sync", "stop"])
def test_serve_tells_on_ready_where_it_listens_and_serves_while_awaiting_it(
        tmp_path: Path, kind: str) -> None:
    """"stop": a caller's own ``stop`` event ends the service as a signal
    does (``stop or trio.Event()`` asked a trio Event for its truth, which
    it refuses: serve failed before it started)."""
    done = subprocess.run([sys.executable, "-c", _SERVE, str(tmp_path / "data"), kind],
                          capture_output=True, text=True, timeout=30, cwd=ROOT,
                          env={**os.environ, "SVC_MAX_LAG_MS": "0"})
    assert done.returncode == 0, done.stderr
    listening_on = next(ln for ln in done.stdout.splitlines()
                        if ln.startswith("svc: listening on "))
    seen = json.loads(next(ln for ln in done.stdout.splitlines()
                           if ln.startswith("SEEN "))[5:])
    assert seen["binds"] == listening_on.removeprefix("svc: listening on ").split()
    assert seen["binds"][0].startswith("http://127.0.0.1:")
    if kind == "async":
        assert seen["answer"] == "HTTP/1.1 200 OK"
    assert "stopped; data is closed" in done.stderr  # its SIGTERM (or the event) stopped it


# -- the network keys' file ---------------------------------------------------------------


def test_network_keys_that_cannot_be_written_serve_from_memory_and_the_file_stays(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """(As root too: the new file's place is taken by a directory.)"""
    clock = FixedClock(100 * EPOCH_MS)
    _, fresh = counter()
    ring = NetworkKeyring.open(str(tmp_path), clock, fresh, b"s" * 32)  # type: ignore[arg-type]
    on_disk = (tmp_path / FILE_NAME).read_bytes()
    blocker = tmp_path / (FILE_NAME + ".tmp")
    blocker.mkdir()
    clock.now += EPOCH_MS
    with caplog.at_level(logging.ERROR, logger="svc.network_keys"):
        ring.save(ring.rotate_now())
    assert [r.getMessage() for r in caplog.records] == [
        f"cannot write {tmp_path / FILE_NAME}: [Errno 21] Is a directory: '{blocker}' "
        "(network keys kept in memory only)"]
    assert [e for e, _ in ring.keys.keys] == [100, 101, 102]  # rotated in memory
    assert ring.tap_hash("203.0.113.7") is not None
    assert (tmp_path / FILE_NAME).read_bytes() == on_disk  # a restart starts from it
    blocker.rmdir()
    ring.save(ring.keys.encode())  # the next rotation's write goes through
    assert NetworkKeys.decode((tmp_path / FILE_NAME).read_bytes()) == ring.keys


# -- the data file's tail -----------------------------------------------------------------


def _store_works(store: LmdbStore) -> None:
    through_writer(store, [lambda txn: txn.put(b"k", b"v", db=store.db(b"installs"))])
    with store.read() as txn:
        assert txn.get(b"k", db=store.db(b"installs")) == b"v"


def test_off_linux_the_tail_is_not_prepared_and_the_store_works(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    """(No ``posix_fadvise`` there: asking for it would fail the store's opening.)"""
    monkeypatch.setattr(sys, "platform", "darwin")
    with caplog.at_level(logging.WARNING, logger="svc.storage"):
        store = LmdbStore(str(tmp_path), map_size=MAP)
    monkeypatch.undo()
    try:
        assert store._ahead is None and caplog.records == []  # quietly: nothing to gain
        _store_works(store)
    finally:
        store.close()


def test_a_data_file_that_cannot_be_opened_again_leaves_the_store_working(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    real_open: Callable[..., int] = os.open

    def refuse(path: Any, flags: int, *args: Any, **kw: Any) -> int:
        if str(path).endswith("data.mdb"):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, flags, *args, **kw)

    monkeypatch.setattr(os, "open", refuse)
    with caplog.at_level(logging.WARNING, logger="svc.storage"):
        store = LmdbStore(str(tmp_path), map_size=MAP)
    monkeypatch.undo()
    try:
        assert store._ahead is None
        assert [r.getMessage() for r in caplog.records] == [
            "not preparing the data file's tail ([Errno 24] Too many open files)"]
        _store_works(store)
    finally:
        store.close()
