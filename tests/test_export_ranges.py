"""Exports read whole UTC days, ``from`` and ``to`` both included (a record at
the first millisecond of ``from`` and at the last of ``to`` is in, one at
the first of the next day is not), and only the key's mode (SPEC,
Authentication 3: keys belong to a project and a mode). Records made through
the API at exact moments: trio's autojump clock holds the wall clock still
within a request."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import orjson
import pytest
import trio.testing

from actors.clock import TrioWallClock
from svc_engine.analytics import DAY_MS, day_start_ms
from svc_engine.clicks import Click
from svc_engine.keys import Mode
from tests.conftest import App
from tests.deferred_helpers import ANDROID_UA, PLATFORMS, SDK, init_body, new_install
from web.export import OffLoopBody, click_row

DAY = "2026-09-22"
FROM = day_start_ms(DAY)
MOMENTS = {"first ms": FROM, "last ms": FROM + DAY_MS - 1, "next day": FROM + DAY_MS}


async def _records_at(app: App, mode: str, at_ms: int) -> dict[str, str]:
    """A click, an install and an open made at ``at_ms`` in ``mode``: their ids."""
    clock = app.services.clock
    assert isinstance(clock, TrioWallClock)
    clock.offset_ms += at_ms - clock.now_ms()
    async with app.client(f"sk_{mode}") as c:
        link = (await c.post("/v1/links", json={"path": "/x"})).json()
    async with app.client(**{"user-agent": ANDROID_UA}) as c:
        assert (await c.get(f"/{link['slug']}")).status_code == 302
    install = new_install()
    async with app.client(f"pk_{mode}", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(install, "android"))
                ).status_code == 200
        r = await c.post("/v1/sdk/resolve", json={"url": link["url"], "installId": install})
        assert r.status_code == 200, r.text
    await app.flush()
    assert clock.now_ms() == at_ms  # nothing moved the clock meanwhile
    return {"link": link["id"], "install": install}


async def _export(app: App, mode: str, kind: str) -> list[dict[str, Any]]:
    async with app.client(f"sk_{mode}") as c:
        r = await c.get(f"/v1/export/{kind}", params={"format": "ndjson", "from": DAY,
                                                      "to": DAY})
    assert r.status_code == 200, r.text
    return [orjson.loads(line) for line in r.text.splitlines()]


async def test_an_export_holds_its_days_to_the_millisecond_and_its_mode_only(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    for mode in ("test", "live"):
        async with app.client(f"sk_{mode}") as c:
            assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
    made = {(mode, when): await _records_at(app, mode, at)
            for mode in ("test", "live") for when, at in MOMENTS.items()}
    for mode in ("test", "live"):
        inside = [made[(mode, "first ms")], made[(mode, "last ms")]]
        for kind in ("clicks", "opens", "installs"):
            rows = await _export(app, mode, kind)
            if kind == "installs":
                got = [row["installId"] for row in rows]
                assert got == [r["install"] for r in inside], (mode, kind)
            else:
                got = [row["linkId"] for row in rows]
                assert got == [r["link"] for r in inside], (mode, kind)


@pytest.mark.parametrize(("os_major", "exported"), [
    (None, None), (0, 0), (17, 17), (9_999, 9_999), (10_000, None), (-1, None)])
def test_an_exported_click_s_os_version_is_at_most_four_digits(
        os_major: int | None, exported: int | None) -> None:
    """A version past four digits is made up (stored before taps were
    bounded): exported as no version, as the redirector now reads it."""
    click = Click(id="c1", link_id="l1", project_id="p1", mode=Mode.LIVE, platform="ios",
                  os_major=os_major, country=None, referrer_host=None, at_ms=0)
    assert click_row(click)["osMajor"] == exported


async def test_an_export_body_closed_early_closes_its_pages_and_releases_once() -> None:
    """A download abandoned after its first chunk (the client went away):
    closing the body closes the page generator (its read transaction ends)
    and frees the project's export slot, once however often it is closed."""
    closed: list[str] = []
    released: list[str] = []

    def pages() -> Iterator[bytes]:
        try:
            yield b"first\n"
            yield b"second\n"
        finally:
            closed.append("pages")

    async def inline(read: Callable[[], bytes | None]) -> bytes | None:
        return read()

    body = OffLoopBody(inline, pages(), lambda: released.append("slot"))
    assert [await body.__anext__()] == [b"first\n"]
    body.close()
    body.close()
    assert closed == ["pages"] and released == ["slot"]
    assert [chunk async for chunk in body] == []
