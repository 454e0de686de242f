"""Baseline: a bare ASGI app on Hypercorn's trio worker answering 302.

It is served the way the service is served (``hypercorn.trio.serve`` in a trio
run), with the access log off, so the difference between this baseline and a
service path is Quart-Trio plus the service's own work.

Usage: ``python -m bench.baselines.hypercorn_302 --port 8000``
"""

from __future__ import annotations

import argparse

import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from hypercorn.typing import (
    ASGIReceiveCallable,
    ASGISendCallable,
    HTTPResponseBodyEvent,
    HTTPResponseStartEvent,
    Scope,
)

from bench.baselines.termination import wait_for_termination

LOCATION = b"https://example.com/target?utm_source=bench"
RESPONSE_START: HTTPResponseStartEvent = {
    "type": "http.response.start",
    "status": 302,
    "headers": [(b"location", LOCATION), (b"content-length", b"0")],
}
RESPONSE_BODY: HTTPResponseBodyEvent = {
    "type": "http.response.body",
    "body": b"",
    "more_body": False,
}


async def app(scope: Scope, receive: ASGIReceiveCallable, send: ASGISendCallable) -> None:
    """Answer every HTTP request with 302; acknowledge the lifespan protocol."""
    if scope["type"] == "http":
        await send(RESPONSE_START)
        await send(RESPONSE_BODY)
    elif scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


def config_for(port: int) -> Config:
    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None
    config.errorlog = "-"
    return config


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    trio.run(serve_until_terminated, args.port)


async def serve_until_terminated(port: int) -> None:
    await serve(app, config_for(port), shutdown_trigger=wait_for_termination)


if __name__ == "__main__":
    main()
