"""Host names as browsers encode them, and bounded lists without duplicates
(svc_engine/hosts.py), through every parser that uses them."""

from __future__ import annotations

import pytest

from svc_engine.destinations import LinkDestinations, blocked_field, parse_hosts
from svc_engine.errors import InvalidDomain, ValidationError
from svc_engine.hosts import SLACK, ascii_host, distinct
from svc_engine.link_input import check_destination_url, normalize_domain, parse_link_create
from svc_engine.platforms import Platforms, apply_platforms_patch

NOW = 1_700_000_000_000
FP = ":".join(["AB"] * 32)


# -- host names ------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "sent"), [
    # expected: what Node's WHATWG URL parser gives as the hostname (browsers' rules)
    # the deviation characters: browsers keep them (UTS #46, not transitional);
    # IDNA 2003 (Python's "idna" codec) wrote strasse.de, another domain
    ("straße.de", "xn--strae-oqa.de"),
    ("ὀδυσσεύς.gr", "xn--pxac3bcak3d8526a.gr"),  # a final sigma
    ("bücher.example", "xn--bcher-kva.example"),
    ("\uff25\uff38\uff21\uff2d\uff30\uff2c\uff25.com", "example.com"),  # fullwidth
    ("☃.net", "xn--n3h.net"),  # a symbol: IDNA 2008 refuses it, browsers do not
    ("example.com", "example.com"),
])
def test_hosts_are_encoded_as_browsers_send_them(name: str, sent: str) -> None:
    assert ascii_host(name) == sent


def test_a_joiner_where_browsers_refuse_it_is_refused() -> None:
    with pytest.raises(UnicodeError):
        ascii_host("ex\u200dample.com")


def test_destination_urls_custom_domains_and_allowed_hosts_agree_with_browsers() -> None:
    assert check_destination_url("https://straße.de/x?q=1", field="webFallbackUrl") == (
        "https://xn--strae-oqa.de/x?q=1")
    assert normalize_domain("Go.Straße.de") == "go.xn--strae-oqa.de"
    rules = LinkDestinations(sdk_allowed_hosts=parse_hosts(["straße.de"]))
    assert rules.sdk_allowed_hosts == ("xn--strae-oqa.de",)
    assert blocked_field(rules, {"webFallbackUrl": "https://xn--strae-oqa.de/x"}) is None
    assert blocked_field(rules, {"webFallbackUrl": "https://strasse.de/x"}) == "webFallbackUrl"
    with pytest.raises(ValidationError):
        check_destination_url("https://ex\u200dample.com/", field="webFallbackUrl")
    with pytest.raises(InvalidDomain):
        normalize_domain("ex\u200dample.com")


# -- bounded lists ---------------------------------------------------------------------


def test_distinct_keeps_the_first_of_each_in_order() -> None:
    assert distinct(["b", "a", "b", "c", "a"], str, most=3,
                    field="f", not_a_list="list", too_many="many") == ("b", "a", "c")


def test_distinct_stops_at_the_first_item_past_the_limit() -> None:
    """A list of many distinct items costs ``most`` + 1 checks, not all of them
    (nor, with ``in`` tests on a list, their square)."""
    seen: list[object] = []

    def item(x: object) -> object:
        seen.append(x)
        return x

    with pytest.raises(ValidationError) as info:
        distinct(list(range(SLACK * 5)), item, most=5, field="f", not_a_list="",
                 too_many="at most 5")
    assert len(seen) == 6 and info.value.field == "f"
    seen.clear()
    with pytest.raises(ValidationError):  # longer than SLACK times the limit: none checked
        distinct([1] * (SLACK * 5 + 1), item, most=5, field="f", not_a_list="",
                 too_many="at most 5")
    assert seen == []
    assert distinct([1] * (SLACK * 5), item, most=5, field="f", not_a_list="",
                    too_many="x") == (1,)


@pytest.mark.parametrize("parse", [
    lambda v: parse_link_create({"tags": v}, allow_custom_slug=False, now_ms=NOW),
    lambda v: parse_hosts(v),
    lambda v: apply_platforms_patch(Platforms(), {"android": {"sha256CertFingerprints": v}}),
])
def test_a_huge_list_is_refused_before_its_items_are_read(parse: object) -> None:
    """100,000 entries (a 1 MiB body): refused at once, naming the field; it
    was quadratic (seconds of the event loop for the hosts, the tags of a
    publishable-key link too)."""
    assert callable(parse)
    for huge in ([f"h{i}.example" for i in range(100_000)], ["x.example"] * 100_000):
        with pytest.raises(ValidationError) as info:
            parse(huge)
        assert info.value.field in ("tags", "sdkAllowedHosts",
                                    "android.sha256CertFingerprints")


def test_duplicates_within_the_slack_are_still_dropped() -> None:
    draft = parse_link_create({"tags": ["a", "b"] * 30}, allow_custom_slug=False, now_ms=NOW)
    assert draft.tags == ("a", "b")
    patched = apply_platforms_patch(Platforms(), {"android": {"sha256CertFingerprints":
                                                              [FP, FP.lower()] * 5}})
    assert patched.android.sha256_cert_fingerprints == (FP,)


def test_a_huge_domain_is_refused_before_idna(monkeypatch: pytest.MonkeyPatch) -> None:
    """IDNA costs microseconds a character: a 1 MiB `domain` held the event
    loop for seconds before its length was checked."""
    from svc_engine import link_input

    calls: list[str] = []
    monkeypatch.setattr(link_input, "ascii_host",
                        lambda name: calls.append(name) or ascii_host(name))
    for huge in ("a" * 1_000_000 + "ü", "ü" * 512_000, "x." * 600):
        with pytest.raises(InvalidDomain, match="at most 253"):
            normalize_domain(huge)
    assert calls == []
    assert normalize_domain("go.bücher.example") == "go.xn--bcher-kva.example"
    assert calls == ["go.bücher.example"]
