"""Key parts (storage/layout.py): ids to 16 bytes and back, prefix ends, key parts."""

from __future__ import annotations

import hashlib
import pathlib
import uuid

import lmdb
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage import layout


@given(st.uuids(version=None))
def test_an_id_goes_to_16_bytes_and_back(value: uuid.UUID) -> None:
    raw = layout.uid(str(value))
    assert raw == value.bytes
    assert layout.from_uid(raw) == str(value)
    assert layout.from_uid(memoryview(raw)) == str(value)  # as LMDB may hand it over


@pytest.mark.parametrize("raw", [b"", b"x" * 15, b"x" * 17])
def test_a_stored_id_is_16_bytes(raw: bytes) -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        layout.from_uid(raw)


def _reference(value: str) -> bytes | None:
    try:
        return uuid.UUID(value).bytes
    except ValueError:
        return None


def _uid(value: str) -> bytes | None:
    layout.uid.cache_clear()  # the computation, not an earlier answer
    try:
        return layout.uid(value)
    except ValueError:
        return None


_HEX = "0123456789abcdefABCDEF"


@given(st.one_of(
    st.uuids(version=None).map(str),
    st.uuids(version=None).map(lambda u: u.hex),
    st.uuids(version=None).map(lambda u: "{" + str(u).upper() + "}"),
    st.uuids(version=None).map(lambda u: u.urn),
    st.text(alphabet=_HEX + "- {}\t\n\u0663\uff11xg", min_size=28, max_size=40),
    st.lists(st.sampled_from([*_HEX, "-", " ", "  "]), min_size=30, max_size=40).map("".join),
))
def test_uid_reads_every_string_as_uuid_does(value: str) -> None:
    """Same bytes as uuid.UUID for what it accepts, ValueError for what it refuses."""
    assert _uid(value) == _reference(value)


@pytest.mark.parametrize("value", [
    "12345678-1234-5678-1234-567812345678", "12345678123456781234567812345678",
    "1234-5678-1234-5678-1234-5678-1234-5678", "{12345678-1234-5678-1234-567812345678}",
    "urn:uuid:12345678-1234-5678-1234-567812345678", "12345678 12345678123456781234 78",
    "1234567812345678123456781234567", "123456781234567812345678123456789",
    "\u0661" * 32, " 12345678123456781234567812345678", "1234567812345678123456781234567g"])
def test_uid_edge_forms(value: str) -> None:
    assert _uid(value) == _reference(value)


def test_uid_cache_is_small() -> None:
    """Ids made by requests pass through once: a bound of 65,536 held ~14 MiB of them."""
    assert layout.uid.cache_info().maxsize == layout.UID_CACHE <= 4096


KEYS = st.binary(max_size=8).map(lambda b: b.replace(b"\x01", b"\xff"))  # many 0xFF bytes


@given(KEYS, KEYS)
def test_prefix_end_is_after_every_key_of_the_prefix_and_before_every_later_one(
        prefix: bytes, key: bytes) -> None:
    end = layout.prefix_end(prefix)
    if key.startswith(prefix):
        assert key < end
        assert (prefix + key + b"\xff" * layout.MAX_KEY)[:layout.MAX_KEY] < end
    elif key > prefix:
        assert key >= end


@pytest.mark.parametrize(("prefix", "end"), [
    (b"a", b"b"), (b"a\xff", b"b"), (b"\x00\xff\xff", b"\x01"), (b"ab\xfe", b"ab\xff")])
def test_prefix_end_carries_past_0xff_bytes(prefix: bytes, end: bytes) -> None:
    assert layout.prefix_end(prefix) == end


@pytest.mark.parametrize("prefix", [b"", b"\xff", b"\xff" * 17])
def test_a_prefix_of_0xff_bytes_ends_after_the_longest_key_lmdb_stores(prefix: bytes) -> None:
    assert layout.prefix_end(prefix) > b"\xff" * layout.MAX_KEY


@pytest.mark.parametrize(("value", "part"), [
    (None, b"\x00"), (b"", b"\x01\x00"), (b"ab", b"\x01\x02ab"),
    (b"x" * 255, b"\x01\xff" + b"x" * 255)])
def test_a_key_part_is_its_length_and_bytes(value: bytes | None, part: bytes) -> None:
    assert layout.part(value) == part


def test_a_key_part_longer_than_255_bytes_is_its_sha256() -> None:
    value = b"x" * 256
    assert layout.part(value) == b"\x02" + hashlib.sha256(value).digest()


@given(st.none() | st.binary(max_size=300), st.none() | st.binary(max_size=300))
def test_no_key_part_is_a_prefix_of_another_values(a: bytes | None, b: bytes | None) -> None:
    if a != b:
        assert not layout.part(b).startswith(layout.part(a))


def test_max_key_is_the_longest_key_lmdb_stores(tmp_path: pathlib.Path) -> None:
    env = lmdb.open(str(tmp_path), map_size=1 << 20)
    try:
        assert env.max_key_size() == layout.MAX_KEY
    finally:
        env.close()
