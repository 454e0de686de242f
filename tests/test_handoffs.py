"""Authenticated handoffs (SPEC.md "Authenticated handoff flow", "Handoff and
token lifecycle", "Limits": lifetime 7 days, userId trimmed 1 to 256)."""

from __future__ import annotations

import hashlib
import hmac

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.errors import ValidationError
from svc_engine.handoffs import (
    HANDOFF_TTL_MS,
    Handoff,
    creation_order,
    handoff_expiry,
    next_seq,
    pick_handoff,
    user_hash,
)
from svc_engine.keys import Mode

NOW = 1_795_000_000_000
SEC = 1000
DAY = 24 * 3600 * SEC
SALT = b"project-salt-0123456789abcdef"
LINK = "aaaaaaaa-0000-4000-8000-000000000001"


def handoff(hid: str, created_ago_ms: int, *, ttl_ms: int = HANDOFF_TTL_MS,
            link_id: str = LINK, seq: int = 0) -> Handoff:
    created = NOW - created_ago_ms
    return Handoff(id=hid, link_id=link_id, user_hash=b"h" * 32, mode=Mode.LIVE,
                   created_at_ms=created, expires_at_ms=created + ttl_ms, seq=seq)


@pytest.mark.parametrize(("seconds", "expires"), [
    (None, NOW + 7 * DAY), (1, NOW + SEC), (3600, NOW + 3600 * SEC), (7 * 24 * 3600, NOW + 7 * DAY),
])
def test_handoff_expiry(seconds: int | None, expires: int) -> None:
    assert HANDOFF_TTL_MS == 7 * DAY
    assert handoff_expiry(NOW, seconds) == expires


@pytest.mark.parametrize("seconds", [0, -1, 7 * 24 * 3600 + 1, True])
def test_handoff_expiry_out_of_range(seconds: int) -> None:
    with pytest.raises(ValidationError) as info:
        handoff_expiry(NOW, seconds)
    assert info.value.field == "expiresInSeconds"


def test_user_hash_is_salted_hmac_of_the_trimmed_id() -> None:
    expected = hmac.new(SALT, b"user-42", hashlib.sha256).digest()
    assert user_hash(SALT, "user-42") == expected
    assert user_hash(SALT, "  user-42\t\n") == expected
    assert user_hash(b"another-project", "user-42") != expected
    assert user_hash(SALT, "user-43") != expected
    assert user_hash(SALT, "ü" * 256) == hmac.new(SALT, ("ü" * 256).encode(), "sha256").digest()


def test_user_ids_are_trimmed_and_counted_as_the_sdk_does() -> None:
    """Dart's ``trim`` and ``length`` (UTF-16 code units): an ID the SDK
    would refuse to claim is refused when the handoff is made."""
    assert user_hash(SALT, "\ufeffuser-42\u3000") == user_hash(SALT, "user-42")
    assert user_hash(SALT, "\x1cuser-42") != user_hash(SALT, "user-42")  # Dart keeps U+001C
    assert user_hash(SALT, "😀" * 128) == hmac.new(SALT, ("😀" * 128).encode(), "sha256").digest()
    for bad in ("😀" * 129, "😀" * 200, "x" * 255 + "😀", "\ufeff"):
        with pytest.raises(ValidationError, match=r"UTF-16|1 to 256"):
            user_hash(SALT, bad)
    assert user_hash(SALT, "x" * 254 + "😀") is not None


@pytest.mark.parametrize("bad", ["", "   ", "x" * 257, "😀" * 129])
def test_user_hash_refuses_bad_ids(bad: str) -> None:
    with pytest.raises(ValidationError) as info:
        user_hash(SALT, bad)
    assert info.value.field == "userId"


