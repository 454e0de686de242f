"""The sweeps drain: each run deletes everything that expired, in writes of
at most ``SLICE`` records, however much that is (real store, real actors)."""

from __future__ import annotations

import uuid

import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.config import Config
from svc_engine.idempotency import RETENTION_MS
from tests.conftest import App
from tests.deferred_helpers import (
    ANDROID_UA,
    IOS_UA,
    PLATFORMS,
    SDK,
    init_body,
    referrer_from_location,
)
from web import housekeeping
from web.housekeeping import ATTRIBUTION_SWEEP, IDEM_SWEEP, Housekeeper

DAY_MS = 86_400_000


async def launch(app: App, key: str) -> None:
    async with app.client("pk_test", **SDK, **{"idempotency-key": key}) as c:
        r = await c.post("/v1/sdk/init", json=init_body(str(uuid.uuid4()), "android"))
    assert r.status_code == 200, r.text


async def test_the_idempotency_sweep_deletes_every_expired_record(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "SLICE", 3)
    store, scope = app.services.store, f"{app.project_id}:test"
    first = app.services.clock.now_ms()
    old = [f"old-{i}" for i in range(7)]
    for key in old:
        await launch(app, key)
    await trio.sleep(1)
    await launch(app, "young")
    _, job = Housekeeper(app.services).jobs[IDEM_SWEEP]
    # one run, three slices of three or fewer: all seven, not just one slice,
    # with a pause after each full slice
    started = trio.current_time()
    assert await job(first + RETENTION_MS + 500) == {"records": 7}
    assert trio.current_time() - started >= 2 * housekeeping.SLICE_PAUSE_S
    assert all(store.get_response(scope, key) is None for key in old)
    assert store.get_response(scope, "young") is not None
    assert await job(first + RETENTION_MS + 500) == {}


