"""Outbound address guard (svc_engine.ssrf).

Every case of tests/data/ssrf-address-vectors.json is checked. Its Svix table
is our policy; where Svix or Convoy differ from ours the expected verdict is
overridden below with the reason.
"""

from __future__ import annotations

import ipaddress
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from svc_engine import ssrf
from svc_engine.errors import ValidationError

VECTORS = json.loads(
    (Path(__file__).parent / "data" / "ssrf-address-vectors.json").read_text("utf-8")
)


def _dial_host(dial_address: str) -> str:
    """'1.1.1.1:443' -> '1.1.1.1'; '[::1]:80' -> '::1'; 'not-an-ip:80' -> 'not-an-ip'."""
    host, _, _port = dial_address.rpartition(":")
    return host.removeprefix("[").removesuffix("]")


# --- Svix: the same policy as ours -------------------------------------------------

SVIX = VECTORS["svix_is_allowed"]["cases"]


@pytest.mark.parametrize("case", SVIX, ids=[c["address"] for c in SVIX])
def test_svix_address_table(case: dict[str, Any]) -> None:
    verdict = ssrf.address_verdict(case["address"])
    assert verdict.allowed is (case["verdict"] == "allowed"), verdict


SVIX_URLS = VECTORS["svix_url_cases"]

# Svix blocks loopback receivers; we allow exactly the literal hosts localhost,
# 127.0.0.1 and [::1], because the spec allows plain http for them and they are
# how integrators and our own tests receive webhooks locally. Everything else
# in the table (userinfo, the expanded v4-mapped loopback) is blocked as in Svix.
OUR_URL_OVERRIDES = {
    "https://127.0.0.1": "allowed",
    "https://[::1]": "allowed",
    "https://[::1]:9876": "allowed",
    "http://127.0.0.1/": "allowed",
    "http://localhost/": "allowed",
}


def test_url_overrides_name_real_cases() -> None:
    assert set(OUR_URL_OVERRIDES) <= {c["url"] for c in SVIX_URLS["cases"]}


@pytest.mark.parametrize("case", SVIX_URLS["cases"], ids=[c["url"] for c in SVIX_URLS["cases"]])
def test_svix_url_table(case: dict[str, Any]) -> None:
    expected = OUR_URL_OVERRIDES.get(case["url"], case["verdict"].split()[0])
    verdict = ssrf.url_target_rule(case["url"])
    assert verdict.decision == expected, verdict


@pytest.mark.parametrize("url", SVIX_URLS["url_parser_rejects"])
def test_svix_urls_the_parser_must_reject(url: str) -> None:
    assert isinstance(ssrf.parse_url(url), ssrf.UrlRejected)
    assert ssrf.url_target_rule(url).decision == ssrf.BLOCKED


# --- Convoy ----------------------------------------------------------------------------

CONVOY_PRIVATE = VECTORS["convoy_block_private_networks"]["cases"]


@pytest.mark.parametrize("case", CONVOY_PRIVATE, ids=[c["dial_address"] for c in CONVOY_PRIVATE])
def test_convoy_block_private_networks_table(case: dict[str, Any]) -> None:
    # Convoy's strict policy agrees with ours on every case.
    verdict = ssrf.address_verdict(_dial_host(case["dial_address"]))
    assert verdict.allowed is not case["blocked"], verdict


CONVOY_METADATA = VECTORS["convoy_block_metadata_endpoints"]["cases"]

# Convoy's default webhook policy blocks only metadata and link-local targets
# and lets private networks through. Ours blocks everything not globally
# routable, so these private, ULA, NAT64 and 6to4 targets are blocked unless an
# operator allow-lists them (see the next test).
BLOCKED_BY_US_ALLOWED_BY_CONVOY = {
    "10.0.0.5:80",
    "192.168.1.10:8080",
    "172.16.0.1:80",
    "[fd12:3456::1]:80",
    "[64:ff9b::808:808]:80",
    "[2002:0808:0808::1]:80",
}

# The allow-list an operator would set to get Convoy's "private allowed" mode.
PRIVATE_ALLOW = (
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "fc00::/7",
    "64:ff9b::/96",
    "2002::/16",
)


def test_convoy_overrides_name_real_cases() -> None:
    assert {c["dial_address"] for c in CONVOY_METADATA} >= BLOCKED_BY_US_ALLOWED_BY_CONVOY


@pytest.mark.parametrize("case", CONVOY_METADATA, ids=[c["dial_address"] for c in CONVOY_METADATA])
def test_convoy_metadata_table_under_our_default_policy(case: dict[str, Any]) -> None:
    blocked = case["blocked"] or case["dial_address"] in BLOCKED_BY_US_ALLOWED_BY_CONVOY
    verdict = ssrf.address_verdict(_dial_host(case["dial_address"]))
    assert verdict.allowed is not blocked, verdict


