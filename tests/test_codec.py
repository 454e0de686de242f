"""A stored record names its version; one newer than the code knows is
refused, never misread (storage/codec.py for CBOR records, the first byte of
a stored custom event in storage/event_records.py). A data dir written by a
newer svc is refused whole at open (storage/schema.py, test_storage); these
guards hold a single record that got there another way (a copied key, a
partial downgrade)."""

from __future__ import annotations

import struct
from collections.abc import Callable

import cbor2
import pytest

from storage import codec, event_records
from svc_engine import decode
from svc_engine.plans import Plan
from svc_engine.records import Organization

ORG = Organization(id="o1", name="Acme", plan=Plan.GROWTH, created_at_ms=5)


def test_a_record_round_trips_with_its_version() -> None:
    raw = codec.encode(ORG)
    assert cbor2.loads(raw)["v"] == Organization.VERSION
    assert codec.decode(Organization, raw) == ORG


@pytest.mark.parametrize("version", [Organization.VERSION + 1, 99])
def test_a_newer_record_is_refused(version: int) -> None:
    raw = cbor2.dumps(ORG.to_map() | {"v": version})
    with pytest.raises(ValueError, match="newer than this code knows"):
        codec.decode(Organization, raw)


@pytest.mark.parametrize("version", [None, "1", 1.0])
def test_a_record_without_an_integer_version_is_refused(version: object) -> None:
    m = ORG.to_map()
    if version is None:
        del m["v"]
    else:
        m["v"] = version
    with pytest.raises(ValueError):
        codec.decode(Organization, cbor2.dumps(m))


def test_an_older_version_is_read() -> None:
    assert codec.decode(Organization, cbor2.dumps(ORG.to_map() | {"v": 0})) == ORG


def test_a_record_that_is_not_a_map_is_refused() -> None:
    with pytest.raises(ValueError, match="not a map"):
        codec.decode(Organization, cbor2.dumps([1, 2]))


def _event_item(version: int) -> tuple[bytes, bytes]:
    """A stored custom event of the current layout, its first byte ``version``."""
    event_id = bytes(range(16))
    install = bytes(range(16, 32))
    key = b"p" * 17 + struct.pack(">QQH", 1_700_000_000_000, 1_700_000_000_123, 0) + event_id
    value = struct.pack(">B16s", version, install) + b'{"name":"buy"}'
    return key, value


def test_a_stored_event_of_this_version_is_read() -> None:
    key, value = _event_item(event_records.VERSION)
    ev = event_records.StoredEvent.from_item(key, value)
    assert ev.install_id == event_records.uuid_text(bytes(range(16, 32)))
    assert ev.json == b'{"name":"buy"}'
    assert ev.received_at_ms == 1_700_000_000_123


def test_a_stored_event_of_a_newer_version_is_refused() -> None:
    key, value = _event_item(event_records.VERSION + 1)
    with pytest.raises(ValueError, match="newer than this code knows"):
        event_records.StoredEvent.from_item(key, value)


# -- typed reads out of a decoded map (svc_engine/decode.py) ------------------------------

@pytest.mark.parametrize(("read", "good", "bad"), [
    (decode.req_str, "x", 1),
    (decode.opt_str, "x", b"x"),
    (decode.req_int, 7, True),  # a bool is not a count
    (decode.opt_int, 7, 1.5),
    (decode.req_bool, False, 0),
    (decode.req_bytes, b"\x00", "00"),
    (decode.opt_bytes, b"\x00", bytearray(b"\x00")),
])
def test_a_mistyped_field_fails_naming_the_field(
        read: Callable[[dict[str, object], str], object], good: object, bad: object) -> None:
    assert read({"f": good}, "f") == good
    with pytest.raises(decode.RecordError, match=r"^f: expected "):
        read({"f": bad}, "f")


@pytest.mark.parametrize("read", [decode.opt_str, decode.opt_int, decode.opt_bytes])
def test_an_optional_field_may_be_missing_or_null(
        read: Callable[[dict[str, object], str], object]) -> None:
    assert read({}, "f") is None and read({"f": None}, "f") is None


@pytest.mark.parametrize("read", [decode.req_str, decode.req_int, decode.req_bool,
                                  decode.req_bytes])
def test_a_required_field_may_not_be_missing(
        read: Callable[[dict[str, object], str], object]) -> None:
    with pytest.raises(decode.RecordError, match=r"^f: expected .*, got NoneType"):
        read({}, "f")


def test_a_flag_added_in_a_later_version_reads_its_default_when_missing() -> None:
    assert decode.req_bool({}, "suspended", False) is False
    assert decode.req_bool({"suspended": True}, "suspended", False) is True


def test_a_stored_record_with_a_mistyped_field_is_refused() -> None:
    with pytest.raises(decode.RecordError, match="created_at_ms"):
        codec.decode(Organization, cbor2.dumps(ORG.to_map() | {"created_at_ms": "5"}))
