"""The network hash's keys: one for each 7-hour epoch, dropped the epoch
after their own, kept in a file of the data dir that backups do not copy.

Pure rules (svc_engine/network_keys.py), the keyring and its file
(web/network_keyring.py), and matching across a key's change in the
service under autojump_clock (its wall clock starts 1 h 46 min 40 s before
an epoch begins: ``BOUNDARY_S``)."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from actors.clock import TrioWallClock
from storage.lmdb_store import LmdbStore
from svc_engine.click_window import net_hash, net_hashes
from svc_engine.config import Config
from svc_engine.network_keys import (
    EPOCH_MS,
    KEY_BYTES,
    NetworkKeys,
    epoch_of,
    next_rotation_ms,
)
from svc_engine.settings import WINDOW_MAX
from tests.conftest import App, running_app
from tests.deferred_helpers import IOS_UA, init_body, new_install
from tests.test_deferred_api import init, link, setup, tap
from web.network_keyring import FILE_NAME, NetworkKeyring

HOUR_MS = 3_600_000
T0 = 1_790_000_000_000  # TrioWallClock's wall time at trio time 0
BOUNDARY_S = (next_rotation_ms(T0) - T0) / 1000


def counter() -> tuple[list[bytes], object]:
    made: list[bytes] = []

    def fresh(n: int) -> bytes:
        made.append(len(made).to_bytes(n, "big"))
        return made[-1]

    return made, fresh


class FixedClock:
    def __init__(self, now_ms: int) -> None:
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now

    def trio_time_for(self, wall_ms: int) -> float:
        return (wall_ms - self.now) / 1000


# -- the rules ------------------------------------------------------------------------------


def test_a_rotation_holds_the_epoch_before_the_current_and_the_next() -> None:
    made, fresh = counter()
    now = 100 * EPOCH_MS + 5
    keys = NetworkKeys().rotated(now, fresh)  # type: ignore[arg-type]
    # nothing was hashed with a key that did not exist: none made for the epoch before
    assert [e for e, _ in keys.keys] == [100, 101] and len(made) == 2
    assert keys.tap_key(now) == made[0] and keys.launch_keys(now) == (made[0],)
    later = keys.rotated(now + EPOCH_MS, fresh)  # type: ignore[arg-type]
    assert [e for e, _ in later.keys] == [100, 101, 102]
    assert later.tap_key(now + EPOCH_MS) == made[1]  # made one epoch ahead
    assert later.launch_keys(now + EPOCH_MS) == (made[1], made[0])
    # a window that starts inside the launch's epoch needs its key alone
    at = 101 * EPOCH_MS + 3 * HOUR_MS
    assert later.launch_keys(at, since_ms=at - 2 * HOUR_MS) == (made[1],)
    assert later.launch_keys(at, since_ms=at - 4 * HOUR_MS) == (made[1], made[0])
    dropped = later.rotated(now + 2 * EPOCH_MS, fresh)  # type: ignore[arg-type]
    assert [e for e, _ in dropped.keys] == [101, 102, 103]
    assert made[0] not in dropped.encode()
    # a rotation that comes late (a service stopped for days) keeps nothing stale
    stale = dropped.rotated(now + 9 * EPOCH_MS, fresh)  # type: ignore[arg-type]
    assert [e for e, _ in stale.keys] == [109, 110]


@given(tap_ms=st.integers(0, 10**13), delay_ms=st.integers(0, 6 * HOUR_MS),
       rotations=st.lists(st.integers(0, 6 * HOUR_MS), max_size=4))
def test_every_tap_a_launch_may_match_is_under_one_of_the_launch_s_keys(
        tap_ms: int, delay_ms: int, rotations: list[int]) -> None:
    """Whenever the rotations between them ran (at least one at each
    epoch's start, as the keyring does, and any number more), a launch at
    most 6 hours (the longest window) after a tap looks under the tap's key."""
    _, fresh = counter()
    keys = NetworkKeys().rotated(tap_ms, fresh)  # type: ignore[arg-type]
    tap_key = keys.tap_key(tap_ms)
    launch_ms = tap_ms + delay_ms
    times = sorted({*(tap_ms + r for r in rotations if r <= delay_ms),
                    *range(next_rotation_ms(tap_ms), launch_ms + 1, EPOCH_MS)})
    for at in times:
        keys = keys.rotated(at, fresh)  # type: ignore[arg-type]
    assert tap_key is not None and tap_key in keys.launch_keys(launch_ms)
    assert tap_key in keys.launch_keys(launch_ms, since_ms=tap_ms)  # the tightest window


def test_the_encoding_round_trips_and_refuses_what_it_did_not_write() -> None:
    keys = NetworkKeys(((7, b"a" * KEY_BYTES), (8, b"b" * KEY_BYTES)))
    assert NetworkKeys.decode(keys.encode()) == keys
    for bad in (b"", b"junk", keys.encode()[:-1], keys.encode() + b"x",
                NetworkKeys(((8, b"b" * 32), (7, b"a" * 32))).encode()):
        with pytest.raises(ValueError):
            NetworkKeys.decode(bad)


def test_a_launch_hashes_its_network_once_a_key() -> None:
    keys = (b"k" * 32, b"j" * 32)
    assert net_hashes(keys, " 203.0.113.7 ") == tuple(net_hash(k, "203.0.113.7") for k in keys)
    assert net_hashes(keys, "not an address") == ()
    assert net_hashes((), "203.0.113.7") == ()


# -- the keyring and its file ---------------------------------------------------------------


def test_a_new_data_dir_keeps_its_secret_for_the_taps_before_and_drops_it_later(
        tmp_path: Path) -> None:
    """A data dir an older svc served hashed its taps with the server's
    secret: a launch still finds them for one more epoch, then the secret is
    no network key anywhere."""
    secret = b"s" * 32
    clock = FixedClock(100 * EPOCH_MS + HOUR_MS)
    _, fresh = counter()
    ring = NetworkKeyring.open(str(tmp_path), clock, fresh, secret)  # type: ignore[arg-type]
    path = tmp_path / FILE_NAME
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert ring.launch_hashes("203.0.113.7")[1] == net_hash(secret, "203.0.113.7")
    assert ring.tap_hash("203.0.113.7") != net_hash(secret, "203.0.113.7")
    assert NetworkKeys.decode(path.read_bytes()) == ring.keys
    clock.now += 2 * EPOCH_MS
    ring.save(ring.rotate_now())
    assert secret not in path.read_bytes()
    assert net_hash(secret, "203.0.113.7") not in ring.launch_hashes("203.0.113.7")
    again = NetworkKeyring.open(str(tmp_path), clock, fresh, secret)  # type: ignore[arg-type]
    assert again.keys == ring.keys  # a restart reads the file, not the secret


def test_an_unreadable_file_starts_new_keys_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / FILE_NAME).write_bytes(b"not keys")
    clock = FixedClock(100 * EPOCH_MS)
    _, fresh = counter()
    with caplog.at_level(logging.WARNING, logger="svc.network_keys"):
        ring = NetworkKeyring.open(str(tmp_path), clock, fresh, b"s" * 32)  # type: ignore[arg-type]
    assert "unreadable" in caplog.text
    assert [e for e, _ in ring.keys.keys] == [100, 101]
    assert NetworkKeys.decode((tmp_path / FILE_NAME).read_bytes()) == ring.keys


