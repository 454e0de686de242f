"""Delivery end to end over real HTTPS (trustme), checked by an independent
Standard Webhooks implementation; what counts as a failed attempt; the
outbound address guard."""

from __future__ import annotations

import json
import ssl
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpcore
import pytest
import standardwebhooks
import trio
import trustme

from actors.clock import SystemClock, TrioWallClock
from actors.webhook_sender import BlockedAddress, GuardedBackend, HttpSender, SendJob
from storage.lmdb_store import LmdbStore
from svc_engine.webhook_delivery import Delivery, DeliveryStatus
from tests.conftest import App, running_app
from tests.webhook_receiver_fixture import (
    Receiver,
    add_endpoint,
    deliveries_of,
    emit,
    make_ca,
    running_receiver,
    status,
    webhook_config,
)
from web.webhook_receiver import Received, Reply

SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"


@pytest.fixture
def ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    return make_ca(tmp_path)


@pytest.fixture
async def live(store: LmdbStore, data_dir: str, ca: tuple[trustme.CA, str]
               ) -> AsyncIterator[tuple[App, Receiver]]:
    """The service on the real wall clock (receivers check timestamps against it)."""
    clock = SystemClock()
    async with running_receiver(ca[0], clock) as receiver, \
            running_app(store, webhook_config(data_dir, ca[1]), clock) as app:
        yield app, receiver


async def _settled(app: App, event_id: str, count: int = 1) -> list[Delivery]:
    with trio.fail_after(10):
        while True:
            found = deliveries_of(app, event_id)
            if len(found) >= count and all(d.attempts and d.status is not DeliveryStatus.SENDING
                                           for d in found):
                return found
            await trio.sleep(0.005)


async def test_delivery_verifies_with_standard_webhooks(
        live: tuple[App, Receiver]) -> None:
    app, receiver = live
    endpoint = await add_endpoint(app, receiver.url, events=["click", "install"])
    started = trio.current_time()
    event = await emit(app, "install", data={"installId": "i-1", "platform": "ios"})
    hit = (await receiver.wait_for(1))[0]
    assert trio.current_time() - started < 1.0  # "aim for under a second"
    headers = hit.headers
    assert headers["content-type"] == "application/json"
    assert headers["user-agent"] == "Svc-Webhooks/1.0"
    assert headers["svc-event"] == "install"
    payload = standardwebhooks.Webhook(endpoint["secret"]).verify(hit.request.body, headers)
    assert payload == json.loads(hit.request.body)
    assert set(payload) == {"id", "type", "createdAt", "projectId", "env", "data"}
    assert payload["id"] == event.id and payload["type"] == "install"
    assert payload["projectId"] == app.project_id and payload["env"] == "test"
    assert payload["createdAt"].endswith("Z") and payload["data"] == {"installId": "i-1",
                                                                        "platform": "ios"}
    [d] = await _settled(app, event.id)
    assert headers["webhook-id"] == d.id and d.status is DeliveryStatus.DELIVERED
    assert abs(int(headers["webhook-timestamp"]) - d.attempts[0].started_at_ms // 1000) <= 1
    with pytest.raises(standardwebhooks.webhooks.WebhookVerificationError):
        standardwebhooks.Webhook(SECRET).verify(hit.request.body, headers)


async def test_only_matching_events_after_creation_are_sent(
        live: tuple[App, Receiver]) -> None:
    app, receiver = live
    before = app.services.clock.now_ms() - 1
    await add_endpoint(app, receiver.url, events=["conversion"])
    await emit(app, "conversion", at_ms=before)  # happened before the endpoint was added
    await emit(app, "click")  # not subscribed
    await emit(app, "conversion", mode="live")  # other mode
    wanted = await emit(app, "conversion")
    hits = await receiver.wait_for(1)
    await trio.sleep(0.2)
    assert [json.loads(h.request.body)["id"] for h in hits] == [wanted.id]


@pytest.mark.parametrize("code,kind,delivered", [
    (200, "delivered", True), (201, "delivered", True), (204, "delivered", True),
    (299, "delivered", True), (302, "redirect", False), (301, "redirect", False),
    (404, "http_status", False), (410, "http_status", False), (500, "http_status", False),
])
async def test_any_2xx_delivers_anything_else_fails(
        live: tuple[App, Receiver], code: int, kind: str, delivered: bool) -> None:
    app, receiver = live
    receiver.respond = status(code, b"", [("location", receiver.url + "?moved")])
    await add_endpoint(app, receiver.url)
    event = await emit(app, "open")
    [d] = await _settled(app, event.id)
    attempt = d.attempts[0]
    assert attempt.kind == kind and attempt.status_code == code
    assert d.status is (DeliveryStatus.DELIVERED if delivered else DeliveryStatus.RETRYING)
    await trio.sleep(0.1)
    assert len(receiver.hits) == 1  # a redirect is never followed


async def test_untrusted_certificate_is_a_tls_error(
        live: tuple[App, Receiver], tmp_path: Path) -> None:
    app, _ = live
    stranger = trustme.CA()  # a receiver whose certificate the service does not trust
    async with running_receiver(stranger, app.services.clock) as other:
        await add_endpoint(app, other.url)
        event = await emit(app, "click")
        [d] = await _settled(app, event.id)
        assert other.hits == []
    assert d.attempts[0].kind == "tls_error" and d.status is DeliveryStatus.RETRYING
    assert "TLS" in (d.attempts[0].error or "")


async def test_refused_connection_and_blocked_addresses(live: tuple[App, Receiver]) -> None:
    app, _ = live
    with trio.socket.socket() as s:  # a port nobody listens on
        await s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]
    await add_endpoint(app, f"https://localhost:{closed_port}/hook")
    await add_endpoint(app, "https://10.1.2.3/hook")
    await add_endpoint(app, "https://169.254.169.254/latest/meta-data")
    event = await emit(app, "click")
    found = await _settled(app, event.id, 3)
    kinds = sorted(d.attempts[0].kind for d in found)
    assert kinds == ["blocked_address", "blocked_address", "connection_error"]
    errors = " ".join(d.attempts[0].error or "" for d in found)
    assert "private" in errors and "metadata" in errors