@pytest.mark.parametrize(("pending", "winner", "cleared"), [
    ([], None, ()),
    ([handoff("h1", 3 * DAY)], "h1", ("h1",)),
    # newest pending wins; all are cleared
    ([handoff("h1", 3 * DAY), handoff("h2", 1 * DAY), handoff("h3", 2 * DAY)], "h2",
     ("h1", "h2", "h3")),
    # the newest expired: the newest unexpired one wins
    ([handoff("h1", 3 * DAY), handoff("h2", 1 * DAY, ttl_ms=DAY)], "h1", ("h1", "h2")),
    # expired exactly at expires_at_ms, alive one millisecond earlier
    ([handoff("h1", 10 * SEC, ttl_ms=10 * SEC)], None, ("h1",)),
    ([handoff("h1", 10 * SEC, ttl_ms=10 * SEC + 1)], "h1", ("h1",)),
    ([handoff("h1", 8 * DAY), handoff("h2", 7 * DAY)], None, ("h1", "h2")),
    # same creation time: the one created later in that millisecond (larger
    # seq) wins, whatever the ids; the same on every replay
    ([handoff("h2", DAY, seq=0), handoff("h1", DAY, seq=1)], "h1", ("h1", "h2")),
    ([handoff("h1", DAY, seq=1), handoff("h2", DAY, seq=0)], "h1", ("h1", "h2")),
    ([handoff("h9", DAY, seq=0), handoff("h1", DAY, seq=2), handoff("h5", DAY, seq=1)], "h1",
     ("h1", "h5", "h9")),
    # the later one expired (shorter time): the earlier one of the millisecond wins
    ([handoff("h9", DAY, seq=0), handoff("h1", DAY, seq=1, ttl_ms=DAY)], "h9", ("h1", "h9")),
    # records from before seq existed (all 0): the larger id, on every replay
    ([handoff("h2", DAY), handoff("h1", DAY)], "h2", ("h1", "h2")),
])
def test_pick_handoff(pending: list[Handoff], winner: str | None,
                      cleared: tuple[str, ...]) -> None:
    picked, to_clear = pick_handoff(pending, NOW)
    assert (None if picked is None else picked.id) == winner
    assert to_clear == cleared


def test_next_seq_numbers_the_handoffs_of_one_millisecond() -> None:
    assert next_seq([]) == 0
    assert next_seq([handoff("h1", 0)]) == 1
    assert next_seq([handoff("h1", 0, seq=0), handoff("h2", 0, seq=4),
                     handoff("h3", 0, seq=2)]) == 5
    made: list[Handoff] = []  # a writer storing handoffs one after another
    for hid in ("hf", "ha", "hc", "h0"):
        made.append(handoff(hid, 0, seq=next_seq(made)))
    assert sorted(reversed(made), key=creation_order) == made
    assert pick_handoff(list(reversed(made)), NOW)[0] == made[-1]


def test_creation_order_is_time_then_seq_then_id() -> None:
    a, b = handoff("hb", DAY, seq=0), handoff("ha", DAY, seq=1)
    c, d = handoff("h0", DAY - 1, seq=0), handoff("hz", DAY + 1, seq=7)
    assert sorted([a, b, c, d], key=creation_order) == [d, a, b, c]
    assert creation_order(handoff("h1", DAY)) < creation_order(handoff("h2", DAY))


def test_a_record_from_before_seq_reads_as_seq_0() -> None:
    h = handoff("h1", DAY, seq=3)
    legacy = {k: v for k, v in h.to_map().items() if k != "seq"}
    assert h.to_map()["seq"] == 3 and "seq" not in legacy
    assert Handoff.from_map(legacy) == attrs.evolve(h, seq=0)


pending_st = st.lists(
    st.builds(handoff, hid=st.text(alphabet="abcdef0123456789", min_size=1, max_size=4),
              created_ago_ms=st.integers(min_value=0, max_value=9 * DAY),
              ttl_ms=st.integers(min_value=1, max_value=HANDOFF_TTL_MS),
              seq=st.integers(min_value=0, max_value=3)),
    max_size=12, unique_by=lambda h: h.id)


@given(pending_st)
def test_property_claim_clears_everything_and_the_newest_alive_wins(
        pending: list[Handoff]) -> None:
    picked, to_clear = pick_handoff(pending, NOW)
    assert set(to_clear) == {h.id for h in pending}
    alive = [h for h in pending if h.expires_at_ms > NOW]
    if not alive:
        assert picked is None
        return
    assert picked is not None and picked in alive
    assert all((h.created_at_ms, h.seq, h.id) <= (picked.created_at_ms, picked.seq, picked.id)
               for h in alive)
    # the order the store returns them in does not matter
    assert pick_handoff(list(reversed(pending)), NOW) == (picked, to_clear)


@given(st.builds(Handoff, id=st.text(), link_id=st.text(), user_hash=st.binary(max_size=32),
                 mode=st.sampled_from(Mode), created_at_ms=st.integers(0, 2**53),
                 expires_at_ms=st.integers(0, 2**53), seq=st.integers(0, 2**32)))
def test_handoff_round_trip(h: Handoff) -> None:
    assert Handoff.from_map(h.to_map()) == h
