"""Baseline servers that every benchmark run measures beside the service.

Each one answers every request with a 302 and a Location header, so a service
path's throughput can be read as a ratio to what the bare HTTP layers manage on
the same machine in the same run:

- ``hypercorn_302``: a raw ASGI app on Hypercorn's trio worker (the server the
  service runs on, without Quart-Trio and without storage);
- ``h11_302``: trio and h11 with no ASGI layer at all (the trio floor).

Both take ``--port`` and stop cleanly (exit status 0) on SIGTERM or SIGINT.
"""