async def test_huge_response_is_read_capped(live: tuple[App, Receiver]) -> None:
    app, receiver = live
    receiver.respond = status(200, b"y" * (4 << 20))
    await add_endpoint(app, receiver.url)
    event = await emit(app, "click")
    [d] = await _settled(app, event.id)
    attempt = d.attempts[0]
    assert d.status is DeliveryStatus.DELIVERED
    assert attempt.response_body == "y" * 4096 and attempt.response_truncated


# -- the address guard, with a stub resolver and a stub dialer --------------------------

class _Dialer(httpcore.AsyncNetworkBackend):
    def __init__(self, refuse: Sequence[str] = ()) -> None:
        self.dialed: list[str] = []
        self._refuse = set(refuse)

    async def connect_tcp(self, host: str, port: int, timeout: float | None = None,
                          local_address: str | None = None,
                          socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        self.dialed.append(host)
        if host in self._refuse:
            raise httpcore.ConnectError("refused")
        return httpcore.AsyncMockStream([])

    async def connect_unix_socket(self, path: str, timeout: float | None = None,
                                  socket_options: Any = None) -> httpcore.AsyncNetworkStream:
        raise AssertionError("never")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _Resolver:
    def __init__(self, *answers: list[str]) -> None:
        self.answers = list(answers)
        self.calls = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls += 1
        return self.answers.pop(0)


async def test_guard_dials_only_the_addresses_it_judged() -> None:
    resolver, dialer = _Resolver(["93.184.216.34", "2606:2800:220:1::248"]), _Dialer()
    guard = GuardedBackend((), resolver, dialer)
    await guard.connect_tcp("hooks.example.com", 443)
    assert dialer.dialed == ["93.184.216.34"] and resolver.calls == 1


@pytest.mark.parametrize("answer", [["10.0.0.7"], ["93.184.216.34", "127.0.0.1"],
                                    ["169.254.169.254"], ["fe80::1%2"], ["::ffff:192.168.0.1"],
                                    ["224.0.0.1"], []])
async def test_guard_refuses_names_resolving_to_inner_addresses(answer: list[str]) -> None:
    dialer = _Dialer()
    with pytest.raises(BlockedAddress):
        await GuardedBackend((), _Resolver(answer), dialer).connect_tcp("evil.example", 443)
    assert dialer.dialed == []


async def test_allow_list_and_literal_localhost() -> None:
    dialer = _Dialer(refuse=["127.0.0.1"])
    guard = GuardedBackend(("10.0.0.0/8",), _Resolver(["10.0.0.7"]), dialer)
    await guard.connect_tcp("internal.example", 443)
    await guard.connect_tcp("localhost", 8443)  # never looked up; 127.0.0.1 then ::1
    assert dialer.dialed == ["10.0.0.7", "127.0.0.1", "::1"]
    with pytest.raises(BlockedAddress):  # metadata stays blocked inside an allowed range
        await GuardedBackend(("169.254.0.0/16",), _Resolver(["169.254.169.254"]),
                             _Dialer()).connect_tcp("md.example", 80)


async def test_dns_rebinding_finds_no_second_lookup() -> None:
    resolver, dialer = _Resolver(["93.184.216.34"], ["127.0.0.1"]), _Dialer()
    guard = GuardedBackend((), resolver, dialer, dns_cache_ms=0)
    await guard.connect_tcp("rebind.example", 443)
    with pytest.raises(BlockedAddress):
        await guard.connect_tcp("rebind.example", 443)
    assert dialer.dialed == ["93.184.216.34"]  # what was dialled is what was judged


async def test_a_kept_answer_is_judged_again_and_a_moved_name_is_refused_once_it_expires(
        autojump_clock: trio.testing.MockClock) -> None:
    resolver, dialer = _Resolver(["93.184.216.34"], ["127.0.0.1"]), _Dialer()
    guard = GuardedBackend((), resolver, dialer, clock=TrioWallClock())
    await guard.connect_tcp("rebind.example", 443)
    await trio.sleep(29.9)
    await guard.connect_tcp("rebind.example", 443)  # the kept answer, judged again
    assert resolver.calls == 1
    await trio.sleep(0.2)
    with pytest.raises(BlockedAddress):  # 30 s on, the name is looked up again
        await guard.connect_tcp("rebind.example", 443)
    assert resolver.calls == 2 and dialer.dialed == ["93.184.216.34"] * 2


async def test_sender_blocks_a_name_that_points_at_a_listening_loopback(
        ca: tuple[trustme.CA, str]) -> None:
    clock = SystemClock()

    async def resolve(host: str, port: int) -> Sequence[str]:
        return ["127.0.0.1"]

    async with running_receiver(ca[0], clock) as receiver:
        async with HttpSender(clock, ca_bundle=ca[1], resolver=resolve) as sender:
            job = SendJob("d-1", "e-1", f"https://sneaky.example:{receiver.port}/h", SECRET,
                          "click", b"{}")
            report = await sender.attempt(job)
            plain = await sender.attempt(SendJob("d-2", "e-1", "http://example.com/h",
                                                 SECRET, "click", b"{}"))
        assert receiver.hits == []
    assert report.error == "blocked_address" and "loopback" in report.detail
    assert plain.error == "blocked_address" and "plain http" in plain.detail


async def _never(req: Received, n: int) -> Reply:
    await trio.sleep_forever()
    raise AssertionError


async def test_a_slow_endpoint_times_out_after_10_seconds(
        ca: tuple[trustme.CA, str], autojump_clock: trio.testing.MockClock) -> None:

    clock = TrioWallClock()
    async with running_receiver(ca[0], clock) as receiver:
        receiver.respond = _never
        async with HttpSender(clock, ca_bundle=ca[1]) as sender:
            report = await sender.attempt(SendJob("d-1", "e-1", receiver.url, SECRET,
                                                  "click", b"{}"))
    assert report.error == "timeout" and len(receiver.hits) == 1
    assert report.finished_at_ms - report.started_at_ms == 10_000


async def test_a_server_with_local_receivers_off_neither_takes_nor_reaches_them(
        store: LmdbStore, data_dir: str, ca: tuple[trustme.CA, str]) -> None:
    """``SVC_WEBHOOK_LOCAL_RECEIVERS=false`` (a server several teams share):
    an endpoint on this machine is refused when made or edited, and one made
    before the operator turned them off is never reached: its attempts fail
    as a blocked address."""
    clock = SystemClock()
    async with running_receiver(ca[0], clock) as receiver:
        async with running_app(store, webhook_config(data_dir, ca[1]), clock) as app:
            before = await add_endpoint(app, receiver.url)  # allowed by default
            keys = app.keys
        off = webhook_config(data_dir, ca[1], webhook_local_receivers=False)
        async with running_app(store, off, clock) as app:
            app.keys = keys
            async with app.client("sk_test") as c:
                made = await c.post("/v1/webhooks/endpoints",
                                    json={"url": f"http://127.0.0.1:{receiver.port}/hook"})
                edited = await c.patch(f"/v1/webhooks/endpoints/{before['id']}",
                                       json={"url": f"https://[::1]:{receiver.port}/hook"})
                described = await c.patch(f"/v1/webhooks/endpoints/{before['id']}",
                                          json={"description": "kept"})
            for refused in (made, edited):
                assert refused.status_code == 400, refused.text
                assert refused.json()["error"]["field"] == "url"
                assert "turned off on this server" in refused.json()["error"]["message"]
            assert described.status_code == 200
            event = await emit(app, "click")
            [d] = await _settled(app, event.id)
    assert receiver.hits == []
    assert d.status is DeliveryStatus.RETRYING
    assert d.attempts[0].kind == "blocked_address"
    assert "turned off on this server" in (d.attempts[0].error or "")


async def test_the_operator_s_allow_list_reaches_the_running_sender(
        store: LmdbStore, data_dir: str, tmp_path: Path) -> None:
    """``SVC_WEBHOOK_ALLOW_CIDRS`` end to end: a receiver at 127.0.0.2 (a
    loopback address, not a local receiver) is reached once the operator
    lists 127.0.0.0/8. Only the setting's parsing was tested: dropping it on
    its way to the sender passed."""
    from tests.raw_http_server import NO_CONTENT, answering, serving
    ca = trustme.CA()
    ca_path = str(tmp_path / "ca-allow.pem")
    ca.cert_pem.write_to_path(ca_path)
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.2").configure_cert(tls)
    config = webhook_config(data_dir, ca_path, webhook_allow_cidrs=("127.0.0.0/8",))
    async with serving(answering(NO_CONTENT), tls=tls, hosts=("127.0.0.2",)) as server, \
            running_app(store, config, SystemClock()) as app:
        await add_endpoint(app, f"https://127.0.0.2:{server.port}/hook")
        event = await emit(app, "click")
        [d] = await _settled(app, event.id)
    assert d.status is DeliveryStatus.DELIVERED, d.attempts
    assert len(server.seen) == 1
