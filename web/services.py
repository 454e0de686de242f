"""The running service's parts, handed to every handler."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import TypeVar
from urllib.parse import SplitResult, urlsplit

import attrs

from actors.clock import Clock
from actors.registry import Registry
from actors.signal import Wakeup
from actors.timer import TimerActor
from actors.webhooks import WebhookActor
from storage.attribution_store import AttributionStore
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.links import Link, default_domain
from web.network_keyring import NetworkKeyring
from web.read_threads import ReadThreads

T = TypeVar("T")


def system_random(n: int) -> bytes:
    return secrets.token_bytes(n)


def bare_host(host: str) -> str:
    """A Host header's name, as link domains are kept: lower case, without
    its port (an IPv6 address keeps its brackets) or a trailing dot
    (``go.acme.com.`` is the same name, fully qualified). It may be empty
    (``Host: :80``): no domain is."""
    host = host.strip().lower()
    bare = host if host.endswith("]") else host.rsplit(":", 1)[0]
    return bare.rstrip(".")


@attrs.define
class Services:
    config: Config
    store: LmdbStore
    clock: Clock
    registry: Registry
    timer: TimerActor
    server_secret: bytes
    network_keys: NetworkKeyring
    random: Callable[[int], bytes] = system_random
    # Notified after a commit that appended to the outbox; the webhook
    # dispatcher waits on it (and also polls, so a missed notify only delays).
    outbox_wakeup: Wakeup = attrs.field(factory=Wakeup)
    # The owner of webhook endpoints and deliveries (set by web/assembly.py).
    webhooks: WebhookActor | None = None
    links: LinksStore = attrs.field(init=False)
    attribution: AttributionStore = attrs.field(init=False)
    reads: ReadThreads = attrs.field(init=False)
    # Projects with an export streaming (web/export.py: one at a time each).
    exports: set[str] = attrs.field(init=False, factory=set)

    def __attrs_post_init__(self) -> None:
        self.reads = ReadThreads(inline=self.store.writer.inline)
        self.links = LinksStore(self.store)
        self.attribution = AttributionStore(self.store, self.config.base_url)

    async def off_loop(self, read: Callable[[], T]) -> T:
        """Run ``read`` in a worker thread: for a read that may take longer
        than a tap's whole answer (an analytics range of a busy project, a
        filtered scan, an export's page). On the event loop it would hold
        every redirect and SDK call behind it (hundreds of milliseconds, and
        the load shedder's 503s past ``SVC_MAX_LAG_MS``); in a thread the loop
        gets the interpreter back within a short switch interval
        (web/read_threads.py). At most ``READ_THREADS`` run at once."""
        return await self.reads.run(read)

    @property
    def default_domain(self) -> str:
        return default_domain(self.config.base_url)

    def link_domain(self, host: str | None) -> str:
        """The link domain a Host header (or URL netloc) names; an unknown host
        falls back to the default domain."""
        return self._domain_and_owner(host)[0]

    def link_at(self, host: str | None, slug: str) -> Link | None:
        """The link a tap on ``host`` names by ``slug``. On a custom domain, only
        a link of the project that owns the domain now: a domain given up and
        claimed by another project must not serve the links made on it before
        (they redirected to the first project's app and fallbacks, under the
        second's association files)."""
        domain, owner = self._domain_and_owner(host)
        link = self.links.by_slug(domain, slug)
        if link is not None and owner is not None and link.project_id != owner:
            return None
        return link

    def _domain_and_owner(self, host: str | None) -> tuple[str, str | None]:
        """The link domain of a Host header, and its owning project (None for
        the default domain, which every project shares)."""
        default = self.default_domain
        if not host:
            return default, None
        host = host.strip().lower()
        if host == default:
            return host, None
        bare = bare_host(host)
        owner = self.links.domain_owner(bare)
        if owner is not None:
            return bare, owner
        return default, None

    def url_link_domain(self, parts: SplitResult) -> str | None:
        """The link domain of a URL that opened the app, or None when its host
        is neither the default domain nor a custom one: an app's own website
        links reach ``resolve`` too, and ``https://shop.example/sale`` is not
        the short link ``sale``. Unlike :meth:`link_domain` (a request's Host,
        which a proxy may rewrite), nothing falls back; the port is ignored
        (``https://go.example:443/x`` is ``go.example``), user info refused."""
        try:
            host, _ = parts.hostname, parts.port  # port: a ValueError when invalid
        except ValueError:
            return None
        if not host or parts.username is not None or parts.password is not None:
            return None
        default = self.default_domain
        if host == urlsplit("//" + default).hostname:
            return default
        return host if self.links.domain_owner(host) is not None else None
