"""One webhook attempt over HTTP: sign, guard the address, POST, read a capped answer.

WebhookSenders make the outbound calls and report what happened; they never
decide retries or health (the WebhookActor does, from ``AttemptReport``).

* One shared ``httpx.AsyncClient`` (trio backend) for every delivery: a
  client per delivery costs ~19 ms of CPU building its TLS context
  (reading/perf-ceiling.md 2.5). Its proxies-from-environment are off
  (``trust_env=False``), so no proxy variable can route around the guard.
* The address guard sits where connections are made: ``GuardedBackend`` is
  the connection pool's network backend. It resolves the host itself, judges
  every address with ``svc_engine.ssrf.url_target_rule`` (private, loopback,
  link-local, multicast and metadata addresses refused unless in
  ``webhook_allow_cidrs``; literal ``localhost``, ``127.0.0.1`` and ``[::1]``
  URLs allowed), and dials only the addresses it judged. There is no second
  lookup between check and connect, so DNS rebinding has nothing to exploit.
  TLS still verifies the certificate for the URL's host name (SNI and
  hostname check use the name, not the address). A kept-alive connection
  stays on the address it was judged for; ``keepalive_expiry`` (30 s) bounds
  how long a re-pointed name keeps reaching its old address.
* Redirects are never followed (a 3xx is a failed attempt).
* The 10-second limit covers the whole attempt: resolution, connection, TLS,
  request, response head and reading the body (``trio.move_on_after``).
* At most ``READ_LIMIT`` bytes of the answer are read (raw, with
  ``Accept-Encoding: identity``, so nothing is decompressed); a longer body
  closes the connection. The delivery keeps the first 4 KiB.
* Each attempt is signed when it starts (``webhook-timestamp`` is that moment)
  with the secret current when the attempt was handed over.
"""

from __future__ import annotations

import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Sequence
from typing import Any

import attrs
import certifi
import httpcore
import httpx
import trio

from actors.clock import Clock
from svc_engine import signing
from svc_engine.ssrf import BLOCKED, RESOLVE, url_target_rule
from svc_engine.webhook_retry import (
    BLOCKED_ADDRESS,
    CONNECTION_ERROR,
    RESPONSE_DEADLINE_MS,
    TIMEOUT,
    TLS_ERROR,
)
from svc_engine.webhook_steps import Answer

READ_LIMIT = 64 * 1024
MAX_CONNECTIONS = 256
KEEPALIVE_EXPIRY_S = 30.0

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]


class BlockedAddress(Exception):
    """The guard refused every way to reach the host; the text says why."""


@attrs.frozen
class SendJob:
    """One attempt handed to a sender."""

    delivery_id: str
    endpoint_id: str
    url: str
    secret: str
    event_type: str
    body: bytes


@attrs.frozen
class AttemptReport:
    """What one attempt did, as the sender saw it."""

    job: SendJob
    started_at_ms: int
    finished_at_ms: int
    status: int | None
    error: str | None
    """An outcome kind from webhook_retry (timeout, tls_error, ...) or None."""
    detail: str
    response_body: bytes = b""
    retry_after: str | None = None

    def answer(self) -> Answer:
        return Answer(self.started_at_ms, self.finished_at_ms, self.status, self.error,
                      self.detail, self.response_body, self.retry_after)


async def system_resolver(host: str, port: int) -> Sequence[str]:
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise httpcore.ConnectError(f"cannot resolve {host}: {e}") from None
    return [str(info[4][0]) for info in infos]


