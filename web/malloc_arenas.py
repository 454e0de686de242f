"""At most two glibc malloc arenas for ``svc serve``, unless the operator chose.

glibc gives a thread that allocates its own arena (a heap of its own) up to
eight per core, and memory freed into an arena stays there for that arena's
later use: ``free`` does not return it to the system unless a whole region
at the arena's top is free. The service's threads are few (the event loop,
the writer, its commit thread) but the worker threads of long reads and
exports come and go, each adopting an arena, and what they free is kept
apart from where the event loop allocates next. In session 29's soaks
(bench/soak.py, bench/README.md) glibc's heaps grew +31 to +40 MiB in 20
minutes, nearly all of it free. Four pairs of soaks since, the same code and
load with and without the cap, leaned the same way over the whole
known-keys phase, if by little: fitted growth in its two halves +27.4 / +1.0
against +17.7 / +51.1 MiB an hour (session 29), net of the bounded tables
+23.6 against +65.1 (session 30), and in session 31 +57.2 against +79.4 and
+21.8 against +63.8, where the memory at the end was 143.5 against 145.4 and
123.6 against 127.9 MiB. The speed did not tell them apart (`bench.ab`,
three rounds each way: within the machine's spread).

So ``serve`` (web/main.py) caps the arenas at two before it starts a thread,
which is what the glibc documentation's
``MALLOC_ARENA_MAX`` does and what it sets when that variable is in the
environment: an operator who set it keeps their value (glibc reads it at
start), and on a C library other than glibc nothing happens. Python's own
small objects are not in these arenas (pymalloc maps its own), so the cap
concerns the larger buffers: request bodies, LMDB values copied out,
encoded responses. Two arenas, not one, so the writer's thread seldom waits
for the event loop's lock inside ``malloc``.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

ENV = "MALLOC_ARENA_MAX"
DEFAULT_ARENAS = 2
M_ARENA_MAX = -8  # glibc's malloc.h


def limit(environ: Mapping[str, str]) -> int | None:
    """Cap glibc's arenas at ``DEFAULT_ARENAS``: the cap set, or None when the
    operator set ``MALLOC_ARENA_MAX`` or the C library is not glibc."""
    if ENV in environ:
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018  (glibc only: raises elsewhere)
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return None
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    return DEFAULT_ARENAS if mallopt(M_ARENA_MAX, DEFAULT_ARENAS) == 1 else None
