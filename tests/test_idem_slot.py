"""IdemSlot: the first answer to a write with an Idempotency-Key is the
rendering the writer stored for its replays, made once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import attrs
import trio
import trio.testing

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from web.http import Request, Response
from web.idem import IdempotencyGuard, IdemSlot, Render, json_render
from web.services import Services


@attrs.frozen
class Result:
    n: int


def counting() -> tuple[list[object], Render]:
    calls: list[object] = []
    ok = json_render(200)

    def render(value: object) -> tuple[int, str, bytes]:
        calls.append(value)
        assert isinstance(value, Result)
        return ok({"n": value.n})

    return calls, render


def test_the_first_answer_is_the_stored_rendering() -> None:
    calls, render = counting()
    slot = IdemSlot("p:test", "key-1", b"fp", 0)
    write = slot.write(render)
    assert write is not None
    result = Result(1)
    stored = write.render(result)  # what the writer does inside the commit
    answer = slot.respond(result, render)
    assert calls == [result]  # rendered once
    assert answer.body == stored[2] == b'{"n":1}' and answer.status == 200
    assert (b"content-type", b"application/json") in answer.headers


def test_an_op_run_twice_answers_with_its_last_run() -> None:
    calls, render = counting()
    slot = IdemSlot("p:test", "key-1", b"fp", 0)
    write = slot.write(render)
    assert write is not None
    write.render(Result(1))  # the first attempt, aborted when another op raised
    second = Result(2)
    stored = write.render(second)
    assert slot.respond(second, render).body == stored[2] == b'{"n":2}'
    assert len(calls) == 2


def test_another_value_or_no_key_is_rendered_for_the_answer() -> None:
    calls, render = counting()
    slot = IdemSlot("p:test", "key-1", b"fp", 0)
    write = slot.write(render)
    assert write is not None
    write.render(Result(1))
    # an equal value that is not the one rendered: rendered again, not assumed
    assert slot.respond(Result(1), render).body == b'{"n":1}'
    assert len(calls) == 2
    keyless = IdemSlot("p:test", None, b"", 0)
    assert keyless.write(render) is None
    assert keyless.respond(Result(3), render).body == b'{"n":3}'
    assert len(calls) == 3


def _post(key: str) -> Request:
    scope = {"method": "POST", "path": "/v1/links", "query_string": b"",
             "headers": [(b"host", b"svc.test"), (b"idempotency-key", key.encode())]}

    async def receive() -> dict[str, object]:
        raise AssertionError("the guard reads no body")

    return Request(scope, receive)


async def test_writes_under_one_key_take_turns_and_leave_no_lock_behind(
        store: LmdbStore) -> None:
    """A retry arriving while the first attempt runs waits for it (here the
    handler stores nothing, so each runs in turn): never two at once under
    one key, while another key runs beside them; the guard's table of locks
    is empty once they are done (a lock left per key would grow without end)."""
    guard = IdempotencyGuard(cast(Services, SimpleNamespace(store=store,
                                                            clock=TrioWallClock())))
    running: list[str] = []
    overlaps: list[list[str]] = []
    release = trio.Event()

    async def handler(key: str) -> Response:
        running.append(key)
        overlaps.append(list(running))
        await release.wait()
        running.remove(key)
        return Response(201, b"{}", [])

    async def write(key: str, answers: list[int]) -> None:
        response = await guard.run(_post(key), "p:test", b"{}",
                                   lambda slot: handler(slot.key or ""))
        answers.append(response.status)

    answers: list[int] = []
    async with trio.open_nursery() as nursery:
        for key in ("k1", "k1", "k1", "k2"):
            nursery.start_soon(write, key, answers)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(guard._locks) == [("p:test", "k1"), ("p:test", "k2")]
        assert guard._locks[("p:test", "k1")][1] == 3  # one running, two waiting
        release.set()
    assert answers == [201] * 4
    assert all(o.count("k1") <= 1 for o in overlaps) and len(overlaps) == 4
    assert any(o == ["k1", "k2"] or o == ["k2", "k1"] for o in overlaps)  # other keys run beside
    assert guard._locks == {}
