"""The request schemas of the served OpenAPI document against the parsers:
every body below is sent to the service (real store, real handlers), which
must refuse it with 400 (or take it), and the document's schema for that
operation must refuse it too (or take it). A document looser than the
parsers (``"tags": [""]`` allowed) or stricter on ordinary input (a section
set to null refused) fails here. Every answer is also judged by the
contract (tests/openapi_contract.py)."""

from __future__ import annotations

from typing import Any

from tests.conftest import App
from tests.deferred_helpers import SDK, init_body, new_install
from tests.openapi_contract import contract_of

L = "{link}"  # the id of a link made first
U = "{url}"  # its short URL
I = "{install}"  # an install that reported its launch  # noqa: E741
U2048 = "{url of 2048}"  # the short URL with a query making it 2,048 characters, the limit
U2049 = "{url of 2049}"  # one more
FP = ":".join(["AB"] * 32)

Case = tuple[str, str, str, Any]  # key, method, path, body
_LINKS = ("sk_test", "POST", "/v1/links")
_PLATFORMS = ("sk_test", "PATCH", "/v1/platforms")
_SETTINGS = ("sk_test", "PATCH", "/v1/deferred/settings")
_HANDOFF = ("sk_test", "POST", "/v1/handoffs")
_HOOKS = ("sk_test", "POST", "/v1/webhooks/endpoints")


def _bodies(*bodies: Any) -> tuple[Any, ...]:
    return bodies


def _init(**fields: Any) -> dict[str, Any]:
    return {**init_body("9b9c8d7e-0000-4000-8000-000000000001", "ios"), **fields}


