"""The owner of the network hash's keys and of their file.

The keys (one for each 7-hour epoch, svc_engine/network_keys.py) live in
memory and in ``network-keys`` in the data dir (owner-only), so a restart
keeps matching the taps made before it. The file is not in the store: a
backup (``svc backup`` copies the store) holds hashes without their keys,
which no one can then test against a guessed address. A rotation, at each
epoch's start, rewrites the file without the key dropped (a new file put in
place of the old one).

A data dir without the file (a new one, or one an older svc served, whose
taps were hashed with the server's secret) starts with the server's secret
as the key of the epoch before the current one, so launches until the
current epoch ends still match the taps made before (a launch of the next
epoch looks under that epoch's key and the current one's only); it leaves
memory and the file at the next rotation, as the key of an epoch before
the previous one.

Rotations follow the wall clock: the loop looks every ``CHECK_S`` of trio's
clock whether the wall time's epoch changed, so a wall clock stepped
forward (NTP setting a clock that started behind, a machine resumed from
suspend, when trio's clock stood still) rotates within a minute, not at
the boundary trio's clock was told to wait for.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import trio

from actors.clock import Clock
from svc_engine.click_window import net_hash, net_hashes
from svc_engine.network_keys import KEY_BYTES, NetworkKeys, epoch_of, next_rotation_ms

log = logging.getLogger("svc.network_keys")
FILE_NAME = "network-keys"
CHECK_S = 60.0  # how often the loop reads the wall clock's epoch


class NetworkKeyring:
    def __init__(self, path: str, clock: Clock, random: Callable[[int], bytes],
                 keys: NetworkKeys) -> None:
        self.path = path
        self._clock = clock
        self._random = random
        self.keys = keys

    @classmethod
    def open(cls, data_dir: str, clock: Clock, random: Callable[[int], bytes],
             legacy_key: bytes) -> NetworkKeyring:
        """The keys of ``data_dir``'s file, rotated to now and written back.
        Blocking file I/O (a small file, once, before serving)."""
        path = os.path.join(data_dir, FILE_NAME)
        now = clock.now_ms()
        try:
            with open(path, "rb") as f:
                held = NetworkKeys.decode(f.read(4096))
        except FileNotFoundError:  # (the server's secret is 32 bytes, as a key is)
            held = (NetworkKeys(((epoch_of(now) - 1, legacy_key),))
                    if len(legacy_key) == KEY_BYTES else NetworkKeys())
        except (OSError, ValueError) as e:
            log.warning("%s is unreadable (%s): new network keys; iPhone taps of the last "
                        "hours will not match by network", path, e)
            held = NetworkKeys()
        ring = cls(path, clock, random, held)
        ring.save(ring.rotate_now())
        return ring

    def tap_hash(self, ip: str) -> bytes | None:
        """A tap's network hash, under its epoch's key."""
        key = self.keys.tap_key(self._clock.now_ms())
        return net_hash(key, ip) if key is not None else None

    def launch_hashes(self, ip: str, since_ms: int | None = None) -> tuple[bytes, ...]:
        """A launch's network hashes: under its epoch's key and the one
        before's (only when its window, from ``since_ms``, reaches into it)."""
        return net_hashes(self.keys.launch_keys(self._clock.now_ms(), since_ms), ip)

    def rotate_now(self) -> bytes:
        """Hold the keys of now; what the file should hold is returned."""
        self.keys = self.keys.rotated(self._clock.now_ms(), self._random)
        return self.keys.encode()

    def save(self, data: bytes) -> None:
        """Write the file (blocking: written and flushed, then put in place).
        When it cannot be written the error is logged and the keys in memory
        serve on; a restart would then start from the file as it was."""
        try:
            _write(self.path, data)
        except OSError as e:
            log.error("cannot write %s: %s (network keys kept in memory only)", self.path, e)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                  ) -> None:
        """Rotate at each epoch's start (within ``CHECK_S`` of it by the wall clock)."""
        task_status.started()
        rotated = epoch_of(self._clock.now_ms())
        while True:
            boundary = self._clock.trio_time_for(next_rotation_ms(self._clock.now_ms()))
            await trio.sleep_until(min(boundary, trio.current_time() + CHECK_S))
            if epoch_of(self._clock.now_ms()) == rotated:
                continue
            # On the loop: a file of at most 115 bytes flushed once in 7 hours
            # (~0.1-0.2 ms here, like one commit's flush), which a test can
            # then see written as soon as the rotation is due.
            self.save(self.rotate_now())
            rotated = epoch_of(self._clock.now_ms())


def _write(path: str, data: bytes) -> None:
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.write(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(os.path.dirname(path) or ".", os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
