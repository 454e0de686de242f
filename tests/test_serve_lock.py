"""One ``svc serve`` per data directory (web/serve_lock.py): a second one
exits at once naming the first; the lock goes with its process, even when
that process is killed."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import httpx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _second_serve(data_dir: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "web.cli", "serve", "--data", data_dir,
                           "--port", "0"], capture_output=True, text=True, timeout=30,
                          cwd=ROOT, env={**os.environ, "SVC_MAX_LAG_MS": "0"})


def test_a_second_serve_of_one_data_dir_exits_and_the_first_serves_on(
        server_factory: Any, tmp_path: Any) -> None:
    data = str(tmp_path / "data")
    first = server_factory(data).start()
    assert first.proc is not None
    second = _second_serve(data)
    assert second.returncode == 1
    assert f"svc: another svc serve (pid {first.proc.pid}) is serving {data}" in second.stderr
    assert "Traceback" not in second.stderr
    assert httpx.get(f"{first.url}/healthz").status_code == 200
    assert first.stop() == 0
    again = server_factory(data, bootstrap=False).start()  # released on a clean stop
    assert httpx.get(f"{again.url}/healthz").status_code == 200
    assert again.proc is not None
    refused = _second_serve(data)  # names the serving pid, not those before it
    assert refused.returncode == 1
    [line] = [ln for ln in refused.stderr.splitlines() if "another svc serve" in ln]
    assert f"(pid {again.proc.pid}) is serving" in line, refused.stderr
    again.kill()
    after_kill = server_factory(data, bootstrap=False).start()  # and when killed
    assert httpx.get(f"{after_kill.url}/healthz").status_code == 200
    assert after_kill.stop() == 0


def test_another_data_dir_serves_beside_it(server_factory: Any, tmp_path: Any) -> None:
    first = server_factory(str(tmp_path / "a")).start()
    other = server_factory(str(tmp_path / "b")).start()
    for srv in (first, other):
        assert httpx.get(f"{srv.url}/healthz").status_code == 200
    assert first.stop() == 0 and other.stop() == 0
