"""Standard Webhooks v1 signing and verification (svc_engine.signing).

Every vector in tests/data/standard-webhooks-vectors.json that applies to the
v1 HMAC scheme is exercised here; the asymmetric v1a vector is used to show
that verification ignores v1a entries.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import hmac
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import pytest
import standardwebhooks
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import signing
from svc_engine.errors import ValidationError

VECTORS = json.loads(
    (Path(__file__).parent / "data" / "standard-webhooks-vectors.json").read_text("utf-8")
)
SIGN_VECTORS = VECTORS["sign_vectors"]
CANONICAL = next(v for v in SIGN_VECTORS if v["id"] == "sw-canonical")
RUST = next(v for v in SIGN_VECTORS if v["id"] == "sw-rust")


def _pad(b64: str) -> str:
    return b64 + "=" * (-len(b64) % 4)


def _headers(msg_id: str, ts: int | str, signature: str) -> dict[str, str]:
    return {"webhook-id": msg_id, "webhook-timestamp": str(ts), "webhook-signature": signature}


# --- sign vectors ---------------------------------------------------------


@pytest.mark.parametrize("vector", SIGN_VECTORS, ids=[v["id"] for v in SIGN_VECTORS])
def test_sign_vectors(vector: dict[str, Any]) -> None:
    body = vector["payload"].encode()
    got = signing.sign(vector["secret"], vector["msg_id"], vector["timestamp"], body)
    assert got == vector["expected_signature"]
    assert len(signing.parse_secret(vector["secret"])) == vector["key_length_bytes"]
    if "secret_unprefixed_also_valid" in vector:
        bare = vector["secret_unprefixed_also_valid"]
        assert signing.sign(bare, vector["msg_id"], vector["timestamp"], body) == got
    headers = _headers(vector["msg_id"], vector["timestamp"], got)
    assert signing.verify(vector["secret"], headers, body, now_s=vector["timestamp"]).ok


LARGE = VECTORS["large_payload_vectors"]


@pytest.mark.parametrize("case", LARGE["cases"], ids=lambda c: str(c["payload_length"]))
def test_large_payload_vectors(case: dict[str, Any]) -> None:
    assert LARGE["payload_rule"] == "the ASCII character 'a' repeated payload_length times"
    body = b"a" * case["payload_length"]
    got = signing.sign(LARGE["secret"], LARGE["msg_id"], LARGE["timestamp"], body)
    assert got == case["expected_signature"]


# --- asymmetric (v1a) entries are out of scope and ignored ------------------

ASYM = VECTORS["asymmetric_vectors"][0]


def test_verify_ignores_v1a_entry_alone() -> None:
    body = ASYM["payload"].encode()
    headers = _headers(ASYM["msg_id"], ASYM["timestamp"], ASYM["expected_signature"])
    result = signing.verify(CANONICAL["secret"], headers, body, now_s=ASYM["timestamp"])
    assert result == signing.VerifyResult(
        False, signing.NO_MATCHING_SIGNATURE, "no v1 entry matches"
    )


def test_verify_skips_v1a_entry_next_to_valid_v1() -> None:
    body = ASYM["payload"].encode()
    # Same msg_id, timestamp and payload as the canonical v1 vector.
    assert (ASYM["msg_id"], ASYM["timestamp"], ASYM["payload"]) == (
        CANONICAL["msg_id"],
        CANONICAL["timestamp"],
        CANONICAL["payload"],
    )
    value = f"{ASYM['expected_signature']} {CANONICAL['expected_signature']}"
    headers = _headers(ASYM["msg_id"], ASYM["timestamp"], value)
    assert signing.verify(CANONICAL["secret"], headers, body, now_s=ASYM["timestamp"]).ok


def test_verify_ignores_a_valid_mac_under_another_version_label() -> None:
    body = CANONICAL["payload"].encode()
    mac = CANONICAL["expected_signature"].removeprefix("v1,")
    for label in ("v1a", "v2", "V1", "v1 "):
        headers = _headers(CANONICAL["msg_id"], CANONICAL["timestamp"], f"{label},{mac}")
        result = signing.verify(CANONICAL["secret"], headers, body, now_s=CANONICAL["timestamp"])
        assert result.reason == signing.NO_MATCHING_SIGNATURE, label


def test_v1a_keys_are_not_signing_secrets() -> None:
    for key in (ASYM["secret_key"], ASYM["public_key"]):
        with pytest.raises(ValidationError):
            signing.parse_secret(key)


def test_spec_illustrative_header_does_not_verify_with_any_suite_secret() -> None:
    example = VECTORS["spec_illustrative_examples_not_vectors"]
    headers = example["headers"]
    now = int(headers["webhook-timestamp"])
    for secret in (CANONICAL["secret"], RUST["secret"]):
        result = signing.verify(secret, headers, b"{}", now_s=now)
        assert result.reason == signing.NO_MATCHING_SIGNATURE


# --- verification relative to now --------------------------------------------

REL = VECTORS["verify_cases_relative_to_now"]
REL_SECRET = "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
REL_ID = "msg_p5jXN8AQM9LWM0D4loKWxJek"
REL_BODY = b'{"test": 2432232314}'
NOW = 1_700_000_000

Headers = dict[str, str]
Case = tuple[str, Headers, bytes, int]  # secret, headers, body, tolerance


def _signed(offset: int, body: bytes = REL_BODY) -> Headers:
    ts = NOW + offset
    return _headers(REL_ID, ts, signing.sign(REL_SECRET, REL_ID, ts, body))


def _mutated(offset: int, **changes: str | None) -> Case:
    headers = _signed(offset)
    for name, value in changes.items():
        key = name.replace("_", "-")
        if value is None:
            del headers[key]
        else:
            headers[key] = value
    return REL_SECRET, headers, REL_BODY, signing.TOLERANCE_S


def _valid_among_invalid(offset: int) -> Case:
    bogus = "Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="
    headers = _signed(offset)
    valid = headers["webhook-signature"]
    headers["webhook-signature"] = f"v1,{bogus} v2,{bogus} {valid} v1,{bogus}"
    return REL_SECRET, headers, REL_BODY, signing.TOLERANCE_S


def _rust_all_invalid(offset: int) -> Case:
    ts = NOW + offset
    value = (
        "v1,tFtCZ5RDCPxzWQRWXWPgrCgE2frDBe9gjpbWQxnVfsQ= "
        "v1,Mm7xgUVICxZfQ3bgf0h0Dof65L/IFx+PnZvnDWPCX6Q= "
        "v1,9DfC1c3eeOrXB6w/5dIDydLNQaEyww5KalE5jLBZucE="
    )
    return RUST["secret"], _headers(RUST["msg_id"], ts, value), RUST["payload"].encode(), 300


def _tampered_timestamp(offset: int) -> Case:
    # Go's VerifyIgnoringTimestamp: emulated with an unbounded tolerance, so
    # only the signature (which covers the timestamp) can reject it.
    headers = _signed(offset)
    headers["webhook-timestamp"] = "946684800"
    return REL_SECRET, headers, REL_BODY, 10**12


# name -> (build the case from offset, expected VerifyResult.reason)
REL_BUILDERS: dict[str, tuple[Callable[[int], Case], str]] = {
    "valid": (lambda o: _mutated(o), signing.OK),
    "valid_with_whsec_prefix_in_verifier_secret": (
        lambda o: ("whsec_" + REL_SECRET, *_mutated(o)[1:]),
        signing.OK,
    ),
    "missing_webhook_id": (lambda o: _mutated(o, webhook_id=None), signing.MISSING_HEADER),
    "missing_webhook_timestamp": (
        lambda o: _mutated(o, webhook_timestamp=None),
        signing.MISSING_HEADER,
    ),
    "missing_webhook_signature": (
        lambda o: _mutated(o, webhook_signature=None),
        signing.MISSING_HEADER,
    ),
    "non_numeric_timestamp": (
        lambda o: _mutated(o, webhook_timestamp="hello"),
        signing.BAD_TIMESTAMP,
    ),
    "wrong_signature_one_char": (
        lambda o: _mutated(o, webhook_signature="v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OA="),
        signing.NO_MATCHING_SIGNATURE,
    ),
    "wrong_signature_other": (
        lambda o: _mutated(o, webhook_signature="v1,Ceo5qEr07ixe2NLpvHk3FH9bwy/WavXrAFQ/9tdO6mc="),
        signing.NO_MATCHING_SIGNATURE,
    ),
    "garbage_signature": (
        lambda o: _mutated(o, webhook_signature="v1,dawfeoifkpqwoekfpqoekf"),
        signing.NO_MATCHING_SIGNATURE,
    ),
    "garbage_signature_2": (
        lambda o: _mutated(o, webhook_signature="v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLawdd"),
        signing.NO_MATCHING_SIGNATURE,
    ),
    "partial_signature_version_only": (
        lambda o: _mutated(o, webhook_signature="v1,"),
        signing.NO_MATCHING_SIGNATURE,
    ),
    "partial_signature_prefix_8_chars": (
        lambda o: _mutated(o, webhook_signature=_signed(o)["webhook-signature"][:8]),
        signing.NO_MATCHING_SIGNATURE,
    ),
    "too_old": (lambda o: _mutated(o), signing.TIMESTAMP_TOO_OLD),
    "too_new": (lambda o: _mutated(o), signing.TIMESTAMP_TOO_NEW),
    "multi_signature_valid_among_invalid": (_valid_among_invalid, signing.OK),
    "multi_signature_all_invalid": (_rust_all_invalid, signing.NO_MATCHING_SIGNATURE),
    "empty_payload": (
        lambda o: (REL_SECRET, _signed(o, b""), b"", signing.TOLERANCE_S),
        signing.OK,
    ),
    # We have no ignore-timestamp mode; the vector's -300 s sits exactly on our
    # tolerance, which is accepted (the limit is inclusive).
    "ignore_timestamp_mode_old": (lambda o: _mutated(o), signing.OK),
    "ignore_timestamp_mode_tampered_ts": (_tampered_timestamp, signing.NO_MATCHING_SIGNATURE),
}


def test_every_relative_case_has_a_builder() -> None:
    assert {c["name"] for c in REL["cases"]} == set(REL_BUILDERS)


@pytest.mark.parametrize("case", REL["cases"], ids=[c["name"] for c in REL["cases"]])
def test_verify_cases_relative_to_now(case: dict[str, Any]) -> None:
    build, reason = REL_BUILDERS[case["name"]]
    secret, headers, body, tolerance = build(case["offset_seconds"])
    result = signing.verify(secret, headers, body, now_s=NOW, tolerance_s=tolerance)
    assert result.ok is case["expect"].startswith("ok")
    assert result.reason == reason


# --- sign input validation ----------------------------------------------------

SIV = VECTORS["sign_input_validation_cases"]


@pytest.mark.parametrize("case", SIV["cases"], ids=lambda c: c["timestamp_input"])
def test_sign_rejects_bad_timestamps(case: dict[str, Any]) -> None:
    text = case["timestamp_input"]
    with pytest.raises(ValidationError) as info:
        signing.sign(SIV["secret"], SIV["msg_id"], cast(int, text), b"{}")
    assert info.value.field == "timestamp"
    # The same values as numbers: a float and a negative integer are refused too.
    try:
        number: float = float(text)
    except ValueError:
        return
    with pytest.raises(ValidationError):
        signing.sign(SIV["secret"], SIV["msg_id"], cast(int, number), b"{}")
    if number < 0:
        with pytest.raises(ValidationError):
            signing.sign(SIV["secret"], SIV["msg_id"], int(number), b"{}")


@pytest.mark.parametrize("msg_id", ["", "a.b", "msg 1", "msg\n1", "msg_é", ".", "x\x00"])
def test_sign_rejects_unsafe_msg_ids(msg_id: str) -> None:
    with pytest.raises(ValidationError) as info:
        signing.sign(CANONICAL["secret"], msg_id, 1, b"{}")
    assert info.value.field == "msg_id"


def test_sign_rejects_bool_timestamp_and_str_body() -> None:
    with pytest.raises(ValidationError):
        signing.sign(CANONICAL["secret"], "m", True, b"{}")
    with pytest.raises(ValidationError):
        signing.sign(CANONICAL["secret"], "m", 1, cast(bytes, "{}"))


# --- secret parsing -------------------------------------------------------------

SECRETS = VECTORS["secret_parsing_cases"]


@pytest.mark.parametrize("case", SECRETS["verifier_libraries"], ids=lambda c: c["secret"] or "''")
def test_secret_parsing_verifier_library_cases(case: dict[str, Any]) -> None:
    secret = case["secret"]
    if case["expect"] == "ok":
        assert signing.parse_secret(secret) == signing.parse_secret(case["equivalent_to"])
        return
    # Empty secrets are refused by every library. The two unpadded secrets are
    # accepted only by the Python reference library (it appends '==' and drops
    # bad characters); we decode strictly like Go and Rust and refuse them.
    # Their signatures are still checked under derived vectors.
    assert case["expect"].startswith("error") or "Python lib only" in case["expect"]
    with pytest.raises(ValidationError) as info:
        signing.parse_secret(secret)
    assert info.value.field == "secret"


@pytest.mark.parametrize(
    "case", SECRETS["svix_server_endpoint_secret_validation"], ids=lambda c: c["secret"][:24]
)
def test_secret_parsing_svix_server_cases(case: dict[str, Any]) -> None:
    if case["expect"].startswith("accepted"):
        size = int(case["expect"].split("(")[1].split()[0])
        assert len(signing.parse_secret(case["secret"])) == size
    else:
        with pytest.raises(ValidationError):
            signing.parse_secret(case["secret"])


def test_secret_size_limits_are_the_standard_range() -> None:
    assert len(signing.parse_secret(signing.format_secret(b"k" * 24))) == 24
    assert len(signing.parse_secret(signing.format_secret(b"k" * 64))) == 64
    for size in (0, 23, 65, 75):
        with pytest.raises(ValidationError):
            signing.format_secret(b"k" * size)
        with pytest.raises(ValidationError):
            signing.parse_secret("whsec_" + base64.b64encode(b"k" * size).decode())


@pytest.mark.parametrize(
    "secret",
    [
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=",  # a signature, not a secret
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw==",  # padding beyond the end
        "whsec_MfKQ9r8GKYqrTwjUPD8I LPZIo2LaLaSw",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSé",
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLa-w",  # url-safe alphabet
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSx=",  # 23 bytes with stray low bits
    ],
)
def test_parse_secret_is_strict(secret: str) -> None:
    with pytest.raises(ValidationError):
        signing.parse_secret(secret)


def test_parse_secret_rejects_non_strings() -> None:
    with pytest.raises(ValidationError):
        signing.parse_secret(cast(str, b"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"))


def test_format_secret_rejects_non_bytes() -> None:
    with pytest.raises(ValidationError):
        signing.format_secret(cast(bytes, "k" * 32))


# --- derived vectors (ours) -------------------------------------------------------

DERIVED = {c["name"]: c for c in VECTORS["derived_vectors_not_upstream"]["cases"]}


@pytest.mark.parametrize("name", ["unpadded_secret_23_bytes", "unpadded_secret_25_bytes"])
def test_derived_unpadded_secret_vectors(name: str) -> None:
    case = DERIVED[name]
    key = base64.b64decode(_pad(case["secret"]))
    assert len(key) == case["decoded_key_bytes"]
    body = case["payload"].encode()
    assert (
        signing.signature_for_key(key, case["msg_id"], case["timestamp"], body)
        == (case["expected_signature"])
    )
    with pytest.raises(ValidationError):  # unpadded: refused by our strict decoder
        signing.parse_secret(case["secret"])
    with pytest.raises(ValidationError):  # padded, but still not canonical or too short
        signing.parse_secret("whsec_" + _pad(case["secret"]))
    if signing.SECRET_MIN_BYTES <= len(key) <= signing.SECRET_MAX_BYTES:
        # The same key in canonical form is a valid secret and signs identically.
        canonical = signing.format_secret(key)
        got = signing.sign(canonical, case["msg_id"], case["timestamp"], body)
        assert got == case["expected_signature"]
    else:  # 23 bytes is below the standard's 24-byte minimum
        with pytest.raises(ValidationError):
            signing.format_secret(key)


@pytest.mark.parametrize("name", ["empty_payload", "non_ascii_utf8_payload"])
def test_derived_payload_vectors(name: str) -> None:
    case = DERIVED[name]
    body = case["payload"].encode("utf-8")
    if "payload_utf8_hex" in case:
        assert body.hex() == case["payload_utf8_hex"]
    got = signing.sign(case["secret"], case["msg_id"], case["timestamp"], body)
    assert got == case["expected_signature"]
    headers = _headers(case["msg_id"], case["timestamp"], got)
    assert signing.verify(case["secret"], headers, body, now_s=case["timestamp"]).ok


def test_derived_rotation_two_keys() -> None:
    case = DERIVED["rotation_two_keys"]
    secrets = [s.split()[0] for s in case["secrets_in_order"]]
    body = case["payload"].encode()
    value = signing.signature_header(secrets, case["msg_id"], case["timestamp"], body)
    assert value == case["expected_webhook_signature_header"]
    headers = _headers(case["msg_id"], case["timestamp"], value)
    for secret in secrets:  # a receiver holding either secret accepts
        assert signing.verify(secret, headers, body, now_s=case["timestamp"]).ok
    assert signing.verify(secrets, headers, body, now_s=case["timestamp"]).ok


# --- headers, tolerance and malformed input ----------------------------------------


def test_build_headers() -> None:
    body = CANONICAL["payload"].encode()
    headers = signing.build_headers(
        CANONICAL["secret"], CANONICAL["msg_id"], CANONICAL["timestamp"], body, "click"
    )
    assert headers == {
        "content-type": "application/json",
        "user-agent": "Svc-Webhooks/1.0",
        "webhook-id": CANONICAL["msg_id"],
        "webhook-timestamp": str(CANONICAL["timestamp"]),
        "webhook-signature": CANONICAL["expected_signature"],
        "svc-event": "click",
    }


@pytest.mark.parametrize("event_type", ["", "cl ick", "click\r\nx-evil: 1", "clické"])
def test_build_headers_rejects_unsafe_event_type(event_type: str) -> None:
    with pytest.raises(ValidationError):
        signing.build_headers(CANONICAL["secret"], "m", 1, b"{}", event_type)


def test_header_names_are_case_insensitive() -> None:
    headers = {k.upper(): v for k, v in _signed(0).items()}
    assert signing.verify(REL_SECRET, headers, REL_BODY, now_s=NOW).ok
    mixed = {"Webhook-Id": REL_ID, **{k: v for k, v in _signed(0).items() if k != "webhook-id"}}
    assert signing.verify(REL_SECRET, mixed, REL_BODY, now_s=NOW).ok


@pytest.mark.parametrize(
    ("offset", "reason"),
    [
        (-300, signing.OK),
        (300, signing.OK),
        (-301, signing.TIMESTAMP_TOO_OLD),
        (301, signing.TIMESTAMP_TOO_NEW),
        (-86_400, signing.TIMESTAMP_TOO_OLD),
    ],
)
def test_tolerance_is_five_minutes_inclusive(offset: int, reason: str) -> None:
    assert signing.verify(REL_SECRET, _signed(offset), REL_BODY, now_s=NOW).reason == reason


@pytest.mark.parametrize(
    "timestamp",
    [
        f"{NOW}.0",
        f"+{NOW}",
        f" {NOW}",
        f"{NOW} ",
        f"-{NOW}",
        "\u0661\u0667" + "\u0660" * 8,  # Arabic-Indic digits: str.isdigit() is True
        "1e9",
        "9" * 21,
        "0x10",
    ],
)
def test_only_ascii_digit_timestamps(timestamp: str) -> None:
    headers = _signed(0)
    headers["webhook-timestamp"] = timestamp
    result = signing.verify(REL_SECRET, headers, REL_BODY, now_s=NOW)
    assert result.reason == signing.BAD_TIMESTAMP


@pytest.mark.parametrize(
    "value",
    ["v1", "v1,,", ",", "v1,é", "v1,a,b", "   ", "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE"],
)
def test_malformed_entries_are_skipped(value: str) -> None:
    headers = _signed(0)
    result = signing.verify(REL_SECRET, {**headers, "webhook-signature": value}, REL_BODY, NOW)
    assert result.reason in (signing.NO_MATCHING_SIGNATURE, signing.MISSING_HEADER)
    joined = f"{value} {headers['webhook-signature']}"
    ok = signing.verify(REL_SECRET, {**headers, "webhook-signature": joined}, REL_BODY, NOW)
    assert ok.ok


def test_empty_header_values_count_as_missing() -> None:
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        headers = {**_signed(0), name: ""}
        result = signing.verify(REL_SECRET, headers, REL_BODY, now_s=NOW)
        assert result.reason == signing.MISSING_HEADER
        assert name in result.detail


def test_verify_raises_only_for_bad_secrets() -> None:
    with pytest.raises(ValidationError):
        signing.verify([], _signed(0), REL_BODY, now_s=NOW)
    with pytest.raises(ValidationError):
        signing.verify("whsec_", _signed(0), REL_BODY, now_s=NOW)


def test_rotated_out_secret_stops_verifying() -> None:
    headers = _signed(0)
    assert not signing.verify(RUST["secret"], headers, REL_BODY, now_s=NOW).ok


# --- properties ---------------------------------------------------------------------

keys = st.binary(min_size=signing.SECRET_MIN_BYTES, max_size=signing.SECRET_MAX_BYTES)
msg_ids = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-",
    min_size=1,
    max_size=40,
)
timestamps = st.integers(min_value=0, max_value=253_402_300_799)  # up to year 9999


@given(key=keys, msg_id=msg_ids, ts=timestamps, body=st.binary(max_size=512))
def test_sign_verify_round_trip(key: bytes, msg_id: str, ts: int, body: bytes) -> None:
    secret = signing.format_secret(key)
    assert signing.parse_secret(secret) == key
    headers = signing.build_headers(secret, msg_id, ts, body, "test")
    assert signing.verify(secret, headers, body, now_s=ts).ok
    assert not signing.verify(secret, headers, body + b"x", now_s=ts).ok
    other = headers | {"webhook-id": msg_id + "x"}
    assert not signing.verify(secret, other, body, now_s=ts).ok


@given(key=keys, msg_id=msg_ids, ts=timestamps, body=st.text(max_size=256))
def test_sign_matches_standardwebhooks_reference(
    key: bytes, msg_id: str, ts: int, body: str
) -> None:
    when = datetime.datetime.fromtimestamp(ts, tz=datetime.UTC)
    reference = standardwebhooks.Webhook(key).sign(msg_id, when, body)
    assert signing.sign(signing.format_secret(key), msg_id, ts, body.encode()) == reference


@given(
    headers=st.dictionaries(
        st.sampled_from(["webhook-id", "webhook-timestamp", "webhook-signature", "x"]),
        st.text(max_size=80),
    ),
    body=st.binary(max_size=64),
    now=st.integers(min_value=-(2**63), max_value=2**63),
)
def test_verify_never_raises_on_any_headers(headers: dict[str, str], body: bytes, now: int) -> None:
    result = signing.verify(CANONICAL["secret"], headers, body, now_s=now)
    assert isinstance(result, signing.VerifyResult)
    assert not result.ok


def test_the_mac_covers_the_timestamp_header_as_received() -> None:
    """SPEC 5.4: the MAC is over ``<webhook-id>.<webhook-timestamp>.<body>``,
    the header's text: a sender writing leading zeros signs those digits, and
    a signature over the number written another way does not verify."""
    key = signing.parse_secret(REL_SECRET)
    padded = f"0{NOW}"
    over_number = signing.signature_for_key(key, REL_ID, NOW, REL_BODY)
    assert signing.verify(REL_SECRET, _signed_over_text(padded), REL_BODY, NOW).ok
    assert signing.verify(REL_SECRET, _headers(REL_ID, padded, over_number), REL_BODY,
                          NOW).reason == signing.NO_MATCHING_SIGNATURE


def _signed_over_text(timestamp_text: str) -> Headers:
    """Headers signed over the timestamp as written (leading zeros and all)."""
    key = signing.parse_secret(REL_SECRET)
    mac = hmac.new(key, f"{REL_ID}.{timestamp_text}.".encode() + REL_BODY, hashlib.sha256)
    return _headers(REL_ID, timestamp_text, f"v1,{base64.b64encode(mac.digest()).decode()}")


def test_the_longest_timestamp_text_is_twenty_digits() -> None:
    """Twenty digits (zero-padded here) is the most parsed; "9" * 21 is
    refused in test_only_ascii_digit_timestamps."""
    padded = f"{NOW:020d}"
    assert signing.verify(REL_SECRET, _signed_over_text(padded), REL_BODY, NOW).ok
    assert signing.verify(REL_SECRET, _signed_over_text(f"0{padded}"), REL_BODY,
                          NOW).reason == signing.BAD_TIMESTAMP


@pytest.mark.parametrize("stray", ["!", "*", "\t", "-", "_"])
def test_a_signature_with_a_character_outside_base64_does_not_verify(stray: str) -> None:
    """A lenient base64 decoder drops characters outside the alphabet, so a
    valid signature with one slipped in would still match."""
    headers = _signed(0)
    version, _, mac = headers["webhook-signature"].partition(",")
    tampered = f"{version},{mac[:10]}{stray}{mac[10:]}"
    result = signing.verify(REL_SECRET, {**headers, "webhook-signature": tampered}, REL_BODY,
                            NOW)
    assert result.reason == signing.NO_MATCHING_SIGNATURE
