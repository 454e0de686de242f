"""NameCache: webhook host names' answers kept 30 s, one lookup per name in flight."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import trio
import trio.testing

from actors.clock import TrioWallClock
from actors.name_cache import DNS_CACHE_MS, NameCache


class _Resolver:
    """Answers after ``delay_s``; ``fail`` names raise; records every lookup."""

    def __init__(self, delay_s: float = 0.0, fail: Sequence[str] = ()) -> None:
        self.asked: list[str] = []
        self.delay_s = delay_s
        self.fail = set(fail)
        self.answers = 0

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.asked.append(host)
        await trio.sleep(self.delay_s)
        if host in self.fail:
            raise OSError(f"cannot resolve {host}")
        self.answers += 1
        return [f"93.184.216.{self.answers}"]


async def test_an_answer_is_kept_30_seconds(autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver()
    names = NameCache(resolver, TrioWallClock())
    assert DNS_CACHE_MS == 30_000
    assert await names.addresses("hooks.example", 443) == ("93.184.216.1",)
    await trio.sleep(29.999)
    assert await names.addresses("hooks.example", 443) == ("93.184.216.1",)
    assert await names.addresses("hooks.example", 8443) == ("93.184.216.2",)  # port is part of it
    await trio.sleep(0.001)
    assert await names.addresses("hooks.example", 443) == ("93.184.216.3",)
    assert resolver.asked == ["hooks.example"] * 3


async def test_concurrent_attempts_share_one_lookup(
        autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver(delay_s=1.0)
    names = NameCache(resolver, TrioWallClock())
    got: list[tuple[str, ...]] = []

    async def attempt() -> None:
        got.append(await names.addresses("hooks.example", 443))

    async with trio.open_nursery() as nursery:
        for _ in range(50):
            nursery.start_soon(attempt)
    assert got == [("93.184.216.1",)] * 50 and resolver.asked == ["hooks.example"]
    assert trio.current_time() == pytest.approx(1.0)


async def test_a_failed_lookup_is_shared_by_its_waiters_and_not_kept(
        autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver(delay_s=1.0, fail=["down.example"])
    names = NameCache(resolver, TrioWallClock())
    errors: list[str] = []

    async def attempt() -> None:
        try:
            await names.addresses("down.example", 443)
        except OSError as e:
            errors.append(str(e))

    async with trio.open_nursery() as nursery:
        for _ in range(5):
            nursery.start_soon(attempt)
    assert errors == ["cannot resolve down.example"] * 5 and len(resolver.asked) == 1
    resolver.fail.clear()
    assert await names.addresses("down.example", 443) == ("93.184.216.1",)  # asked again
    assert len(resolver.asked) == 2 and len(names) == 1


async def test_a_cancelled_lookup_hands_the_name_to_a_waiter(
        autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver(delay_s=1.0)
    names = NameCache(resolver, TrioWallClock())
    got: list[tuple[str, ...]] = []

    async def leader() -> None:
        with trio.move_on_after(0.5):  # its attempt's deadline
            await names.addresses("hooks.example", 443)
            raise AssertionError("the leader's lookup should have been cancelled")

    async def waiter() -> None:
        await trio.sleep(0.1)
        got.append(await names.addresses("hooks.example", 443))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leader)
        nursery.start_soon(waiter)
    assert got == [("93.184.216.1",)] and resolver.asked == ["hooks.example"] * 2
    assert trio.current_time() == pytest.approx(1.5)  # the waiter looked up from 0.5 s


async def test_at_most_capacity_names_are_kept_oldest_out_first(
        autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver()
    names = NameCache(resolver, TrioWallClock(), capacity=2)
    for host in ("a.example", "b.example", "c.example"):
        await names.addresses(host, 443)
    assert len(names) == 2
    await names.addresses("c.example", 443)
    await names.addresses("b.example", 443)
    assert resolver.asked == ["a.example", "b.example", "c.example"]
    await names.addresses("a.example", 443)  # the oldest went: asked again, b goes
    await names.addresses("c.example", 443)
    assert resolver.asked[3:] == ["a.example"] and len(names) == 2


async def test_ttl_zero_looks_up_every_time(autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver()
    names = NameCache(resolver, TrioWallClock(), ttl_ms=0)
    for _ in range(3):
        await names.addresses("hooks.example", 443)
    assert resolver.asked == ["hooks.example"] * 3 and len(names) == 0


async def test_the_shortest_ttl_keeps_an_answer_one_millisecond(
        autojump_clock: trio.testing.MockClock) -> None:
    resolver = _Resolver()
    names = NameCache(resolver, TrioWallClock(), ttl_ms=1)
    await names.addresses("hooks.example", 443)
    await names.addresses("hooks.example", 443)  # the same millisecond: kept
    await trio.sleep(0.001)
    await names.addresses("hooks.example", 443)
    assert resolver.asked == ["hooks.example"] * 2 and len(names) == 1