async def test_an_answer_is_replayed_for_24_hours(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    """README: replayed byte for byte "for at least 24 hours" (the test above
    reads the retention from the constant it checks, so a shorter one passed)."""
    store, scope = app.services.store, f"{app.project_id}:test"
    first = app.services.clock.now_ms()
    await launch(app, "day-old")
    _, job = Housekeeper(app.services).jobs[IDEM_SWEEP]
    assert await job(first + 23 * 3_600_000) == {}
    assert await job(first + 24 * 3_600_000) == {}
    assert store.get_response(scope, "day-old") is not None
    assert await job(first + 24 * 3_600_000 + 1_000) == {"records": 1}
    assert store.get_response(scope, "day-old") is None


async def test_the_attribution_sweep_deletes_every_expired_token(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(housekeeping, "SLICE", 2)
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        ln = (await c.post("/v1/links", json={"path": "/p"})).json()
    tokens = []
    async with app.client(**{"user-agent": ANDROID_UA}) as c:
        for _ in range(5):
            r = await c.get(f"/{ln['slug']}")
            tokens.append(referrer_from_location(r.headers["location"]).split("=")[1])
    attribution = app.services.attribution
    assert all(attribution.get_token(t) is not None for t in tokens)
    _, job = Housekeeper(app.services).jobs[ATTRIBUTION_SWEEP]
    done = await job(app.services.clock.now_ms() + 8 * DAY_MS)
    assert done["tokens"] == 5
    assert all(attribution.get_token(t) is None for t in tokens)


async def test_a_failed_run_leaves_the_schedule_as_it_was(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A run persisted its next deadline only after its work: one sweep the
    store refused (a full disk or map) ended that job until a restart, and so
    network hashes outlived their 7 hours. Now the next run is recorded
    first; a run whose next deadline cannot be written is tried again a
    minute later. The webhook history's hourly sweep the same."""
    from actors import webhook_history
    from svc_engine.errors import StorageUnavailable

    sweeps: list[int] = []
    real_sweep = app.services.attribution.sweep

    async def flaky_sweep(now: int, limit: int, latest: int | None = None) -> dict[str, int]:
        sweeps.append(now)
        if len(sweeps) == 1:
            raise StorageUnavailable("simulated: the disk is full")
        return await real_sweep(now, limit, latest)

    monkeypatch.setattr(app.services.attribution, "sweep", flaky_sweep)
    purges: list[int] = []
    real_purge = webhook_history._sweep

    async def flaky_purge(actor: object, now: int) -> None:
        purges.append(now)
        if len(purges) == 1:
            raise StorageUnavailable("simulated: the disk is full")
        await real_purge(actor, now)  # type: ignore[arg-type]

    monkeypatch.setattr(webhook_history, "_sweep", flaky_purge)
    await trio.sleep(3 * 3600 + 60)
    assert len(sweeps) == 18  # every 10 minutes, the failed first one included
    assert len(purges) == 3  # every hour
    refusals = 0
    real_replace = app.services.store.replace_deadline

    async def refusing_replace(old: object, new: object) -> None:
        nonlocal refusals
        if refusals < 1 and getattr(old, "kind", "") == ATTRIBUTION_SWEEP:
            refusals += 1
            raise StorageUnavailable("simulated: the disk is full")
        await real_replace(old, new)  # type: ignore[arg-type]

    monkeypatch.setattr(app.services.store, "replace_deadline", refusing_replace)
    before = len(sweeps)
    await trio.sleep(9 * 60 + 1)  # the next run cannot record its successor: no work
    assert refusals == 1 and len(sweeps) == before
    await trio.sleep(60)  # a minute later it runs
    assert len(sweeps) == before + 1
    assert sweeps[before] - sweeps[before - 1] == 10 * 60_000 + 60_000  # to the millisecond
    await trio.sleep(3600)
    assert len(sweeps) == before + 7


HOUR_MS = 3_600_000


async def test_each_job_runs_one_period_after_the_start_then_every_period(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    """The idempotency sweep hourly, the attribution sweep every 10 minutes,
    the raw events' retention daily (README's housekeeping)."""
    from web.housekeeping import EVENTS_RETENTION

    periods = {IDEM_SWEEP: HOUR_MS, ATTRIBUTION_SWEEP: 10 * 60_000, EVENTS_RETENTION: DAY_MS}
    store, clock = app.services.store, app.services.clock
    start = clock.now_ms()
    planned = store.first_deadlines(periods)
    assert {kind: d.due_ms - start for kind, d in planned.items()} == periods
    await trio.sleep(DAY_MS / 1000 + 1)
    planned = store.first_deadlines(periods)
    assert {kind: (d.due_ms - start) % periods[kind] for kind, d in planned.items()
            } == dict.fromkeys(periods, 0)


@pytest.mark.parametrize("tap_before_the_step", [False, True])
async def test_a_wall_clock_gone_back_keeps_no_network_hash_past_7_hours(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock,
        tap_before_the_step: bool) -> None:
    """The machine's clock ran 8 hours ahead, then NTP stepped it back: the
    sweeps, planned at wall times now 8 hours ahead, waited those hours (a
    network hash kept 15), and a tap made before the step lay 8 hours in the
    future, to be swept only once the clock caught up with it."""
    from tests.conftest import running_app
    clock = TrioWallClock()
    clock.offset_ms = 8 * HOUR_MS
    async with running_app(store, config, clock) as app:
        async with app.client("sk_test") as c:
            assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
            assert (await c.patch("/v1/deferred/settings", json={
                "probabilisticMatching": True, "probabilisticIpMatching": True,
                "probabilisticWindowMinutes": 360})).status_code == 200
            ln = (await c.post("/v1/links", json={"path": "/a"})).json()
        if not tap_before_the_step:
            clock.offset_ms = 0
        async with app.client(**{"user-agent": IOS_UA}) as c:
            await c.get(f"/{ln['slug']}")
        await app.flush()
        clock.offset_ms = 0
        entries = app.services.attribution.window(app.project_id, "test", 0)
        assert len(entries) == 1 and entries[0].net_hash is not None
        await trio.sleep(7 * 3600)
        assert app.services.attribution.window(app.project_id, "test", 0) == []
        raw = b"".join(v for _, v in app.services.store.scan(b"click_window", b""))
        assert raw == b""


async def test_a_run_planned_before_a_step_back_and_a_restart_waits_at_most_its_period(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock) -> None:
    """The sweep's next run was planned while the clock ran 8 hours ahead,
    then the service restarted on a corrected clock: read from the store, the
    run waited the 8 hours; a run more than its period ahead goes at once."""
    from svc_engine.deadlines import Deadline
    from tests.conftest import running_app
    clock = TrioWallClock()
    start = clock.now_ms()
    await store.add_deadlines([Deadline(start + 8 * HOUR_MS, ATTRIBUTION_SWEEP, "all")])
    async with running_app(store, config, clock):
        await trio.sleep(1)
        planned = [d.due_ms - start for d in store.load_deadlines()
                   if d.kind == ATTRIBUTION_SWEEP]
    assert planned == [10 * 60_000]  # it ran at the start and planned the next from then


async def test_a_long_sweep_run_keeps_the_taps_made_during_it(
        app: App, autojump_clock: trio.testing.MockClock,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every slice of a run read the run's start as now: past a minute of
    slices (a backlog of millions of expired taps), each new tap was "dated
    ahead" and deleted by the next slice."""
    from svc_engine.click_window import ClickWindowEntry
    from svc_engine.keys import Mode

    monkeypatch.setattr(housekeeping, "SLICE", 1)
    monkeypatch.setattr(housekeeping, "SLICE_PAUSE_S", 1.0)
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        assert (await c.patch("/v1/deferred/settings", json={
            "probabilisticMatching": True, "probabilisticWindowMinutes": 360})).status_code == 200
        ln = (await c.post("/v1/links", json={"path": "/a"})).json()
    now = app.services.clock.now_ms()
    window = app.services.attribution.click_window
    old = [ClickWindowEntry(click_id=str(uuid.uuid4()), link_id=ln["id"], mode=Mode.TEST,
                            os_major=26, country="DE", at_ms=now - 7 * 3_600_000 + i)
           for i in range(150)]  # expired: 150 slices of one, a second apart
    await app.services.store.write(lambda txn: [window.put(txn, app.project_id, e)
                                                for e in old])
    _, job = Housekeeper(app.services).jobs[ATTRIBUTION_SWEEP]
    async with trio.open_nursery() as n:
        n.start_soon(job, now)
        await trio.sleep(100)  # the run is 100 slices in
        async with app.client(**{"user-agent": IOS_UA, "cf-ipcountry": "DE"}) as c:
            await c.get(f"/{ln['slug']}")
        await app.flush()
    left = app.services.attribution.window(app.project_id, "test", 0)
    assert [e.link_id for e in left] == [ln["id"]]
