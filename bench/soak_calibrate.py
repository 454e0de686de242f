"""What one entry of each bounded per-key table of the service costs, measured
in this process with the service's own code (tracemalloc), so that the soak
can say how much of the growth it saw with new keys those tables explain.

Each table is filled, fresh, with ``n`` distinct keys of the kind the soak
sends, and the traced bytes it gained are divided by ``n``; the two
per-address tables, which a soak's fresh phase fills to their bounds, are
filled to their bounds (an entry costs more in a full table: at 100,000
entries the rate limiter's 180 B against 156 at 5,000, session 37). The table's bound
(file:line in the soak's census, bench/soak.py ``CENSUS``) says how far it
can grow; ``expected_fill`` multiplies each cost by the entries the soak's
new keys could have added, up to that bound.
"""

from __future__ import annotations

import gc
import random
import time
import tracemalloc
from collections.abc import Callable, Mapping

import attrs

from bench.soak_load import KeySpace, _address, _currency


@attrs.frozen
class Table:
    name: str
    key: str          # the soak's key kind (KeySpace.distinct) that adds entries
    bound: int        # most entries held
    bytes_per_entry: float


def _traced(fill: Callable[[], object]) -> float:
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = fill()
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return float(after - before)


def calibrate(n: int = 5000) -> list[Table]:
    from storage import event_records
    from web import useragent
    from web.auth import MAX_BUCKETS, RateLimiter
    from web.dashboard.throttle import MAX_ENTRIES, SignInThrottle

    now = int(time.time() * 1000)
    tables: list[Table] = []

    def limiter() -> object:
        rl = RateLimiter(300)
        for i in range(MAX_BUCKETS):
            rl.check(_address(i, 100).encode(), now)
        return rl

    tables.append(Table("client rate limiter (web/auth.py RateLimiter, per address)",
                        "addresses", MAX_BUCKETS, _traced(limiter) / MAX_BUCKETS))

    def throttle() -> object:
        t = SignInThrottle(b"k" * 32)
        for i in range(MAX_ENTRIES):
            t.attempt(f"fresh{i}@example.org", _address(i, 100), now)
        return t

    # one attempt adds an e-mail entry and a client entry
    tables.append(Table("sign-in throttle (web/dashboard/throttle.py, per e-mail + client)",
                        "emails", MAX_ENTRIES, _traced(throttle) / MAX_ENTRIES))

    keys = KeySpace(random.Random(5), pool_addresses=1, pool_user_agents=1)
    keys.set_phase("fresh")
    uas = [keys.user_agent(random.choice(("ios", "android", "desktop"))) for _ in range(n)]
    useragent.classified.cache_clear()
    useragent.classify(uas[0])  # the bot pattern and parser built outside the measure
    m = min(n, 2000)
    per_ua = _traced(lambda: [useragent.classify(ua) for ua in uas[1:m + 1]]) / m
    useragent.classified.cache_clear()
    tables.append(Table("user-agent verdicts (web/useragent.py classify lru 4096 + "
                        "ua-parser's cache 2000, per user agent)", "user_agents", 4096, per_ua))

    from storage import events_store

    project = "2f7f83fb-77ad-4603-b6e8-a672a2909b1a"
    day = now // 86_400_000
    names = [f"custom_event_{i}" for i in range(n)]
    events_store._counter_keys.cache_clear()
    event_records._NAME_PIECE.clear()
    m = min(n, 4000)

    def event_names() -> object:
        for name in names[:m]:
            events_store._counter_keys(project, "live", False, None, day, name)
            event_records._name_piece(name)
        return None

    tables.append(Table("event-name memos (storage/events_store.py _counter_keys lru 4096 + "
                        "storage/event_records.py _NAME_PIECE 4096, per event name)",
                        "event_names", 4096, _traced(event_names) / m))
    events_store._counter_keys.cache_clear()
    event_records._NAME_PIECE.clear()

    event_records._BY_KIND.clear()
    amounts = [(_currency(i % 50), round(0.5 + i * 0.01, 2)) for i in range(n)]

    def memo() -> object:
        for currency, amount in amounts:
            event_records._revenue({"currency": currency, "revenue": amount})
        return None

    tables.append(Table("revenue memo (storage/event_records.py _BY_KIND, per currency and "
                        "amount)", "amounts", event_records._MEMO_MAX ** 2, _traced(memo) / n))
    event_records._BY_KIND.clear()
    return tables


PER_ADDRESS = ("client rate limiter", "sign-in throttle")
"""The tables ``SOAK_TRACE_BOUND`` holds (bench/soak_trace.py), by name prefix."""


def held_to(tables: list[Table], bound: int) -> list[Table]:
    """``tables`` with the per-address ones held to ``bound`` entries."""
    return [attrs.evolve(t, bound=min(t.bound, bound)) if t.name.startswith(PER_ADDRESS) else t
            for t in tables]


def expected_fill(tables: list[Table], new_keys: Mapping[str, int],
                  held_before: Mapping[str, int]) -> list[tuple[Table, int, float]]:
    """(table, entries added, bytes) for the new keys of a phase: entries up to
    the table's bound, less what the earlier phases' keys already hold."""
    out = []
    for t in tables:
        room = max(0, t.bound - held_before.get(t.key, 0))
        added = min(new_keys.get(t.key, 0), room)
        out.append((t, added, added * t.bytes_per_entry))
    return out
