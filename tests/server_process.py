"""Run ``svc serve`` as a real process on a real socket (port 0)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

READY = re.compile(r"svc: listening on (\S+)")


class ServerProcess:
    def __init__(self, data_dir: str, *, log_dir: str, env: dict[str, str] | None = None,
                 bootstrap: bool = True, extra_args: tuple[str, ...] = (),
                 wrap: tuple[str, ...] = ()) -> None:
        self.data_dir = data_dir
        self.log_path = os.path.join(log_dir, f"server-{time.monotonic_ns()}.log")
        # Load shedding on event-loop delay is off unless a test asks for it:
        # a test machine's scheduling pauses are not the service's overload.
        self.env = {"SVC_MAX_LAG_MS": "0", **os.environ, **(env or {})}
        self.bootstrap = bootstrap
        self.extra_args = extra_args
        self.wrap = wrap  # a command that execs the server, e.g. prlimit
        self.proc: subprocess.Popen[str] | None = None
        self.url = ""
        self.info: dict[str, Any] = {}

    def start(self, timeout: float = 20.0) -> ServerProcess:
        args = [*self.wrap, sys.executable, "-m", "web.cli", "serve", "--data", self.data_dir,
                "--port", "0", *self.extra_args]
        if self.bootstrap:
            args.append("--bootstrap")
        self._log = open(self.log_path, "a")  # noqa: SIM115 - closed in stop/kill
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=self._log, text=True,
                                     env=self.env, cwd=os.path.dirname(os.path.dirname(
                                         os.path.abspath(__file__))))
        assert self.proc.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"server exited early: {''.join(lines)}\n{self.logs()}")
            lines.append(line)
            m = READY.search(line)
            if m:
                self.url = m.group(1).replace("0.0.0.0", "127.0.0.1")
                break
        else:
            raise RuntimeError("server did not become ready")
        text = "".join(lines)
        if "{" in text:
            self.info = json.loads(text[text.index("{"): text.rindex("}") + 1])
        return self

    def client(self, key: str | None = None, **headers: str) -> httpx.Client:
        h = {"content-type": "application/json", **headers}
        if key is not None:
            h["authorization"] = f"Bearer {self.info['keys'].get(key, key)}"
        return httpx.Client(base_url=self.url, headers=h, timeout=10)

    def logs(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL: no cleanup at all, like a power cut of the process."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self._close()

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 20) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        try:
            return self.proc.wait(timeout)
        finally:
            self._close()

    def _close(self) -> None:
        if self.proc is not None and self.proc.stdout is not None:
            self.proc.stdout.close()
        if getattr(self, "_log", None) is not None:
            self._log.close()


def scraped(url: str, token: str, family: str) -> float:
    """The first sample of one metric family in a server's ``/metrics``."""
    r = httpx.get(f"{url}/metrics", headers={"authorization": f"Bearer {token}"})
    assert r.status_code == 200, r.status_code
    for found in text_string_to_metric_families(r.text):
        if found.name == family:
            return float(found.samples[0].value)
    raise AssertionError(f"no {family} in the scrape")