@pytest.mark.parametrize("case", CONVOY_METADATA, ids=[c["dial_address"] for c in CONVOY_METADATA])
def test_convoy_metadata_table_with_private_allow_list(case: dict[str, Any]) -> None:
    # With private ranges allow-listed, our verdicts equal Convoy's exactly:
    # metadata stays blocked even inside an allowed range (fd00:ec2::254 in
    # fc00::/7) or wrapped in an allowed NAT64 or 6to4 prefix.
    verdict = ssrf.address_verdict(_dial_host(case["dial_address"]), PRIVATE_ALLOW)
    assert verdict.allowed is not case["blocked"], verdict


# --- CPython ipaddress pitfalls --------------------------------------------------------

PITFALLS = VECTORS["python_stdlib_pitfalls_observed"]


def _addresses_in(text: str) -> list[str]:
    """Every address named in a note, and for a network its first, second and last."""
    found: list[str] = []
    for word in text.replace("(", " ").replace(")", " ").split():
        try:
            found.append(str(ipaddress.ip_address(word)))
            continue
        except ValueError:
            pass
        try:
            net = ipaddress.ip_network(word)
        except ValueError:
            continue
        found += [str(net.network_address), str(net.network_address + 1)]
        found.append(str(net.broadcast_address))
    return found


PITFALL_NOTES = [
    *PITFALLS["is_global_true_but_must_block"],
    *PITFALLS["neither_private_nor_global"],
    PITFALLS["v4_mapped"],
]


@pytest.mark.parametrize("note", PITFALL_NOTES)
def test_stdlib_pitfalls_are_blocked(note: str) -> None:
    addresses = _addresses_in(note)
    assert addresses, note
    for address in addresses:
        assert not ssrf.address_verdict(address).allowed, address


def test_cgnat_metadata_named_in_pitfalls() -> None:
    assert "100.100.100.200" in _addresses_in(PITFALLS["neither_private_nor_global"][0])
    assert ssrf.address_verdict("100.100.100.200").reason == "metadata"


# --- our own rules --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("address", "reason"),
    [
        ("8.8.8.8", "global"),
        ("::ffff:8.8.8.8", "ipv4_mapped:global"),
        ("169.254.169.254", "metadata"),
        ("169.254.170.2", "metadata"),
        ("fd00:ec2::254", "metadata"),
        ("100.100.100.200", "metadata"),
        ("::ffff:169.254.169.254", "ipv4_mapped:metadata"),
        ("64:ff9b::a9fe:a9fe", "nat64:metadata"),
        ("2002:a9fe:a9fe::1", "6to4:metadata"),
        ("64:ff9b::808:808", "nat64"),
        ("2002:808:808::1", "6to4"),
        ("::127.0.0.1", "ipv4_compatible:loopback"),
        ("::8.8.8.8", "ipv4_compatible:global"),
        ("::2", "ipv4_compatible:this_network"),  # the first IPv4-compatible one: not :: or ::1
        ("::1", "loopback"),
        ("::", "unspecified"),
        ("::ffff:0:8.8.8.8", "ipv4_translated"),
        ("fe80::1%eth0", "scoped"),
        ("2001:4860:4860::8888%1", "scoped"),
        ("4000::1", "reserved"),
        ("2001::1", "ietf_protocol_assignment"),
        ("fec0::1", "site_local"),
        ("0.0.0.0", "unspecified"),
        ("0.1.2.3", "this_network"),
        ("255.255.255.255", "broadcast"),
        ("240.0.0.1", "reserved"),
        ("192.168.0.1", "private"),
        ("", "unparseable"),
        ("[::1]", "unparseable"),
        ("127.1", "unparseable"),
        ("1.1.1.1:443", "unparseable"),
    ],
)
def test_reasons(address: str, reason: str) -> None:
    verdict = ssrf.address_verdict(address)
    assert verdict == ssrf.Verdict(reason == "global" or reason.endswith(":global"), reason)


