"""Webhook signatures: the Standard Webhooks ``v1`` scheme (HMAC-SHA256).

What is signed is ``<webhook-id>.<webhook-timestamp>.<raw body>``: the
delivery id, the attempt's Unix time in seconds as a decimal string, and the
exact body bytes sent. The ``webhook-signature`` header is a space-separated
list of ``v1,<base64 MAC>`` entries.

A secret is ``whsec_`` followed by standard base64 (with ``=`` padding) of
24 to 64 random bytes (the Standard Webhooks range). ``parse_secret`` also
accepts the bare base64 text without the prefix, as every reference verifier
does, but decodes strictly: unpadded, non-alphabet or non-canonical text
(excess padding, stray low bits in the last digit) is refused rather than
silently repaired (the Python reference library appends ``==`` and drops bad
characters; we do not).

``verify`` is the receiver's side (used by the sample receiver and the tests).
A bad or missing header, a timestamp outside the tolerance, or no matching
entry is a ``VerifyResult`` with ``ok=False`` and a reason code, never an
exception. Only a bad *secret* raises, because that is the caller's
configuration fault, not the sender's. Entries of other versions (``v1a``
Ed25519, ``v2``) and malformed entries are skipped.

No clock is read here: the signing time and the receiver's "now" are
arguments.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence

import attrs

from svc_engine.errors import ValidationError

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format prefix, not a secret
SECRET_MIN_BYTES = 24
SECRET_MAX_BYTES = 64
SECRET_BYTES = 32
"""Size of the key material the service generates for a new secret."""

SIGNATURE_VERSION = "v1"
TOLERANCE_S = 300
USER_AGENT = "Svc-Webhooks/1.0"

# The longest timestamp text we parse; 20 digits exceeds any 64-bit time.
_MAX_TIMESTAMP_DIGITS = 20

# Reason codes of VerifyResult.
OK = "ok"
MISSING_HEADER = "missing_header"
BAD_TIMESTAMP = "bad_timestamp"
TIMESTAMP_TOO_OLD = "timestamp_too_old"
TIMESTAMP_TOO_NEW = "timestamp_too_new"
NO_MATCHING_SIGNATURE = "no_matching_signature"


@attrs.frozen
class VerifyResult:
    """Outcome of verifying one delivery. ``reason`` is one of the codes above."""

    ok: bool
    reason: str
    detail: str = ""


def parse_secret(secret: str) -> bytes:
    """Return the HMAC key of ``whsec_<base64>`` (prefix optional).

    Raises ValidationError(field="secret") for an empty, non-base64, unpadded
    or wrongly sized secret.
    """
    if not isinstance(secret, str):
        raise ValidationError("secret must be a string", field="secret")
    text = secret.removeprefix(SECRET_PREFIX)
    if not text:
        raise ValidationError("secret is empty", field="secret")
    try:
        key = base64.b64decode(text.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        key = b""
    # Canonical form only: no excess padding, no stray low bits in the last digit.
    if not key or base64.b64encode(key).decode("ascii") != text:
        raise ValidationError(
            "secret must be 'whsec_' followed by padded standard base64", field="secret"
        )
    _check_key_size(key)
    return key


def format_secret(key: bytes) -> str:
    """Serialise key material as ``whsec_<base64>``; the key must be 24 to 64 bytes."""
    if not isinstance(key, bytes):
        raise ValidationError("secret key material must be bytes", field="secret")
    _check_key_size(key)
    return SECRET_PREFIX + base64.b64encode(key).decode("ascii")


def _check_key_size(key: bytes) -> None:
    if not SECRET_MIN_BYTES <= len(key) <= SECRET_MAX_BYTES:
        raise ValidationError(
            f"secret must decode to {SECRET_MIN_BYTES} to {SECRET_MAX_BYTES} bytes, not {len(key)}",
            field="secret",
        )


def signed_content(msg_id: str, timestamp_s: int, body: bytes) -> bytes:
    """The exact bytes the MAC covers: ``id.timestamp.body``."""
    return f"{msg_id}.{timestamp_s}.".encode() + body


def signature_for_key(key: bytes, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256>`` for raw key bytes (no size rule applied)."""
    mac = hmac.new(key, signed_content(msg_id, timestamp_s, body), hashlib.sha256).digest()
    return f"{SIGNATURE_VERSION},{base64.b64encode(mac).decode('ascii')}"


def sign(secret: str, msg_id: str, timestamp_s: int, body: bytes) -> str:
    """Sign one attempt; returns one ``v1,<base64>`` header entry.

    The id must be non-empty printable ASCII without ``.`` or spaces (the
    scheme's rule: the id must not be able to shift the ``.`` separators);
    the timestamp a non-negative integer number of seconds.
    """
    _check_msg_id(msg_id)
    _check_timestamp(timestamp_s)
    if not isinstance(body, bytes):
        raise ValidationError("body must be bytes", field="body")
    return signature_for_key(parse_secret(secret), msg_id, timestamp_s, body)


