"""SPEC.md Authentication: key formats, kinds, and the auth error codes."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.errors import InvalidApiKey, WrongKeyKind
from svc_engine.keys import (
    KeyKind,
    Mode,
    check_key_kind,
    key_hash,
    make_key,
    new_key,
    parse_bearer,
    parse_key,
)


@given(st.binary(min_size=24, max_size=24), st.sampled_from(KeyKind), st.sampled_from(Mode))
def test_new_keys_parse_back(rb: bytes, kind: KeyKind, mode: Mode) -> None:
    raw = new_key(kind, mode, rb)
    assert raw.startswith(f"{kind.value}_{mode.value}_")
    p = parse_key(raw)
    assert p is not None and p.kind is kind and p.mode is mode


@pytest.mark.parametrize("header", [
    None, "", "Bearer", "Bearer ", "Basic abc", "pk_test_x", "Bearer pk_test_short",
    "Bearer xx_test_" + "a" * 32, "Bearer pk_prod_" + "a" * 32, "Bearer pk_test_" + "!" * 32,
    "Bearer sk_" + "a" * 32,
])
def test_malformed_authorization_is_invalid_api_key(header: str | None) -> None:
    with pytest.raises(InvalidApiKey) as e:
        parse_bearer(header)
    assert e.value.status == 401 and e.value.code == "invalid_api_key"


def test_bearer_scheme_is_case_insensitive() -> None:
    raw = new_key(KeyKind.SECRET, Mode.LIVE, b"\x01" * 24)
    assert parse_bearer(f"bearer {raw}").raw == raw


def _record(kind: KeyKind, revoked: bool = False):  # type: ignore[no-untyped-def]
    raw, rec = make_key("k", "p", kind, Mode.TEST, "", b"\x02" * 24, 1)
    if revoked:
        import attrs
        rec = attrs.evolve(rec, revoked_at_ms=2)
    return raw, rec


def test_unknown_key_is_401() -> None:
    with pytest.raises(InvalidApiKey):
        check_key_kind(None, KeyKind.PUBLISHABLE)


def test_revoked_key_is_401() -> None:
    _, rec = _record(KeyKind.PUBLISHABLE, revoked=True)
    with pytest.raises(InvalidApiKey):
        check_key_kind(rec, KeyKind.PUBLISHABLE)


@pytest.mark.parametrize("have,need", [(KeyKind.SECRET, KeyKind.PUBLISHABLE),
                                       (KeyKind.PUBLISHABLE, KeyKind.SECRET)])
def test_wrong_kind_is_403(have: KeyKind, need: KeyKind) -> None:
    _, rec = _record(have)
    with pytest.raises(WrongKeyKind) as e:
        check_key_kind(rec, need)
    assert e.value.status == 403 and e.value.code == "wrong_key_kind"
    # the message names the kind the endpoint takes
    assert ("publishable key (pk_)" in e.value.message) is (need is KeyKind.PUBLISHABLE)
    assert ("secret key (sk_" in e.value.message) is (need is KeyKind.SECRET)


@pytest.mark.parametrize("scheme", ["Basic", "Token", "Bearer:"])
def test_a_valid_key_under_another_scheme_is_invalid(scheme: str) -> None:
    raw = new_key(KeyKind.SECRET, Mode.LIVE, b"\x01" * 24)
    with pytest.raises(InvalidApiKey):
        parse_bearer(f"{scheme} {raw}")


def test_the_json_view_of_a_key() -> None:
    _, pk = _record(KeyKind.PUBLISHABLE)
    raw_s, sk = _record(KeyKind.SECRET)
    assert pk.to_json()["kind"] == "publishable" and sk.to_json()["kind"] == "secret"
    assert sk.to_json()["hint"] == f"sk_test_\u2026{raw_s[-4:]}"
    assert sk.to_json()["revoked"] is False
    _, gone = _record(KeyKind.SECRET, revoked=True)
    assert gone.to_json()["revoked"] is True


def test_only_publishable_keys_keep_their_value() -> None:
    raw_p, pk = _record(KeyKind.PUBLISHABLE)
    raw_s, sk = _record(KeyKind.SECRET)
    assert pk.public_value == raw_p
    assert sk.public_value is None
    assert raw_s not in repr(sk.to_map())
    assert sk.hash == key_hash(raw_s)
