"""Profiles of a target's loaded phase with py-spy (``--profile``).

py-spy samples the server process (all threads, ``--nonblocking`` so the
server is not paused) while wrk loads it and writes the raw collapsed stacks
to ``bench/out/<target>/profile.txt``; ``summarize`` prints where the time
went, by leaf frame and by the service's own functions. py-spy slows the
server down by a fifth or so: read the shares, not the req/s of such a run.

Usage: ``python -m bench.pyspy bench/out/<target>/profile.txt``
"""

from __future__ import annotations

import collections
import re
import subprocess
import sys
from pathlib import Path

OWN = ("web/", "storage/", "svc_engine/", "actors/")
_FRAME = re.compile(r"(.*) \((.*?)(:\d+)?\)$")


def start(pid: int, seconds: int, out: Path) -> subprocess.Popen[bytes]:
    py_spy = Path(sys.executable).with_name("py-spy")
    return subprocess.Popen(
        [str(py_spy), "record", "--nonblocking", "-p", str(pid), "-o", str(out), "-f", "raw",
         "-d", str(seconds), "-r", "250", "--threads"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def _name(frame: str) -> str:
    m = _FRAME.match(frame)
    if not m:
        return frame
    where = m.group(2).split("site-packages/")[-1]
    for own in OWN:
        if own in where:
            where = own + where.split(own, 1)[1]
    return f"{m.group(1)} ({where})"


def summarize(path: Path, top: int = 25) -> str:
    leaf: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    threads: collections.Counter[str] = collections.Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count = line.rstrip().rpartition(" ")
        if not stack or not count.isdigit():
            continue  # --nonblocking can read a frame mid-change: garbled, skipped
        n = int(count)
        total += n
        frames = stack.split(";")
        threads[frames[0][:60]] += n
        leaf[_name(frames[-1])] += n
        for f in {_name(f) for f in frames}:
            inclusive[f] += n
    if not total:
        return "no samples"
    out = [f"{total} samples; threads: "
           + ", ".join(f"{k} {100 * v / total:.0f}%" for k, v in threads.most_common(4)),
           "-- leaf frames"]
    out += [f"{100 * v / total:5.1f}% {k}" for k, v in leaf.most_common(top)]
    out.append("-- svc functions, inclusive")
    own = [(k, v) for k, v in inclusive.most_common() if any(o in k for o in OWN)]
    out += [f"{100 * v / total:5.1f}% {k}" for k, v in own[:top]]
    return "\n".join(out)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1])))
