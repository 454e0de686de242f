"""Key parts (storage/layout.py): ids to 16 bytes and back."""

from __future__ import annotations

import uuid

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
