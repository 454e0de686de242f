"""Project settings for deferred linking (SPEC.md "Project settings").

One settings object per project, shared by test and live modes. ``PATCH`` takes
any subset of the fields; an unknown field, a wrong type or an out-of-range
window is a 400 ``validation_error`` and changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import req_bool, req_int
from svc_engine.errors import ValidationError

WINDOW_MIN = 15
WINDOW_MAX = 360
WINDOW_DEFAULT = 120

_BOOL_FIELDS = ("iosLandingPage", "webFallbackTokens", "probabilisticMatching",
                "probabilisticIpMatching")
_FIELDS = (*_BOOL_FIELDS, "probabilisticWindowMinutes")


@attrs.frozen
class DeferredSettings:
    VERSION = 1
    ios_landing_page: bool = False
    web_fallback_tokens: bool = False
    probabilistic_matching: bool = False
    probabilistic_ip_matching: bool = False
    probabilistic_window_minutes: int = WINDOW_DEFAULT

    def to_json(self) -> dict[str, object]:
        return {
            "iosLandingPage": self.ios_landing_page,
            "webFallbackTokens": self.web_fallback_tokens,
            "probabilisticMatching": self.probabilistic_matching,
            "probabilisticIpMatching": self.probabilistic_ip_matching,
            "probabilisticWindowMinutes": self.probabilistic_window_minutes,
        }

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, **self.to_json()}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> DeferredSettings:
        return cls(
            ios_landing_page=req_bool(m, "iosLandingPage", False),
            web_fallback_tokens=req_bool(m, "webFallbackTokens", False),
            probabilistic_matching=req_bool(m, "probabilisticMatching", False),
            probabilistic_ip_matching=req_bool(m, "probabilisticIpMatching", False),
            probabilistic_window_minutes=req_int(m, "probabilisticWindowMinutes")
            if "probabilisticWindowMinutes" in m else WINDOW_DEFAULT,
        )

    @property
    def window_ms(self) -> int:
        return self.probabilistic_window_minutes * 60_000


def apply_patch(current: DeferredSettings, patch: object) -> DeferredSettings:
    """Validate a PATCH body and return the settings it produces."""
    if not isinstance(patch, dict):
        raise ValidationError("the body must be a JSON object of settings fields")
    for key in patch:
        if key not in _FIELDS:
            raise ValidationError(
                f"unknown setting {key!r}; known settings: {', '.join(_FIELDS)}", field=key
            )
    merged = current.to_json()
    for key in _BOOL_FIELDS:
        if key in patch:
            if not isinstance(patch[key], bool):
                raise ValidationError(f"{key} must be true or false", field=key)
            merged[key] = patch[key]
    if "probabilisticWindowMinutes" in patch:
        v = patch["probabilisticWindowMinutes"]
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValidationError(
                "probabilisticWindowMinutes must be a whole number of minutes",
                field="probabilisticWindowMinutes",
            )
        if not WINDOW_MIN <= v <= WINDOW_MAX:
            raise ValidationError(
                f"probabilisticWindowMinutes must be between {WINDOW_MIN} and {WINDOW_MAX}",
                field="probabilisticWindowMinutes",
            )
        merged["probabilisticWindowMinutes"] = v
    return DeferredSettings.from_map(merged)
