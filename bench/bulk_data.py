"""Filling a data dir fast, through the service's own storage code.

For the scale and memory steps the service must start on a store that already
holds a lot: a million links, ten million clicks, a thousand projects, a
hundred thousand click-window entries. Going through HTTP would take hours,
so these helpers write with the same code the service runs, but in large
transactions of their own, with no server running:

- links: ``LinksStore.create`` (slug index, per-project index, the org's link
  counter) with its ``store.write`` pointed at the open batch transaction;
- clicks and window entries: ``AttributionStore.click_op`` (the redirector's
  op: the click, its analytics counters, a window entry if given), run in the
  batch transaction with the writer's counter coalescing (one read-modify-
  write per counter key per batch, exactly as the writer does);
- organizations, projects, keys, settings and platforms: ``web.tenancy`` and
  the stores' own methods, through the real writer.
"""

from __future__ import annotations

import random
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import attrs
import lmdb
import trio

from storage import counters
from storage.attribution_store import AttributionStore
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore
from storage.writer import Writer
from svc_engine.attribution import ClickWindowEntry
from svc_engine.clicks import Click
from svc_engine.ids import new_id
from svc_engine.keys import Mode, base62
from svc_engine.link_input import LinkDraft
from svc_engine.links import Link, new_link
from svc_engine.plans import Plan
from svc_engine.platforms import Platforms, apply_platforms_patch
from svc_engine.settings import DeferredSettings
from web import tenancy
from web.services import system_random

PLATFORMS = {"ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
                     "teamId": "ABCDE12345"},
             "android": {"packageName": "com.example.shop"},
             "web": {"fallbackUrl": "https://example.com/"}}
COUNTRIES = ("US", "GB", "DE", "FR", "SE", "NO", "IN", "BR", "JP", "NL", "ES", "IT")
REFERRERS = (None, "t.co", "news.example", "mail.example", "www.google.com")
PLATFORM_MIX = ("ios", "ios", "android", "android", "android", "desktop")


@attrs.frozen
class Tenant:
    org_id: str
    project_id: str
    keys: dict[str, str]


def with_writer(store: LmdbStore, fn: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``fn`` in trio with a fresh writer for the store (a closed writer
    cannot be restarted), then close it."""
    store.writer = Writer(store.env)

    async def main() -> Any:
        async with trio.open_nursery() as n:
            await n.start(store.writer.run)
            try:
                return await fn()
            finally:
                store.writer.close()

    return trio.run(main)


def bootstrap(store: LmdbStore, public_url: str, settings: DeferredSettings | None = None
              ) -> Tenant:
    """The first organization (on the unlimited plan) and project, its platforms
    and deferred settings."""

    async def go() -> Tenant:
        info = await tenancy.bootstrap(store, public_url, system_random, _now())
        org_id, project_id = str(info["organizationId"]), str(info["projectId"])
        await store.set_plan(org_id, Plan.SCALE)
        await configure(store, project_id, settings)
        keys = info["keys"]
        assert isinstance(keys, dict)
        return Tenant(org_id, project_id, {str(k): str(v) for k, v in keys.items()})

    return with_writer(store, go)  # type: ignore[no-any-return]


async def configure(store: LmdbStore, project_id: str,
                    settings: DeferredSettings | None) -> None:
    await LinksStore(store).put_platforms(project_id, apply_platforms_patch(Platforms(),
                                                                            PLATFORMS), None)
    if settings is not None:
        await store.put_settings(project_id, settings, None)


def create_projects(store: LmdbStore, org_id: str, count: int,
                    concurrency: int = 64) -> list[Tenant]:
    """``count`` more projects of ``org_id`` with their keys and platforms."""
    made: list[Tenant] = []

    async def go() -> None:
        async def worker(first: int) -> None:
            for i in range(first, count, concurrency):
                project, keys = await tenancy.create_project(store, org_id, f"bench {i}",
                                                             system_random, _now())
                await configure(store, project.id, None)
                made.append(Tenant(org_id, project.id, keys))

        async with trio.open_nursery() as n:
            for first in range(min(concurrency, count)):
                n.start_soon(worker, first)

    with_writer(store, go)
    return made


class _InTransaction:
    """A stand-in for the store whose ``write`` runs the op in an open transaction."""

    def __init__(self, store: LmdbStore) -> None:
        self._store = store
        self.txn: lmdb.Transaction | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    async def write(self, op: Callable[[lmdb.Transaction], Any]) -> Any:
        assert self.txn is not None
        return op(self.txn)


def write_links(store: LmdbStore, tenant: Tenant, domain: str, count: int,
                rng: random.Random, batch: int = 50_000) -> list[Link]:
    """``count`` links with random slugs, created by ``LinksStore.create``."""
    proxy = _InTransaction(store)
    links_store = LinksStore(proxy)  # type: ignore[arg-type]
    made: list[Link] = []
    now = _now()

    async def create_batch(n: int) -> None:
        for _ in range(n):
            draft = LinkDraft(path=f"/product/{len(made)}", campaign="scale")
            link = new_link(draft, link_id=new_id(rng.randbytes(16)),
                            project_id=tenant.project_id, mode=Mode.LIVE, domain=domain,
                            slug=base62(rng.randbytes(8), 9), now_ms=now)
            made.append(await links_store.create(link, org_id=tenant.org_id, quota=None,
                                                 idem=None))

    for first in range(0, count, batch):
        with store.env.begin(write=True) as txn:
            proxy.txn = txn
            trio.run(create_batch, min(batch, count - first))
        proxy.txn = None
    return made


def write_clicks(store: LmdbStore, links: Sequence[Link], count: int, rng: random.Random, *,
                 start_ms: int, span_ms: int, window: bool = False,
                 batch: int = 100_000) -> None:
    """``count`` clicks in time order over ``[start_ms, start_ms + span_ms)`` on
    ``links`` (skewed: low link indices get most clicks, as popular links do),
    recorded by ``AttributionStore.click_op``. With ``window`` every click is an
    iPhone tap that also leaves a click-window entry."""
    attribution = AttributionStore(store, "http://bench.invalid")
    step = span_ms / max(count, 1)
    done = 0
    while done < count:
        n = min(batch, count - done)
        ops = []
        for i in range(done, done + n):
            link = links[min(len(links) - 1, int(len(links) * rng.random() ** 2))]
            platform = "ios" if window else rng.choice(PLATFORM_MIX)
            os_major = 26 if platform == "ios" else (14 if platform == "android" else None)
            at = start_ms + int(i * step)
            click = Click(id=new_id(rng.randbytes(16)), link_id=link.id,
                          project_id=link.project_id, mode=link.mode, platform=platform,
                          os_major=os_major, country=rng.choice(COUNTRIES),
                          referrer_host=rng.choice(REFERRERS), at_ms=at)
            entry = None
            if window:
                entry = ClickWindowEntry(click_id=click.id, link_id=link.id, mode=link.mode,
                                         os_major=26, country=click.country, at_ms=at,
                                         net_hash=None)
            ops.append(attribution.click_op(click, link, window=entry, token=None))
        counter_batch, token = counters.begin_batch()
        try:
            with store.env.begin(write=True) as txn:
                for op in ops:
                    op(txn)
                counter_batch.keep_op()
                counter_batch.flush(txn)
        finally:
            counters.end_batch(token)
        done += n


def _now() -> int:
    return time.time_ns() // 1_000_000
