"""HttpSender (actors/webhook_sender.py) over the h11 client, against real local
servers: the exact request, one deadline over the whole attempt, no proxies,
no redirects, and the address guard working with the connection pool
(resolved once per attempt, pooled connections only for judged addresses)."""

from __future__ import annotations

import ssl
from collections.abc import Sequence
from pathlib import Path

import pytest
import standardwebhooks
import trio
import trustme
from hypothesis import given
from hypothesis import strategies as st

from actors.clock import SystemClock, TrioWallClock
from actors.webhook_sender import (
    GuardedBackend,
    HttpSender,
    SendJob,
    failure_of,
    signed_head,
    system_resolver,
)
from svc_engine import signing
from svc_engine.errors import ValidationError
from svc_engine.webhook_retry import classify_response
from tests.raw_http_server import NO_CONTENT, Peer, answering, serving

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
BODY = b'{"type":"click","data":{"n":1}}'


def _job(url: str, delivery_id: str = "d-1") -> SendJob:
    return SendJob(delivery_id, "e-1", url, SECRET, "click", BODY)


async def test_a_wall_clock_step_during_an_attempt_does_not_make_it_a_timeout() -> None:
    """The 10-second rule is judged on trio's clock: NTP stepping the wall
    clock 60 s forward during a 5 ms answer made it a timeout (retried, and
    counted against the endpoint's health)."""
    from svc_engine.webhook_retry import classify_response

    class Stepped(SystemClock):
        offset = 0

        def now_ms(self) -> int:
            return super().now_ms() + self.offset

    clock = Stepped()

    async def handle(peer: Peer) -> None:
        while await peer.request() is not None:
            clock.offset += 60_000
            await peer.send(NO_CONTENT)

    async with serving(handle) as server, HttpSender(clock) as sender:
        report = await sender.attempt(_job(f"http://127.0.0.1:{server.port}/h"))
    assert report.finished_at_ms - report.started_at_ms >= 60_000
    assert report.status == 204 and report.elapsed_ms is not None
    assert report.answer().elapsed_ms == report.elapsed_ms < 10_000
    assert classify_response(report.status, report.error, report.elapsed_ms).delivered


async def test_the_request_is_exactly_the_signed_delivery() -> None:
    async with serving(answering(NO_CONTENT)) as server, \
            HttpSender(SystemClock()) as sender:
        report = await sender.attempt(_job(f"http://127.0.0.1:{server.port}/in?x=1"))
    assert report.status == 204 and report.error is None
    [seen] = server.seen
    assert seen.request.method == b"POST" and seen.request.target == b"/in?x=1"
    assert seen.request.http_version == b"1.1" and seen.body == BODY
    names = [k for k, _ in seen.headers]
    assert names == ["host", "content-type", "user-agent", "webhook-id", "webhook-timestamp",
                     "webhook-signature", "svc-event", "content-length", "accept-encoding"]
    headers = dict(seen.headers)
    assert headers["host"] == f"127.0.0.1:{server.port}"
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "Svc-Webhooks/1.0"
    assert headers["svc-event"] == "click" and headers["webhook-id"] == "d-1"
    assert headers["content-length"] == str(len(BODY))
    assert headers["accept-encoding"] == "identity"
    assert int(headers["webhook-timestamp"]) == report.started_at_ms // 1000
    standardwebhooks.Webhook(SECRET).verify(BODY, headers)


async def test_proxies_from_the_environment_are_not_used(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    async with serving(answering(NO_CONTENT)) as proxy, \
            serving(answering(NO_CONTENT)) as target:
        for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                     "all_proxy"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy.port}")
        monkeypatch.delenv("NO_PROXY", raising=False)
        monkeypatch.delenv("no_proxy", raising=False)
        async with HttpSender(SystemClock()) as sender:
            report = await sender.attempt(_job(f"http://127.0.0.1:{target.port}/h"))
    assert report.status == 204 and len(target.seen) == 1 and proxy.connections == 0


async def test_a_redirect_is_a_failed_attempt_and_is_not_followed() -> None:
    async with serving(answering(NO_CONTENT)) as elsewhere:
        moved = (b"HTTP/1.1 307 Temporary Redirect\r\nlocation: http://127.0.0.1:%d/h\r\n"
                 b"content-length: 0\r\n\r\n" % elsewhere.port)
        async with serving(answering(moved)) as server, HttpSender(SystemClock()) as sender:
            report = await sender.attempt(_job(f"http://127.0.0.1:{server.port}/h"))
    assert report.status == 307 and report.error is None and elsewhere.connections == 0
    outcome = classify_response(report.status, report.error, 5)
    assert not outcome.delivered and outcome.kind == "redirect"


async def test_the_answer_is_read_up_to_64_kib() -> None:
    big = b"HTTP/1.1 503 Busy\r\nretry-after: 120\r\ncontent-length: 200000\r\n\r\n"
    big += b"b" * 200_000
    async with serving(answering(big)) as server, HttpSender(SystemClock()) as sender:
        report = await sender.attempt(_job(f"http://127.0.0.1:{server.port}/h"))
    assert report.status == 503
    assert report.response_body == b"b" * 65536


