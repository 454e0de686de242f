"""Assembling the running service: which actors start, and the ASGI front.

Used by ``svc serve`` (web/main.py) and by the in-process test fixture, so both
run the same parts. Each part is started with ``nursery.start`` in the
service nursery handed in; none lives in a request's nursery.
"""

from __future__ import annotations

import trio

from actors.clock import Clock
from actors.registry import Registry
from actors.timer import TimerActor
from actors.webhook_dispatch import start_webhooks
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from web.dashboard import create_dashboard
from web.front import Front
from web.housekeeping import Housekeeper
from web.network_keyring import NetworkKeyring
from web.services import Services, system_random


async def start_services(nursery: trio.Nursery, config: Config, store: LmdbStore,
                         clock: Clock, server_secret: bytes) -> Services:
    timer = TimerActor(store, clock)
    registry = Registry(store, clock, nursery)
    network_keys = NetworkKeyring.open(config.data_dir, clock, system_random, server_secret)
    services = Services(config=config, store=store, clock=clock, registry=registry,
                        timer=timer, server_secret=server_secret, network_keys=network_keys)
    await nursery.start(network_keys.run)
    store.on_outbox = services.outbox_wakeup.notify
    await nursery.start(Housekeeper(services).run)
    services.webhooks = await start_webhooks(
        nursery, store=store, clock=clock, timer=timer, wakeup=services.outbox_wakeup,
        random=services.random, allow=config.webhook_allow_cidrs,
        ca_bundle=config.webhook_ca_bundle, retry_scale=config.webhook_retry_scale,
        local=config.webhook_local_receivers)
    # Handlers of every deadline kind are registered above; now load and run.
    await nursery.start(timer.run)
    return services


def build_front(services: Services) -> Front:
    return Front(services, dashboard=create_dashboard(services))
