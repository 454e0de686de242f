"""Running a server under test: start, readiness, CPU accounting, clean stop.

The server runs as a subprocess on a free loopback port, optionally behind
``taskset -c CPUS`` (taskset execs the command, so the PID we hold is the
server's). Its CPU time is read from ``/proc``: utime + stime of the process
and every live descendant, plus cutime + cstime for descendants already reaped,
so a server that forks workers is fully counted.

Stopping sends SIGTERM to the PID we started and waits; only if it is still
alive after the grace period does it SIGKILL that PID and the descendants it
had. Nothing else is ever signalled.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import attrs


class BenchFailed(RuntimeError):
    """A benchmark could not be run as described (server, readiness, status or wrk)."""


@attrs.frozen
class ProcStat:
    """The fields of ``/proc/<pid>/stat`` the harness uses (times in clock ticks)."""

    ppid: int
    utime: int
    stime: int
    cutime: int
    cstime: int

    @classmethod
    def from_text(cls, text: str) -> ProcStat:
        # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
        fields = text.rsplit(")", 1)[1].split()
        return cls(
            ppid=int(fields[1]),
            utime=int(fields[11]),
            stime=int(fields[12]),
            cutime=int(fields[13]),
            cstime=int(fields[14]),
        )


@attrs.define
class RunningServer:
    process: subprocess.Popen[bytes]
    port: int
    argv: list[str]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def free_port() -> int:
    """A loopback port that was free a moment ago (the server binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(
    argv: Sequence[str],
    *,
    port: int,
    cwd: Path,
    env: Mapping[str, str],
    cpus: str | None,
    log_path: Path,
) -> RunningServer:
    """Start ``argv`` (already holding ``port``) with output going to ``log_path``."""
    full = ["taskset", "-c", cpus, *argv] if cpus is not None else list(argv)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            full,
            cwd=cwd,
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    return RunningServer(process=process, port=port, argv=full, log_path=log_path)


def wait_ready(server: RunningServer, path: str, *, timeout_s: float = 20.0) -> None:
    """Poll ``GET path`` until the server answers at all; ``BenchFailed`` if it dies or stalls."""
    deadline = time.monotonic() + timeout_s
    while True:
        if server.process.poll() is not None:
            raise BenchFailed(
                f"server exited with {server.process.returncode} before it was ready: "
                f"{log_tail(server.log_path)}"
            )
        with contextlib.suppress(OSError, http.client.HTTPException):
            request(server.port, "GET", path)
            return
        if time.monotonic() > deadline:
            tail = log_tail(server.log_path)
            raise BenchFailed(f"server not ready after {timeout_s:.0f}s: {tail}")
        time.sleep(0.05)


def request(
    port: int,
    method: str,
    path: str,
    *,
    headers: Sequence[tuple[str, str]] = (),
    body: bytes | None = None,
) -> int:
    """Send one request to the loopback server and return the response status."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request(method, path, body=body, headers=dict(headers))
        response = conn.getresponse()
        response.read()
        return response.status
    finally:
        conn.close()


def log_tail(path: Path, limit: int = 800) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(empty log)"
    except OSError:
        return "(no log)"


def _proc_stats() -> dict[int, ProcStat]:
    stats = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, ValueError, IndexError):
                stats[int(entry.name)] = ProcStat.from_text((entry / "stat").read_text())
    return stats


def process_tree(pid: int, stats: Mapping[int, ProcStat]) -> list[int]:
    """``pid`` and all its live descendants, parents first."""
    children: dict[int, list[int]] = {}
    for child, stat in stats.items():
        children.setdefault(stat.ppid, []).append(child)
    tree, todo = [], [pid]
    while todo:
        current = todo.pop()
        if current in stats:
            tree.append(current)
            todo.extend(children.get(current, ()))
    return tree


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user + system) used so far by ``pid`` and its descendants."""
    stats = _proc_stats()
    ticks = sum(
        stats[p].utime + stats[p].stime + stats[p].cutime + stats[p].cstime
        for p in process_tree(pid, stats)
    )
    return ticks / os.sysconf("SC_CLK_TCK")


def tree_bytes_written(pid: int) -> int:
    """Bytes ``pid`` and its descendants have passed to write() and pwrite()
    so far (``wchar`` of /proc/PID/io): LMDB's page writes and the log lines,
    not socket sends (send() is not counted) nor the kernel's writeback (whose
    ``write_bytes`` ext4's large folios inflate, bench/README.md session 19)."""
    total = 0
    for p in process_tree(pid, _proc_stats()):
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{p}/io").read_text().splitlines():
                if line.startswith("wchar:"):
                    total += int(line.split()[1])
    return total


def machine_cpu_seconds() -> tuple[float, float]:
    """(busy, steal) CPU seconds of the whole machine so far, from /proc/stat.

    Busy is user + nice + system + irq + softirq over all CPUs; steal is time the
    hypervisor gave to someone else. Around a measured run, busy minus the
    server's and wrk's own CPU time is what other processes used: noise.
    """
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    tick = os.sysconf("SC_CLK_TCK")
    return (user + nice + system + irq + softirq) / tick, steal / tick


def stop_server(server: RunningServer, *, grace_s: float = 10.0) -> tuple[int, bool]:
    """SIGTERM the server and wait; returns (exit status, stopped cleanly).

    Clean means it exited by itself after SIGTERM with status 0. Otherwise the
    server and the descendants it had are SIGKILLed.
    """
    process = server.process
    if process.poll() is not None:
        return process.returncode, False
    descendants = process_tree(server.pid, _proc_stats())[1:]
    process.send_signal(signal.SIGTERM)
    try:
        status = process.wait(timeout=grace_s)
        return status, status == 0
    except subprocess.TimeoutExpired:
        process.kill()
        for pid in descendants:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        return process.wait(timeout=grace_s), False
