"""SPEC.md "Project settings": defaults, ranges, unknown fields, types."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.errors import ValidationError
from svc_engine.settings import DeferredSettings, apply_patch

DEFAULTS = {
    "iosLandingPage": False,
    "webFallbackTokens": False,
    "probabilisticMatching": False,
    "probabilisticIpMatching": False,
    "probabilisticWindowMinutes": 120,
}


def test_defaults_match_spec() -> None:
    assert DeferredSettings().to_json() == DEFAULTS


@pytest.mark.parametrize("field", [k for k in DEFAULTS if k != "probabilisticWindowMinutes"])
def test_each_boolean_can_be_set_alone(field: str) -> None:
    new = apply_patch(DeferredSettings(), {field: True})
    assert new.to_json() == {**DEFAULTS, field: True}


@pytest.mark.parametrize("minutes", [15, 16, 120, 359, 360])
def test_window_in_range(minutes: int) -> None:
    assert apply_patch(DeferredSettings(), {"probabilisticWindowMinutes": minutes}
                       ).probabilistic_window_minutes == minutes


@pytest.mark.parametrize("minutes", [14, 361, 0, -1, 10_000])
def test_window_out_of_range(minutes: int) -> None:
    with pytest.raises(ValidationError) as e:
        apply_patch(DeferredSettings(), {"probabilisticWindowMinutes": minutes})
    assert e.value.field == "probabilisticWindowMinutes"


@pytest.mark.parametrize("patch", [
    {"probabilisticWindowMinutes": 120.5},
    {"probabilisticWindowMinutes": "120"},
    {"probabilisticWindowMinutes": True},
    {"iosLandingPage": 1},
    {"iosLandingPage": "true"},
    {"iosLandingPage": None},
])
def test_wrong_types_rejected(patch: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        apply_patch(DeferredSettings(), patch)


def test_unknown_field_rejected_and_names_it() -> None:
    with pytest.raises(ValidationError) as e:
        apply_patch(DeferredSettings(), {"iosLandingPage": True, "darkMode": True})
    assert e.value.field == "darkMode"
    assert e.value.code == "validation_error" and e.value.status == 400


@pytest.mark.parametrize("body", [[], "x", 3, None])
def test_body_must_be_object(body: object) -> None:
    with pytest.raises(ValidationError):
        apply_patch(DeferredSettings(), body)


def test_empty_patch_changes_nothing() -> None:
    s = DeferredSettings(ios_landing_page=True, probabilistic_window_minutes=30)
    assert apply_patch(s, {}) == s


@given(st.fixed_dictionaries({}, optional={
    "iosLandingPage": st.booleans(), "webFallbackTokens": st.booleans(),
    "probabilisticMatching": st.booleans(), "probabilisticIpMatching": st.booleans(),
    "probabilisticWindowMinutes": st.integers(15, 360)}))
def test_patch_round_trips_through_storage_map(patch: dict[str, object]) -> None:
    new = apply_patch(DeferredSettings(), patch)
    assert DeferredSettings.from_map(new.to_map()) == new
    for k, v in patch.items():
        assert new.to_json()[k] == v


def test_a_stored_record_without_a_field_reads_as_its_default() -> None:
    """A settings record written before a field existed (only its version)."""
    assert DeferredSettings.from_map({"v": 1}).to_json() == DEFAULTS
    kept = DeferredSettings.from_map({"v": 1, "probabilisticMatching": True})
    assert kept.to_json() == {**DEFAULTS, "probabilisticMatching": True}


@pytest.mark.parametrize(("minutes", "ms"), [(15, 900_000), (120, 7_200_000), (360, 21_600_000)])
def test_the_window_in_milliseconds(minutes: int, ms: int) -> None:
    assert DeferredSettings(probabilistic_window_minutes=minutes).window_ms == ms
