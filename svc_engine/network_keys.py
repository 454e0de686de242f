"""The keys of the network hash, one for each 7-hour epoch.

A tap's network hash (``probabilisticIpMatching``) is keyed with the key of
the epoch the tap is in; a launch looks its taps up under the key of its own
epoch and of the one before. The window is at most 6 hours (SPEC), shorter
than an epoch, so every tap a launch may match lies in one of those two.
A key is kept while a launch may still need it, the epoch after its own,
and then dropped: a hash made with it, wherever a copy of it lies (a backup
of the store, a page LMDB freed but has not reused), can no longer be tested
against a guessed address, even by whoever holds the whole data dir. So no
hash stays linkable past 14 hours, and most past 7 (SPEC keeps a hash at
most 7 hours in the running store; a copy keeps it for as long as the copy
lives).

The next epoch's key is made one epoch ahead, so a tap never waits for a key
and a rotation that runs late (a busy loop, a stopped service) finds the
keys it needs. Pure: the time and the source of fresh keys are arguments.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

EPOCH_MS = 7 * 3_600_000
"""An epoch: longer than the longest window (6 h), so a launch's taps lie in
its epoch or the one before."""
KEY_BYTES = 32
_MAGIC = b"svc network keys 1\n"
_RECORD = 8 + KEY_BYTES


def epoch_of(now_ms: int) -> int:
    return now_ms // EPOCH_MS


def next_rotation_ms(now_ms: int) -> int:
    """When the epoch after ``now_ms``'s begins."""
    return (epoch_of(now_ms) + 1) * EPOCH_MS


@attrs.frozen
class NetworkKeys:
    """Keys by epoch, oldest first: at most the epoch before the current one,
    the current one and the next."""

    keys: tuple[tuple[int, bytes], ...] = ()

    def key_of(self, epoch: int) -> bytes | None:
        for e, key in self.keys:
            if e == epoch:
                return key
        return None

    def tap_key(self, now_ms: int) -> bytes | None:
        """The key a tap at ``now_ms`` is hashed with (None: no key held for
        its epoch; the tap then has no network hash)."""
        return self.key_of(epoch_of(now_ms))

    def launch_keys(self, now_ms: int, since_ms: int | None = None) -> tuple[bytes, ...]:
        """The keys a launch at ``now_ms`` looks its taps up with: its
        epoch's, then the one before's, those held. With ``since_ms``, the
        start of its window: the one before's only when the window reaches
        into that epoch (a 2-hour window does in the first 2 of the 7 hours)."""
        epoch = epoch_of(now_ms)
        current = self.key_of(epoch)
        if since_ms is not None and epoch_of(since_ms) >= epoch:
            return (current,) if current is not None else ()
        return tuple(k for k in (current, self.key_of(epoch - 1)) if k is not None)

    def rotated(self, now_ms: int, fresh: Callable[[int], bytes]) -> NetworkKeys:
        """The keys to hold from ``now_ms``: the epoch before, the current and
        the next, each kept when held and made with ``fresh(KEY_BYTES)`` when
        not (the one before only kept, never made: nothing was hashed with a
        key that did not exist). Every older key is dropped."""
        epoch = epoch_of(now_ms)
        kept = []
        for e in (epoch - 1, epoch, epoch + 1):
            key = self.key_of(e)
            if key is None and e >= epoch:
                key = fresh(KEY_BYTES)
                if len(key) != KEY_BYTES:
                    raise ValueError(f"a network key is {KEY_BYTES} bytes")
            if key is not None:
                kept.append((e, key))
        return NetworkKeys(tuple(kept))

    def encode(self) -> bytes:
        return _MAGIC + b"".join(e.to_bytes(8, "big") + key for e, key in self.keys)

    @classmethod
    def decode(cls, data: bytes) -> NetworkKeys:
        """ValueError when ``data`` is not what ``encode`` writes."""
        if not data.startswith(_MAGIC) or (len(data) - len(_MAGIC)) % _RECORD:
            raise ValueError("not a network keys file")
        body = data[len(_MAGIC):]
        keys = tuple((int.from_bytes(body[i:i + 8], "big"), body[i + 8:i + _RECORD])
                     for i in range(0, len(body), _RECORD))
        if [e for e, _ in keys] != sorted({e for e, _ in keys}):
            raise ValueError("network keys out of order")
        return cls(keys)
