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