REFUSED: list[Case] = [
    *((*_LINKS, body) for body in _bodies(
        {"tags": [""]}, {"tags": ["   "]}, {"tags": [f"t{i}" for i in range(21)]},
        {"tags": ["x" * 51]}, {"tags": [1]}, {"tags": "a"},
        {"params": {f"k{i}": i for i in range(51)}}, {"params": {"": 1}},
        {"params": {"k" * 101: 1}}, {"params": {"k": "v" * 1001}}, {"params": {"k": [1]}},
        {"params": {"k": None}}, {"params": {"k": {"a": 1}}}, {"params": {"k": 2**63}},
        {"params": []},
        {"title": "t" * 201}, {"campaign": "c" * 101}, {"channel": "c" * 101},
        {"ogTitle": "o" * 201}, {"ogDescription": "d" * 1001}, {"title": "a\x00b"},
        {"title": 5},
        {"path": ""}, {"path": "no-slash"}, {"path": "/" + "p" * 2048}, {"path": "/a\x01"},
        {"path": None},
        {"webFallbackUrl": "ftp://example.com/x"}, {"iosFallbackUrl": "javascript:alert(1)"},
        {"androidFallbackUrl": "https://user@example.com/"},
        {"ogImageUrl": "https://exa mple.com/"},
        {"webFallbackUrl": "https://example.com/" + "a" * 2048},
        {"webFallbackUrl": "//example.com/x"}, {"webFallbackUrl": "https:///x"},
        {"webFallbackUrl": "https://example.com:99999/"}, {"ogImageUrl": 5},
        {"expiresAt": "tomorrow"}, {"expiresAt": "2030-01-31T12:00:00"},
        {"expiresAt": 1893456000},
        {"slug": "has space"}, {"slug": "s" * 65}, {"slug": "Dashboard"}, {"slug": "v1"},
        {"slug": ""}, {"slug": 5},
        {"domain": "not a domain"}, {"domain": "1.2.3.4"}, {"domain": "localhost"},
        {"domain": "http://go.example.com"}, {"domain": "go.example.123"}, {"domain": 42},
        {"domain": "svc.test:8080"},
        {"unknownField": 1}, {"id": "x"}, {"mode": "live"}, [], "x")),
    ("pk_test", "POST", "/v1/sdk/links", {"slug": "mine"}),
    ("pk_test", "POST", "/v1/sdk/links", {"domain": "svc.test"}),
    ("pk_test", "POST", "/v1/sdk/links", {"tags": [""]}),
    ("sk_test", "PATCH", f"/v1/links/{L}", {"slug": "x"}),
    ("sk_test", "PATCH", f"/v1/links/{L}", {"domain": "a.example.com"}),
    ("sk_test", "PATCH", f"/v1/links/{L}", {"path": None}),
    ("sk_test", "PATCH", f"/v1/links/{L}", {"tags": ["x" * 51]}),
    *(("sk_test", "POST", "/v1/domains", body) for body in _bodies(
        {"domain": "1.2.3.4"}, {"domain": "localhost"}, {"domain": "a.example", "x": 1}, {},
        {"domain": None}, {"domain": "go.example.123"}, {"domain": "a_b.example.com"},
        {"domain": "go.example.com:443"})),
    *((*_PLATFORMS, body) for body in _bodies(
        {"ios": {"teamId": "abc"}}, {"ios": {"appStoreId": "abc"}},
        {"ios": {"appStoreId": -5}}, {"ios": {"appStoreId": True}},
        {"ios": {"bundleId": "nodots"}}, {"ios": {"scheme": "https"}},
        {"ios": {"scheme": "JavaScript:"}}, {"ios": {"scheme": "1abc"}},
        {"android": {"packageName": "1com.x"}}, {"android": {"sha256CertFingerprints": ["AB"]}},
        {"android": {"sha256CertFingerprints": [f"{i:02X}" * 32 for i in range(11)]}},
        {"web": {"fallbackUrl": "ftp://x.example"}}, {"ios": 1}, {"ios": {"appId": "x"}},
        {"windows": {}})),
    *((*_SETTINGS, body) for body in _bodies(
        {"probabilisticWindowMinutes": 14}, {"probabilisticWindowMinutes": 361},
        {"probabilisticWindowMinutes": "60"}, {"probabilisticWindowMinutes": 60.5},
        {"iosLandingPage": 1}, {"unknown": True})),
    *((*_HANDOFF, body) for body in _bodies(
        {"userId": "u"}, {"userId": "u", "linkId": L, "url": U}, {"userId": "   ", "linkId": L},
        {"userId": "u" * 257, "linkId": L}, {"userId": "u", "url": "ftp://x.example/a"},
        {"userId": "u", "linkId": "nope"}, {"userId": "u", "linkId": L, "expiresInSeconds": 0},
        {"userId": "u", "linkId": L, "expiresInSeconds": 604801},
        {"userId": "u", "linkId": L, "expiresInSeconds": True},
        {"userId": "u", "linkId": L, "extra": 1}, {"linkId": L})),
    *(("pk_test", "POST", "/v1/sdk/init", body) for body in _bodies(
        _init(installId="not-a-uuid"), _init(installId="9b9c8d7e-0000-1000-8000-000000000000"),
        _init(sdkVersion=""), _init(sdkVersion="v" * 65), _init(platform=5),
        _init(isFirstLaunch="yes"), _init(osVersion="o" * 65),
        _init(installReferrer="r" * 4097))),
    *(("pk_test", "POST", "/v1/sdk/resolve", body) for body in _bodies(
        {"url": "no-scheme", "installId": I}, {"url": "", "installId": I},
        {"url": U, "installId": "bad"}, {"url": "https://x.example/" + "a" * 2048,
                                         "installId": I}, {"url": U, "installId": I,
                                                           "platform": 5})),
    ("pk_test", "POST", "/v1/sdk/handoffs/claim", {"userId": "  ", "installId": I}),
    ("pk_test", "POST", "/v1/sdk/handoffs/claim", {"userId": "u"}),
    *((*_HOOKS, body) for body in _bodies(
        {"url": "http://hooks.example.com/x"}, {"url": "not a url"}, {"description": "no url"},
        {"url": "https://a.example.com", "description": "d" * 201},
        {"url": "https://a.example.com", "events": []},
        {"url": "https://a.example.com", "events": ["purchase"]},
        {"url": "https://a.example.com/#frag"}, {"url": "https://user@a.example.com/"},
        {"url": "https://a.example.com/\u00fc"}, {"url": "https://a.example.com", "mode": "x"},
        {"url": "ftp://a.example.com/"}, {"url": "https://a.example.com", "description": 5})),
    # one past each length limit (the one itself is among ACCEPTED)
    (*_LINKS, {"webFallbackUrl": "https://example.com/" + "a" * 2029}),
    ("pk_test", "POST", "/v1/sdk/resolve", {"url": U2049, "installId": I}),
    (*_HANDOFF, {"userId": "u", "url": U2049}),
    *(("sk_test", "PATCH", "/v1/link-destinations", body) for body in _bodies(
        {"sdkAllowedHosts": ["https://x.example"]}, {"sdkAllowedHosts": ["1.2.3.4"]},
        {"sdkAllowedHosts": "x.example"}, {"other": []},
        {"sdkAllowedHosts": [f"h{i}.example" for i in range(101)]},
        {"sdkAllowedHosts": ["*.localhost"]})),
]