@pytest.mark.parametrize(
    ("address", "allow", "allowed", "reason"),
    [
        ("127.0.0.1", ["127.0.0.0/8"], True, "allow_list"),
        ("10.1.2.3", ["10.0.0.0/8"], True, "allow_list"),
        ("10.1.2.3", ["10.0.0.1/8"], True, "allow_list"),  # host bits are tolerated
        ("::ffff:10.1.2.3", ["10.0.0.0/8"], True, "ipv4_mapped:allow_list"),
        ("11.0.0.1", ["10.0.0.0/8"], True, "global"),
        ("192.168.0.1", ["10.0.0.0/8"], False, "private"),
        ("169.254.169.254", ["169.254.0.0/16"], False, "metadata"),
        ("169.254.169.254", ["169.254.169.254/32"], True, "allow_list"),
        ("169.254.1.1", ["169.254.0.0/16"], True, "allow_list"),
        ("100.100.100.200", ["100.64.0.0/10"], False, "metadata"),  # e.g. Tailscale
        ("100.100.100.100", ["100.64.0.0/10"], True, "allow_list"),
        ("fd00:ec2::254", ["fd00::/8"], False, "metadata"),
        ("fd00:ec2::254", ["fd00:ec2::254/128"], True, "allow_list"),
        ("64:ff9b::808:808", ["64:ff9b::/96"], True, "allow_list"),
        ("64:ff9b::7f00:1", ["64:ff9b::/96"], False, "nat64:loopback"),
        ("64:ff9b::7f00:1", ["64:ff9b::/96", "127.0.0.0/8"], True, "allow_list"),
        ("2002:0a00:0001::1", ["2002::/16"], False, "6to4:private"),
        ("2002:0808:0808::1", ["2002::/16"], True, "allow_list"),
        ("::1", ["::1/128"], True, "allow_list"),
        ("::1", ["127.0.0.0/8"], False, "loopback"),
    ],
)
def test_allow_list(address: str, allow: list[str], allowed: bool, reason: str) -> None:
    assert ssrf.address_verdict(address, allow) == ssrf.Verdict(allowed, reason)


@pytest.mark.parametrize("entry", ["10.0.0.0/33", "nonsense", "", "10.0.0.0/8/8"])
def test_bad_allow_list_entry_is_a_validation_error(entry: str) -> None:
    with pytest.raises(ValidationError) as info:
        ssrf.address_verdict("8.8.8.8", [entry])
    assert info.value.field == "allow"


