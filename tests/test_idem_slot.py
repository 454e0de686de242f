"""IdemSlot: the first answer to a write with an Idempotency-Key is the
rendering the writer stored for its replays, made once."""

from __future__ import annotations

import attrs

from web.idem import IdemSlot, Render, json_render


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
