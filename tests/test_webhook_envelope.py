"""The webhook event envelope and click data (svc_engine.webhook_envelope)."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import webhook_envelope as env
from svc_engine.errors import ValidationError

EVENT_ID = "0b3c1d9e-7a52-4f0e-9d43-2a8f3f7c5b11"
PROJECT_ID = "5f1e2d3c-4b5a-4697-8887-96a5b4c3d2e1"
LINK_ID = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d"


@pytest.mark.parametrize(
    ("ms", "text"),
    [
        (0, "1970-01-01T00:00:00.000Z"),
        (1, "1970-01-01T00:00:00.001Z"),
        (999, "1970-01-01T00:00:00.999Z"),
        (1_614_265_330_123, "2021-02-25T15:02:10.123Z"),
        (1_709_251_199_999, "2024-02-29T23:59:59.999Z"),
        (253_402_300_799_999, "9999-12-31T23:59:59.999Z"),
        # the 400-year eras of the day count's arithmetic begin on 1 March
        (951_868_799_999, "2000-02-29T23:59:59.999Z"),
        (951_868_800_000, "2000-03-01T00:00:00.000Z"),
        (4_107_499_200_000, "2100-02-28T12:00:00.000Z"),
        (4_107_542_400_000, "2100-03-01T00:00:00.000Z"),
        (13_574_563_200_000, "2400-02-29T00:00:00.000Z"),
        (13_574_649_600_000, "2400-03-01T00:00:00.000Z"),
        (240_784_704_000_000, "9600-03-01T00:00:00.000Z"),
    ],
)
def test_iso_utc_ms(ms: int, text: str) -> None:
    assert env.iso_utc_ms(ms) == text


@pytest.mark.parametrize("bad", [-1, 253_402_300_800_000, 1.5, True, "0"])
def test_iso_utc_ms_rejects(bad: Any) -> None:
    with pytest.raises(ValidationError):
        env.iso_utc_ms(bad)


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_iso_utc_ms_matches_datetime_and_sorts_like_time(ms: int) -> None:
    text = env.iso_utc_ms(ms)
    parsed = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
    epoch = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    assert (parsed - epoch) // datetime.timedelta(milliseconds=1) == ms
    assert len(text) == 24
    assert env.iso_utc_ms(max(0, ms - 1)) <= text


def test_envelope_fields_and_order() -> None:
    body = env.envelope(EVENT_ID, "test", 1_614_265_330_123, PROJECT_ID, "live", {"a": 1})
    assert body == {
        "id": EVENT_ID,
        "type": "test",
        "createdAt": "2021-02-25T15:02:10.123Z",
        "projectId": PROJECT_ID,
        "env": "live",
        "data": {"a": 1},
    }
    assert list(body) == ["id", "type", "createdAt", "projectId", "env", "data"]


@pytest.mark.parametrize("event_type", ["click", "open", "install", "conversion", "test"])
def test_every_spec_type_is_accepted(event_type: str) -> None:
    assert env.envelope(EVENT_ID, event_type, 0, PROJECT_ID, "test", {})["type"] == event_type


@pytest.mark.parametrize(
    ("args", "field"),
    [
        ((EVENT_ID, "purchase", 0, PROJECT_ID, "live", {}), "type"),
        ((EVENT_ID, "click", 0, PROJECT_ID, "prod", {}), "env"),
        ((EVENT_ID, "click", 0, PROJECT_ID, "live", []), "data"),
        (("not-a-uuid", "click", 0, PROJECT_ID, "live", {}), "id"),
        ((EVENT_ID.upper(), "click", 0, PROJECT_ID, "live", {}), "id"),
        ((EVENT_ID, "click", 0, "{" + PROJECT_ID + "}", "live", {}), "projectId"),
        ((EVENT_ID, "click", -1, PROJECT_ID, "live", {}), "time"),
    ],
)
def test_envelope_rejects(args: tuple[Any, ...], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        env.envelope(*args)
    assert info.value.field == field


def _click(**overrides: Any) -> dict[str, Any]:
    fields: dict[str, Any] = {
        "link_id": LINK_ID,
        "url": "https://go.example.com/summer",
        "domain": "go.example.com",
        "slug": "summer",
        "campaign": "summer-sale",
        "channel": "email",
        "platform": "ios",
        "country": "DE",
        "referrer_host": "news.example.org",
        "clicked_at_ms": 1_614_265_330_123,
    }
    fields.update(overrides)
    return env.click_data(**fields)


def test_click_data_matches_the_spec_table() -> None:
    assert _click() == {
        "linkId": LINK_ID,
        "url": "https://go.example.com/summer",
        "domain": "go.example.com",
        "slug": "summer",
        "campaign": "summer-sale",
        "channel": "email",
        "platform": "ios",
        "country": "DE",
        "referrerHost": "news.example.org",
        "clickedAt": "2021-02-25T15:02:10.123Z",
    }


def test_click_data_optional_values() -> None:
    data = _click(campaign=None, channel=None, country=None, referrer_host=None)
    assert (data["campaign"], data["channel"]) == ("", "")
    assert (data["country"], data["referrerHost"]) == (None, None)
    assert _click(country="de")["country"] == "DE"


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"platform": "windows"}, "platform"),
        ({"country": "DEU"}, "country"),
        ({"country": "1A"}, "country"),
        ({"referrer_host": "https://news.example.org/a?b"}, "referrerHost"),
        ({"referrer_host": "News.Example.org"}, "referrerHost"),
        ({"referrer_host": "news.example.org:8080"}, "referrerHost"),
        ({"link_id": "x"}, "linkId"),
        ({"clicked_at_ms": -5}, "time"),
    ],
)
def test_click_data_rejects(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        _click(**overrides)
    assert info.value.field == field


@pytest.mark.parametrize(
    ("referrer", "host"),
    [
        (None, None),
        ("", None),
        ("https://News.Example.org/path?q=secret", "news.example.org"),
        ("http://user:pw@example.com:8080/x", "example.com"),
        ("android-app://com.google.android.gm/", "com.google.android.gm"),
        ("news.example.org", "news.example.org"),
        ("https:///nohost", None),
        ("https://exa mple.com/", None),
        ("https://[::1/", None),
        # an address is no host name: never kept (and "::1" could not be parsed back)
        ("https://[::1]:8080/page", None),
        ("https://[2001:DB8::1]/x", None),
        ("http://[fe80::1%25eth0]/", None),
        ("http://192.168.1.5/router", None),
        ("10.0.0.1:8080", None),
        ("http://10.1.2/x", None),  # not an address, nor a name: no TLD is all digits
        ("https://example.123/", None),
        ("https://123.example/", "123.example"),
        # what a browser reads as IPv4 (WHATWG URL: the last label is a number)
        ("http://0xcb.0x0.0x71.0xc5/x", None), ("http://3405803973/", None),
        ("http://0xCB000071/", None), ("http://a.0x/", None), ("http://0xcb.0.0x71.197/", None),
        ("https://0xg.example/", "0xg.example"), ("https://example.0xg/", "example.0xg"),
        ("2001:db8::1", None),
        ("fe80::1", None),  # two colons: not "fe80" with a port
        ("cafe::1", None),
        ("example.com:8080", "example.com"),
        # only a DNS host name is kept: it goes into counter keys and exports
        ("https://" + "a" * 427 + ".com/", None),  # a label of 427 (LMDB keys end at 511)
        ("https://" + ".".join(["a" * 63] * 4) + "/", None),  # 255 characters
        ("https://" + ".".join(["a" * 63] * 3) + ".bb/", ".".join(["a" * 63] * 3) + ".bb"),
        ("http://=cmd|'/c calc'!A0/x", None),
        ("+1+2", None),
        ("http://-2+3/", None),
        ("https://News.Example.org./", "news.example.org"),
        ("https://_dmarc.example.com/", "_dmarc.example.com"),
        ("https://xn--bcher-kva.example/", "xn--bcher-kva.example"),
    ],
)
def test_referrer_host_of(referrer: str | None, host: str | None) -> None:
    assert env.referrer_host_of(referrer) == host


@given(st.text(max_size=60))
def test_a_referrer_host_passes_the_click_event_s_own_check(referrer: str) -> None:
    """What the redirector keeps of any Referer is a host the click event
    accepts: a click must never fail on its webhook data (it would be lost)."""
    host = env.referrer_host_of(referrer)
    assert host is None or env.referrer_host_of(host) == host


@given(st.one_of(st.uuids().map(str), st.uuids().map(lambda u: str(u).upper()),
                 st.uuids().map(lambda u: u.hex), st.uuids().map(lambda u: f"{{{u}}}"),
                 st.text(max_size=40)))
def test_an_id_is_accepted_exactly_when_it_is_canonical_uuid_text(value: str) -> None:
    try:
        canonical = str(uuid.UUID(value)) == value
    except ValueError:
        canonical = False
    try:
        env.envelope(value, "click", 0, PROJECT_ID, "live", {})
    except ValidationError as e:
        assert not canonical and e.field == "id"
    else:
        assert canonical
