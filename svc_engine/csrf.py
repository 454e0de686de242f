"""CSRF tokens for dashboard forms (synchronizer tokens).

Every form carries a hidden ``csrf`` field and every POST is refused (403)
unless the field matches:

* signed in: HMAC-SHA256(server secret, "session:" + session id). The session
  id is not the cookie, so the token can sit in the page without exposing it;
  it changes with each sign-in.
* signed out (sign-in and invitation forms): HMAC-SHA256(server secret,
  "anonymous:" + nonce), where the nonce is a random value in an HttpOnly
  cookie. Another site can neither read that cookie nor forge the token, which
  prevents signing a victim into the attacker's account ("login CSRF").
"""

from __future__ import annotations

import base64
import hashlib
import hmac


def _mac(secret: bytes, purpose: str, value: str) -> str:
    digest = hmac.new(secret, f"{purpose}:{value}".encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def session_token(secret: bytes, session_id: str) -> str:
    return _mac(secret, "session", session_id)


def anonymous_token(secret: bytes, nonce: str) -> str:
    return _mac(secret, "anonymous", nonce)


def matches(expected: str, submitted: str | None) -> bool:
    """Constant-time comparison; a missing field never matches."""
    if not submitted or not expected:
        return False
    return hmac.compare_digest(expected.encode("ascii", "replace"),
                               submitted.encode("ascii", "replace"))
