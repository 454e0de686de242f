"""Platforms settings and the domain-association files built from them.

Formats checked against the vendors' documentation:
- Apple, "Supporting associated domains" / "applinks.Details.Components":
  {"applinks": {"details": [{"appIDs": ["<TeamID>.<BundleID>"],
  "components": [{"/": "<pattern>", "exclude": true?, "comment": "..."}]}]}},
  components evaluated in order, first match wins, "*" any run, "?" one char.
- Google, "Verify Android App Links" / Digital Asset Links statement list:
  [{"relation": ["delegate_permission/common.handle_all_urls"],
    "target": {"namespace": "android_app", "package_name": "...",
               "sha256_cert_fingerprints": ["14:6D:E9:..."]}}].
"""

from __future__ import annotations

import fnmatch
import json
import re

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.decode import RecordError
from svc_engine.errors import DestinationBlocked, ValidationError
from svc_engine.links import new_slug
from svc_engine.platforms import (
    AndroidPlatform,
    IosPlatform,
    Platforms,
    WebPlatform,
    apple_app_site_association,
    apply_platforms_patch,
    assetlinks,
    normalize_fingerprint,
)

FP = ("14:6D:E9:83:C5:73:06:50:D8:EE:B9:95:2F:34:FC:64:"
      "16:A0:83:42:E6:1D:BE:A8:8A:04:96:B2:3F:CF:44:E5")
FP_LOWER_BARE = FP.replace(":", "").lower()

FULL_BODY = {
    "ios": {"appStoreId": "1234567890", "bundleId": "com.example.app", "teamId": "ABCDE12345",
            "scheme": "exampleapp"},
    "android": {"packageName": "com.example.app", "sha256CertFingerprints": [FP],
                "scheme": "exampleapp"},
    "web": {"fallbackUrl": "https://example.com/"},
}


def full() -> Platforms:
    return apply_platforms_patch(Platforms(), FULL_BODY)


def test_defaults_are_empty() -> None:
    assert Platforms().to_json() == {
        "ios": {"appStoreId": None, "bundleId": None, "teamId": None, "scheme": None},
        "android": {"packageName": None, "sha256CertFingerprints": [], "scheme": None},
        "web": {"fallbackUrl": None},
    }


def test_full_patch() -> None:
    p = full()
    assert p == Platforms(
        ios=IosPlatform(app_store_id="1234567890", bundle_id="com.example.app",
                        team_id="ABCDE12345", scheme="exampleapp"),
        android=AndroidPlatform(package_name="com.example.app", sha256_cert_fingerprints=(FP,),
                                scheme="exampleapp"),
        web=WebPlatform(fallback_url="https://example.com/"),
    )
    assert p.to_json() == FULL_BODY
    assert p.ios.app_id == "ABCDE12345.com.example.app"


def test_patch_is_partial_and_null_clears() -> None:
    p = apply_platforms_patch(full(), {"ios": {"scheme": None}, "android": {}})
    assert p.ios.scheme is None and p.ios.app_store_id == "1234567890"
    assert p.android == full().android
    p = apply_platforms_patch(full(), {"web": None, "android": None})
    assert p.web == WebPlatform() and p.android == AndroidPlatform() and p.ios == full().ios
    assert apply_platforms_patch(full(), {}) == full()


@pytest.mark.parametrize(("body", "expected"), [
    ({"ios": {"appStoreId": 1234567890}}, IosPlatform(app_store_id="1234567890")),
    ({"ios": {"appStoreId": "id1234567890"}}, IosPlatform(app_store_id="1234567890")),
    ({"ios": {"scheme": "ExampleApp://"}}, IosPlatform(scheme="exampleapp")),
    ({"ios": {"scheme": "com.example.app-1+x"}}, IosPlatform(scheme="com.example.app-1+x")),
    ({"ios": {"bundleId": " com.Example.my-app "}}, IosPlatform(bundle_id="com.Example.my-app")),
    ({"ios": {"teamId": ""}}, IosPlatform()),
])
def test_ios_normalization(body: dict[str, object], expected: IosPlatform) -> None:
    assert apply_platforms_patch(Platforms(), body).ios == expected


def test_fingerprints_are_normalized_and_deduplicated() -> None:
    assert normalize_fingerprint(FP_LOWER_BARE) == FP
    assert normalize_fingerprint(FP.lower()) == FP
    p = apply_platforms_patch(Platforms(), {"android": {
        "sha256CertFingerprints": [FP_LOWER_BARE, FP, "AA" * 32]}})
    assert p.android.sha256_cert_fingerprints == (FP, ":".join(["AA"] * 32))


