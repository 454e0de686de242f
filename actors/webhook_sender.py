"""One webhook attempt over HTTP: sign, guard the address, POST, read a capped answer.

WebhookSenders make the outbound calls and report what happened; they never
decide retries or health (the WebhookActor does, from ``AttemptReport``).

* One ``H11Client`` (actors/h11_client.py: trio + h11, HTTP/1.1, a keep-alive
  pool per vetted address, port and TLS host) and one TLS context for every
  delivery: a TLS context per delivery costs ~19 ms of CPU
  (reading/perf-ceiling.md 2.5). Nothing is read from the environment, so no
  proxy variable can route around the guard.
* The address guard decides where to connect: ``url_target_rule`` on the URL
  (private, loopback, link-local, multicast and metadata addresses refused
  unless in ``webhook_allow_cidrs``; literal ``localhost``, ``127.0.0.1`` and
  ``[::1]`` URLs allowed; plain http only for those). ``GuardedBackend``
  takes a host name's addresses from ``NameCache`` (actors/name_cache.py:
  answers kept 30 s, one lookup per name in flight), judges every address of
  the answer on every attempt, and dials or takes from the pool only the
  addresses it judged. There is no second lookup between check and connect,
  so DNS rebinding has nothing to exploit. TLS verifies the certificate for
  the URL's host name (SNI and hostname check use the name, not the address).
* Redirects are never followed (a 3xx is a failed attempt).
* One deadline (10 s, ``deadline_s``) covers the whole attempt: resolution,
  connection, TLS, request, response head and reading the body.
* At most ``READ_LIMIT`` bytes of the answer are read (raw, with
  ``Accept-Encoding: identity``, so nothing is decompressed); a longer body
  closes the connection. The delivery keeps the first 4 KiB.
* Each attempt is signed when it starts (``webhook-timestamp`` is that moment)
  with the secret current when the attempt was handed over. The header
  fields are ``signing.build_headers``'s (svc_engine/signing.py), built
  straight as the bytes h11 takes.
"""

from __future__ import annotations

import functools
import socket
import ssl
from collections.abc import Sequence
from typing import Protocol
from urllib.parse import urlsplit

import attrs
import certifi
import h11
import trio

from actors.clock import Clock, SystemClock
from actors.h11_client import H11Client, Pool, connect_tcp
from actors.name_cache import DNS_CACHE_MS, NameCache, Resolver
from svc_engine import signing
from svc_engine.errors import ValidationError
from svc_engine.ssrf import BLOCKED, DEFAULT_PORTS, RESOLVE, TargetVerdict, url_target_rule
from svc_engine.webhook_retry import (
    BLOCKED_ADDRESS,
    CONNECTION_ERROR,
    RESPONSE_DEADLINE_MS,
    TIMEOUT,
    TLS_ERROR,
)
from svc_engine.webhook_steps import Answer

READ_LIMIT = 64 * 1024

_target_rule = functools.lru_cache(maxsize=4096)(url_target_rule)
"""``url_target_rule`` is pure; a delivery's URL is judged once, not per attempt.
(Arguments must be hashable: tuples for the addresses and the allow-list.)"""

_CONTENT_TYPE = (b"content-type", b"application/json")
_USER_AGENT = (b"user-agent", signing.USER_AGENT.encode("ascii"))
_ACCEPT_IDENTITY = (b"accept-encoding", b"identity")


class BlockedAddress(Exception):
    """The guard refused every way to reach the host; the text says why."""


class Dialer(Protocol):
    async def connect_tcp(self, host: str, port: int) -> trio.SocketStream: ...


class TcpDialer:
    """Connects to an IP address; never resolves."""

    async def connect_tcp(self, host: str, port: int) -> trio.SocketStream:
        return await connect_tcp(host, port)


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
    elapsed_ms: int | None = None
    """How long the attempt took on the monotonic clock (None: the wall
    times' difference)."""

    def answer(self) -> Answer:
        return Answer(self.started_at_ms, self.finished_at_ms, self.status, self.error,
                      self.detail, self.response_body, self.elapsed_ms)


async def system_resolver(host: str, port: int) -> Sequence[str]:
    try:
        infos = await trio.socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise OSError(f"cannot resolve {host}: {e}") from None
    return [str(info[4][0]) for info in infos]


class GuardedBackend:
    """Resolve (through a ``NameCache``), judge every address, dial only the
    addresses judged. ``dns_cache_ms=0``: look the name up on every attempt."""

    def __init__(self, allow: Sequence[str] = (), resolver: Resolver = system_resolver,
                 inner: Dialer | None = None, *, clock: Clock | None = None,
                 dns_cache_ms: int = DNS_CACHE_MS, local: bool = True) -> None:
        self._allow = tuple(allow)
        self._local = local
        self._names = NameCache(resolver, clock if clock is not None else SystemClock(),
                                ttl_ms=dns_cache_ms)
        self._inner = inner if inner is not None else TcpDialer()

    async def allowed_addresses(self, host: str, port: int) -> tuple[str, ...]:
        named = f"[{host}]" if ":" in host else host
        url = f"https://{named}:{port}/"
        verdict = _target_rule(url, None, self._allow, self._local)
        if verdict.decision == RESOLVE:
            resolved = await self._names.addresses(host, port)
            verdict = _target_rule(url, resolved, self._allow, self._local)
        if not verdict.allowed:
            raise BlockedAddress(verdict.reason)
        return verdict.addresses

    async def dial(self, addresses: Sequence[str], port: int) -> tuple[str, trio.SocketStream]:
        """Connect to the first of ``addresses`` (already judged) that answers."""
        error: Exception | None = None
        for address in addresses:
            try:
                return address, await self._inner.connect_tcp(address, port)
            except Exception as e:  # any dial failure moves on to the next address
                error = e
        raise error or OSError("no address to connect to")

    async def connect_tcp(self, host: str, port: int) -> trio.SocketStream:
        return (await self.dial(await self.allowed_addresses(host, port), port))[1]


