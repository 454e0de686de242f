"""Webhook endpoint field validation (svc_engine.webhook_endpoint), after SPEC's table."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import webhook_endpoint as we
from svc_engine.errors import ValidationError

ALL = ("click", "open", "install", "conversion")


@pytest.mark.parametrize(
    "url",
    [
        "https://hooks.example.com/svc",
        "https://hooks.example.com:8443/svc?token=abc",
        "HTTPS://Hooks.Example.com/",
        "https://1.2.3.4/",
        "https://[2001:db8::1]/",
        "http://localhost/",
        "http://localhost:8080/hook",
        "http://127.0.0.1:9000/",
        "http://[::1]:9000/hook",
        "HTTP://LOCALHOST/",
        "https://localhost/",
    ],
)
def test_valid_urls_are_stored_as_given(url: str) -> None:
    assert we.validate_url(url) == url


@pytest.mark.parametrize(
    "url",
    [
        "http://hooks.example.com/",  # plain http only for the three local hosts
        "http://127.0.0.2/",
        "http://[::2]/",
        "http://localhost.example.com/",
        "http://0.0.0.0/",
        "ftp://hooks.example.com/",
        "javascript:alert(1)",
        "hooks.example.com/svc",
        "//hooks.example.com/",
        "https://",
        "https:///x",
        "https://user:pw@hooks.example.com/",
        "https://@hooks.example.com/",
        "https://hooks.example.com/#section",
        "https://hooks.example.com/ x",
        "https://hooks.example.com:99999/",
        "https://127.1/",
        "",
        "https://hooks.example.com/" + "a" * 2100,
    ],
)
def test_invalid_urls(url: str) -> None:
    with pytest.raises(ValidationError) as info:
        we.validate_url(url)
    assert info.value.field == "url"
    assert info.value.code == "validation_error"


@pytest.mark.parametrize("url", ["http://localhost:9000/h", "https://localhost/h",
                                 "https://127.0.0.1:8443/", "http://[::1]/h"])
def test_local_receivers_are_refused_when_the_server_turns_them_off(url: str) -> None:
    assert we.validate_url(url) == url
    with pytest.raises(ValidationError) as info:
        we.validate_url(url, local=False)
    assert info.value.field == "url" and "turned off on this server" in info.value.message
    assert we.validate_url("https://hooks.example.com/h", local=False)


def test_url_must_be_a_string() -> None:
    with pytest.raises(ValidationError) as info:
        we.validate_url(None)
    assert info.value.field == "url"


@pytest.mark.parametrize(
    ("given_", "stored"),
    [
        (None, None),
        ("", None),
        ("   ", None),
        ("Orders service", "Orders service"),
        ("  padded  ", "padded"),
        ("x" * 200, "x" * 200),
        ("é" * 200, "é" * 200),  # characters, not bytes
        (" " + "x" * 200 + " ", "x" * 200),
    ],
)
def test_description(given_: str | None, stored: str | None) -> None:
    assert we.validate_description(given_) == stored


@pytest.mark.parametrize("bad", ["x" * 201, 5, ["a"]])
def test_invalid_description(bad: object) -> None:
    with pytest.raises(ValidationError) as info:
        we.validate_description(bad)
    assert info.value.field == "description"


@pytest.mark.parametrize(
    ("given_", "stored"),
    [
        (None, ALL),
        (["click"], ("click",)),
        (["conversion", "click"], ("click", "conversion")),
        (["open", "open", "install"], ("open", "install")),
        (ALL, ALL),
        (("install",), ("install",)),
    ],
)
def test_events(given_: object, stored: tuple[str, ...]) -> None:
    assert we.validate_events(given_) == stored


@pytest.mark.parametrize("bad", [[], (), ["test"], ["click", "purchase"], ["Click"], "click", 3,
                                 {"click": False}, {"click": True}, {"click"}, [["click"]],
                                 [None]])
def test_invalid_events(bad: object) -> None:
    with pytest.raises(ValidationError) as info:
        we.validate_events(bad)
    assert info.value.field == "events"


def test_validate_endpoint_defaults_and_field_order() -> None:
    fields = we.validate_endpoint("https://h.example/")
    assert fields == we.EndpointFields("https://h.example/", None, ALL)
    with pytest.raises(ValidationError) as info:
        we.validate_endpoint("http://h.example/", "x" * 500, [])
    assert info.value.field == "url"
    with pytest.raises(ValidationError) as info:
        we.validate_endpoint("https://h.example/", "x" * 500, [])
    assert info.value.field == "description"
    with pytest.raises(ValidationError) as info:
        we.validate_endpoint("https://h.example/", "ok", [])
    assert info.value.field == "events"


def test_is_subscribed() -> None:
    assert we.is_subscribed(("click",), "click")
    assert not we.is_subscribed(("click",), "open")
    assert we.is_subscribed(("click",), "test")  # Send test always reaches it


@given(st.lists(st.sampled_from(ALL), min_size=1))
def test_any_non_empty_subset_is_valid_and_canonical(chosen: list[str]) -> None:
    stored = we.validate_events(chosen)
    assert set(stored) == set(chosen)
    assert list(stored) == [e for e in ALL if e in stored]