@given(st.binary(min_size=32, max_size=32))
def test_any_sha256_normalizes_to_colon_pairs(digest: bytes) -> None:
    fp = normalize_fingerprint(digest.hex())
    assert re.fullmatch(r"([0-9A-F]{2}:){31}[0-9A-F]{2}", fp)
    assert bytes.fromhex(fp.replace(":", "")) == digest


INVALID: list[tuple[object, str]] = [
    ([], ""),
    ({"macos": {}}, "macos"),
    ({"ios": []}, "ios"),
    ({"ios": {"appId": "x"}}, "ios.appId"),
    ({"ios": {"appStoreId": "12ab"}}, "ios.appStoreId"),
    ({"ios": {"appStoreId": "0123"}}, "ios.appStoreId"),
    ({"ios": {"appStoreId": True}}, "ios.appStoreId"),
    ({"ios": {"teamId": "abcde12345"}}, "ios.teamId"),
    ({"ios": {"teamId": "ABCDE1234"}}, "ios.teamId"),
    ({"ios": {"teamId": "ABCDE123456"}}, "ios.teamId"),
    ({"ios": {"bundleId": "app"}}, "ios.bundleId"),
    ({"ios": {"bundleId": "com.example app"}}, "ios.bundleId"),
    ({"ios": {"bundleId": "com..example"}}, "ios.bundleId"),
    ({"ios": {"bundleId": "com.example_app"}}, "ios.bundleId"),
    ({"ios": {"scheme": "https"}}, "ios.scheme"),
    ({"ios": {"scheme": "HTTP"}}, "ios.scheme"),
    ({"ios": {"scheme": "javascript"}}, "ios.scheme"),
    ({"ios": {"scheme": "1app"}}, "ios.scheme"),
    ({"ios": {"scheme": "my_app"}}, "ios.scheme"),
    ({"ios": {"scheme": "my app"}}, "ios.scheme"),
    ({"ios": {"scheme": 5}}, "ios.scheme"),
    ({"android": {"packageName": "example"}}, "android.packageName"),
    ({"android": {"packageName": "com.1example"}}, "android.packageName"),
    ({"android": {"packageName": "com.exa-mple"}}, "android.packageName"),
    ({"android": {"sha256CertFingerprints": FP}}, "android.sha256CertFingerprints"),
    ({"android": {"sha256CertFingerprints": [FP[:-3]]}}, "android.sha256CertFingerprints"),
    ({"android": {"sha256CertFingerprints": [FP.replace("14", "ZZ")]}},
     "android.sha256CertFingerprints"),
    ({"android": {"sha256CertFingerprints": [5]}}, "android.sha256CertFingerprints"),
    ({"android": {"sha256CertFingerprints": [f"{i:064X}" for i in range(11)]}},
     "android.sha256CertFingerprints"),
    ({"android": {"scheme": "intent"}}, "android.scheme"),
    ({"android": {"bundleId": "x"}}, "android.bundleId"),
    ({"web": {"fallbackUrl": 5}}, "web.fallbackUrl"),
    ({"web": {"url": "https://x.com"}}, "web.url"),
]


@pytest.mark.parametrize(("body", "field"), INVALID)
def test_invalid_patches_name_the_field(body: object, field: str) -> None:
    before = full()
    with pytest.raises(ValidationError) as info:
        apply_platforms_patch(before, body)
    assert (info.value.field or "") == field


def test_web_fallback_must_be_http() -> None:
    with pytest.raises(DestinationBlocked):
        apply_platforms_patch(Platforms(), {"web": {"fallbackUrl": "javascript:alert(1)"}})


def test_record_round_trip() -> None:
    for p in (Platforms(), full()):
        stored = p.to_map()
        assert stored["v"] == 1
        assert Platforms.from_map(stored) == p
    with pytest.raises(RecordError):
        Platforms.from_map({"v": 2})
    with pytest.raises(RecordError):
        Platforms.from_map({"v": 1, "ios": []})


# -- apple-app-site-association ---------------------------------------------------------


def apple_matches(components: list[dict[str, object]], path: str) -> bool:
    """Apple's rule: the first component whose "/" pattern matches decides."""
    for component in components:
        pattern = str(component["/"])
        if component.get("caseSensitive", True) is False:
            hit = fnmatch.fnmatch(path.lower(), pattern.lower())
        else:
            hit = fnmatch.fnmatchcase(path, pattern)
        if hit:
            return component.get("exclude") is not True
    return False


