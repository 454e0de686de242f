"""Baseline: a bare trio + h11 keep-alive server answering 302.

No ASGI, no framework: one task per connection drives an ``h11.Connection``
and answers each request with the same 302 before reading the next. It is the
floor that trio itself allows for a redirect on this machine.

Usage: ``python -m bench.baselines.h11_302 --port 8000``
"""

from __future__ import annotations

import argparse
import functools

import h11
import trio

from bench.baselines.termination import wait_for_termination

LOCATION = "https://example.com/target?utm_source=bench"
RECEIVE_SIZE = 65536
REDIRECT = h11.Response(
    status_code=302,
    headers=[("location", LOCATION), ("content-length", "0")],
    reason=b"Found",
)


async def serve_connection(stream: trio.SocketStream) -> None:
    """Answer the requests of one connection until either side closes it."""
    conn = h11.Connection(h11.SERVER)
    async with stream:
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    conn.receive_data(await stream.receive_some(RECEIVE_SIZE))
                elif isinstance(event, h11.Request):
                    await stream.send_all(conn.send(REDIRECT) + conn.send(h11.EndOfMessage()))
                elif event is h11.PAUSED:
                    if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                        return
                    conn.start_next_cycle()
                elif isinstance(event, h11.ConnectionClosed):
                    return
                # h11.Data and h11.EndOfMessage (a request body) need nothing.
                if conn.our_state is h11.MUST_CLOSE:
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError, h11.RemoteProtocolError):
            return


async def serve_until_terminated(port: int) -> None:
    async with trio.open_nursery() as nursery:
        await nursery.start(
            functools.partial(trio.serve_tcp, serve_connection, port, host="127.0.0.1")
        )
        await wait_for_termination()
        nursery.cancel_scope.cancel()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    trio.run(serve_until_terminated, args.port)


if __name__ == "__main__":
    main()
