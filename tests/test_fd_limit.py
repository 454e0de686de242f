"""The open-file limit makes room for the connection cap (web/fd_limit.py):
raised up to the hard limit at start, and the cap lowered, with a warning,
when the hard limit is too low."""

from __future__ import annotations

import resource
import sys
from typing import Any

import pytest

from tests.server_process import scraped
from web.fd_limit import MIN_CONNECTIONS, OTHER_FDS, FdPlan, plan

INF = resource.RLIM_INFINITY
TOKEN = "scrape-token-0123456789"


@pytest.mark.parametrize(("soft", "hard", "cap", "expected"), [
    (1024, 524288, 1024, FdPlan(1024 + OTHER_FDS, 1024)),  # systemd's usual 1,024 soft
    (1024, INF, 1024, FdPlan(1024 + OTHER_FDS, 1024)),
    (INF, INF, 1024, FdPlan(INF, 1024)),
    (1_048_576, 1_048_576, 1024, FdPlan(1_048_576, 1024)),  # already enough: untouched
    (1024, 1024, 1024, FdPlan(1024, 1024 - OTHER_FDS)),  # hard too low: the cap shrinks
    (1024, 1200, 1024, FdPlan(1200, 1200 - OTHER_FDS)),
    (256, 256, 1024, FdPlan(256, MIN_CONNECTIONS)),
    (1024, 2000, 100, FdPlan(1024, 100)),  # a small cap fits as it is
])
def test_plan(soft: int, hard: int, cap: int, expected: FdPlan) -> None:
    assert plan(soft, hard, cap) == expected


def _limited(soft: int, hard: int) -> tuple[str, ...]:
    """A command prefix that starts the server with these limits."""
    script = ("import os, resource, sys; "
              f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard})); "
              "os.execv(sys.argv[1], sys.argv[1:])")
    return (sys.executable, "-c", script)


def _limits(pid: int) -> tuple[int, int]:
    with open(f"/proc/{pid}/limits") as f:
        for line in f:
            if line.startswith("Max open files"):
                soft, hard = line.split()[3:5]
                return int(soft), int(hard)
    raise AssertionError("no open-file limit line")


def _connection_cap(url: str) -> float:
    return scraped(url, TOKEN, "svc_http_connections_limit")


def test_a_low_soft_limit_is_raised_at_start(server_factory: Any) -> None:
    # the hard limit this test may keep (only root may raise it)
    hard_now = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    hard = 20000 if hard_now == INF else min(hard_now, 20000)
    assert hard > 300
    srv = server_factory(env={"SVC_METRICS_TOKEN": TOKEN}, wrap=_limited(300, hard)).start()
    assert srv.proc is not None
    raised = min(1024 + OTHER_FDS, hard)
    assert _limits(srv.proc.pid) == (raised, hard)
    assert _connection_cap(srv.url) == min(1024, raised - OTHER_FDS)
    srv.stop()
    assert ("open-file limit" in srv.logs()) == (raised < 1024 + OTHER_FDS)


def test_a_low_hard_limit_lowers_the_cap_with_a_warning(server_factory: Any) -> None:
    srv = server_factory(env={"SVC_METRICS_TOKEN": TOKEN}, wrap=_limited(600, 600)).start()
    assert srv.proc is not None
    assert _limits(srv.proc.pid) == (600, 600)
    assert _connection_cap(srv.url) == 600 - OTHER_FDS
    srv.stop()
    logs = srv.logs()
    assert "leaves room for 216 connections, not SVC_MAX_CONNECTIONS=1024" in logs
    assert f"LimitNOFILE={1024 + OTHER_FDS}" in logs


def test_a_refused_raise_fits_the_cap_to_the_limit_it_has(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """A container may forbid raising the soft limit even under the hard one:
    the service then serves with the connections its soft limit leaves room
    for, and says so, rather than promising 1,024 with 512 descriptors."""
    from web import fd_limit

    def refuse(which: int, limits: tuple[int, int]) -> None:
        raise ValueError("not allowed")

    monkeypatch.setattr(resource, "getrlimit", lambda which: (512, 65_536))
    monkeypatch.setattr(resource, "setrlimit", refuse)
    caplog.set_level("WARNING")
    cap = fd_limit.make_room(1_024)
    assert cap == 512 - OTHER_FDS
    assert any("could not raise the open-file limit from 512" in r.getMessage()
               for r in caplog.records)
    assert any(f"serving with {cap}" in r.getMessage() for r in caplog.records)