def test_aasa_document_shape() -> None:
    doc = apple_app_site_association(full())
    json.dumps(doc)  # serializable as is
    assert list(doc) == ["applinks"]
    applinks = doc["applinks"]
    assert isinstance(applinks, dict) and list(applinks) == ["details"]
    [detail] = applinks["details"]
    assert detail["appIDs"] == ["ABCDE12345.com.example.app"]
    for component in detail["components"]:
        assert set(component) <= {"/", "exclude", "comment", "caseSensitive"}
        assert isinstance(component["/"], str) and component["/"].startswith("/")
    assert detail["components"][-1]["/"] == "/*"
    assert "exclude" not in detail["components"][-1]


@pytest.mark.parametrize(("path", "opens_app"), [
    ("/abc123XYZ", True), ("/summer-sale", True), ("/" + new_slug(b"12345678"), True),
    ("/", False), ("/v1/sdk/init", False), ("/dashboard", False), ("/dashboard/settings", False),
    ("/Dashboard", False), ("/.well-known/assetlinks.json", False), ("/healthz", False),
    ("/favicon.ico", False), ("/robots.txt", False), ("/static/app.css", False),
])
def test_aasa_opens_the_app_for_links_only(path: str, opens_app: bool) -> None:
    [detail] = apple_app_site_association(full())["applinks"]["details"]  # type: ignore[index]
    assert apple_matches(detail["components"], path) is opens_app


@pytest.mark.parametrize(("path", "opens_app"), [
    ("/go/abc123XYZ", True), ("/go/summer-sale", True), ("/go", False), ("/go/", False),
    ("/GO/x", False), ("/go/v1", False), ("/go/Dashboard/x", False), ("/pricing", False),
    ("/", False), ("/abc123XYZ", False), ("/gone/abc", False),
])
def test_aasa_under_a_public_url_path_opens_only_its_links(path: str, opens_app: bool) -> None:
    """``SVC_PUBLIC_URL=https://example.com/go``: links are /go/SLUG; the
    file claimed every path of the domain (the operator's whole site opened
    the apps)."""
    [detail] = apple_app_site_association(full(), base_path="/go")["applinks"]["details"]  # type: ignore[index]
    assert apple_matches(detail["components"], path) is opens_app


def test_aasa_of_many_apps_is_one_entry_well_under_apple_s_limit() -> None:
    """An entry an app repeated the same components: past 128 KB (Apple's
    limit, past which iOS drops the whole file) at about 47 apps."""
    every = [attrs.evolve(full(), ios=attrs.evolve(full().ios, bundle_id=f"com.example.a{i}"))
             for i in range(500)] + [full(), Platforms()]
    doc = apple_app_site_association(every)
    [detail] = doc["applinks"]["details"]  # type: ignore[index]
    assert len(detail["appIDs"]) == 501 and len(set(detail["appIDs"])) == 501
    assert len(json.dumps(doc)) < 128 * 1024 // 4


@pytest.mark.parametrize("ios", [IosPlatform(), IosPlatform(team_id="ABCDE12345"),
                                 IosPlatform(bundle_id="com.example.app",
                                             app_store_id="1")])
def test_aasa_without_an_app_id_lists_no_apps(ios: IosPlatform) -> None:
    assert apple_app_site_association(Platforms(ios=ios)) == {"applinks": {"details": []}}


# -- assetlinks.json --------------------------------------------------------------------


def test_assetlinks_statement() -> None:
    assert assetlinks(full()) == [{
        "relation": ["delegate_permission/common.handle_all_urls"],
        "target": {
            "namespace": "android_app",
            "package_name": "com.example.app",
            "sha256_cert_fingerprints": [FP],
        },
    }]
    json.dumps(assetlinks(full()))


@pytest.mark.parametrize("android", [
    AndroidPlatform(), AndroidPlatform(package_name="com.example.app"),
    AndroidPlatform(sha256_cert_fingerprints=(FP,)),
])
def test_assetlinks_empty_without_package_and_fingerprint(android: AndroidPlatform) -> None:
    assert assetlinks(Platforms(android=android)) == []


@pytest.mark.parametrize(("section", "key", "longest"), [
    ("ios", "bundleId", "com." + "a" * 151),  # App Store Connect: 155 characters
    ("android", "packageName", "com." + "a" * 251),  # 255
    ("ios", "scheme", "a" * 64),
    ("android", "scheme", "a" * 64),
])
def test_lengths_up_to_the_limit_are_accepted_and_one_more_is_not(
        section: str, key: str, longest: str) -> None:
    accepted = apply_platforms_patch(full(), {section: {key: longest}})
    assert accepted.to_json()[section][key] == longest
    with pytest.raises(ValidationError) as info:
        apply_platforms_patch(full(), {section: {key: longest + "a"}})
    assert info.value.field == f"{section}.{key}"
