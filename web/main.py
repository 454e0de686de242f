"""The composition root: ``svc serve``.

Before anything opens, the process makes room for its connection cap in the
open-file limit (web/fd_limit.py) and takes its data directory's serve lock
(web/serve_lock.py: one serving process per data directory).

One ``trio.run``. The root nursery holds the storage writer; inside it the
service nursery holds the timer, the housekeeper, the project actors' registry
and the HTTP server (web/server.py) with the ASGI front. On SIGTERM or SIGINT
the server stops accepting, closes idle connections and lets in-flight
requests finish (``SVC_SHUTDOWN_GRACE``), the actors are stopped, the writer
commits everything queued, and LMDB is closed. A request is answered only
after its write is durable, so nothing acknowledged is lost.
"""

from __future__ import annotations

import contextlib
import gc
import json
import logging
import os
import signal
import socket
import ssl
import sys
from collections.abc import Awaitable, Callable

import attrs
import trio

from actors.clock import Clock, SystemClock
from actors.webhook_sender import ssl_context
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.errors import (
    MapUnavailable,
    StoreDamaged,
    StoreSchema,
    StoreUnreachable,
    ValidationError,
)
from web import fd_limit, logs, malloc_arenas, serve_lock, tenancy, useragent
from web.assembly import build_front, start_services
from web.front import Front
from web.metrics_sources import server_metrics
from web.server import HttpServer, ListenFailed, ServerSettings, tls_context
from web.services import system_random

log = logging.getLogger("svc")


def _concrete_port(config: Config) -> Config:
    """``--port 0`` picks a free port now, so that the public base URL (short
    links, the dashboard's snippets) names the port actually served."""
    if config.port != 0:
        return config
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        try:
            probe.bind((config.host, 0))
        except OSError as e:  # an unknown host, or not this machine's: one line
            raise ListenFailed.of(config.host, 0, e) from e
        port = int(probe.getsockname()[1])
    return attrs.evolve(config, port=port)


def _tune_gc() -> None:
    """Everything alive once the service has started (modules, templates, the
    user-agent and bot tables, caches) lives as long as the process: freeze it
    out of the collector's scans, and collect the young generation less often.
    Full collections then scan only what requests created, which keeps them
    short (bench/README.md has the p99 effect)."""
    gc.collect()
    gc.freeze()
    gen0, gen1, gen2 = gc.get_threshold()
    gc.set_threshold(max(gen0, 7000), gen1, gen2)


def server_settings(config: Config) -> ServerSettings:
    tls = bool(config.certfile and config.keyfile)
    return ServerSettings(host=config.host, port=config.port,
                          max_connections=config.max_connections,
                          max_lag_s=config.max_lag_ms / 1000,
                          keep_alive_s=5.0, max_header_bytes=16 * 1024,
                          shutdown_grace_s=float(config.shutdown_grace_s),
                          certfile=config.certfile if tls else None,
                          keyfile=config.keyfile if tls else None)


async def _wait_for_signal(stop: trio.Event) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("received %s: shutting down", signal.Signals(signum).name)
            stop.set()
            return


async def serve(config: Config, *, clock: Clock | None = None, bootstrap: bool = False,
                stop: trio.Event | None = None,
                on_ready: Callable[[list[str]], Awaitable[None] | None] | None = None) -> None:
    logs.setup(config.log_level)
    arenas = malloc_arenas.limit(os.environ)  # before the writer's and the workers' threads
    if arenas is not None:
        log.debug("malloc arenas: at most %d (set %s to choose)", arenas, malloc_arenas.ENV)
    config = _concrete_port(config)
    cap = fd_limit.make_room(config.max_connections)
    if cap != config.max_connections:
        config = attrs.evolve(config, max_connections=cap)
    clock = clock or SystemClock()
    if stop is None:
        stop = trio.Event()
    lock = serve_lock.hold(config.data_dir)
    try:
        await _serve_data(config, clock, bootstrap, stop, on_ready)
    finally:
        lock.close()


async def _serve_data(config: Config, clock: Clock, bootstrap: bool, stop: trio.Event,
                      on_ready: Callable[[list[str]], Awaitable[None] | None] | None) -> None:
    store = LmdbStore(config.data_dir, map_size=config.map_size)
    try:
        async with trio.open_nursery() as storage_nursery:
            await storage_nursery.start(store.writer.run)
            try:
                await _serve_with_store(config, store, clock, bootstrap, stop, on_ready)
            finally:
                store.writer.close()
        stats = store.writer.statistics()
        log.info("writer: %d batches, %d ops (largest batch %d, %d failed)", stats.batches,
                 stats.ops, stats.largest_batch, stats.failed_ops)
    finally:
        store.close()
        log.info("stopped; data is closed")
        logs.flush_access()