ACCEPTED: list[Case] = [
    (*_LINKS, {
        "path": "/product/42", "slug": "My_Slug-1",
        "params": {"color": "red", "size": 2, "ratio": 0.5, "gift": True, "big": 2**63 - 1,
                   "small": -(2**63)},
        "title": "Shoes\nfor\tyou", "campaign": "spring", "channel": "email",
        "tags": ["a", " b c ", "a"], "iosFallbackUrl": "https://apps.apple.com/app/id1",
        "androidFallbackUrl": "HTTP://EXAMPLE.COM/x?y=1#z",
        "webFallbackUrl": "https://b\u00fccher.example/\u00e4", "ogTitle": "T" * 200,
        "ogDescription": "D" * 1000, "ogImageUrl": "https://[::1]:8443/i.png",
        "expiresAt": "2099-01-31T12:00:00+02:00"}),
    (*_LINKS, {"domain": "SVC.TEST.", "slug": "on-default"}),
    (*_LINKS, {"domain": "Go.Example.com", "slug": "x1"}),
    (*_LINKS, {"title": "", "tags": None, "params": None, "expiresAt": None,
               "webFallbackUrl": None, "slug": None, "domain": None}),
    ("pk_test", "POST", "/v1/sdk/links", {}),
    ("pk_test", "POST", "/v1/sdk/links", {"path": "/x", "params": {"a": 1}, "tags": ["t" * 50]}),
    ("sk_test", "PATCH", f"/v1/links/{L}", {"title": None, "tags": [], "path": "/new"}),
    ("sk_test", "POST", "/v1/domains", {"domain": "Links.Example.ORG."}),
    ("sk_test", "POST", "/v1/domains", {"domain": "b\u00fccher.example"}),
    *((*_PLATFORMS, body) for body in _bodies(
        {"ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
                 "teamId": "ABCDE12345", "scheme": "exampleshop"},
         "android": {"packageName": "com.example.shop", "sha256CertFingerprints": [FP],
                     "scheme": "exampleshop"}, "web": {"fallbackUrl": "https://example.com/"}},
        {"ios": None}, {"ios": {"appStoreId": 1234567890}}, {"ios": {"appStoreId": " id123 "}},
        {"ios": {"scheme": "exampleshop://", "teamId": ""}},
        {"android": {"sha256CertFingerprints": ["ab" * 32, FP, FP]}},
        {"web": {"fallbackUrl": None}}, {})),
    *((*_SETTINGS, body) for body in _bodies(
        {"probabilisticWindowMinutes": 15}, {"probabilisticWindowMinutes": 360,
                                             "iosLandingPage": True}, {})),
    (*_HANDOFF, {"userId": " user-1 ", "linkId": L}),
    (*_HANDOFF, {"userId": "u", "url": U, "expiresInSeconds": 604800, "linkId": None}),
    ("pk_test", "POST", "/v1/sdk/init", {**init_body(new_install(), "Windows Phone 8.1"),
                                         "futureField": 1, "osVersion": None}),
    ("pk_test", "POST", "/v1/sdk/resolve", {"url": U, "installId": I, "platform": None}),
    ("pk_test", "POST", "/v1/sdk/resolve",
     {"url": "exampleshop://open?svc_link=" + U, "installId": I, "extra": True}),
    ("pk_test", "POST", "/v1/sdk/handoffs/claim", {"userId": " user-1 ", "installId": I}),
    (*_HOOKS, {"url": "https://hooks.example.com/x", "description": "  orders  ",
               "events": ["click", "click"]}),
    (*_HOOKS, {"url": "HTTP://LOCALHOST:9000/h"}),
    (*_HOOKS, {"url": "http://[::1]:8080/h?x=1", "events": None, "description": None}),
    ("sk_test", "PATCH", "/v1/link-destinations",
     {"sdkAllowedHosts": ["Example.COM", "*.example.com", "b\u00fccher.example", "x.example"]}),
    ("sk_test", "PATCH", "/v1/link-destinations", {"sdkAllowedHosts": None}),
    # each length limit itself (one more is among REFUSED)
    (*_LINKS, {"webFallbackUrl": "https://example.com/" + "a" * 2028}),
    ("pk_test", "POST", "/v1/sdk/resolve", {"url": U2048, "installId": I}),
    (*_HANDOFF, {"userId": "u", "url": U2048}),
    ("pk_test", "POST", "/v1/sdk/init", {**init_body(new_install(), "ios"), "sdkVersion": "v" * 64,
                                         "osVersion": "o" * 64}),
    ("pk_test", "POST", "/v1/sdk/init", {**init_body(new_install(), "android"),
                                         "installReferrer": "r" * 4096}),
]


