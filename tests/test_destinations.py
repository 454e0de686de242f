"""The destination allowlist of links made with the publishable key
(svc_engine/destinations.py), pure: entries, matching, the record."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.decode import RecordError
from svc_engine.destinations import (
    FIELD,
    HOSTS_MAX,
    LIMITED_FIELDS,
    LinkDestinations,
    apply_destinations_patch,
    blocked_field,
    check_sdk_link,
    destination_host,
    host_allowed,
    host_entry,
    parse_hosts,
)
from svc_engine.errors import DestinationBlocked, ValidationError
from svc_engine.link_input import LinkDraft, check_destination_url, parse_link_create

NOW = 1_700_000_000_000
RULES = LinkDestinations(sdk_allowed_hosts=parse_hosts(
    ["example.com", "*.cdn.example.org", "bücher.example"]))


def allowed(url: str, rules: LinkDestinations = RULES) -> bool:
    """Whether a URL, cleaned as a link body's is, passes ``rules``."""
    clean = check_destination_url(url, field="webFallbackUrl")
    return blocked_field(rules, {"webFallbackUrl": clean}) is None


@pytest.mark.parametrize("url", [
    "https://example.com/sale",
    "http://example.com",
    "https://EXAMPLE.com/Case/Kept",          # hosts compare case-insensitively
    "https://example.com./x",                 # a trailing dot is the same host
    "https://example.com:8443/x",             # the port is not part of the host
    "https://img.cdn.example.org/a.png",      # *.cdn.example.org: one level below
    "https://a.b.cdn.example.org/a.png",      # ... and any depth
    "https://IMG.CDN.Example.Org./a.png",
    "https://bücher.example/",                # IDNA, as link_input encodes it
    "https://BÜCHER.example/",
    "https://xn--bcher-kva.example/",         # the same host, already encoded
    "https://\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com/",  # full-width: IDNA maps it
])
def test_listed_hosts_are_allowed(url: str) -> None:
    assert allowed(url)


@pytest.mark.parametrize("url", [
    "https://www.example.com/",               # example.com is that host only
    "https://evil-example.com/",              # a lookalike
    "https://notexample.com/",
    "https://example.com.evil.net/",          # the listed name as a prefix
    "https://example.co/",
    "https://cdn.example.org/",               # *.cdn.example.org: not the name itself
    "https://evilcdn.example.org/",           # the suffix without its dot
    "https://example.org/",
    "https://bucher.example/",
    "http://93.184.216.34/",                  # IP literals never match a host name
    "http://127.0.0.1/",
    "http://[::1]/",
    "http://[2001:db8::1]/x",
    "http://0x7f.1/",                         # a browser reads this as 127.0.0.1
])
def test_other_hosts_are_blocked(url: str) -> None:
    assert not allowed(url)


def test_an_empty_list_allows_every_host() -> None:
    assert allowed("http://93.184.216.34/", LinkDestinations())
    assert allowed("https://anything.example.net/", LinkDestinations())


def test_host_allowed_directly() -> None:
    entries = ("example.com", "*.example.net")
    assert host_allowed("example.com", entries) and host_allowed("a.example.net", entries)
    assert not host_allowed("example.net", entries)
    assert not host_allowed(".example.net", entries)
    assert not host_allowed(None, entries) and not host_allowed("", entries)
    assert not host_allowed("10.0.0.1", ("10.0.0.1",))  # never an IP, even if stored
    assert destination_host("https://Example.COM./x") == "example.com"
    assert destination_host("http://[::1]:8080/") == "::1"


def test_every_destination_field_of_a_draft_is_checked() -> None:
    assert [name for name, _ in LIMITED_FIELDS] == [
        "iosFallbackUrl", "androidFallbackUrl", "webFallbackUrl", "ogImageUrl"]
    for name, attr in LIMITED_FIELDS:
        assert hasattr(LinkDraft(), attr)
        draft = parse_link_create({"path": "/p", name: "https://evil.example.net/x"},
                                  allow_custom_slug=False, now_ms=NOW)
        with pytest.raises(DestinationBlocked) as info:
            check_sdk_link(RULES, draft)
        assert info.value.field == name and info.value.code == "destination_blocked"
        assert name in info.value.message and "evil.example.net" in info.value.message


def test_the_first_bad_field_is_named_and_good_drafts_pass() -> None:
    good = parse_link_create({"iosFallbackUrl": "https://example.com/i",
                              "androidFallbackUrl": "https://example.com/a",
                              "webFallbackUrl": "https://www.cdn.example.org/w",
                              "ogImageUrl": "https://img.cdn.example.org/i.png"},
                             allow_custom_slug=False, now_ms=NOW)
    check_sdk_link(RULES, good)  # no exception
    check_sdk_link(RULES, LinkDraft())  # a link without URLs
    bad = parse_link_create({"iosFallbackUrl": "https://example.com/i",
                             "webFallbackUrl": "https://phish.example.net/",
                             "ogImageUrl": "https://tracker.example.net/p.gif"},
                            allow_custom_slug=False, now_ms=NOW)
    with pytest.raises(DestinationBlocked) as info:
        check_sdk_link(RULES, bad)
    assert info.value.field == "webFallbackUrl"


# -- entries -------------------------------------------------------------------------


