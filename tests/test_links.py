"""Short links: record, JSON forms, slugs, domains and body validation."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.decode import RecordError
from svc_engine.errors import DestinationBlocked, InvalidDomain, ValidationError
from svc_engine.keys import Mode
from svc_engine.links import (
    Link,
    LinkDraft,
    apply_link_patch,
    check_destination_url,
    default_domain,
    is_reserved_slug,
    is_valid_custom_slug,
    iso_utc,
    new_link,
    new_slug,
    normalize_domain,
    parse_iso_ms,
    parse_link_create,
    parse_link_update,
    resolved_link_json,
    short_url,
    slug_in,
)

NOW = 1_750_000_000_000  # 2025-06-15T15:06:40Z
PUBLIC = "https://links.example.com"
FUTURE = "2030-01-31T12:00:00Z"
FUTURE_MS = 1_896_091_200_000


def make_link(**overrides: Any) -> Link:
    fields: dict[str, Any] = dict(
        id="3b241101-e2bb-4255-8caf-4136c566a962", project_id="p1", mode=Mode.TEST,
        domain="links.example.com", slug="Ab3dE6gH9", path="/product/42",
        created_at_ms=NOW, updated_at_ms=NOW,
    )
    fields.update(overrides)
    return Link(**fields)


# -- slugs --------------------------------------------------------------------------


def test_new_slug_is_nine_base62_characters() -> None:
    assert new_slug(bytes(8)) == "000000000"
    assert new_slug(b"\xff" * 8) != new_slug(b"\xff" * 7 + b"\xfe")
    assert new_slug(b"\x01\x02\x03\x04\x05\x06\x07\x08") == new_slug(
        b"\x01\x02\x03\x04\x05\x06\x07\x08extra")
    with pytest.raises(ValueError, match="8 random bytes"):
        new_slug(bytes(7))


@given(st.binary(min_size=8, max_size=8))
def test_new_slug_shape(data: bytes) -> None:
    slug = new_slug(data)
    assert re.fullmatch(r"[0-9A-Za-z]{9}", slug)
    assert is_valid_custom_slug(slug) or is_reserved_slug(slug)


def test_generated_slugs_do_not_collide_in_practice() -> None:
    # 8 bytes -> 9 chars keeps distinct inputs distinct when they differ in the low 53 bits.
    slugs = {new_slug(i.to_bytes(8, "big")) for i in range(20_000)}
    assert len(slugs) == 20_000


@pytest.mark.parametrize(("slug", "ok"), [
    ("summer-sale", True), ("A_b-9", True), ("x", True), ("a" * 64, True),
    ("a" * 65, False), ("", False), ("has space", False), ("dot.slug", False),
    ("slash/slug", False), ("ünïcode", False), ("v1", False), ("V1", False),
    ("dashboard", False), ("Dashboard", False), ("healthz", False), ("static", False),
    (".well-known", False), ("favicon.ico", False), ("robots.txt", False),
])
def test_custom_slug_rules(slug: str, ok: bool) -> None:
    assert is_valid_custom_slug(slug) is ok


# -- times --------------------------------------------------------------------------


@pytest.mark.parametrize(("ms", "text"), [
    (0, "1970-01-01T00:00:00.000Z"),
    (NOW, "2025-06-15T15:06:40.000Z"),
    (NOW + 7, "2025-06-15T15:06:40.007Z"),
    (FUTURE_MS, "2030-01-31T12:00:00.000Z"),
])
def test_iso_utc(ms: int, text: str) -> None:
    assert iso_utc(ms) == text
    assert parse_iso_ms(text) == ms


@pytest.mark.parametrize(("text", "ms"), [
    ("2030-01-31T12:00:00Z", FUTURE_MS),
    ("2030-01-31T13:00:00+01:00", FUTURE_MS),
    ("2030-01-31T12:00:00.5Z", FUTURE_MS + 500),
    ("2030-01-31T12:00:00", None),  # no offset: ambiguous
    ("2030-01-31", None),
    ("tomorrow", None),
    ("", None),
])
def test_parse_iso_ms(text: str, ms: int | None) -> None:
    assert parse_iso_ms(text) == ms


@given(st.integers(min_value=0, max_value=253_402_300_799_999))
def test_iso_round_trip(ms: int) -> None:
    assert parse_iso_ms(iso_utc(ms)) == ms


# -- domains and URLs ----------------------------------------------------------------


@pytest.mark.parametrize(("name", "expected"), [
    ("links.example.com", "links.example.com"),
    ("  Links.Example.COM. ", "links.example.com"),
    ("münchen.de", "xn--mnchen-3ya.de"),
    ("xn--mnchen-3ya.de", "xn--mnchen-3ya.de"),
    ("a-b.c-d.example", "a-b.c-d.example"),
    ("go.example.co.uk", "go.example.co.uk"),
])
def test_normalize_domain_accepts(name: str, expected: str) -> None:
    assert normalize_domain(name) == expected


@pytest.mark.parametrize("name", [
    "", "localhost", "example", "https://links.example.com", "links.example.com:8443",
    "links.example.com/path", "user@links.example.com", "192.168.1.1", "[::1]", "::1",
    "-bad.example.com", "bad-.example.com", "under_score.example.com", "a..b.com",
    "x" * 64 + ".com", ("a" * 60 + ".") * 5 + "com", "links.example.123", 42, None,
    "sp ace.example.com", "tab\t.example.com",
])
def test_normalize_domain_rejects(name: object) -> None:
    with pytest.raises(InvalidDomain):
        normalize_domain(name)


@pytest.mark.parametrize(("url", "expected"), [
    ("https://example.com", "https://example.com"),
    ("http://example.com/a?b=c#d", "http://example.com/a?b=c#d"),
    ("HTTPS://Example.com/Path", "HTTPS://Example.com/Path"),
    ("https://example.com:8443/x", "https://example.com:8443/x"),
    ("https://[2001:db8::1]/x", "https://[2001:db8::1]/x"),
    ("https://münchen.de/straße?q=ä", "https://xn--mnchen-3ya.de/stra%C3%9Fe?q=%C3%A4"),
    ("https://bücher.example:8443/a", "https://xn--bcher-kva.example:8443/a"),  # port kept
    ("  https://example.com/trim  ", "https://example.com/trim"),
])
def test_destination_url_accepts(url: str, expected: str) -> None:
    assert check_destination_url(url, field="webFallbackUrl") == expected


@pytest.mark.parametrize("url", [
    "javascript:alert(1)", "data:text/html,hi", "ftp://example.com/x", "myapp://open",
    "intent://scan#Intent;scheme=zxing;end", "example.com/page", "//example.com/x",
    "/relative", "https://apple.com@evil.example", "https://user:pw@example.com/",
])
def test_destination_url_blocks(url: str) -> None:
    with pytest.raises(DestinationBlocked):
        check_destination_url(url, field="iosFallbackUrl")


@pytest.mark.parametrize("url", [
    "", "https://", "https:///path", "https://exa mple.com", "https://example.com\\@evil.com",
    "https://example.com:99999/", "https://bad_host.example/", "https://[zz::1]/",
    "https://example.com/a\nb", "https://" + "a" * 2048 + ".com", 42, None,
])
def test_destination_url_invalid(url: object) -> None:
    with pytest.raises(ValidationError) as info:
        check_destination_url(url, field="webFallbackUrl")
    assert info.value.field == "webFallbackUrl"


@pytest.mark.parametrize("url", [
    "https://[v1.a:b]/x", "https://[v1.x]/x", "https://[::1%eth0]/x",
    "https://[fe80::1%25en0]:8443/x",
])
def test_a_bracketed_host_that_is_no_plain_ipv6_address_is_named_so(url: str) -> None:
    """``urlsplit`` passes a bracketed "future" literal and an address with a
    zone, which no browser opens: the check refuses them as what they claim
    to be, an IPv6 address (``[v1.x]`` was kept as given)."""
    with pytest.raises(ValidationError, match="invalid IPv6 address") as info:
        check_destination_url(url, field="androidFallbackUrl")
    assert info.value.field == "androidFallbackUrl"
    assert check_destination_url("https://[2001:DB8::1]:8443/x", field="x") == (
        "https://[2001:DB8::1]:8443/x")


def test_short_url_on_default_and_custom_domains() -> None:
    assert default_domain("http://LocalHost:8000/") == "localhost:8000"
    assert short_url("localhost:8000", "abc", public_url="http://localhost:8000/") == (
        "http://localhost:8000/abc")
    assert short_url("links.example.com", "abc", public_url=PUBLIC) == (
        "https://links.example.com/abc")
    assert short_url("go.brand.com", "abc", public_url=PUBLIC) == "https://go.brand.com/abc"


# -- create bodies ------------------------------------------------------------------


def test_empty_body_gives_defaults() -> None:
    assert parse_link_create({}, allow_custom_slug=False, now_ms=NOW) == LinkDraft()


def test_full_body() -> None:
    body = {
        "path": "/product/42?color=red", "params": {"s": "x", "n": 3, "f": 1.5, "b": True},
        "title": " Summer  ", "campaign": "summer", "channel": "email",
        "tags": ["a", "b", "a", " c "], "iosFallbackUrl": "https://example.com/ios",
        "androidFallbackUrl": "https://example.com/android",
        "webFallbackUrl": "https://example.com/web", "ogTitle": "OG title",
        "ogDescription": "line one\nline two", "ogImageUrl": "https://cdn.example.com/i.png",
        "expiresAt": FUTURE,
    }
    draft = parse_link_create(body, allow_custom_slug=False, now_ms=NOW)
    assert draft == LinkDraft(
        path="/product/42?color=red", params={"s": "x", "n": 3, "f": 1.5, "b": True},
        title="Summer", campaign="summer", channel="email", tags=("a", "b", "c"),
        ios_fallback_url="https://example.com/ios",
        android_fallback_url="https://example.com/android",
        web_fallback_url="https://example.com/web", og_title="OG title",
        og_description="line one line two", og_image_url="https://cdn.example.com/i.png",
        expires_at_ms=FUTURE_MS,
    )
    assert isinstance(draft.params["b"], bool) and isinstance(draft.params["n"], int)


def test_custom_slug_and_domain_only_on_the_server_api() -> None:
    body = {"slug": "summer", "domain": "Go.Brand.com"}
    draft = parse_link_create(body, allow_custom_slug=True, now_ms=NOW)
    assert (draft.slug, draft.domain) == ("summer", "go.brand.com")
    for key in body:
        with pytest.raises(ValidationError) as info:
            parse_link_create({key: body[key]}, allow_custom_slug=False, now_ms=NOW)
        assert info.value.field == key
    with pytest.raises(InvalidDomain):
        parse_link_create({"domain": "https://x.com"}, allow_custom_slug=True, now_ms=NOW)
    assert parse_link_create({"slug": None, "domain": None}, allow_custom_slug=True,
                             now_ms=NOW) == LinkDraft()


def test_domain_naming_the_default_domain_is_the_default() -> None:
    """``GET /v1/domains`` answers the default as the public URL's host[:port]:
    sent back as ``domain`` it is no custom domain (``:`` and ``localhost`` are
    refused there), it is the default, as if left out."""
    for default, sent in [("localhost:8080", "localhost:8080"),
                          ("localhost:8080", " LocalHost:8080 "),
                          ("go.acme.com", "Go.Acme.com."),
                          ("go.acme.com:8443", "go.acme.com.:8443"),
                          ("[::1]:8080", "[::1]:8080")]:
        draft = parse_link_create({"domain": sent}, allow_custom_slug=True, now_ms=NOW,
                                  default_domain=default)
        assert draft.domain is None, (default, sent)
    with pytest.raises(InvalidDomain):  # another port is not the default domain
        parse_link_create({"domain": "localhost:9090"}, allow_custom_slug=True, now_ms=NOW,
                          default_domain="localhost:8080")
    with pytest.raises(ValidationError):  # the SDK's call still takes no domain
        parse_link_create({"domain": "localhost:8080"}, allow_custom_slug=False, now_ms=NOW,
                          default_domain="localhost:8080")


BAD_BODIES: list[tuple[object, str | None]] = [
    ([], None),
    ("path", None),
    ({"unknown": 1}, "unknown"),
    ({"id": "x"}, "id"),
    ({"path": "product"}, "path"),
    ({"path": ""}, "path"),
    ({"path": None}, "path"),
    ({"path": 5}, "path"),
    ({"path": "/" + "a" * 2048}, "path"),
    ({"path": "/a\x00b"}, "path"),
    ({"params": []}, "params"),
    ({"params": {"a": None}}, "params.a"),
    ({"params": {"a": [1]}}, "params.a"),
    ({"params": {"a": {"b": 1}}}, "params.a"),
    ({"params": {"a": float("nan")}}, "params.a"),
    ({"params": {"a": float("inf")}}, "params.a"),
    ({"params": {"a": 2**63}}, "params.a"),
    ({"params": {"a": "x" * 1001}}, "params.a"),
    ({"params": {"": 1}}, "params"),
    ({"params": {str(i): i for i in range(51)}}, "params"),
    ({"title": 5}, "title"),
    ({"title": "x" * 201}, "title"),
    ({"title": "bell\x07"}, "title"),
    ({"campaign": "x" * 101}, "campaign"),
    ({"channel": ["email"]}, "channel"),
    ({"ogDescription": "x" * 1001}, "ogDescription"),
    ({"tags": "a,b"}, "tags"),
    ({"tags": [""]}, "tags"),
    ({"tags": ["  "]}, "tags"),
    ({"tags": [1]}, "tags"),
    ({"tags": ["x" * 51]}, "tags"),
    ({"tags": [str(i) for i in range(21)]}, "tags"),
    ({"expiresAt": "2020-01-01T00:00:00Z"}, "expiresAt"),
    ({"expiresAt": iso_utc(NOW)}, "expiresAt"),
    ({"expiresAt": "2030-01-31T12:00:00"}, "expiresAt"),
    ({"expiresAt": 1_900_000_000_000}, "expiresAt"),
    ({"expiresAt": "9999-12-31T23:59:59-23:59"}, "expiresAt"),  # past year 9999 in UTC
    ({"expiresAt": "9999-12-31T23:59:59.999-00:01"}, "expiresAt"),
    ({"webFallbackUrl": 5}, "webFallbackUrl"),
    ({"slug": "summer"}, "slug"),
]


@pytest.mark.parametrize(("body", "field"), BAD_BODIES)
def test_invalid_bodies_name_the_field(body: object, field: str | None) -> None:
    with pytest.raises(ValidationError) as info:
        parse_link_create(body, allow_custom_slug=False, now_ms=NOW)
    assert info.value.field == field
    assert info.value.status == 400 and info.value.code == "validation_error"


@pytest.mark.parametrize("key", ["iosFallbackUrl", "androidFallbackUrl", "webFallbackUrl",
                                 "ogImageUrl"])
@pytest.mark.parametrize("url", ["javascript:alert(1)", "market://details?id=x", "file:///etc"])
def test_non_http_destinations_are_blocked(key: str, url: str) -> None:
    with pytest.raises(DestinationBlocked) as info:
        parse_link_create({key: url}, allow_custom_slug=False, now_ms=NOW)
    assert info.value.code == "destination_blocked" and key in info.value.message


@pytest.mark.parametrize(("slug", "message"), [
    ("dashboard", "reserved"), ("has space", "letters"), ("", "letters"), (5, "letters"),
])
def test_bad_custom_slugs(slug: object, message: str) -> None:
    with pytest.raises(ValidationError, match=message) as info:
        parse_link_create({"slug": slug}, allow_custom_slug=True, now_ms=NOW)
    assert info.value.field == "slug"


def test_empty_optional_text_is_null() -> None:
    draft = parse_link_create({"title": "  ", "campaign": None, "params": None, "tags": None},
                              allow_custom_slug=False, now_ms=NOW)
    assert draft == LinkDraft()


json_values = st.one_of(st.booleans(), st.integers(-(2**63), 2**63 - 1),
                        st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=50))


@given(st.dictionaries(st.text(min_size=1, max_size=20).filter(lambda k: k.isprintable()),
                       json_values, max_size=10))
def test_any_scalar_params_are_kept_as_given(params: dict[str, Any]) -> None:
    draft = parse_link_create({"params": params}, allow_custom_slug=False, now_ms=NOW)
    assert draft.params == params
    assert all(type(draft.params[k]) is type(v) for k, v in params.items())


# -- records and JSON -----------------------------------------------------------------


def test_new_link_and_json_forms() -> None:
    draft = parse_link_create({"path": "/p", "params": {"k": 1}, "campaign": "c",
                               "tags": ["t"], "expiresAt": FUTURE,
                               "webFallbackUrl": "https://example.com/w"},
                              allow_custom_slug=False, now_ms=NOW)
    link = new_link(draft, link_id="3b241101-e2bb-4255-8caf-4136c566a962", project_id="p1",
                    mode=Mode.LIVE, domain="links.example.com", slug="abc", now_ms=NOW)
    assert link.to_json(public_url=PUBLIC) == {
        "id": "3b241101-e2bb-4255-8caf-4136c566a962", "url": "https://links.example.com/abc",
        "domain": "links.example.com", "slug": "abc", "path": "/p", "params": {"k": 1},
        "title": None, "campaign": "c", "channel": None, "tags": ["t"],
        "iosFallbackUrl": None, "androidFallbackUrl": None,
        "webFallbackUrl": "https://example.com/w", "ogTitle": None, "ogDescription": None,
        "ogImageUrl": None, "expiresAt": "2030-01-31T12:00:00.000Z",
        "createdAt": "2025-06-15T15:06:40.000Z", "mode": "live",
    }
    assert resolved_link_json(link, public_url=PUBLIC, is_deferred=True,
                              confidence="deterministic", method="install_referrer") == {
        "linkId": "3b241101-e2bb-4255-8caf-4136c566a962", "url": "https://links.example.com/abc",
        "path": "/p", "params": {"k": 1}, "campaign": "c", "channel": None,
        "isDeferred": True, "confidence": "deterministic", "method": "install_referrer",
    }


def test_expiry() -> None:
    link = make_link(expires_at_ms=NOW + 10)
    assert not link.is_expired(NOW + 9)
    assert link.is_expired(NOW + 10)
    assert not make_link().is_expired(2**62)


def test_update_changes_only_given_fields() -> None:
    link = make_link(title="Old", campaign="c", tags=("a",), params={"k": "v"},
                     web_fallback_url="https://example.com/w", expires_at_ms=FUTURE_MS)
    patch = parse_link_update({"title": "New", "tags": None, "params": None,
                               "webFallbackUrl": None, "expiresAt": None}, now_ms=NOW)
    updated = apply_link_patch(link, patch, now_ms=NOW + 5)
    assert (updated.title, updated.campaign, updated.tags, updated.params) == (
        "New", "c", (), {})
    assert updated.web_fallback_url is None and updated.expires_at_ms is None
    assert (updated.created_at_ms, updated.updated_at_ms) == (NOW, NOW + 5)
    assert (updated.id, updated.slug, updated.domain, updated.path) == (
        link.id, link.slug, link.domain, link.path)
    assert apply_link_patch(link, parse_link_update({}, now_ms=NOW), now_ms=NOW) == link


@pytest.mark.parametrize(("body", "field"), [
    ({"slug": "new"}, "slug"), ({"domain": "go.brand.com"}, "domain"), ({"path": None}, "path"),
    ({"createdAt": FUTURE}, "createdAt"), ({"expiresAt": "2001-01-01T00:00:00Z"}, "expiresAt"),
])
def test_update_rejects(body: dict[str, object], field: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_link_update(body, now_ms=NOW)
    assert info.value.field == field


def test_update_blocks_bad_destinations() -> None:
    with pytest.raises(DestinationBlocked):
        parse_link_update({"ogImageUrl": "data:image/png;base64,AAAA"}, now_ms=NOW)


optional_text = st.none() | st.text(max_size=30)
links = st.builds(
    make_link,
    mode=st.sampled_from(Mode), slug=st.from_regex(r"[A-Za-z0-9_-]{1,64}", fullmatch=True),
    params=st.dictionaries(st.text(max_size=10), json_values, max_size=5),
    title=optional_text, campaign=optional_text, channel=optional_text,
    tags=st.lists(st.text(min_size=1, max_size=10), max_size=5).map(tuple),
    ios_fallback_url=optional_text, og_description=optional_text,
    expires_at_ms=st.none() | st.integers(0, 2**53), deleted=st.booleans(),
)


@given(links)
def test_record_round_trip(link: Link) -> None:
    stored = link.to_map()
    assert stored["v"] == 1
    assert Link.from_map(stored) == link


@pytest.mark.parametrize("broken", [
    {"v": 2}, {"params": {"a": [1]}}, {"tags": "a"}, {"slug": None}, {"mode": "prod"},
])
def test_from_map_rejects_malformed_records(broken: dict[str, object]) -> None:
    stored = {**make_link().to_map(), **broken}
    with pytest.raises((RecordError, ValueError)):
        Link.from_map(stored)


AT_THE_LIMITS: list[dict[str, Any]] = [
    {"path": "/" + "a" * 2047},
    {"params": {f"k{i}": i for i in range(50)}},
    {"params": {"k" * 100: "x" * 1000}},
    {"title": "x" * 200}, {"campaign": "x" * 100}, {"channel": "x" * 100},
    {"ogTitle": "x" * 200}, {"ogDescription": "x" * 1000},
    {"webFallbackUrl": "https://example.com/" + "a" * (2048 - len("https://example.com/"))},
    {"tags": ["x" * 50] + [str(i) for i in range(19)]},
]


@pytest.mark.parametrize("body", AT_THE_LIMITS)
def test_each_limit_itself_is_accepted(body: dict[str, Any]) -> None:
    """One past each limit is in BAD_BODIES; the limit itself is in."""
    draft = parse_link_create(body, allow_custom_slug=False, now_ms=NOW)
    (key, value), = body.items()
    got = {"path": draft.path, "params": draft.params, "title": draft.title,
           "campaign": draft.campaign, "channel": draft.channel, "ogTitle": draft.og_title,
           "ogDescription": draft.og_description, "webFallbackUrl": draft.web_fallback_url,
           "tags": draft.tags}[key]
    assert got == (tuple(value) if key == "tags" else value)


@pytest.mark.parametrize(("key", "kind"), [
    ("slug", "not accepted here"), ("domain", "not accepted here"), ("id", "read-only"),
    ("createdAt", "read-only"), ("clicks", "unknown"),
])
def test_an_update_names_why_a_field_is_refused(key: str, kind: str) -> None:
    with pytest.raises(ValidationError) as info:
        parse_link_update({key: "x"}, now_ms=NOW)
    assert info.value.field == key and info.value.message == f"field {key!r} is {kind}"


def test_a_domain_of_253_characters_is_the_longest() -> None:
    name = ".".join(("a" * 63, "b" * 63, "c" * 63, "d" * 57)) + ".com"
    assert len(name) == 253 and normalize_domain(name) == name
    longer = ".".join(("a" * 63, "b" * 63, "c" * 63, "d" * 58)) + ".com"
    with pytest.raises(InvalidDomain):
        normalize_domain(longer)


@pytest.mark.parametrize(("path", "under", "slug"), [
    ("/abc", "", "abc"),
    ("/go/abc", "/go", "abc"),
    ("/go/abc", "/go/", "abc"),
    ("/abc", "/go", None),  # the default domain serves links under the public URL's path
    ("/gox/abc", "/go", None),
    ("/go/", "/go", None),
    ("/go/a/b", "/go", None),
    ("/", "", None),
    ("abc", "", None),
])
def test_slug_in_a_short_url_path(path: str, under: str, slug: str | None) -> None:
    assert slug_in(path, under=under) == slug


def test_a_destination_keeps_every_printable_ascii_character() -> None:
    """Only what a Location header cannot carry is percent-encoded: non-ASCII."""
    kept = "https://example.com/a!b~c'd*e?q=!$&r=(x)#!top"
    assert check_destination_url(kept, field="webFallbackUrl") == kept
    assert check_destination_url("https://example.com/é!", field="webFallbackUrl") == (
        "https://example.com/%C3%A9!")
