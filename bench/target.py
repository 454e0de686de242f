"""What the harness needs to know to benchmark one HTTP path.

A ``Target`` names a server command, how to tell it is ready, and the requests
wrk sends to it. Strings in ``server``, ``body_file``, ``paths_file`` and
``lua_script`` may use these placeholders, filled in when the target runs:

- ``{python}``: the interpreter running the harness;
- ``{port}``: a free loopback port chosen for this run;
- ``{workdir}``: a fresh per-target directory under ``bench/out/`` (server
  data, generated slug lists, logs).

Requests: one fixed path, or several (``paths``, or a ``paths_file`` with one
path a line) of which wrk picks one at random per request. ``method``,
``headers`` and ``body_file`` set the request line, headers and body (a JSON
POST is ``method="POST"``, a Content-Type header and a body file). A custom
``lua_script`` may replace the request generation (it must not define
``done``: the harness appends its own ``done`` hook that reports exact
percentiles as JSON).

``prepare`` runs after the server is ready and before any load: it gets the
base URL and the work directory, and can create links or write the slug list
that ``paths_file`` names. The environment variable ``BENCH_LOAD_SECONDS``
then holds the seconds of load to come (all phases, and room for the
unloaded phase measured again when wrk's record of it is impossible), so a
hook can make as much consumable state as the run will use. ``note`` runs
after the load and may return a line for the run's notes (e.g. how much of
that state was used).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Literal

import attrs

Group = Literal["baseline", "service"]
Prepare = Callable[[str, Path], Mapping[str, str] | None]
"""Runs before the load; may return extra request headers (e.g. an API key it
created), which join the target's headers for the status check and for wrk."""
Note = Callable[[Path], str | None]

_PLACEHOLDERS = ("python", "port", "workdir")


@attrs.frozen
class Target:
    """One benchmarked path and the server that answers it."""

    name: str
    description: str
    server: tuple[str, ...]
    group: Group = "service"
    ready_path: str = "/"
    paths: tuple[str, ...] = ("/",)
    paths_file: str | None = None
    method: str = "GET"
    headers: tuple[tuple[str, str], ...] = ()
    body_file: str | None = None
    lua_script: str | None = None
    expect_status: int = 302
    env: tuple[tuple[str, str], ...] = ()
    server_cpus: str | None = "1"
    """CPU list the server is pinned to with taskset (``None``: not pinned)."""
    wrk_cpus: str | None = "0"
    """CPU list wrk is pinned to with taskset (``None``: not pinned)."""
    prepare: Prepare | None = attrs.field(default=None, eq=False)
    note: Note | None = attrs.field(default=None, eq=False)
    """Runs after the measured phases (server still up): a line for the run's notes."""

    def __attrs_post_init__(self) -> None:
        if not self.paths or any(not p.startswith("/") for p in self.paths):
            raise ValueError(f"{self.name}: paths must be non-empty and start with '/'")
        if not self.ready_path.startswith("/"):
            raise ValueError(f"{self.name}: ready_path must start with '/'")

    def server_argv(self, values: Mapping[str, str]) -> list[str]:
        """The server command with its placeholders filled in."""
        return [fill(part, values) for part in self.server]


def fill(template: str, values: Mapping[str, str]) -> str:
    """Replace ``{python}``, ``{port}`` and ``{workdir}`` in ``template``.

    Other braces are left alone, so JSON or Lua in a command line survives.
    """
    for key in _PLACEHOLDERS:
        if key in values:
            template = template.replace("{" + key + "}", values[key])
    return template


def fill_optional(template: str | None, values: Mapping[str, str]) -> str | None:
    return None if template is None else fill(template, values)