@pytest.mark.parametrize(("given_", "stored"), [
    ("example.com", "example.com"),
    ("  Example.COM.  ", "example.com"),
    ("*.Example.com", "*.example.com"),
    ("*.cdn.example.org.", "*.cdn.example.org"),
    ("bücher.example", "xn--bcher-kva.example"),
    ("*.BÜCHER.example", "*.xn--bcher-kva.example"),
    ("xn--bcher-kva.example", "xn--bcher-kva.example"),
])
def test_entries_are_stored_normalised(given_: str, stored: str) -> None:
    assert host_entry(given_) == stored


@pytest.mark.parametrize("bad", [
    "https://example.com", "example.com/path", "example.com:443", "user@example.com",
    "example.com?x", "exa mple.com", "localhost", "com", "127.0.0.1", "[::1]", "::1",
    "*.com", "*example.com", "a.*.example.com", "**.example.com", "*.", "*", "", "   ",
    "exa_mple.com", "-example.com", "example.123", "a" * 64 + ".com",
    ".".join(["a" * 60] * 5),  # 304 characters
    "x" * 300, 5, None, ["example.com"], {"host": "example.com"},
])
def test_bad_entries_are_refused_naming_the_field(bad: object) -> None:
    with pytest.raises(ValidationError) as info:
        parse_hosts([bad])
    assert info.value.field == FIELD and info.value.code == "validation_error"


def test_lists_drop_duplicates_keep_order_and_are_bounded() -> None:
    assert parse_hosts(None) == parse_hosts([]) == ()
    assert parse_hosts(["b.example", "A.example", "a.example.", "b.example"]) == (
        "b.example", "a.example")
    hosts = [f"h{i}.example.com" for i in range(HOSTS_MAX)]
    assert len(parse_hosts(hosts)) == HOSTS_MAX
    assert len(parse_hosts([*hosts, hosts[0].upper()])) == HOSTS_MAX  # a duplicate
    with pytest.raises(ValidationError, match=f"at most {HOSTS_MAX}") as info:
        parse_hosts([*hosts, "one-more.example.com"])
    assert info.value.field == FIELD
    for not_a_list in ("example.com", 3, {"a": 1}):
        with pytest.raises(ValidationError):
            parse_hosts(not_a_list)


def test_patch_bodies() -> None:
    current = LinkDestinations(("example.com",))
    assert apply_destinations_patch(current, {}) == current
    assert apply_destinations_patch(current, {FIELD: None}) == LinkDestinations()
    assert apply_destinations_patch(current, {FIELD: ["*.Shop.example"]}) == LinkDestinations(
        ("*.shop.example",))
    for body, field in (({"sdkAllowedHost": []}, "sdkAllowedHost"),
                        ({FIELD: [], "extra": 1}, "extra"), ([], None), ("x", None)):
        with pytest.raises(ValidationError) as info:
            apply_destinations_patch(current, body)
        assert info.value.field == field


# -- the record ------------------------------------------------------------------------


def test_the_record_round_trips_and_reads_old_maps_as_empty() -> None:
    rules = LinkDestinations(("example.com", "*.cdn.example.org"))
    assert rules.to_json() == {"sdkAllowedHosts": ["example.com", "*.cdn.example.org"]}
    assert LinkDestinations.from_map(rules.to_map()) == rules
    assert LinkDestinations.from_map({"v": 1}) == LinkDestinations()  # no field: any host
    assert LinkDestinations().to_json() == {"sdkAllowedHosts": []}
    for bad in ({"v": 1, FIELD: "example.com"}, {"v": 1, FIELD: [1]}):
        with pytest.raises(RecordError):
            LinkDestinations.from_map(bad)


# -- properties --------------------------------------------------------------------------

LABEL = st.from_regex(r"[a-z][a-z0-9]{0,8}", fullmatch=True)
NAME = st.lists(LABEL, min_size=2, max_size=4).map(".".join)


@given(NAME, NAME)
def test_exact_entries_allow_only_their_own_host(entry: str, host: str) -> None:
    rules = LinkDestinations((host_entry(entry),))
    assert allowed(f"https://{host}/p", rules) == (host == entry)
    assert allowed(f"https://{entry.upper()}./p", rules)


@given(NAME, NAME)
def test_wildcards_allow_only_hosts_below(entry: str, host: str) -> None:
    rules = LinkDestinations((host_entry(f"*.{entry}"),))
    assert allowed(f"https://{host}/p", rules) == host.endswith(f".{entry}")
    assert not allowed(f"https://{entry}/p", rules)
    assert allowed(f"https://x.{entry}/p", rules)
    assert not allowed(f"https://x{entry}/p", rules)


@given(st.text(max_size=40))
def test_entries_are_a_fixed_point_or_refused(text: str) -> None:
    try:
        entry = host_entry(text)
    except ValidationError:
        return
    assert host_entry(entry) == entry and entry == entry.lower() and entry.isascii()


def test_the_longest_entry_is_a_wildcard_of_the_longest_name() -> None:
    name = ".".join(("a" * 63, "b" * 63, "c" * 63, "d" * 57)) + ".com"  # 253 characters
    assert host_entry(f"*.{name}") == f"*.{name}"  # 255 characters, the most
    with pytest.raises(ValidationError) as info:
        host_entry(f"*.{name}x")
    assert info.value.message == f"{FIELD}: an entry is at most 255 characters"
