"""The soak's webhook receiver: ``python -m bench.soak_receiver --port P --secret whsec_...
[--secret-test whsec_...] --stats FILE [--fail-every N]``.

A plain-HTTP/1.1 keep-alive server on loopback (trio + h11) that verifies each
delivery's Standard Webhooks signature (svc_engine.signing.verify), answers
204, or 503 to one request in ``--fail-every`` (so that some deliveries are
retried, as with a real receiver that hiccups), and writes its counts to
``--stats`` as JSON every two seconds and at exit (SIGTERM). It runs as its
own process so that its CPU does not come out of the load generator's.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import time
from pathlib import Path

import h11
import trio

from svc_engine import signing

MAX_BODY = 1 << 20


class Counts:
    def __init__(self) -> None:
        self.requests = 0
        self.verified = 0
        self.bad_signature = 0
        self.failed_on_purpose = 0
        self.bytes = 0
        self.connections = 0
        self.types: dict[str, int] = {}

    def as_json(self) -> dict[str, object]:
        return {"requests": self.requests, "verified": self.verified,
                "bad_signature": self.bad_signature, "failed_on_purpose": self.failed_on_purpose,
                "bytes": self.bytes, "connections": self.connections, "types": self.types}


async def serve_connection(stream: trio.SocketStream, secret: list[str], counts: Counts,
                           fail_every: int) -> None:
    counts.connections += 1
    conn = h11.Connection(h11.SERVER)

    async def next_event() -> object:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event
            conn.receive_data(await stream.receive_some(65536))

    try:
        while True:
            event = await next_event()
            if not isinstance(event, h11.Request):
                return  # ConnectionClosed, or PAUSED on a peer that must close
            headers = {k.decode().lower(): v.decode("latin-1") for k, v in event.headers}
            body = bytearray()
            while isinstance(ev := await next_event(), h11.Data):
                body += ev.data
                if len(body) > MAX_BODY:
                    return
            if not isinstance(ev, h11.EndOfMessage):
                return
            counts.requests += 1
            counts.bytes += len(body)
            result = signing.verify(secret, headers, bytes(body), int(time.time()))
            status = 204
            if result.ok:
                counts.verified += 1
                try:
                    kind = str(json.loads(body).get("type", "?"))
                except ValueError:
                    kind = "?"
                counts.types[kind] = counts.types.get(kind, 0) + 1
                if fail_every and counts.verified % fail_every == 0:
                    status = 503
                    counts.failed_on_purpose += 1
            else:
                counts.bad_signature += 1
                status = 401
            out = conn.send(h11.Response(status_code=status, headers=[("content-length", "0")]))
            out += conn.send(h11.EndOfMessage())
            await stream.send_all(out)
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return
            conn.start_next_cycle()
    except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError,
            h11.LocalProtocolError):
        return
    finally:
        await stream.aclose()


async def main(port: int, secret: list[str], stats: Path, fail_every: int) -> None:
    counts = Counts()

    def write() -> None:
        tmp = stats.with_suffix(".tmp")
        tmp.write_text(json.dumps(counts.as_json()))
        os.replace(tmp, stats)

    async def writer() -> None:
        while True:
            write()
            await trio.sleep(2)

    async def handler(stream: trio.SocketStream) -> None:
        await serve_connection(stream, secret, counts, fail_every)

    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            listeners = await trio.open_tcp_listeners(port, host="127.0.0.1")
            nursery.start_soon(trio.serve_listeners, handler, listeners)
            nursery.start_soon(writer)
            async for _ in signals:
                break
            nursery.cancel_scope.cancel()
    write()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--secret", required=True)
    parser.add_argument("--secret-test", default=None, help="a second endpoint's secret")
    parser.add_argument("--stats", type=Path, required=True)
    parser.add_argument("--fail-every", type=int, default=50)
    args = parser.parse_args()
    secrets = [args.secret, *([args.secret_test] if args.secret_test else [])]
    trio.run(main, args.port, secrets, args.stats, args.fail_every)
