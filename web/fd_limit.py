"""Room for the connection cap in the process' open-file limit.

Every client connection is a file descriptor, and so are the store's files,
the listeners, the event loop's own and the webhook sender's connections
(up to ``h11_client.MAX_IDLE`` kept alive plus one per sender). Many hosts
start processes with a soft limit of 1,024 descriptors and a much higher hard
limit, below the default cap of 1,024 connections plus those. Out of
descriptors, ``accept`` fails, and so would a webhook delivery or a store
file: the process would be up but failing in odd places.

So at start ``svc serve`` raises its soft limit to what the cap needs (never
above the hard limit, which only the operator can raise). If the hard limit
is too low, the connection cap is lowered to what fits and a warning says how
to raise it: a connection past the cap then gets the quick 503 of
web/server.py, and nothing else runs out. Decision (SPEC.md is silent):
lower the cap rather than refuse to start, since a small instance behind a
proxy works well with a few hundred connections.
"""

from __future__ import annotations

import logging
import resource

import attrs

from actors.h11_client import MAX_IDLE

log = logging.getLogger("svc")
# Descriptors other than client connections: the webhook sender's pooled
# connections (MAX_IDLE) and in-flight attempts (32 senders), the store's
# files, listeners, the event loop, logs and DNS, with room to spare.
OTHER_FDS = MAX_IDLE + 128
MIN_CONNECTIONS = 16


@attrs.frozen
class FdPlan:
    soft: int  # the soft limit to set (unchanged when already enough)
    max_connections: int  # the connection cap that fits under it


def plan(soft: int, hard: int, max_connections: int) -> FdPlan:
    """The soft limit to ask for and the connection cap it allows.
    ``resource.RLIM_INFINITY`` (-1) stands for no limit."""
    want = max_connections + OTHER_FDS
    if soft == resource.RLIM_INFINITY or soft >= want:
        return FdPlan(soft, max_connections)
    new_soft = want if hard == resource.RLIM_INFINITY else min(want, hard)  # >= soft
    cap = min(max_connections, max(new_soft - OTHER_FDS, MIN_CONNECTIONS))
    return FdPlan(new_soft, cap)


def make_room(max_connections: int) -> int:
    """Raise the soft open-file limit for ``max_connections``; return the
    connection cap to serve with (lower when the hard limit is too low)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    p = plan(soft, hard, max_connections)
    if p.soft != soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (p.soft, hard))
        except (ValueError, OSError) as e:
            log.warning("could not raise the open-file limit from %d: %s", soft, e)
            p = plan(soft, soft, max_connections)
    if p.max_connections < max_connections:
        log.warning("the open-file limit (%d, hard %d) leaves room for %d connections, "
                    "not SVC_MAX_CONNECTIONS=%d: serving with %d (raise the limit, e.g. "
                    "LimitNOFILE=%d in a systemd unit or ulimit -n)",
                    p.soft, hard, p.max_connections, max_connections, p.max_connections,
                    max_connections + OTHER_FDS)
    return p.max_connections
