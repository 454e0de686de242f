"""Request-body parsers of the SDK endpoints and POST /v1/handoffs (SPEC.md
"SDK endpoints", "SDK event", "Limits"; DESIGN.md "API conventions")."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.errors import ValidationError
from svc_engine.event_batch import parse_events_batch
from svc_engine.sdk_requests import (
    HANDOFF_MAX_SECONDS,
    ClaimRequest,
    InitRequest,
    os_major,
    parse_claim,
    parse_handoff_create,
    parse_init,
    parse_install_referrer,
    parse_resolve,
    parse_timestamp_ms,
)

INSTALL = "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab"
EVENT_ID = "a0b1c2d3-e4f5-1789-8abc-def012345678"  # a v1-shaped UUID: any version is fine
LINK = "0d9e8f7a-6b5c-4d3e-9f21-0a1b2c3d4e5f"
NOW = 1_795_000_000_000  # 2026-11-18T...Z
T0 = "2026-11-01T10:00:00Z"
T0_MS = 1_793_527_200_000


def init_body(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"installId": INSTALL, "isFirstLaunch": True, "sdkVersion": "0.2.0",
                            "platform": "android", "osVersion": "14",
                            "installReferrer": "svc_token=abc_DEF-123&utm_source=x"}
    body.update(over)
    return {k: v for k, v in body.items() if v is not _DROP}


_DROP = object()


def event(**over: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": EVENT_ID, "name": "purchase", "properties": {"revenue": 9.99},
                            "linkId": LINK, "occurredAt": T0}
    body.update(over)
    return {k: v for k, v in body.items() if v is not _DROP}


def batch(events: list[Any], **over: Any) -> dict[str, Any]:
    return {"installId": INSTALL, "events": events, **over}


def field_of(call: Any) -> str | None:
    with pytest.raises(ValidationError) as info:
        call()
    err = info.value
    assert err.status == 400 and err.code == "validation_error"
    if err.field is not None:
        assert err.message.startswith(f"{err.field}: ")
    return err.field


# --- init ------------------------------------------------------------------------------


def test_init_android_first_launch() -> None:
    req = parse_init(init_body(extraFieldFromNewerSdk={"x": 1}))
    assert req == InitRequest(install_id=INSTALL, is_first_launch=True, sdk_version="0.2.0",
                              platform="android", os_version="14",
                              install_referrer="svc_token=abc_DEF-123&utm_source=x")
    assert req.referrer_token == "abc_DEF-123"
    assert req.os_major == 14


@pytest.mark.parametrize(("platform", "is_first", "token"), [
    ("android", True, "abc_DEF-123"),
    ("android", False, None),  # the referrer is read on the first launch only
    ("ios", True, None),
])
def test_referrer_token_only_on_android_first_launch(platform: str, is_first: bool,
                                                     token: str | None) -> None:
    req = parse_init(init_body(platform=platform, isFirstLaunch=is_first))
    assert req.referrer_token == token


@pytest.mark.parametrize(("given_", "stored"), [
    ("ios", "ios"), ("iOS", "ios"), ("android", "android"), (" Android ", "android"),
    ("web", "other"), ("", "other"), ("fuchsia", "other"),
])
def test_init_platform(given_: str, stored: str) -> None:
    assert parse_init(init_body(platform=given_)).platform == stored


def test_init_optional_fields_absent_or_null() -> None:
    req = parse_init(init_body(osVersion=_DROP, installReferrer=None))
    assert req.os_version is None and req.install_referrer is None and req.os_major is None


def test_init_upper_case_install_id_is_normalised() -> None:
    assert parse_init(init_body(installId=INSTALL.upper())).install_id == INSTALL


@pytest.mark.parametrize(("over", "field"), [
    ({"installId": _DROP}, "installId"),
    ({"installId": 42}, "installId"),
    ({"installId": "not-a-uuid"}, "installId"),
    ({"installId": "3f2b8c1e-9d4a-1b6e-8f00-1234567890ab"}, "installId"),  # version 1
    ({"installId": "3f2b8c1e-9d4a-4b6e-7f00-1234567890ab"}, "installId"),  # wrong variant
    ({"installId": "3f2b8c1e9d4a4b6e8f001234567890ab"}, "installId"),  # not canonical
    ({"installId": "{3f2b8c1e-9d4a-4b6e-8f00-1234567890ab}"}, "installId"),
    ({"installId": INSTALL + "\n"}, "installId"),
    ({"isFirstLaunch": 1}, "isFirstLaunch"),  # a number is not a boolean
    ({"isFirstLaunch": "true"}, "isFirstLaunch"),
    ({"isFirstLaunch": _DROP}, "isFirstLaunch"),
    ({"sdkVersion": ""}, "sdkVersion"),
    ({"sdkVersion": 2}, "sdkVersion"),
    ({"sdkVersion": "x" * 65}, "sdkVersion"),
    ({"platform": None}, "platform"),
    ({"platform": True}, "platform"),
    ({"osVersion": 17}, "osVersion"),
    ({"osVersion": "1" * 65}, "osVersion"),
    ({"installReferrer": ["svc_token=a"]}, "installReferrer"),
    ({"installReferrer": "a" * 4097}, "installReferrer"),
])
def test_init_rejects(over: dict[str, Any], field: str) -> None:
    assert field_of(lambda: parse_init(init_body(**over))) == field


@pytest.mark.parametrize("over", [
    {"sdkVersion": "1"}, {"sdkVersion": "x" * 64}, {"osVersion": ""}, {"osVersion": "1" * 64},
    {"installReferrer": ""}, {"installReferrer": "a" * 4096},
])
def test_init_limits_are_inclusive(over: dict[str, Any]) -> None:
    """Each length limit itself is accepted (one past it: test_init_rejects);
    an optional text may be empty."""
    req = parse_init(init_body(**over))
    key, value = next(iter(over.items()))
    assert getattr(req, {"sdkVersion": "sdk_version", "osVersion": "os_version",
                         "installReferrer": "install_referrer"}[key]) == value


@pytest.mark.parametrize("body", [None, [], "x", 3, True])
def test_body_must_be_an_object(body: object) -> None:
    for parse in (parse_init, parse_resolve, parse_claim):
        assert field_of(lambda: parse(body)) is None  # noqa: B023
    assert field_of(lambda: parse_events_batch(body, now_ms=NOW)) is None


# --- install referrer ------------------------------------------------------------------


@pytest.mark.parametrize(("raw", "token"), [
    ("svc_token=abc&utm_source=x", "abc"),
    ("utm_source=google-play&svc_token=T0k_en-9", "T0k_en-9"),
    ("?svc_token=abc", "abc"),
    ("svc_token%3Dabc%26utm_source%3Dx", "abc"),  # encoded once more by the store
    ("utm_source=google-play&utm_medium=organic", None),
    ("", None),
    ("svc_token=", None),
    ("svc_token=a%20b", None),  # not a token
    ("svc_token=" + "a" * 129, None),
    ("svc_token=first&svc_token=second", "first"),
    ("not a query string at all", None),
])
def test_parse_install_referrer(raw: str, token: str | None) -> None:
    assert parse_install_referrer(raw) == token


@given(st.text())
def test_parse_install_referrer_never_raises(raw: str) -> None:
    result = parse_install_referrer(raw)
    assert result is None or (1 <= len(result) <= 128 and result.isascii())


@pytest.mark.parametrize(("text", "major"), [
    ("17.4.1", 17), ("14", 14), ("Version 17.4 (Build 21E219)", 17), ("iOS 18.0", 18),
    (None, None), ("", None), ("beta", None), ("0.1", None), ("1234.5", None),
    ("1", 1), ("999.1", 999),  # one to three digits
])
def test_os_major(text: str | None, major: int | None) -> None:
    assert os_major(text) == major


# --- resolve and claim -----------------------------------------------------------------


@pytest.mark.parametrize(("url", "short"), [
    ("https://go.example.com/abc", "https://go.example.com/abc"),
    ("HTTP://go.example.com/abc", "HTTP://go.example.com/abc"),
    ("myapp://open?svc_link=https%3A%2F%2Fgo.example.com%2Fabc",
     "https://go.example.com/abc"),
    ("myapp://product/42?color=red", None),
    ("myapp://open?svc_link=javascript%3Aalert(1)", None),
    ("myapp://open?svc_link=https%3A%2F%2F%5B%3A%3A1%2Fa", None),  # broken IPv6 host
])
def test_resolve_short_url(url: str, short: str | None) -> None:
    req = parse_resolve({"url": url, "installId": INSTALL, "unknown": 1})
    assert req.url == url and req.short_url == short


@pytest.mark.parametrize(("url", "from_page"), [
    ("https://go.example.com/abc?svc_open=landing", True),  # the button without a scheme
    ("https://go.example.com/abc?utm=x&svc_open=landing", True),
    ("myapp://product/1?svc_link=https%3A%2F%2Fgo.example.com%2Fabc", True),  # its scheme
    ("https://go.example.com/abc", False),  # the plain short link: a universal link
    ("https://go.example.com/abc?svc_open=preview", False),  # only the page's own mark
    ("https://go.example.com/abc?svc_open=1", False),
    ("https://go.example.com/abc?svc_open=", False),
    ("https://go.example.com/landing?x=svc_open", False),
    ("myapp://product/1", False),  # a scheme URL without a link resolves nothing
])
def test_only_the_page_s_own_mark_makes_a_landing_page_open(url: str, from_page: bool) -> None:
    """README: the button without a scheme is the short link marked
    ``?svc_open=landing``; any other ``svc_open`` is not that page's button,
    and resolves as the link itself (a landing-page open upgrades an install
    to deterministic, so it must not come from a guess)."""
    assert parse_resolve({"url": url, "installId": INSTALL}).from_landing_page is from_page


@pytest.mark.parametrize(("body", "field"), [
    ({"installId": INSTALL}, "url"),
    ({"url": "", "installId": INSTALL}, "url"),
    ({"url": "/relative/path", "installId": INSTALL}, "url"),
    ({"url": "https://[::1/x", "installId": INSTALL}, "url"),
    ({"url": "https://x.test/" + "a" * 2048, "installId": INSTALL}, "url"),
    ({"url": "https://x.test/a"}, "installId"),
])
def test_resolve_rejects(body: dict[str, Any], field: str) -> None:
    assert field_of(lambda: parse_resolve(body)) == field


def test_resolve_url_of_the_longest_length() -> None:
    url = "https://x.test/" + "a" * (2048 - len("https://x.test/"))
    assert parse_resolve({"url": url, "installId": INSTALL}).url == url


@pytest.mark.parametrize(("user_id", "stored"), [
    ("u", "u"), ("  u-1  ", "u-1"), ("x" * 256, "x" * 256), (" " + "x" * 256 + "\n", "x" * 256),
])
def test_claim_trims_user_id(user_id: str, stored: str) -> None:
    assert parse_claim({"userId": user_id, "installId": INSTALL}) == ClaimRequest(stored, INSTALL)


@pytest.mark.parametrize("user_id", ["", "   ", "x" * 257, 12, None, ["u"]])
def test_claim_rejects_user_id(user_id: object) -> None:
    assert field_of(lambda: parse_claim({"userId": user_id, "installId": INSTALL})) == "userId"


# --- POST /v1/handoffs -----------------------------------------------------------------


def test_handoff_create_with_link_id() -> None:
    req = parse_handoff_create({"linkId": LINK.upper(), "userId": " u1 "},
                               web_fallback_tokens=False)
    assert (req.link_id, req.url, req.svc_token, req.user_id, req.expires_in_seconds) == (
        LINK, None, None, "u1", None)


@pytest.mark.parametrize("seconds", [1, 3600, HANDOFF_MAX_SECONDS])
def test_handoff_expiry_range(seconds: int) -> None:
    req = parse_handoff_create({"url": "https://go.example.com/a", "userId": "u",
                                "expiresInSeconds": seconds}, web_fallback_tokens=False)
    assert req.expires_in_seconds == seconds and req.url == "https://go.example.com/a"


def test_handoff_svc_token_needs_the_setting() -> None:
    body = {"svcToken": "abcDEF_123-x", "userId": "u"}
    assert parse_handoff_create(body, web_fallback_tokens=True).svc_token == "abcDEF_123-x"
    assert field_of(lambda: parse_handoff_create(body, web_fallback_tokens=False)) == "svcToken"


@pytest.mark.parametrize(("body", "field"), [
    ({"userId": "u"}, "linkId"),
    ({"linkId": LINK, "url": "https://go.example.com/a", "userId": "u"}, "url"),
    ({"linkId": "nope", "userId": "u"}, "linkId"),
    ({"url": "ftp://go.example.com/a", "userId": "u"}, "url"),
    ({"url": "https://[::1/a", "userId": "u"}, "url"),
    ({"url": "https:///a", "userId": "u"}, "url"),
    ({"svcToken": "has space", "userId": "u"}, "svcToken"),
    ({"linkId": LINK}, "userId"),
    ({"linkId": LINK, "userId": " "}, "userId"),
    ({"linkId": LINK, "userId": "u", "expiresInSeconds": 0}, "expiresInSeconds"),
    ({"linkId": LINK, "userId": "u", "expiresInSeconds": HANDOFF_MAX_SECONDS + 1},
     "expiresInSeconds"),
    ({"linkId": LINK, "userId": "u", "expiresInSeconds": True}, "expiresInSeconds"),
    ({"linkId": LINK, "userId": "u", "expiresInSeconds": 60.0}, "expiresInSeconds"),
    ({"linkId": LINK, "userId": "u", "expiresInSeconds": "60"}, "expiresInSeconds"),
    ({"linkId": LINK, "userId": "u", "expiresIn": 60}, "expiresIn"),  # unknown: server API
])
def test_handoff_create_rejects(body: dict[str, Any], field: str) -> None:
    assert field_of(lambda: parse_handoff_create(body, web_fallback_tokens=True)) == field


# --- events ----------------------------------------------------------------------------


@pytest.mark.parametrize("count", [1, 100])
def test_batch_sizes_accepted(count: int) -> None:
    parsed = parse_events_batch(batch([event() for _ in range(count)]), now_ms=NOW)
    assert len(parsed.events) == count and parsed.install_id == INSTALL


@pytest.mark.parametrize("count", [0, 101])
def test_batch_sizes_rejected(count: int) -> None:
    body = batch([event() for _ in range(count)])
    assert field_of(lambda: parse_events_batch(body, now_ms=NOW)) == "events"


@pytest.mark.parametrize(("body", "field"), [
    ({"events": [event()]}, "installId"),
    ({"installId": INSTALL}, "events"),
    ({"installId": INSTALL, "events": {"0": event()}}, "events"),
])
def test_batch_envelope_rejects(body: dict[str, Any], field: str) -> None:
    assert field_of(lambda: parse_events_batch(body, now_ms=NOW)) == field


def test_event_fields() -> None:
    parsed = parse_events_batch(
        batch([event(id=EVENT_ID.upper(), linkId=LINK.upper(), extra="ignored")]), now_ms=NOW)
    (e,) = parsed.events
    assert (e.id, e.name, e.properties, e.link_id, e.occurred_at_ms) == (
        EVENT_ID, "purchase", {"revenue": 9.99}, LINK, T0_MS)


@pytest.mark.parametrize("length", [1, 100])
def test_name_length_accepted(length: int) -> None:
    (e,) = parse_events_batch(batch([event(name="é" * length)]), now_ms=NOW).events
    assert len(e.name) == length


@pytest.mark.parametrize("length", [0, 101])
def test_name_length_rejected(length: int) -> None:
    body = batch([event(), event(), event(), event(name="n" * length)])
    parsed = parse_events_batch(body, now_ms=NOW)  # the others are kept
    assert len(parsed.events) == 3
    assert [(r.index, r.field, r.message) for r in parsed.rejected] == [
        (3, "events[3].name", "events[3].name: must be 1 to 100 characters")]
    with pytest.raises(ValidationError) as info:  # alone, it refuses its batch
        parse_events_batch(batch([event(name="n" * length)]), now_ms=NOW)
    assert info.value.field == "events[0].name"
    assert info.value.message == "events[0].name: must be 1 to 100 characters"


@pytest.mark.parametrize(("over", "field"), [
    ({"id": _DROP}, "id"),
    ({"id": "1234"}, "id"),
    ({"id": 5}, "id"),
    ({"name": None}, "name"),
    ({"name": 7}, "name"),
    ({"linkId": "not-a-uuid"}, "linkId"),
    ({"linkId": "0d9e8f7a6b5c4d3e9f210a1b2c3d4e5f"}, "linkId"),
    ({"linkId": 12}, "linkId"),
    ({"properties": []}, "properties"),
    ({"properties": "{}"}, "properties"),
    ({"properties": 1}, "properties"),
    ({"properties": {"x": float("nan")}}, "properties"),
    ({"properties": {"x": float("inf")}}, "properties"),
    ({"properties": {"x": "a" * 8200}}, "properties"),
    ({"occurredAt": _DROP}, "occurredAt"),
    ({"occurredAt": 1_793_527_200_000}, "occurredAt"),
    ({"occurredAt": "2026-11-01"}, "occurredAt"),
    ({"occurredAt": "2026-11-01T10:00:00"}, "occurredAt"),  # no offset
    ({"occurredAt": "2026-11-01 10:00:00Z"}, "occurredAt"),
    ({"occurredAt": "2026-11-01T10:00Z"}, "occurredAt"),
    ({"occurredAt": "2026-02-30T10:00:00Z"}, "occurredAt"),
    ({"occurredAt": "1969-12-31T23:59:59Z"}, "occurredAt"),
])
def test_event_rejects(over: dict[str, Any], field: str) -> None:
    parsed = parse_events_batch(batch([event(), event(**over)]), now_ms=NOW)
    assert len(parsed.events) == 1  # the good one is kept
    assert [r.field for r in parsed.rejected] == [f"events[1].{field}"]
    alone = batch([event(**over)])
    assert field_of(lambda: parse_events_batch(alone, now_ms=NOW)) == f"events[0].{field}"


@pytest.mark.parametrize("item", [None, [], "purchase", 3])
def test_event_must_be_an_object(item: object) -> None:
    assert field_of(lambda: parse_events_batch(batch([item]), now_ms=NOW)) == "events[0]"


@pytest.mark.parametrize("properties", [_DROP, None])
def test_properties_default_to_empty(properties: object) -> None:
    (e,) = parse_events_batch(batch([event(properties=properties)]), now_ms=NOW).events
    assert e.properties == {}


def nested(levels: int) -> dict[str, Any]:
    """A properties object whose containers nest ``levels`` deep (itself included)."""
    value: Any = 1
    for i in range(levels - 1):
        value = {"k": value} if i % 2 else [value]
    return {"k": value}


def test_properties_depth_limit() -> None:
    parse_events_batch(batch([event(properties=nested(8))]), now_ms=NOW)
    body = batch([event(properties=nested(9))])
    assert field_of(lambda: parse_events_batch(body, now_ms=NOW)) == "events[0].properties"


def test_properties_size_limit_is_on_compact_utf8_json() -> None:
    # {"k":"..."} is 8 bytes of framing; "é" is two bytes in UTF-8
    fits = {"k": "é" * ((8192 - 8) // 2)}
    parse_events_batch(batch([event(properties=fits)]), now_ms=NOW)
    body = batch([event(properties={"k": "é" * ((8192 - 8) // 2) + "x"})])
    assert field_of(lambda: parse_events_batch(body, now_ms=NOW)) == "events[0].properties"


def test_duplicate_ids_inside_a_batch_are_parsed() -> None:
    parsed = parse_events_batch(batch([event(), event(name="again")]), now_ms=NOW)
    assert [e.id for e in parsed.events] == [EVENT_ID, EVENT_ID]


def test_null_link_id_records_without_a_link() -> None:
    (e,) = parse_events_batch(batch([event(linkId=None)]), now_ms=NOW).events
    assert e.link_id is None


def test_occurred_at_in_the_future_is_clamped_to_arrival() -> None:
    (e,) = parse_events_batch(batch([event(occurredAt="2030-01-01T00:00:00Z")]),
                              now_ms=NOW).events
    assert e.occurred_at_ms == NOW


@pytest.mark.parametrize(("text", "ms"), [
    ("2026-11-01T10:00:00Z", T0_MS),
    ("2026-11-01t10:00:00z", T0_MS),
    ("2026-11-01T10:00:00.5Z", T0_MS + 500),
    ("2026-11-01T10:00:00.123Z", T0_MS + 123),
    ("2026-11-01T10:00:00.123999Z", T0_MS + 123),  # truncated, not rounded
    ("2026-11-01T10:00:00.123456789Z", T0_MS + 123),
    ("2026-11-01T12:00:00+02:00", T0_MS),
    ("2026-11-01T04:30:00-05:30", T0_MS),
    ("2026-11-01T10:00:00+00:00", T0_MS),
    ("1970-01-01T00:00:00Z", 0),
    ("1970-01-01T01:00:00+01:00", 0),
    ("1970-01-01T00:59:59+01:00", None),
    ("2026-11-01T10:00:00.1234567890Z", None),
    ("2026-11-01T24:00:00Z", None),
    ("2026-11-01T10:00:60Z", None),
    ("2026-11-01T10:60:00Z", None),
    ("2026-11-01T23:59:59Z", T0_MS + (13 * 60 + 59) * 60_000 + 59_000),
    ("2026-11-01T10:00:00+24:00", None),
    ("20261101T100000Z", None),
    ("2026-11-01T10:00:00+0200", None),
    ("\uff12\uff10\uff12\uff16-11-01T10:00:00Z", None),  # fullwidth digits
])
def test_parse_timestamp_ms(text: str, ms: int | None) -> None:
    assert parse_timestamp_ms(text) == ms


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_timestamp_round_trip(ms: int) -> None:
    import datetime as dt
    when = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    text = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms % 1000:03d}Z"
    assert parse_timestamp_ms(text) == ms


@given(st.dictionaries(st.sampled_from(["url", "installId", "userId", "linkId", "svcToken",
                                         "expiresInSeconds", "extra"]),
                       st.none() | st.booleans() | st.integers() | st.text(max_size=30)
                       | st.just(INSTALL) | st.just("https://[::1/x")))
def test_parsers_raise_only_validation_errors(body: dict[str, Any]) -> None:
    for parse in (parse_resolve, parse_claim,
                  lambda b: parse_handoff_create(b, web_fallback_tokens=True)):
        with contextlib.suppress(ValidationError):
            parse(body)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner,
                                                                max_size=3),
    max_leaves=30)
event_st = st.fixed_dictionaries({}, optional={
    "id": st.sampled_from([EVENT_ID, "x", 1]), "name": json_values,
    "properties": json_values, "linkId": st.sampled_from([LINK, None, "nope", 3]),
    "occurredAt": st.sampled_from([T0, "2026-13-01T00:00:00Z", 5, None])}) | json_values


@given(st.lists(event_st, max_size=4))
def test_events_parser_raises_only_validation_errors(events: list[Any]) -> None:
    with contextlib.suppress(ValidationError):
        parsed = parse_events_batch(batch(events), now_ms=NOW)
        assert all(isinstance(e.properties, dict) for e in parsed.events)


@given(st.text(max_size=40))
def test_parse_timestamp_never_raises(text: str) -> None:
    result = parse_timestamp_ms(text)
    assert result is None or result >= 0