# -- one deadline over the whole attempt ----------------------------------------------------

async def _silent(peer: Peer) -> None:
    await peer.request()
    await trio.sleep_forever()


async def _trickle(peer: Peer) -> None:
    """The head at once, then one body byte a second (never a whole answer)."""
    await peer.request()
    await peer.send(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n")
    while True:
        await trio.sleep(1)
        await peer.send(b".")


@pytest.mark.parametrize("handler", [_silent, _trickle])
async def test_the_10_second_deadline_covers_head_and_body(
        handler: object, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock()
    async with serving(handler) as server, HttpSender(clock) as sender:  # type: ignore[arg-type]
        report = await sender.attempt(_job(f"http://127.0.0.1:{server.port}/h"))
    assert report.error == "timeout" and report.status is None
    assert report.finished_at_ms - report.started_at_ms == 10_000
    assert report.detail == "no complete answer within 10 s"


async def test_an_injected_short_deadline_and_the_timed_out_connection_is_dropped() -> None:
    calls = 0

    async def slow_then_fast(peer: Peer) -> None:
        nonlocal calls
        while await peer.request() is not None:
            calls += 1
            if calls == 1:
                await trio.sleep_forever()
            await peer.send(NO_CONTENT)

    async with serving(slow_then_fast) as server, \
            HttpSender(SystemClock(), deadline_s=0.05) as sender:
        url = f"http://127.0.0.1:{server.port}/h"
        started = trio.current_time()
        first = await sender.attempt(_job(url))
        took = trio.current_time() - started
        second = await sender.attempt(_job(url))
    assert first.error == "timeout" and took < 2
    assert second.status == 204 and server.connections == 2


# -- the guard and the pool -------------------------------------------------------------------

class _Answers:
    """A stub resolver: each call returns the next answer."""

    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.asked: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        return self.answers.pop(0)


def _tls_for(name: str, tmp_path: Path) -> tuple[ssl.SSLContext, str]:
    """A server context with a certificate for ``name``, and the CA bundle's path."""
    ca = trustme.CA()
    ca_path = str(tmp_path / "ca.pem")
    ca.cert_pem.write_to_path(ca_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(name).configure_cert(tls)
    return tls, ca_path


async def test_a_certificate_for_another_name_is_a_tls_error(tmp_path: Path) -> None:
    """The sender's own TLS context checks the host name: a receiver at
    hooks.example presenting a trusted CA's certificate for other.example
    is not the receiver (an unknown CA alone is tested elsewhere)."""
    tls, ca_path = _tls_for("other.example", tmp_path)
    async with serving(answering(NO_CONTENT), tls=tls) as server, \
            HttpSender(SystemClock(), allow=("127.0.0.0/8",), ca_bundle=ca_path,
                       resolver=_Answers(["127.0.0.1"], ["127.0.0.1"]),
                       dns_cache_ms=0) as sender:
        wrong = await sender.attempt(_job(f"https://hooks.example:{server.port}/h"))
        right = await sender.attempt(_job(f"https://other.example:{server.port}/h"))
    assert (wrong.status, wrong.error) == (None, "tls_error")
    assert wrong.detail == "TLS error: CERTIFICATE_VERIFY_FAILED"  # the reason, not the text
    assert right.status == 204 and len(server.seen) == 1


async def test_the_allow_list_lets_a_literal_address_through(tmp_path: Path) -> None:
    """``SVC_WEBHOOK_ALLOW_CIDRS`` on a URL naming an address (no lookup):
    the attempt's own check used the list, not only the dialler's."""
    tls, ca_path = _tls_for("127.0.0.2", tmp_path)
    async with serving(answering(NO_CONTENT), tls=tls, hosts=("127.0.0.2",)) as server:
        url = f"https://127.0.0.2:{server.port}/h"
        async with HttpSender(SystemClock(), allow=("127.0.0.0/8",), ca_bundle=ca_path) as ok:
            allowed = await ok.attempt(_job(url))
        async with HttpSender(SystemClock(), ca_bundle=ca_path) as plain:
            refused = await plain.attempt(_job(url))
    assert allowed.status == 204
    assert refused.error == "blocked_address" and "loopback" in refused.detail


async def test_each_attempt_is_judged_and_pooled_connections_follow_the_answer(
        tmp_path: Path) -> None:
    tls, ca_path = _tls_for("hooks.example", tmp_path)
    resolver = _Answers(["127.0.0.1"], ["127.0.0.1"], ["10.0.0.7"], ["127.0.0.2"],
                        ["93.184.216.34", "127.0.0.1"], ["127.0.0.1", "10.0.0.7"])
    async with serving(answering(NO_CONTENT), tls=tls,
                       hosts=("127.0.0.1", "127.0.0.2")) as server, \
            HttpSender(SystemClock(), allow=("127.0.0.0/8",), ca_bundle=ca_path,
                       resolver=resolver, dns_cache_ms=0) as sender:
        url = f"http://hooks.example:{server.port}/h"
        # Plain http to a name is refused before any lookup.
        assert (await sender.attempt(_job(url))).error == "blocked_address"
        assert resolver.asked == []
        url = url.replace("http://", "https://")
        reports = [await sender.attempt(_job(url)) for _ in range(6)]
    assert [r.status or r.error for r in reports] == [
        204,  # a new connection to 127.0.0.1
        204,  # the same connection again
        "blocked_address",  # the name now points inside: refused, pool or not
        204,  # a new connection to 127.0.0.2, not the idle one to 127.0.0.1
        204,  # both allowed; the idle connection to 127.0.0.1 serves, nothing is dialled
        "blocked_address",  # one inner address is enough to refuse the name
    ]
    assert "private" in (reports[2].detail + reports[5].detail)
    assert resolver.asked == ["hooks.example"] * 6  # once per attempt, never twice
    assert server.local_addresses == ["127.0.0.1", "127.0.0.2"] and len(server.seen) == 4
    assert server.sni == ["hooks.example", "hooks.example"]
    assert dict(server.seen[0].headers)["host"] == f"hooks.example:{server.port}"


@given(st.sampled_from(["click", "open", "install", "conversion", "test"]),
       st.uuids().map(str), st.integers(0, 1 << 34), st.binary(max_size=200))
def test_the_head_is_build_headers_in_order_then_length_and_encoding(
        event_type: str, delivery_id: str, timestamp_s: int, body: bytes) -> None:
    job = SendJob(delivery_id, "e-1", "https://hooks.example/in", SECRET, event_type, body)
    head = signed_head(job, timestamp_s)
    expected = signing.build_headers(SECRET, delivery_id, timestamp_s, body, event_type)
    assert head[0] == (b"host", b"")  # the caller's
    assert head[1:-2] == [(k.encode(), v.encode()) for k, v in expected.items()]
    assert head[-2:] == [(b"content-length", str(len(body)).encode()),
                         (b"accept-encoding", b"identity")]


@pytest.mark.parametrize(("delivery_id", "event_type", "secret"), [
    ("has.dot", "click", SECRET), ("d-1", "cli ck", SECRET), ("d-1", "", SECRET),
    ("d-1", "click", "whsec_short")])
def test_the_head_refuses_what_build_headers_refuses(
        delivery_id: str, event_type: str, secret: str) -> None:
    job = SendJob(delivery_id, "e-1", "https://hooks.example/in", secret, event_type, BODY)
    with pytest.raises(ValidationError):
        signing.build_headers(secret, delivery_id, 1, BODY, event_type)
    with pytest.raises(ValidationError):
        signed_head(job, 1)


async def test_elapsed_is_the_attempt_on_trios_clock_in_milliseconds(
        autojump_clock: trio.testing.MockClock) -> None:
    async def slow(peer: Peer) -> None:
        while await peer.request() is not None:
            await trio.sleep(1.5)
            await peer.send(NO_CONTENT)

    async with serving(slow) as server, HttpSender(TrioWallClock()) as sender:
        report = await sender.attempt(_job(f"http://127.0.0.1:{server.port}/h"))
    assert report.status == 204 and report.elapsed_ms == 1500


# -- failures: dialling, resolving, and the words of an exchange's error ----------------------

class _Refusing:
    """A dialer every address refuses, each with its own error."""

    def __init__(self) -> None:
        self.dialled: list[str] = []

    async def connect_tcp(self, host: str, port: int) -> trio.SocketStream:
        self.dialled.append(host)
        raise ConnectionRefusedError(f"{host} refused")


async def test_dialling_tries_each_address_and_raises_the_last_error() -> None:
    dialer = _Refusing()
    guard = GuardedBackend(inner=dialer)
    with pytest.raises(ConnectionRefusedError, match=r"^192\.0\.2\.2 refused$"):
        await guard.dial(["192.0.2.1", "192.0.2.2"], 443)
    assert dialer.dialled == ["192.0.2.1", "192.0.2.2"]
    with pytest.raises(OSError, match=r"^no address to connect to$"):
        await guard.dial([], 443)


async def test_the_system_resolver_gives_the_addresses_as_text() -> None:
    assert set(await system_resolver("127.0.0.1", 443)) == {"127.0.0.1"}  # no DNS asked


def _tls_error(reason: str | None) -> ssl.SSLError:
    e = ssl.SSLError(1, "[SSL: X] the whole text")
    e.reason = reason  # type: ignore[misc]
    return e


def test_an_exchange_error_is_tls_when_an_ssl_error_is_its_cause_or_context() -> None:
    caused = OSError("read failed")
    caused.__cause__ = _tls_error("WRONG_VERSION_NUMBER")
    during = ValueError("while reading")
    during.__context__ = _tls_error(None)
    assert failure_of(caused) == ("tls_error", "TLS error: WRONG_VERSION_NUMBER")
    assert failure_of(during) == ("tls_error", "TLS error: [SSL: X] the whole text")
    looped = OSError("")
    looped.__context__ = looped  # a cycle ends the walk
    assert failure_of(looped) == ("connection_error", "connection error: OSError")