def _deny_addresses() -> list[str]:
    nets = [net for net, _reason in ssrf._DENY]
    return [str(net.network_address + (net.num_addresses // 2)) for net in nets]


@pytest.mark.parametrize("address", _deny_addresses())
def test_every_deny_range_is_blocked_in_its_middle(address: str) -> None:
    assert not ssrf.address_verdict(address).allowed


@given(st.ip_addresses(v=4))
def test_ipv4_mapped_form_gets_the_same_verdict(address: ipaddress.IPv4Address) -> None:
    plain = ssrf.address_verdict(str(address))
    mapped = ssrf.address_verdict(f"::ffff:{address}")
    assert mapped.allowed is plain.allowed
    assert mapped.reason == f"ipv4_mapped:{plain.reason}"


@given(st.ip_addresses())
@example(ipaddress.ip_address("::ffff:8.8.8.8"))
@example(ipaddress.ip_address("::8.8.8.8"))
def test_allowed_addresses_are_global_and_outside_every_deny_range(
    address: ipaddress.IPv4Address | ipaddress.IPv6Address,
) -> None:
    verdict = ssrf.address_verdict(str(address))
    if verdict.allowed:
        mapped = address.ipv4_mapped if isinstance(address, ipaddress.IPv6Address) else None
        target = mapped or address
        assert target.is_global
        assert target not in ssrf.METADATA_ADDRESSES
        assert not any(target in net for net, _ in ssrf._DENY)


# --- URL target rule ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "addresses"),
    [
        ("http://localhost:8080/hook", ("127.0.0.1", "::1")),
        ("https://LOCALHOST/hook", ("127.0.0.1", "::1")),
        ("http://127.0.0.1:9000/", ("127.0.0.1",)),
        ("http://[::1]:9000/", ("::1",)),
        ("https://[0:0:0:0:0:0:0:1]/", ("::1",)),  # the same address, written out
    ],
)
def test_local_receivers_are_allowed_without_lookup(url: str, addresses: tuple[str, ...]) -> None:
    verdict = ssrf.url_target_rule(url)
    assert verdict.decision == ssrf.ALLOWED
    assert verdict.reason == "local_receiver"
    assert verdict.addresses == addresses
    # A resolver answer is never consulted for them.
    assert ssrf.url_target_rule(url, resolved=["10.0.0.1"]).addresses == addresses


@pytest.mark.parametrize("url", [
    "http://localhost:8080/hook", "https://LOCALHOST/hook", "http://127.0.0.1:9000/",
    "https://127.0.0.1/", "http://[::1]:9000/", "https://[0:0:0:0:0:0:0:1]/",
])
def test_an_operator_may_turn_local_receivers_off(url: str) -> None:
    """``SVC_WEBHOOK_LOCAL_RECEIVERS=false``: on a server several teams share,
    no project may make it post to its own loopback services, over http or
    https, whatever a resolver or the allow-list would say."""
    verdict = ssrf.url_target_rule(url, local=False)
    assert verdict.decision == ssrf.BLOCKED and verdict.reason == ssrf.LOCAL_RECEIVERS_OFF
    assert ssrf.url_target_rule(url, resolved=["93.184.216.34"], allow=("127.0.0.0/8",),
                                local=False).decision == ssrf.BLOCKED
    other = ssrf.url_target_rule("https://hooks.example.com/", resolved=["93.184.216.34"],
                                 local=False)
    assert other.decision == ssrf.ALLOWED
    looked_up = ssrf.url_target_rule("https://hooks.example.com/", resolved=["127.0.0.1"],
                                     local=False)
    assert looked_up.decision == ssrf.BLOCKED  # a name answering loopback, as always


def test_names_are_resolved_by_the_caller_and_every_answer_must_pass() -> None:
    url = "https://hooks.example.com:8443/in"
    first = ssrf.url_target_rule(url)
    assert first == ssrf.TargetVerdict(
        ssrf.RESOLVE, "host name must be resolved", "hooks.example.com", 8443
    )
    ok = ssrf.url_target_rule(url, resolved=["93.184.216.34", "2606:2800:220:1::", "93.184.216.34"])
    assert ok.allowed
    assert ok.addresses == ("93.184.216.34", "2606:2800:220:1::")
    assert (ok.host, ok.port) == ("hooks.example.com", 8443)
    mixed = ssrf.url_target_rule(url, resolved=["93.184.216.34", "127.0.0.1"])
    assert mixed.decision == ssrf.BLOCKED
    assert mixed.reason == "127.0.0.1: loopback"
    assert mixed.addresses == ()
    assert ssrf.url_target_rule(url, resolved=[]).decision == ssrf.BLOCKED
    assert ssrf.url_target_rule(url, resolved=["nope"]).decision == ssrf.BLOCKED
    allowed = ssrf.url_target_rule(url, resolved=["10.0.0.7"], allow=["10.0.0.0/8"])
    assert allowed.addresses == ("10.0.0.7",)


def test_dns_rebinding_answer_is_judged_not_the_name() -> None:
    # A public-looking name that resolves to metadata is blocked.
    verdict = ssrf.url_target_rule("https://rebind.example/", resolved=["169.254.169.254"])
    assert verdict.decision == ssrf.BLOCKED
    assert verdict.reason == "169.254.169.254: metadata"


@pytest.mark.parametrize(
    ("url", "decision"),
    [
        ("https://8.8.8.8/hook", ssrf.ALLOWED),
        ("https://[2001:4860:4860::8888]/", ssrf.ALLOWED),
        ("https://10.0.0.1/", ssrf.BLOCKED),
        ("https://169.254.169.254/latest/meta-data/", ssrf.BLOCKED),
        ("https://[::ffff:127.0.0.1]/", ssrf.BLOCKED),
        ("https://[fe80::1]/", ssrf.BLOCKED),
        ("http://8.8.8.8/", ssrf.BLOCKED),  # plain http only for local receivers
        ("http://example.com/", ssrf.BLOCKED),
        ("https://127.1/", ssrf.BLOCKED),  # non-canonical IPv4 forms
        ("https://2130706433/", ssrf.BLOCKED),
        ("https://0x7f.0.0.1/", ssrf.BLOCKED),
        ("https://0177.0.0.1/", ssrf.BLOCKED),
        ("https://1.2.3.04/", ssrf.BLOCKED),
        ("https://example.0x10/", ssrf.BLOCKED),
        ("https://evil.com\\@good.com/", ssrf.BLOCKED),
        ("https://good.com\\evil.com/", ssrf.BLOCKED),
        ("https://user@example.com/", ssrf.BLOCKED),
        ("https://localhost@evil.com/", ssrf.BLOCKED),
        ("https://example.com#frag", ssrf.BLOCKED),
        ("ftp://example.com/", ssrf.BLOCKED),
        ("https:example.com", ssrf.BLOCKED),
        ("https:///path", ssrf.BLOCKED),
        ("https://example.com:0/", ssrf.BLOCKED),
        ("https://example.com:65536/", ssrf.BLOCKED),
        ("https://example.com:/", ssrf.BLOCKED),
        ("https://example.com:44a/", ssrf.BLOCKED),
        ("https://[::1]x/", ssrf.BLOCKED),
        ("https://[::1/", ssrf.BLOCKED),
        ("https://[v1.fe]/", ssrf.BLOCKED),
        ("https://exa mple.com/", ssrf.BLOCKED),
        ("https://ex\nample.com/", ssrf.BLOCKED),
        ("https://bücher.example/", ssrf.BLOCKED),
        ("https://a..b/", ssrf.BLOCKED),
        ("https://" + "a" * 64 + ".com/", ssrf.BLOCKED),
        ("https://example.com/" + "a" * 2048, ssrf.BLOCKED),
        ("", ssrf.BLOCKED),
    ],
)
def test_url_forms(url: str, decision: str) -> None:
    assert ssrf.url_target_rule(url).decision == decision


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        ("https://Example.COM/x?y=1", ssrf.UrlParts("https", "example.com", 443, False)),
        ("HTTP://localhost:8080", ssrf.UrlParts("http", "localhost", 8080, False)),
        ("http://localhost/", ssrf.UrlParts("http", "localhost", 80, False)),
        ("https://1.2.3.4:8443/", ssrf.UrlParts("https", "1.2.3.4", 8443, True)),
        ("https://[2001:DB8::1]/", ssrf.UrlParts("https", "2001:db8::1", 443, True)),
        ("https://my_host.internal/", ssrf.UrlParts("https", "my_host.internal", 443, False)),
        (
            "https://xn--bcher-kva.example/",
            ssrf.UrlParts("https", "xn--bcher-kva.example", 443, False),
        ),
    ],
)
def test_parse_url(url: str, parts: ssrf.UrlParts) -> None:
    assert ssrf.parse_url(url) == parts


