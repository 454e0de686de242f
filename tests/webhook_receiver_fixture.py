"""Test support for webhooks: a recording HTTPS receiver (trustme certificates),
the service in-process with a chosen clock, and helpers to make events.

The receiver listens on 127.0.0.1, port 0, with a certificate for
``localhost`` issued by a throwaway CA; the service trusts that CA through
``Config.webhook_ca_bundle``. Its URL uses ``localhost`` (allowed by the
address guard as a local receiver). Every request is recorded raw (method,
headers, body, the service clock's time) before ``respond`` decides the answer.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import trio
import trio.testing
import trustme

from actors.clock import Clock, TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.ids import new_id
from svc_engine.keys import Mode
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.webhook_delivery import Delivery
from tests.conftest import App, running_app
from web.services import system_random
from web.webhook_receiver import Received, Reply, serve_connection

Respond = Callable[[Received, int], Awaitable[Reply]]


@attrs.frozen
class Hit:
    at_ms: int
    request: Received

    @property
    def webhook_id(self) -> str:
        return self.request.header("webhook-id") or ""

    @property
    def headers(self) -> dict[str, str]:
        return dict(self.request.headers)


async def ok(req: Received, n: int) -> Reply:
    return 200, [], b"ok"


def status(code: int, body: bytes = b"nope", headers: list[tuple[str, str]] | None = None
           ) -> Respond:
    async def respond(req: Received, n: int) -> Reply:
        return code, list(headers or []), body

    return respond


class Receiver:
    def __init__(self, ca: trustme.CA, clock: Clock, *, tls: bool = True) -> None:
        self._ca = ca
        self._clock = clock
        self._tls = tls
        self.hits: list[Hit] = []
        self.respond: Respond = ok
        self.port = 0
        self._changed = trio.Event()

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://localhost:{self.port}/hook"

    def ids(self) -> list[str]:
        return [h.webhook_id for h in self.hits]

    def times(self) -> list[int]:
        return [h.at_ms for h in self.hits]

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[Hit]:
        with trio.fail_after(timeout):
            while len(self.hits) < count:
                await self._changed.wait()
        return self.hits

    async def _handle(self, req: Received) -> Reply:
        self.hits.append(Hit(self._clock.now_ms(), req))
        self._changed.set()
        self._changed = trio.Event()
        return await self.respond(req, len(self.hits))

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                    ) -> None:
        if self._tls:
            ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ca.issue_cert("localhost", "127.0.0.1", "::1").configure_cert(ctx)
            listeners: Any = await trio.open_ssl_over_tcp_listeners(0, ctx, host="127.0.0.1")
            self.port = listeners[0].transport_listener.socket.getsockname()[1]
        else:
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            self.port = listeners[0].socket.getsockname()[1]
        task_status.started()

        async def on_connection(stream: trio.abc.Stream) -> None:
            await serve_connection(stream, self._handle)

        await trio.serve_listeners(on_connection, listeners)


def make_ca(tmp_path: Path) -> tuple[trustme.CA, str]:
    ca = trustme.CA()
    path = tmp_path / "webhook-ca.pem"
    ca.cert_pem.write_to_path(str(path))
    return ca, str(path)


def webhook_config(data_dir: str, ca_bundle: str, **kw: Any) -> Config:
    return Config(data_dir=data_dir, public_url="http://svc.test", map_size=64 << 20,
                  rate_limit_per_key=0, webhook_ca_bundle=ca_bundle, **kw)


@asynccontextmanager
async def running_receiver(ca: trustme.CA, clock: Clock, *, tls: bool = True
                           ) -> AsyncIterator[Receiver]:
    receiver = Receiver(ca, clock, tls=tls)
    async with trio.open_nursery() as n:
        await n.start(receiver.serve)
        yield receiver
        n.cancel_scope.cancel()


World = tuple[App, "Receiver", TrioWallClock]


@asynccontextmanager
async def autojump_world(store: LmdbStore, config: Config, ca: trustme.CA
                         ) -> AsyncIterator[World]:
    """The service and a receiver on one ``TrioWallClock``: the tests using it
    also request ``autojump_clock`` (pytest-trio takes the clock from the
    test's own arguments), so wall times are exact virtual times."""
    clock = TrioWallClock()
    async with running_receiver(ca, clock) as receiver, \
            running_app(store, config, clock) as app:
        yield app, receiver, clock


async def until(clock: TrioWallClock, wall_ms: int) -> None:
    """Let virtual time run to ``wall_ms`` and everything due by then settle."""
    await trio.sleep_until(clock.trio_time_for(wall_ms))
    await trio.testing.wait_all_tasks_blocked()


async def failing_endpoint(world: World, *, clicks: int = 0) -> tuple[dict[str, Any], int]:
    """An endpoint whose receiver answers 500, and ``clicks`` events sent to it
    now; the endpoint and the time they were sent."""
    app, receiver, clock = world
    receiver.respond = status(500)
    ep = await add_endpoint(app, receiver.url)
    t0 = clock.now_ms()
    for _ in range(clicks):
        await emit(app, "click")
    return ep, t0


async def add_endpoint(app: App, url: str, key: str = "sk_test", **fields: Any
                       ) -> dict[str, Any]:
    async with app.client(key) as c:
        r = await c.post("/v1/webhooks/endpoints", json={"url": url, **fields})
    assert r.status_code == 201, r.text
    body: dict[str, Any] = r.json()
    return body


async def emit(app: App, type_: str = "click", *, mode: str = "test",
               project_id: str | None = None, data: dict[str, Any] | None = None,
               at_ms: int | None = None) -> OutboxEvent:
    """Record an event as the redirector or SDK would: queued when the project
    has an endpoint in that mode, the dispatcher woken once it committed."""
    services = app.services
    event = OutboxEvent(id=new_id(system_random(16)), type=EventType(type_),
                        project_id=project_id or app.project_id, mode=mode,
                        created_at_ms=services.clock.now_ms() if at_ms is None else at_ms,
                        data=data if data is not None else {"n": 1})

    def record(txn: Any) -> None:
        if services.store.wants_webhooks(txn, event.project_id, event.mode):
            services.store.append_outbox(txn, event)

    await services.store.write(record)
    return event


def deliveries_of(app: App, event_id: str, mode: Mode = Mode.TEST) -> list[Delivery]:
    """Deliveries (any endpoint) of one event, newest first, from the store."""
    assert app.services.webhooks is not None
    tables = app.services.webhooks.tables
    return [d for d in tables.recent(app.project_id, mode, limit=10_000)
            if d.event_id == event_id]