@attrs.frozen
class _Request:
    """What the sender needs of a URL besides the guard's verdict (cached per URL)."""

    target: bytes
    host_header: bytes
    tls: bool


@functools.lru_cache(maxsize=1024)
def _request_of(url: str, host: str, port: int) -> _Request:
    split = urlsplit(url)
    target = (split.path or "/") + (f"?{split.query}" if split.query else "")
    scheme = split.scheme.lower()
    named = f"[{host}]" if ":" in host else host
    authority = named if port == DEFAULT_PORTS[scheme] else f"{named}:{port}"
    return _Request(target.encode("ascii"), authority.encode("ascii"), scheme == "https")


def ssl_context(ca_bundle: str | None = None) -> ssl.SSLContext:
    """Certificates are verified against ``ca_bundle`` (default: certifi's)."""
    return ssl.create_default_context(cafile=ca_bundle or certifi.where())


class HttpSender:
    """Makes attempts over one pooled client; use ``async with`` to open it."""

    def __init__(self, clock: Clock, *, allow: Sequence[str] = (),
                 ca_bundle: str | None = None, resolver: Resolver = system_resolver,
                 deadline_s: float = RESPONSE_DEADLINE_MS / 1000,
                 pool: Pool | None = None, dns_cache_ms: int = DNS_CACHE_MS,
                 local: bool = True) -> None:
        self._clock = clock
        self._allow = tuple(allow)
        self._local = local  # receivers on this machine (SVC_WEBHOOK_LOCAL_RECEIVERS)
        self._deadline_s = deadline_s
        self._guard = GuardedBackend(self._allow, resolver, clock=clock,
                                     dns_cache_ms=dns_cache_ms, local=local)
        self._client = H11Client(ssl_context(ca_bundle), dial=self._guard.dial, pool=pool)

    async def __aenter__(self) -> HttpSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self._client.close()

    async def attempt(self, job: SendJob) -> AttemptReport:
        started = self._clock.now_ms()
        # The 10-second rule is judged on trio's clock: the wall clock may be
        # stepped (NTP) during an attempt, which made a 5 ms answer 60 s long.
        began = trio.current_time()
        status: int | None = None
        error: str | None = None
        detail = ""
        body = b""
        verdict = _target_rule(job.url, None, self._allow, self._local)
        if verdict.decision == BLOCKED:
            error, detail = BLOCKED_ADDRESS, verdict.reason
        else:
            head = signed_head(job, started // 1000)
            with trio.move_on_after(self._deadline_s) as scope:
                try:
                    status, body = await self._post(job, verdict, head)
                except BlockedAddress as e:
                    error, detail = BLOCKED_ADDRESS, str(e)
                except Exception as e:  # any failure of the exchange is a failed attempt
                    error, detail = failure_of(e)
            if scope.cancelled_caught:
                status, body = None, b""
                error, detail = TIMEOUT, f"no complete answer within {self._deadline_s:g} s"
        return AttemptReport(job=job, started_at_ms=started,
                             finished_at_ms=self._clock.now_ms(), status=status, error=error,
                             detail=detail, response_body=body,
                             elapsed_ms=round((trio.current_time() - began) * 1000))

    async def _post(self, job: SendJob, verdict: TargetVerdict,
                    head: list[tuple[bytes, bytes]]) -> tuple[int, bytes]:
        if verdict.allowed:
            addresses = verdict.addresses
        else:
            addresses = await self._guard.allowed_addresses(verdict.host, verdict.port)
        req = _request_of(job.url, verdict.host, verdict.port)
        head[0] = (b"host", req.host_header)
        request = h11.Request(method=b"POST", target=req.target, headers=head)
        response = await self._client.request(addresses, verdict.port,
                                              verdict.host if req.tls else None,
                                              request, job.body, READ_LIMIT)
        return response.status, response.body


def signed_head(job: SendJob, timestamp_s: int) -> list[tuple[bytes, bytes]]:
    """The request's header fields, in order, with ``host`` left for the caller:
    ``signing.build_headers``'s (same checks, same values), then
    ``content-length`` and ``accept-encoding``."""
    if not job.event_type or not job.event_type.isascii() or not job.event_type.isidentifier():
        raise ValidationError("event type must be a plain ASCII word", field="event_type")
    signature = signing.sign(job.secret, job.delivery_id, timestamp_s, job.body)
    return [(b"host", b""), _CONTENT_TYPE, _USER_AGENT,
            (b"webhook-id", job.delivery_id.encode("ascii")),
            (b"webhook-timestamp", b"%d" % timestamp_s),
            (b"webhook-signature", signature.encode("ascii")),
            (b"svc-event", job.event_type.encode("ascii")),
            (b"content-length", b"%d" % len(job.body)), _ACCEPT_IDENTITY]


def failure_of(exc: BaseException) -> tuple[str, str]:
    """(outcome kind, words) for an exception raised by an exchange."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, ssl.SSLError):
            return TLS_ERROR, f"TLS error: {cause.reason or cause}"
        cause = cause.__cause__ or cause.__context__
    text = str(exc) or type(exc).__name__
    return CONNECTION_ERROR, f"connection error: {text}"