class GuardedBackend(httpcore.AsyncNetworkBackend):
    """The connection pool's backend: resolve, judge, dial only allowed addresses."""

    def __init__(self, allow: Sequence[str] = (), resolver: Resolver = system_resolver,
                 inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._allow = tuple(allow)
        self._resolve = resolver
        self._inner = inner if inner is not None else httpcore.TrioBackend()

    async def allowed_addresses(self, host: str, port: int) -> tuple[str, ...]:
        named = f"[{host}]" if ":" in host else host
        url = f"https://{named}:{port}/"
        verdict = url_target_rule(url, None, self._allow)
        if verdict.decision == RESOLVE:
            verdict = url_target_rule(url, await self._resolve(host, port), self._allow)
        if not verdict.allowed:
            raise BlockedAddress(verdict.reason)
        return verdict.addresses

    async def connect_tcp(self, host: str, port: int,
                          timeout: float | None = None,  # noqa: ASYNC109 - httpcore's interface
                          local_address: str | None = None,
                          socket_options: Iterable[Any] | None = None
                          ) -> httpcore.AsyncNetworkStream:
        error: Exception | None = None
        for address in await self.allowed_addresses(host, port):
            try:
                return await self._inner.connect_tcp(address, port, timeout=timeout,
                                                     local_address=local_address,
                                                     socket_options=socket_options)
            except httpcore.ConnectError as e:
                error = e
        raise error or httpcore.ConnectError(f"no address to connect to for {host}")

    async def connect_unix_socket(self, path: str,
                                  timeout: float | None = None,  # noqa: ASYNC109 - as above
                                  socket_options: Iterable[Any] | None = None
                                  ) -> httpcore.AsyncNetworkStream:
        raise BlockedAddress("unix sockets are not webhook targets")

    async def sleep(self, seconds: float) -> None:
        await trio.sleep(seconds)


class _Body(httpx.AsyncByteStream):
    """A response body that ends after ``limit`` bytes (the rest is never read).

    Past the limit it closes the pool's stream (which drops the connection)
    and steps the stream once more, so every generator of httpcore's chain
    ends on the closed connection instead of being left suspended.
    """

    def __init__(self, stream: Any, limit: int) -> None:
        self._stream = stream
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        parts = self._stream.__aiter__()
        size = 0
        while True:
            try:
                part = await parts.__anext__()
            except StopAsyncIteration:
                return
            yield part[: self._limit - size]
            size += len(part)
            if size >= self._limit:
                await self.aclose()
                try:
                    while True:
                        await parts.__anext__()
                except Exception:  # the closed connection ends the chain
                    return

    async def aclose(self) -> None:
        if hasattr(self._stream, "aclose"):
            await self._stream.aclose()


class GuardedTransport(httpx.AsyncBaseTransport):
    """httpx's transport over an httpcore pool that uses ``GuardedBackend``."""

    def __init__(self, ssl_context: ssl.SSLContext, backend: GuardedBackend) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context, max_connections=MAX_CONNECTIONS,
            max_keepalive_connections=MAX_CONNECTIONS, keepalive_expiry=KEEPALIVE_EXPIRY_S,
            http1=True, http2=False, network_backend=backend)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(scheme=request.url.raw_scheme, host=request.url.raw_host,
                             port=request.url.port, target=request.url.raw_path),
            headers=request.headers.raw, content=request.stream,
            extensions=request.extensions)
        resp = await self._pool.handle_async_request(req)
        return httpx.Response(status_code=resp.status, headers=resp.headers,
                              stream=_Body(resp.stream, READ_LIMIT),
                              extensions=resp.extensions)

    async def aclose(self) -> None:
        await self._pool.aclose()


def ssl_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """Certificates are verified against ``ca_bundle`` (default: certifi's)."""
    return ssl.create_default_context(cafile=ca_bundle or certifi.where())


class HttpSender:
    """Makes attempts with one shared client; use ``async with`` to open it."""

    def __init__(self, clock: Clock, *, allow: Sequence[str] = (),
                 ca_bundle: str | None = None, resolver: Resolver = system_resolver) -> None:
        self._clock = clock
        self._allow = tuple(allow)
        self._backend = GuardedBackend(self._allow, resolver)
        self._client = httpx.AsyncClient(
            transport=GuardedTransport(ssl_context(ca_bundle), self._backend),
            follow_redirects=False, trust_env=False,
            timeout=RESPONSE_DEADLINE_MS / 1000)

    async def __aenter__(self) -> HttpSender:
        await self._client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._client.aclose()

    async def attempt(self, job: SendJob) -> AttemptReport:
        started = self._clock.now_ms()
        status: int | None = None
        error: str | None = None
        detail = ""
        retry_after: str | None = None
        body = b""
        verdict = url_target_rule(job.url, None, self._allow)
        if verdict.decision == BLOCKED:
            error, detail = BLOCKED_ADDRESS, verdict.reason
        else:
            headers = signing.build_headers(job.secret, job.delivery_id, started // 1000,
                                            job.body, job.event_type)
            headers["accept-encoding"] = "identity"
            with trio.move_on_after(RESPONSE_DEADLINE_MS / 1000) as scope:
                try:
                    async with self._client.stream("POST", job.url, content=job.body,
                                                   headers=headers) as resp:
                        status = resp.status_code
                        retry_after = resp.headers.get("retry-after")
                        body = b"".join([c async for c in resp.aiter_raw()])[:READ_LIMIT]
                except BlockedAddress as e:
                    error, detail = BLOCKED_ADDRESS, str(e)
                except Exception as e:  # any failure of the exchange is a failed attempt
                    error, detail = failure_of(e)
            if scope.cancelled_caught:
                error, detail = TIMEOUT, "no complete answer within 10 s"
        return AttemptReport(job=job, started_at_ms=started,
                             finished_at_ms=self._clock.now_ms(), status=status, error=error,
                             detail=detail, response_body=body, retry_after=retry_after)


def failure_of(exc: BaseException) -> tuple[str, str]:
    """(outcome kind, words) for an exception raised by an exchange."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLError):
            return TLS_ERROR, f"TLS error: {cause.reason or cause}"
        cause = cause.__cause__ or cause.__context__
    if isinstance(exc, httpx.TimeoutException | httpcore.TimeoutException):
        return TIMEOUT, f"timeout: {exc}"
    text = str(exc) or type(exc).__name__
    return CONNECTION_ERROR, f"connection error: {text}"