def test_a_file_that_cannot_be_written_leaves_the_keys_serving(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    clock = FixedClock(100 * EPOCH_MS)
    _, fresh = counter()
    ring = NetworkKeyring.open(str(tmp_path), clock, fresh, b"s" * 32)  # type: ignore[arg-type]
    os.chmod(tmp_path, 0o500)
    try:
        clock.now += EPOCH_MS
        with caplog.at_level(logging.ERROR, logger="svc.network_keys"):
            ring.save(ring.rotate_now())
    finally:
        os.chmod(tmp_path, 0o700)
    if os.geteuid() != 0:  # root writes anyway
        assert "cannot write" in caplog.text
    assert ring.keys.tap_key(clock.now) is not None


async def test_a_backup_holds_no_network_key(app: App, tmp_path: Path) -> None:
    dest = tmp_path / "backup"
    await app.services.store.backup(str(dest))
    assert FILE_NAME not in os.listdir(dest)
    held = Path(app.services.config.data_dir, FILE_NAME).read_bytes()
    keys = [k for _, k in NetworkKeys.decode(held).keys]
    # the server's secret (in the store) serves the new data dir's epoch before
    # as the key of a data dir an older svc served; every key made is new
    assert keys[0] == app.services.server_secret and len(keys) == 3
    for key in keys[1:]:
        assert key not in (dest / "data.mdb").read_bytes()


# -- matching across a key's change ---------------------------------------------------------


async def test_a_launch_after_the_key_changed_matches_its_network_s_tap_before_it(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    """No country, so only the network can match."""
    await setup(app, probabilisticMatching=True, probabilisticIpMatching=True,
                probabilisticWindowMinutes=60)
    a = await link(app, "/a")
    await trio.sleep(BOUNDARY_S - 600)
    before = app.services.network_keys.keys.tap_key(app.services.clock.now_ms())
    await tap(app, a["slug"], IOS_UA)
    await trio.sleep(1200)  # the key changed between the tap and the launch
    assert app.services.network_keys.keys.tap_key(app.services.clock.now_ms()) != before
    await tap(app, a["slug"], IOS_UA)  # one tap under each key: one group, both consumed
    await app.flush()
    assert len({e.net_hash for e in app.services.attribution.window(
        app.project_id, "test", 0)}) == 2
    status, body = await init(app, init_body(new_install(), "ios"))
    assert status == 200 and body["link"]["linkId"] == a["id"]  # type: ignore[index]
    assert body["link"]["method"] == "probabilistic_match"  # type: ignore[index]
    await app.flush()
    assert all(e.net_hash is None for e in app.services.attribution.window(
        app.project_id, "test", 0))
    status, body = await init(app, init_body(new_install(), "ios"))  # both taps were used
    assert (status, body) == (200, {"link": None})


async def test_taps_of_two_links_either_side_of_the_change_are_a_conflict(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    await setup(app, probabilisticMatching=True, probabilisticIpMatching=True,
                probabilisticWindowMinutes=60)
    a, b = await link(app, "/a"), await link(app, "/b")
    await trio.sleep(BOUNDARY_S - 600)
    await tap(app, a["slug"], IOS_UA)
    await trio.sleep(1200)
    await tap(app, b["slug"], IOS_UA)
    status, body = await init(app, init_body(new_install(), "ios"))
    assert (status, body) == (200, {"link": None})


async def test_the_service_rotates_at_each_epoch_and_the_file_keeps_three_keys(
        app: App, autojump_clock: trio.testing.MockClock) -> None:
    path = Path(app.services.config.data_dir, FILE_NAME)
    first = NetworkKeys.decode(path.read_bytes())
    await trio.sleep(BOUNDARY_S + 2 * EPOCH_MS / 1000 + 1)
    now = app.services.clock.now_ms()
    held = NetworkKeys.decode(path.read_bytes())
    assert held == app.services.network_keys.keys
    assert [e for e, _ in held.keys] == [epoch_of(now) - 1, epoch_of(now), epoch_of(now) + 1]
    assert not {k for _, k in first.keys} & {k for _, k in held.keys}


async def test_a_restart_keeps_matching_the_taps_before_it(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock) -> None:
    clock = TrioWallClock()
    async with running_app(store, config, clock) as app:
        await setup(app, probabilisticMatching=True, probabilisticIpMatching=True)
        a = await link(app, "/a")
        await tap(app, a["slug"], IOS_UA)
        await app.flush()
    await trio.sleep(600)
    async with running_app(store, config, clock) as app:
        status, body = await init(app, init_body(new_install(), "ios"))
    assert status == 200 and body["link"]["linkId"] == a["id"]  # type: ignore[index]


async def test_a_wall_clock_stepped_forward_rotates_within_a_minute(
        store: LmdbStore, config: Config, autojump_clock: trio.testing.MockClock) -> None:
    """The loop waited on trio's clock for the boundary it computed: a wall
    clock stepped 12 hours forward (NTP setting a clock that started behind,
    a resume from suspend) left taps with no key, so no network hash, for
    hours, and the dropped keys in the file."""
    clock = TrioWallClock()
    async with running_app(store, config, clock) as app:
        ring = app.services.network_keys
        first = dict(ring.keys.keys)
        clock.offset_ms = 12 * HOUR_MS
        assert ring.keys.tap_key(clock.now_ms()) is None  # until the loop looks
        await trio.sleep(61)
        now = clock.now_ms()
        assert ring.keys.tap_key(now) is not None
        held = NetworkKeys.decode(Path(config.data_dir, FILE_NAME).read_bytes())
        assert held == ring.keys
        assert [e for e, _ in held.keys][-2:] == [epoch_of(now), epoch_of(now) + 1]
        dropped = [k for e, k in first.items() if e < epoch_of(now) - 1]
        assert dropped and not set(dropped) & {k for _, k in held.keys}


def test_an_epoch_outlasts_the_longest_window_and_no_more_than_spec_keeps_a_hash() -> None:
    """Longer than the longest window (a launch's taps lie in its epoch or the
    one before), at most the 7 hours SPEC.md keeps a network hash."""
    assert WINDOW_MAX * 60_000 < EPOCH_MS <= 7 * 3_600_000
