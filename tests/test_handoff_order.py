"""Handoffs of one user made in the same millisecond keep their creation
order (SPEC.md "Handoff and token lifecycle": newest pending wins), whatever
their random ids: the store numbers them (``seq``) as its writer commits them."""

from __future__ import annotations

import itertools
from collections.abc import Callable

import cbor2
import lmdb
import trio
import trio.testing

from storage import layout
from svc_engine.handoffs import HANDOFF_TTL_MS, Handoff, user_hash
from svc_engine.keys import Mode
from tests.conftest import App
from tests.deferred_helpers import PLATFORMS, SDK, init_body, new_install


def descending_ids() -> Callable[[int], bytes]:
    """Random bytes whose ids (``new_id``) come out ever smaller: each one
    created sorts before the one before it."""
    count = itertools.count()

    def draw(n: int) -> bytes:
        return ((1 << 48) - 1 - next(count)).to_bytes(6, "big").ljust(n, b"\x00")[:n]

    return draw


async def make_links(app: App, n: int) -> list[dict[str, str]]:
    out = []
    async with app.client("sk_test") as c:
        assert (await c.patch("/v1/platforms", json=PLATFORMS)).status_code == 200
        for i in range(n):
            r = await c.post("/v1/links", json={"path": f"/item/{i}"})
            assert r.status_code == 201
            out.append(r.json())
    return out


async def test_the_last_handoff_of_a_millisecond_is_claimed(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    links = await make_links(app, 3)
    claimer, lister = "5f0c6f8e-6d8a-4a55-9c43-0e6c3b1f9a01", "7a1b2c3d-4e5f-4a6b-8c7d-8e9f0a1b2c3d"
    app.services.random = descending_ids()
    made: dict[str, list[dict[str, str]]] = {claimer: [], lister: []}
    async with app.client("sk_test") as c:
        for user in (claimer, lister):
            for ln in links:
                r = await c.post("/v1/handoffs", json={"linkId": ln["id"], "userId": user})
                assert r.status_code == 201
                made[user].append(r.json())
    every = made[claimer] + made[lister]
    assert len({h["createdAt"] for h in every}) == 1  # one millisecond (the clock stood still)
    ids = [h["id"] for h in every]
    assert ids == sorted(ids, reverse=True)  # each made after the other has a smaller id

    iid = new_install()
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(iid, "ios"))
        got = await c.post("/v1/sdk/handoffs/claim", json={"userId": claimer, "installId": iid})
        again = await c.post("/v1/sdk/handoffs/claim", json={"userId": claimer,
                                                              "installId": iid})
    assert got.json()["link"]["linkId"] == links[-1]["id"]  # the newest, not the largest id
    assert again.json() == {"link": None}

    project = app.services.store.get_project(app.project_id)
    assert project is not None
    pending = app.services.attribution.pending_handoffs(app.project_id, "test",
                                                        user_hash(project.salt, lister))
    assert [h.id for h in pending] == [h["id"] for h in made[lister]]  # listed oldest first
    assert [h.seq for h in pending] == [0, 1, 2]  # numbered per user and millisecond


async def test_a_handoff_made_after_a_stored_one_of_its_millisecond_comes_after_it(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    """A record stored before ``seq`` existed (its key and map without one)
    reads as seq 0; one made in its millisecond gets seq 1 and wins, though
    its id is the smaller. No migration: the key layout is unchanged."""
    (old_link, new_link) = await make_links(app, 2)
    user = "0d4c1a3e-2b5f-4e6a-8c7d-9e0f1a2b3c4d"
    project = app.services.store.get_project(app.project_id)
    assert project is not None
    hashed = user_hash(project.salt, user)
    now = app.services.clock.now_ms()
    legacy = Handoff(id="ffffffff-ffff-4fff-bfff-ffffffffffff", link_id=old_link["id"],
                     user_hash=hashed, mode=Mode.TEST, created_at_ms=now,
                     expires_at_ms=now + HANDOFF_TTL_MS)
    record = {k: v for k, v in legacy.to_map().items() if k != "seq"}
    key = (layout.scope(app.project_id, "test") + hashed + layout.ms(now)
           + layout.uid(legacy.id))

    def put_legacy(txn: lmdb.Transaction) -> None:
        txn.put(key, cbor2.dumps(record), db=app.services.store.db(b"handoffs"))
        txn.put(layout.ms(legacy.expires_at_ms) + key, b"",
                db=app.services.store.db(b"handoffs_by_time"))

    await app.services.store.write(put_legacy)
    async with app.client("sk_test") as c:
        made = (await c.post("/v1/handoffs", json={"linkId": new_link["id"],
                                                   "userId": user})).json()
    assert made["id"] < legacy.id
    pending = app.services.attribution.pending_handoffs(app.project_id, "test", hashed)
    assert [h.id for h in pending] == [legacy.id, made["id"]]  # listed oldest first
    assert [(h.seq, h.created_at_ms) for h in pending] == [(0, now), (1, now)]
    iid = new_install()
    async with app.client("pk_test", **SDK) as c:
        await c.post("/v1/sdk/init", json=init_body(iid, "ios"))
        got = await c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": iid})
    assert got.json()["link"]["linkId"] == new_link["id"]
    assert app.services.store.scan(b"handoffs", b"") == []  # both cleared, the legacy key too
    await app.flush()
    with app.services.store.read() as txn:
        assert txn.stat(app.services.store.db(b"handoffs_by_time"))["entries"] == 0