def _fill(value: Any, names: dict[str, str]) -> Any:
    if isinstance(value, str):
        for name, real in names.items():
            value = value.replace(name, real)
        return value
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, names) for v in value]
    return value


async def _names(app: App) -> dict[str, str]:
    """A link, its short URL and a registered install, for the cases to name."""
    install = new_install()
    async with app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/p"})).json()
        assert (await c.post("/v1/domains", json={"domain": "go.example.com"})
                ).status_code == 201
    async with app.client("pk_test", **SDK) as c:
        assert (await c.post("/v1/sdk/init", json=init_body(install, "ios"))).status_code == 200
    padded = link["url"] + "?pad="
    return {L: link["id"], U: link["url"], I: install,
            U2048: padded + "a" * (2048 - len(padded)), U2049: padded + "a" * (2049 - len(padded))}


async def _run(app: App, cases: list[Case], *, accepted: bool) -> None:
    contract, recorder = await contract_of(app)
    names = await _names(app)
    wrong: list[str] = []
    for key, method, path, raw in cases:
        path, body = _fill(path, names), _fill(raw, names)
        async with recorder.client(app, key, **SDK) as c:
            r = await c.request(method, path, json=body)
        shown = repr(raw)[:90]
        if r.status_code >= 300 if accepted else r.status_code != 400:
            wrong.append(f"the service answered {r.status_code} to {method} {path} {shown}: "
                         f"{r.text[:200]} (the case is wrong)")
        elif (refused := contract.refuses(method, path, body)) is None:
            wrong.append(f"no request body documented for {method} {path}")
        elif refused == accepted:
            wrong.append(f"the document {'refuses' if accepted else 'accepts'} what the "
                         f"service {'takes' if accepted else 'refuses'}: {method} {path} "
                         f"{shown}")
    assert wrong == [], "\n".join(wrong)
    assert recorder.problems == [], "\n".join(recorder.problems)


async def test_bodies_the_parsers_refuse_the_document_refuses(app: App) -> None:
    await _run(app, REFUSED, accepted=False)


async def test_bodies_the_parsers_take_the_document_takes(app: App) -> None:
    await _run(app, ACCEPTED, accepted=True)


def test_the_default_domain_with_a_port_is_documented_as_the_parser_takes_it() -> None:
    """``domain`` may name the default domain as ``GET /v1/domains`` lists it
    (host:port, a single label): the schema built for that public URL takes
    what ``parse_link_create`` takes and refuses what it refuses."""
    from svc_engine.errors import CallerError
    from svc_engine.link_input import parse_link_create
    from tests.openapi_contract import Contract
    from web import api_events, api_webhooks  # noqa: F401 - they document their operations
    from web.openapi import document

    contract = Contract(document("http://localhost:8080"))
    wrong = []
    for domain in ("localhost:8080", "LocalHost.:8080", " localhost:8080 ", "localhost:8081",
                   "localhost", "localhost:", "otherhost:8080", "go.example.com:8080"):
        body = {"domain": domain}
        try:
            parse_link_create(body, allow_custom_slug=True, now_ms=0,
                              default_domain="localhost:8080")
            taken = True
        except CallerError:
            taken = False
        if contract.refuses("POST", "/v1/links", body) == taken:
            wrong.append(f"{domain!r}: the parser {'takes' if taken else 'refuses'} it")
    assert wrong == []
