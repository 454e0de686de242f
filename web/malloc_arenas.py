"""At most two glibc malloc arenas for ``svc serve``, unless the operator chose.

glibc gives a thread that allocates its own arena (a heap of its own) up to
eight per core, and memory freed into an arena stays there for that arena's
later use: ``free`` does not return it to the system unless a whole region
at the arena's top is free. The service's threads are few (the event loop,
the writer, its commit thread) but the worker threads of long reads and
exports come and go, each adopting an arena, and what they free is kept
apart from where the event loop allocates next. The soak harness
(bench/soak.py) saw this as resident memory that grew while the same keys
were used: with the same code and load, glibc's heaps grew +31 to +40 MiB in
20 minutes, nearly all of it free, and every run capped at two arenas grew
less (sessions 29-31 in bench/README.md: +1.0 against +51.1, +23.6 against
+65.1 and +X against +Y MiB an hour, fitted with the same keys).

So ``run`` caps the arenas at two, which is what the glibc documentation's
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