async def _serve_with_store(config: Config, store: LmdbStore, clock: Clock, bootstrap: bool,
                            stop: trio.Event,
                            on_ready: Callable[[list[str]], Awaitable[None] | None] | None
                            ) -> None:
    secret = await store.put_meta_once("server_secret", system_random(32))
    served = tenancy.domain_of(config.base_url)
    before = await tenancy.record_served_domain(store, config.base_url)
    if before is not None:
        log.warning("the default link domain is now %s (it was %s): links made on %s do "
                    "not answer here; to serve them, start with a public URL on %s "
                    "(SVC_PUBLIC_URL or --public-url)", served, before, before, before)
    if not (config.country_header or config.geoip_db):
        blind = tenancy.projects_with_probabilistic_matching(store)
        if blind:
            log.warning("probabilistic matching is on for %d project(s) (%s) but no country "
                        "source is set (SVC_COUNTRY_HEADER or SVC_GEOIP_DB): cohort matching "
                        "needs each tap's country, so only network matching "
                        "(probabilisticIpMatching) can attribute their iOS installs",
                        len(blind), ", ".join(blind[:5]) + (", ..." if len(blind) > 5 else ""))
    if bootstrap:
        info = await tenancy.bootstrap(store, config.base_url, system_random, clock.now_ms())
        print(json.dumps(info, indent=2), flush=True)
        owner = info["owner"]
        assert isinstance(owner, dict)
        print(f"svc: dashboard at {config.dashboard_url} (sign in as {owner['email']}"
              + ("" if info.get("created") else "; the password was shown on first start")
              + ")", flush=True)
    async with trio.open_nursery() as nursery:
        services = await start_services(nursery, config, store, clock, secret)
        front = build_front(services)
        useragent.prepare()  # compile the parser and bot tables before the first tap
        _tune_gc()
        nursery.start_soon(_wait_for_signal, stop)
        nursery.start_soon(logs.flush_periodically)
        async with trio.open_nursery() as http:
            binds = await http.start(_serve_http, front, config, stop)
            print(f"svc: listening on {' '.join(binds)}", flush=True)
            if on_ready is not None:
                maybe = on_ready(binds)
                if maybe is not None:
                    await maybe
        # The server has drained the in-flight requests: stop the actors.
        nursery.cancel_scope.cancel()


async def _serve_http(front: Front, config: Config, stop: trio.Event, *,
                      task_status: trio.TaskStatus[list[str]] = trio.TASK_STATUS_IGNORED
                      ) -> None:
    server = HttpServer(front, server_settings(config))
    front.metrics.add(server_metrics(server))
    await server.serve(stop, task_status=task_status)


def check_files(config: Config) -> None:
    """The files the settings name load, before anything starts: a TLS pair, a
    CA bundle for webhooks, a country database. ValidationError naming the
    setting otherwise (``svc: validation_error: ...``, exit 2)."""
    if config.certfile and config.keyfile:
        try:
            tls_context(server_settings(config))
        except (OSError, ssl.SSLError) as e:
            raise ValidationError(f"SVC_CERTFILE/SVC_KEYFILE: cannot load {config.certfile} "
                                  f"and {config.keyfile}: {e}", field="SVC_CERTFILE") from None
    if config.webhook_ca_bundle:
        try:
            ssl_context(config.webhook_ca_bundle)
        except (OSError, ssl.SSLError) as e:
            raise ValidationError(f"SVC_WEBHOOK_CA_BUNDLE: cannot load "
                                  f"{config.webhook_ca_bundle}: {e}",
                                  field="SVC_WEBHOOK_CA_BUNDLE") from None
    if config.geoip_db:
        try:
            import maxminddb

            maxminddb.open_database(config.geoip_db).close()
        except (ImportError, OSError, ValueError, RuntimeError) as e:  # InvalidDatabaseError
            raise ValidationError(f"SVC_GEOIP_DB: cannot open {config.geoip_db} as a "
                                  f"MaxMind-format database: {e}", field="SVC_GEOIP_DB") from None


def run(config: Config, *, bootstrap: bool = False) -> None:
    check_files(config)
    # The handlers only say why; the exit is raised after the try. Raised in an
    # ``except*`` block, Python 3.11.0-3.11.3 wrap it in an exception group
    # (gh-103590), which prints a traceback under the one line.
    refused = False
    try:
        with contextlib.suppress(KeyboardInterrupt):
            trio.run(lambda: serve(config, bootstrap=bootstrap))
    except* ListenFailed as group:  # one line, not a traceback: the usual cause is plain
        failed: BaseException = group
        while isinstance(failed, BaseExceptionGroup):  # nested by the nurseries
            failed = failed.exceptions[0]
        hint = ("is another svc running? SVC_PORT or --port choose another port"
                if getattr(failed, "in_use", False) else
                "SVC_HOST or --host names an address of this machine to listen on")
        print(f"svc: {failed} ({hint})", file=sys.stderr, flush=True)
        refused = True
    except* (serve_lock.DataDirBusy, MapUnavailable, StoreDamaged, StoreSchema,
             StoreUnreachable, tenancy.BootstrapInterrupted) as group:
        print(f"svc: {group.exceptions[0]}", file=sys.stderr, flush=True)
        refused = True
    if refused:
        raise SystemExit(1)
    sys.stdout.flush()