LONG_NAME = ".".join(("a" * 63, "b" * 63, "c" * 63, "d" * 61))  # 253 characters, the most


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("https://user@example.com/", "URL must not contain user information"),
        ("https://@example.com/", "URL must not contain user information"),
        ("https://example.com/#x", "URL must not have a fragment"),
        ("ftp://example.com/", "URL scheme must be https or http"),
        ("https:example.com", "URL scheme must be https or http"),
        ("https://127.1/", "numeric host must be a dotted-quad IPv4 address"),
        ("https://example.com:0/", "URL port must be 1 to 65535"),
        ("https://example.com:/", "URL port must be digits after ':'"),
        ("https://[::1%lo]/", "bracketed host must be a plain IPv6 address"),
        ("", "URL is empty"),
        ("https://example.com/a b", "URL must be ASCII without spaces or control characters"),
        ("https://example.com/" + "a" * 2029, "URL is longer than 2048 characters"),
        ("https://example.com:65536/", "URL port must be 1 to 65535"),
        ("https://example.com:000443/", "URL port must be digits after ':'"),
        (f"https://{LONG_NAME}x/", "host name is longer than 253 characters"),
        ("https://ex!ample.com/", "host name has characters outside a-z, 0-9, '-', '_', '.'"),
        ("https://" + "a" * 64 + ".io/", "host name has an empty or over-long label"),
        ("https://example.0x1f/", "numeric host must be a dotted-quad IPv4 address"),
    ],
)
def test_rejection_reasons(url: str, reason: str) -> None:
    assert ssrf.parse_url(url) == ssrf.UrlRejected(reason)
    assert ssrf.url_target_rule(url) == ssrf.TargetVerdict(ssrf.BLOCKED, reason)


@pytest.mark.parametrize(
    ("url", "parts"),
    [
        # each limit itself is allowed (one past it is in test_rejection_reasons)
        ("https://example.com/" + "a" * 2028, ssrf.UrlParts("https", "example.com", 443, False)),
        ("https://example.com:1/", ssrf.UrlParts("https", "example.com", 1, False)),
        ("https://example.com:65535/", ssrf.UrlParts("https", "example.com", 65535, False)),
        ("https://example.com:00443/", ssrf.UrlParts("https", "example.com", 443, False)),
        (f"https://{LONG_NAME}/", ssrf.UrlParts("https", LONG_NAME, 443, False)),
        ("https://" + "a" * 63 + ".io/", ssrf.UrlParts("https", "a" * 63 + ".io", 443, False)),
        # a last label that only looks like hex digits, or has none after 0x, is a name
        ("https://hooks.cafe/", ssrf.UrlParts("https", "hooks.cafe", 443, False)),
        ("https://hooks.0xg/", ssrf.UrlParts("https", "hooks.0xg", 443, False)),
    ],
)
def test_limits_are_inclusive(url: str, parts: ssrf.UrlParts) -> None:
    assert ssrf.parse_url(url) == parts
