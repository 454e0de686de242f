"""What the harness counts as a server's writes: /proc's ``wchar`` of a real
process tree (a child that writes a known number of bytes to a file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from bench.server import tree_bytes_written

CHILD = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o600)
print("ready", flush=True)
sys.stdin.readline()                      # wait: the test reads wchar first
for i in range(25):
    os.pwrite(fd, b"x" * 4096, i * 4096)  # 25 pages, as LMDB writes them
os.close(fd)
print("done", flush=True)
sys.stdin.readline()                      # stay alive to be read again
"""


def test_the_bytes_a_process_tree_writes_are_counted(tmp_path: Path) -> None:
    # the child runs under a shell, so the count is of a tree, as the
    # harness's servers are (a launcher and its python)
    with subprocess.Popen(["sh", "-c", f'"{sys.executable}" -c "$0" "$1"', CHILD,
                           str(tmp_path / "data.mdb")],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as proc:
        try:
            assert proc.stdin is not None and proc.stdout is not None
            assert proc.stdout.readline() == "ready\n"  # started: its own writes from here
            before = tree_bytes_written(proc.pid)
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline() == "done\n"
            written = tree_bytes_written(proc.pid) - before
            # the 25 pages and the 5-byte line to its stdout pipe; nothing else
            assert 25 * 4096 <= written <= 25 * 4096 + 64
        finally:
            proc.kill()
            proc.wait()
    assert tree_bytes_written(proc.pid) == 0  # gone: nothing to read, no error
