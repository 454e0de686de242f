"""Shared fixtures: a real LMDB in a temp dir, the service in-process (ASGI) and
as a real process on a real socket."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import hypothesis
import pytest
import trio
import trio.testing

from actors.clock import Clock, TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.analytics import DAY_MS
from svc_engine.config import Config
from tests.server_process import ServerProcess
from web import tenancy
from web.assembly import build_front, start_services
from web.front import Front
from web.services import Services, system_random

# No time limit on one example: two cores shared with the service's own threads
# (and, in CI, whatever else runs) make an example's time vary; what a property
# test finds should be a counterexample, not a slow moment.
hypothesis.settings.register_profile("svc", deadline=None)
hypothesis.settings.load_profile("svc")


@pytest.fixture
def data_dir(tmp_path: Any) -> str:
    return str(tmp_path / "data")


@pytest.fixture
async def store(data_dir: str, request: pytest.FixtureRequest) -> AsyncIterator[LmdbStore]:
    # Under autojump_clock, commit in the loop's thread (see storage/writer.py).
    inline = "autojump_clock" in request.fixturenames
    s = LmdbStore(data_dir, map_size=64 << 20, inline_commit=inline)
    async with trio.open_nursery() as n:
        await n.start(s.writer.run)
        yield s
        s.writer.close()
    s.close()


class App:
    """The service in-process: real store, actors and timer; requests via ASGI."""

    def __init__(self, services: Services, front: Front, info: dict[str, Any]) -> None:
        self.services = services
        self.front = front
        self.info = info
        self.keys: dict[str, str] = info["keys"]
        self.project_id: str = info["projectId"]
        self.org_id: str = info["organizationId"]

    async def flush(self) -> None:
        """Wait until every write queued so far is committed (the writer is FIFO)."""
        await self.services.store.write(lambda txn: None)

    def client(self, key: str | None = None, **headers: str) -> httpx.AsyncClient:
        h = {"content-type": "application/json", **headers}
        if key is not None:
            h["authorization"] = f"Bearer {self.keys.get(key, key)}"
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=self.front),
                                 base_url="http://svc.test", headers=h)


@pytest.fixture
def config(data_dir: str) -> Config:
    return Config(data_dir=data_dir, public_url="http://svc.test", map_size=64 << 20,
                  rate_limit_per_key=0, country_header="CF-IPCountry")


@asynccontextmanager
async def running_app(store: LmdbStore, config: Config, clock: Clock) -> AsyncIterator[App]:
    """The service in-process with this config and clock (``app`` is it with
    the default config and the wall clock)."""
    info = await tenancy.bootstrap(store, config.base_url, system_random, clock.now_ms())
    secret = await store.put_meta_once("server_secret", b"s" * 32)
    async with trio.open_nursery() as n:
        services = await start_services(n, config, store, clock, secret)
        yield App(services, build_front(services), info)
        n.cancel_scope.cancel()


def midday_clock() -> TrioWallClock:
    """The wall clock, starting at noon UTC. Trio's clock starts at a random
    point, which put a test's "today" anywhere in the day: a test counting by
    day (today, the last 7 days) could see midnight pass while it ran. Under
    a MockClock (``autojump_clock``) it is the default one, whose wall time
    at trio time 0 tests compute from (1_790_000_000_000: 14:13 UTC)."""
    if isinstance(trio.lowlevel.current_clock(), trio.testing.MockClock):
        return TrioWallClock()
    start = TrioWallClock().now_ms()
    return TrioWallClock(start - start % DAY_MS + DAY_MS // 2
                         - round(trio.current_time() * 1000))


@pytest.fixture
async def app(store: LmdbStore, config: Config) -> AsyncIterator[App]:
    async with running_app(store, config, midday_clock()) as a:
        yield a


@pytest.fixture
def server_factory(tmp_path: Any) -> Iterator[type[ServerProcess]]:
    started: list[ServerProcess] = []

    class Factory(ServerProcess):
        def __init__(self, data_dir: str | None = None, **kw: Any) -> None:
            super().__init__(data_dir or str(tmp_path / "srv-data"), log_dir=str(tmp_path),
                             **kw)
            started.append(self)

    yield Factory
    for s in started:
        s.kill()


def pytest_configure(config: Any) -> None:
    os.environ.setdefault("SVC_LOG_LEVEL", "info")


@pytest.fixture(autouse=True, scope="session")
def _fast_password_hashing() -> Iterator[None]:
    """Argon2 at its production cost takes ~50 ms a hash; tests hash many
    passwords. The algorithm and code path stay the same, only cheaper."""
    import argon2

    from web import tenancy

    saved = tenancy._hasher
    tenancy._hasher = argon2.PasswordHasher(time_cost=1, memory_cost=1024, parallelism=1)
    yield
    tenancy._hasher = saved


# -- screenshots of failed browser tests ------------------------------------------

_PHASE_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    item.stash.setdefault(_PHASE_REPORTS, {})[report.when] = report


@pytest.fixture
def failure_screenshot(request: pytest.FixtureRequest) -> Any:
    """``save(page, label)``: when the test failed, save a full-page screenshot of
    a Playwright page under the run's output directory (``SVC_TEST_OUTPUT``, by
    default ``test-output/``) in ``screenshots/``. Call it before closing the page:
    from a fixture's teardown (the test's report says it failed) or from a
    ``finally`` the test's own failure passes through (no report yet: the
    exception on its way out says so)."""

    def save(page: Any, label: str = "page") -> str | None:
        reports = request.node.stash.get(_PHASE_REPORTS, {})
        failing = sys.exc_info()[0] is not None
        if not failing and not any(r.failed for r in reports.values()):
            return None
        root = os.environ.get("SVC_TEST_OUTPUT") or os.path.join(
            os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "test-output")
        out = os.path.join(root, "screenshots")
        os.makedirs(out, exist_ok=True)
        name = "".join(c if c.isalnum() else "_" for c in request.node.nodeid)
        path = os.path.join(out, f"{name}-{label}.png")
        try:
            page.screenshot(path=path, full_page=True)
        except Exception as e:  # a crashed page must not hide the test's own failure
            print(f"screenshot of {label} failed: {e}")
            return None
        print(f"screenshot: {path}")
        return path

    return save
