"""A data dir this process cannot use is refused in one line by every
command, naming SVC_DATA_DIR and what to do, never a traceback or a wrong
"no data here": a service run as another user than the one that made the
dir (as root here, the commands run as ``nobody`` through ``setpriv``;
otherwise the files are made unreadable), and a path that is a file. What
the service makes itself is owner-only (0700 dir, 0600 files)."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROJECT = "00000000-0000-4000-8000-000000000000"
COMMANDS = [["keys", "list", "--project", PROJECT], ["backup", "BACKUP"],
            ["serve", "--port", "0"], ["doctor"]]


def _svc(data: Path, *args: str, other_user: bool = False) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "web.cli", *args, "--data", str(data)]
    if other_user and os.geteuid() == 0:
        command = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False,
                          cwd=ROOT)


@pytest.fixture
def made(tmp_path: Path) -> Path:
    """A bootstrapped data dir, in a parent anyone may enter."""
    tmp_path.chmod(0o755)
    data = tmp_path / "data"
    done = _svc(data, "bootstrap", "--json")
    assert done.returncode == 0, done.stderr
    return data


def _unusable(data: Path, *, dir_mode: int) -> None:
    """Make ``data`` unusable for the commands run with ``other_user``."""
    if os.geteuid() == 0:
        assert shutil.which("setpriv"), "util-linux's setpriv runs a command as nobody"
        data.chmod(dir_mode)
    else:
        for f in data.iterdir():
            f.chmod(0)
        data.chmod(dir_mode if dir_mode & 0o077 else 0)


@pytest.mark.parametrize("dir_mode", [0o700, 0o755], ids=["dir closed", "files closed"])
def test_a_data_dir_of_another_user_is_refused_in_one_line(made: Path, tmp_path: Path,
                                                           dir_mode: int) -> None:
    _unusable(made, dir_mode=dir_mode)
    try:
        for args in COMMANDS:
            args = [str(tmp_path / "bk") if a == "BACKUP" else a for a in args]
            done = _svc(made, *args, other_user=True)
            out = done.stdout + done.stderr
            assert done.returncode in (1, 2), (args, out)
            assert "Traceback" not in out and "no svc data" not in out, (args, out)
            assert "no LMDB data" not in out, (args, out)  # it is there: not to be remade
            assert "Permission denied" in out, (args, out)
            if args[0] != "doctor":
                assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
                assert "SVC_DATA_DIR" in done.stderr, (args, done.stderr)
    finally:
        made.chmod(0o700)
        for f in made.iterdir():
            f.chmod(0o600)


def test_a_data_dir_that_is_a_file_is_refused_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.write_text("not a directory")
    for args in (["bootstrap"], *COMMANDS[:3]):
        args = [str(tmp_path / "bk") if a == "BACKUP" else a for a in args]
        done = _svc(data, *args)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
        assert "is not a directory" in done.stderr or "Not a directory" in done.stderr, (
            args, done.stderr)


def test_what_serve_makes_is_the_owner_s_alone(tmp_path: Path) -> None:
    """``svc serve`` on a new dir (its lock is taken before the store is
    opened: it made the dir 0755), and ``svc doctor`` on a backup (it made
    ``lock.mdb`` 0644 and then warned about it)."""
    data = tmp_path / "fresh"
    before = os.umask(0o022)  # the usual one, which made the dir 0755
    try:
        with subprocess.Popen([sys.executable, "-m", "web.cli", "serve", "--bootstrap",
                               "--port", "0", "--data", str(data)], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) as proc:
            try:
                assert proc.stdout is not None
                for line in proc.stdout:
                    if "listening" in line:
                        break
            finally:
                proc.terminate()
                proc.wait(timeout=30)
    finally:
        os.umask(before)
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (data, *data.iterdir())}
    assert modes == {"fresh": 0o700, "data.mdb": 0o600, "lock.mdb": 0o600, "serve.lock": 0o600,
                     "network-keys": 0o600}
    backup = tmp_path / "bk"
    assert _svc(data, "backup", str(backup)).returncode == 0
    doctor = _svc(backup, "doctor")
    assert "readable or writable by others" not in doctor.stdout, doctor.stdout
    assert stat.S_IMODE((backup / "lock.mdb").stat().st_mode) == 0o600
