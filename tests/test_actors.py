"""Mailboxes, the registry and failure isolation between projects."""

from __future__ import annotations

import pytest
import trio

from actors.clock import TrioWallClock
from actors.mailbox import Mailbox, MailboxStats
from actors.registry import Registry
from storage.lmdb_store import LmdbStore
from svc_engine.errors import ActorFailed, NotFound, Overloaded, ValidationError
from web import tenancy
from web.services import system_random


async def test_calls_run_one_at_a_time_in_order() -> None:
    box = Mailbox("t", 8)
    seen: list[int] = []

    async def slow(i: int) -> int:
        seen.append(i)
        await trio.sleep(0)
        seen.append(-i)
        return i * 10

    async with trio.open_nursery() as n:
        n.start_soon(box.serve)
        results: list[int] = []

        async def caller(i: int) -> None:
            results.append(await box.call(lambda: slow(i)))

        async with trio.open_nursery() as callers:
            for i in range(1, 4):
                callers.start_soon(caller, i)
        n.cancel_scope.cancel()
    assert sorted(results) == [10, 20, 30]
    for i in range(0, 6, 2):  # each call finished before the next began
        assert seen[i] == -seen[i + 1]


async def test_caller_errors_pass_through_bugs_become_actor_failed() -> None:
    box = Mailbox("t", 8)
    reloads: list[int] = []

    async def on_failure() -> None:
        reloads.append(1)

    def bug() -> None:
        raise KeyError("bug")

    def refuse() -> None:
        raise ValidationError("bad input")

    async with trio.open_nursery() as n:
        n.start_soon(box.serve, on_failure)
        with pytest.raises(ValidationError):
            await box.call(refuse)
        with pytest.raises(ActorFailed) as e:
            await box.call(bug)
        assert e.value.status == 500
        assert await box.call(lambda: "still alive") == "still alive"
        assert box.statistics() == MailboxStats(handled=3, failed=1, queued=0, capacity=8)
        n.cancel_scope.cancel()
    assert reloads == [1]


async def test_full_mailbox_pushes_back() -> None:
    box = Mailbox("t", 2)
    box.call_nowait(lambda: None)
    box.call_nowait(lambda: None)
    with pytest.raises(Overloaded):
        box.call_nowait(lambda: None)
    # A blocking call waits for room instead of growing the queue.
    with trio.move_on_after(0.05) as cs:
        await box.call(lambda: None)
    assert cs.cancelled_caught
    assert box.statistics().queued == 2


async def test_closed_mailbox_fails_queued_calls() -> None:
    box = Mailbox("t", 4)
    with trio.fail_after(5):  # a close that left the caller waiting: fails here, not at 120 s
        async with trio.open_nursery() as n:
            async def caller() -> None:
                with pytest.raises(ActorFailed):
                    await box.call(lambda: None)

            n.start_soon(caller)
            await trio.testing.wait_all_tasks_blocked()
            box.close()
    with pytest.raises(ActorFailed):
        await box.call(lambda: None)


async def test_a_call_on_a_stopped_mailbox_in_a_cancelled_scope_is_cancelled() -> None:
    """At shutdown every task is cancelled; a caller that was about to call an
    actor which stopped first ends with the cancellation, not ActorFailed (an
    error that would escape the service's nursery as a crash)."""
    box = Mailbox("t", 4)
    box.close()
    with trio.CancelScope() as scope:
        scope.cancel()
        await box.call(lambda: None)
    assert scope.cancelled_caught


async def test_registry_isolates_a_failing_project(store: LmdbStore) -> None:
    clock = TrioWallClock()
    info = await tenancy.bootstrap(store, "http://x", system_random, clock.now_ms())
    org = str(info["organizationId"])
    from svc_engine.plans import Plan
    await store.set_plan(org, Plan.SCALE)
    other, _ = await tenancy.create_project(store, org, "other", system_random, clock.now_ms())
    async with trio.open_nursery() as n:
        reg = Registry(store, clock, n)
        a = await reg.get(str(info["projectId"]))
        b = await reg.get(other.id)
        assert await reg.get(other.id) is b  # one actor per project

        def explode() -> None:
            raise RuntimeError("bug in project a")

        with pytest.raises(ActorFailed):
            await a.mailbox.call(explode)
        # a reloaded from durable state and keeps serving; b never noticed.
        assert a.loads == 2
        await a.patch_settings({"iosLandingPage": True}, None)
        assert (await b.get_settings()).ios_landing_page is False
        assert (await a.get_settings()).ios_landing_page is True
        with pytest.raises(NotFound):
            await reg.get("00000000-0000-4000-8000-0000000000ff")
        n.cancel_scope.cancel()


async def test_registry_restarts_a_dead_actor(store: LmdbStore) -> None:
    clock = TrioWallClock()
    info = await tenancy.bootstrap(store, "http://x", system_random, clock.now_ms())
    pid = str(info["projectId"])
    async with trio.open_nursery() as n:
        reg = Registry(store, clock, n)
        a = await reg.get(pid)
        await a.patch_settings({"webFallbackTokens": True}, None)
        a.mailbox.close()  # the actor's task ends
        await trio.testing.wait_all_tasks_blocked()
        b = await reg.get(pid)
        assert b is not a
        assert (await b.get_settings()).web_fallback_tokens is True
        n.cancel_scope.cancel()


async def test_concurrent_first_use_starts_one_actor(store: LmdbStore) -> None:
    clock = TrioWallClock()
    info = await tenancy.bootstrap(store, "http://x", system_random, clock.now_ms())
    pid = str(info["projectId"])
    got = []
    async with trio.open_nursery() as n:
        reg = Registry(store, clock, n)

        async def get() -> None:
            got.append(await reg.get(pid))

        async with trio.open_nursery() as m:
            for _ in range(20):
                m.start_soon(get)
        assert len({id(a) for a in got}) == 1
        assert reg.statistics().started == 1
        n.cancel_scope.cancel()


async def test_a_slow_project_never_blocks_another(store: LmdbStore) -> None:
    clock = TrioWallClock()
    info = await tenancy.bootstrap(store, "http://x", system_random, clock.now_ms())
    org = str(info["organizationId"])
    from svc_engine.plans import Plan
    await store.set_plan(org, Plan.SCALE)
    other, _ = await tenancy.create_project(store, org, "other", system_random, clock.now_ms())
    release = trio.Event()
    async with trio.open_nursery() as n:
        reg = Registry(store, clock, n)
        slow = await reg.get(str(info["projectId"]))
        fast = await reg.get(other.id)

        async def stuck() -> None:
            await release.wait()

        n.start_soon(slow.mailbox.call, stuck)  # project A is busy indefinitely
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(1):  # project B answers meanwhile
            await fast.patch_settings({"iosLandingPage": True}, None)
            assert (await fast.get_settings()).ios_landing_page is True
        assert slow.mailbox.statistics().queued == 0  # A's call is running, not queued
        release.set()
        assert (await slow.get_settings()).ios_landing_page is False
        n.cancel_scope.cancel()