def signature_header(
    secrets: str | Sequence[str], msg_id: str, timestamp_s: int, body: bytes
) -> str:
    """The ``webhook-signature`` value: one entry per secret, in the given order."""
    return " ".join(sign(s, msg_id, timestamp_s, body) for s in _secret_list(secrets))


def build_headers(
    secret: str | Sequence[str],
    msg_id: str,
    timestamp_s: int,
    body: bytes,
    event_type: str,
) -> dict[str, str]:
    """Every header of a delivery request except those the HTTP client adds."""
    if not event_type or not event_type.isascii() or not event_type.isidentifier():
        raise ValidationError("event type must be a plain ASCII word", field="event_type")
    return {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": msg_id,
        "webhook-timestamp": str(timestamp_s),
        "webhook-signature": signature_header(secret, msg_id, timestamp_s, body),
        "svc-event": event_type,
    }


def verify(
    secrets: str | Sequence[str],
    headers: Mapping[str, str],
    body: bytes,
    now_s: int,
    tolerance_s: int = TOLERANCE_S,
) -> VerifyResult:
    """Check a received delivery against one or more secrets.

    Accepts when any ``v1`` entry matches any secret (constant-time compare on
    the decoded MAC bytes) and the timestamp is at most ``tolerance_s`` from
    ``now_s`` either way (exactly ``tolerance_s`` is accepted).
    """
    keys = [parse_secret(s) for s in _secret_list(secrets)]
    lowered = {name.lower(): value for name, value in headers.items()}
    msg_id = lowered.get("webhook-id")
    timestamp_text = lowered.get("webhook-timestamp")
    signatures = lowered.get("webhook-signature")
    for name, value in (
        ("webhook-id", msg_id),
        ("webhook-timestamp", timestamp_text),
        ("webhook-signature", signatures),
    ):
        if not value:
            return VerifyResult(False, MISSING_HEADER, f"{name} is missing or empty")
    assert msg_id is not None and timestamp_text is not None and signatures is not None
    timestamp_s = _parse_timestamp(timestamp_text)
    if timestamp_s is None:
        return VerifyResult(False, BAD_TIMESTAMP, "webhook-timestamp is not whole seconds")
    if timestamp_s < now_s - tolerance_s:
        return VerifyResult(False, TIMESTAMP_TOO_OLD, f"more than {tolerance_s} s old")
    if timestamp_s > now_s + tolerance_s:
        return VerifyResult(False, TIMESTAMP_TOO_NEW, f"more than {tolerance_s} s ahead")
    # MAC the timestamp text exactly as received (it is all ASCII digits).
    content = f"{msg_id}.{timestamp_text}.".encode() + body
    expected = [hmac.new(key, content, hashlib.sha256).digest() for key in keys]
    for entry in signatures.split():
        version, _, encoded = entry.partition(",")
        if version != SIGNATURE_VERSION:
            continue
        given = _decode_signature(encoded)
        if given is None:
            continue
        if any(hmac.compare_digest(mac, given) for mac in expected):
            return VerifyResult(True, OK)
    return VerifyResult(False, NO_MATCHING_SIGNATURE, "no v1 entry matches")


def _secret_list(secrets: str | Sequence[str]) -> list[str]:
    listed = [secrets] if isinstance(secrets, str) else list(secrets)
    if not listed:
        raise ValidationError("at least one secret is needed", field="secret")
    return listed


def _check_msg_id(msg_id: str) -> None:
    if (
        not isinstance(msg_id, str)
        or not msg_id
        or not msg_id.isascii()
        or not msg_id.isprintable()
        or "." in msg_id
        or " " in msg_id
    ):
        raise ValidationError(
            "webhook-id must be printable ASCII without '.' or spaces", field="msg_id"
        )


def _check_timestamp(timestamp_s: object) -> None:
    if not isinstance(timestamp_s, int) or isinstance(timestamp_s, bool) or timestamp_s < 0:
        raise ValidationError(
            "timestamp must be a non-negative whole number of seconds", field="timestamp"
        )


def _parse_timestamp(text: str) -> int | None:
    # ASCII digits only: no sign, no fraction, no spaces, no Unicode digits.
    if not text.isascii() or not text.isdigit() or len(text) > _MAX_TIMESTAMP_DIGITS:
        return None
    return int(text)


def _decode_signature(encoded: str) -> bytes | None:
    try:
        return base64.b64decode(encoded.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error):
        return None
