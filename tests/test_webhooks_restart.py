"""The real service process is SIGKILLed while deliveries are Retrying (and one
attempt is in flight); after a restart every delivery finishes, with the same
webhook-id, and no scheduled attempt is lost or made twice. Retry delays are
scaled by SVC_WEBHOOK_RETRY_SCALE (test only) so the schedule takes seconds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import httpx
import pytest
import standardwebhooks
import trio

from actors.clock import SystemClock
from tests.server_process import ServerProcess
from tests.webhook_receiver_fixture import make_ca, running_receiver
from web.webhook_receiver import Received, Reply

pytestmark = pytest.mark.e2e

EP = "/v1/webhooks/endpoints"
DL = "/v1/webhooks/deliveries"


async def _deliveries(client: httpx.AsyncClient) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = (await client.get(DL)).json()["data"]
    return rows


async def _until(client: httpx.AsyncClient, done: Any, timeout: float = 20) -> list[Any]:
    with trio.fail_after(timeout):
        while True:
            rows = await _deliveries(client)
            if done(rows):
                return rows
            await trio.sleep(0.02)


async def test_sigkill_while_retrying_then_every_delivery_finishes(
        server_factory: type[ServerProcess], tmp_path: Path) -> None:
    ca, ca_path = make_ca(tmp_path)
    env = {"SVC_WEBHOOK_CA_BUNDLE": ca_path, "SVC_WEBHOOK_RETRY_SCALE": "0.001"}
    phase = {"now": "fail"}
    release = trio.Event()

    async def respond(req: Received, n: int) -> Reply:
        if phase["now"] == "hang":
            await release.wait()
        return (200 if phase["now"] == "ok" else 500), [], b""

    async with running_receiver(ca, SystemClock()) as receiver:
        receiver.respond = respond
        srv = server_factory(env=env)
        await trio.to_thread.run_sync(srv.start)
        headers = {"authorization": f"Bearer {srv.info['keys']['sk_test']}"}
        async with httpx.AsyncClient(base_url=srv.url, headers=headers) as c:
            endpoint = (await c.post(EP, json={"url": receiver.url})).json()
            for _ in range(5):
                assert (await c.post(f"{EP}/{endpoint['id']}/test")).status_code == 201
            # Attempts at 0, 60 ms and 360 ms; the 4th is due 1.8 s after the 3rd.
            await _until(c, lambda rows: len(rows) == 5 and all(
                r["status"] == "Retrying" and r["attempts"] == 3 for r in rows))
            phase["now"] = "hang"
            sixth = (await c.post(f"{EP}/{endpoint['id']}/test")).json()
            await receiver.wait_for(16)  # the 6th is in flight, its answer held back
        await trio.to_thread.run_sync(srv.kill)
        phase["now"] = "ok"
        release.set()
        again = server_factory(srv.data_dir, bootstrap=False, env=env)
        await trio.to_thread.run_sync(again.start)
        async with httpx.AsyncClient(base_url=again.url, headers=headers) as c:
            rows = await _until(c, lambda rows: len(rows) == 6 and all(
                r["status"] == "Delivered" for r in rows))
            views = [(await c.get(f"{DL}/{r['id']}")).json() for r in rows]
        await trio.to_thread.run_sync(again.stop)

    sent = Counter(receiver.ids())
    assert set(sent) == {v["id"] for v in views}
    for view in views:
        numbers = [a["number"] for a in view["attemptLog"]]
        if view["id"] == sixth["id"]:
            # Cut off mid-flight: sent again after the restart, same webhook-id.
            assert sent[view["id"]] == 2 and numbers == [1]
        else:
            # 3 failed before the kill, the 4th after it: none lost, none twice.
            assert sent[view["id"]] == 4 and numbers == [1, 2, 3, 4]
            assert [a["responseStatus"] for a in view["attemptLog"]] == [500, 500, 500, 200]
    verifier = standardwebhooks.Webhook(endpoint["secret"])
    for hit in receiver.hits[-6:]:
        verifier.verify(hit.request.body, hit.headers)
