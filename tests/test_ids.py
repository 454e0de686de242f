"""Ids (svc_engine/ids.py): a new id is the UUID v4 of its random bytes."""

from __future__ import annotations

import uuid

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.ids import is_uuid, new_id


@given(st.binary(min_size=16, max_size=40))
def test_new_id_is_the_uuid4_of_the_random_bytes(random_bytes: bytes) -> None:
    made = new_id(random_bytes)
    expected = bytearray(random_bytes[:16])
    expected[6] = (expected[6] & 0x0F) | 0x40
    expected[8] = (expected[8] & 0x3F) | 0x80
    assert made == str(uuid.UUID(bytes=bytes(expected)))
    assert uuid.UUID(made).version == 4 and is_uuid(made, v4=True)


def test_new_id_needs_16_bytes() -> None:
    with pytest.raises(ValueError, match="16 random bytes"):
        new_id(b"x" * 15)
