"""Integers past 64 bits in JSON bodies. orjson decodes an integer outside
-2^63 to 2^64-1 as the nearest float without an error, so
123456789012345678901234567890 in a link's params or an event's properties
was stored as 1.2345678901234568e+29 and answered 201/200. Such a number is
now 400 ``validation_error`` naming its field, on every endpoint (the events
batch checks the properties it keeps: nothing else of it is stored); integers
within the bounds and long numbers sent as strings are kept exactly.

The end-to-end tests run the service on a real socket (port 0)."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import orjson
import pytest

from tests.deferred_helpers import SDK, init_body, new_install
from tests.server_process import ServerProcess
from web.http import EXACT_INT_MAX, EXACT_INT_MIN, inexact_error, inexact_integer

BIG = "123456789012345678901234567890"


# -- the scan (pure) ---------------------------------------------------------------------


@pytest.mark.parametrize(("body", "expected"), [
    (b'{"a": 1, "s": "123456789012345678901234567890"}', None),
    (b"[18446744073709551615, -9223372036854775808, 9223372036854775807]", None),
    (b'{"f": 0.12345678901234567890123, "e": 1.5e-12345678901234567890}', None),
    (b'{"params": {"big": 123456789012345678901234567890}}', (BIG, "params.big")),
    (b"[1, 18446744073709551616]", ("18446744073709551616", "[1]")),
    (b'{"n": -9223372036854775809}', ("-9223372036854775809", "n")),
    (b"123456789012345678901234567890", (BIG, None)),
    (b'{"events": [{"properties": {}}, {"properties": {"k": [1, {"revenue": '
     b'-99999999999999999999}]}}]}',
     ("-99999999999999999999", "events[1].properties.k[1].revenue")),
    (b'{"a\\"b": "\\\\", "c": 99999999999999999999}', ("99999999999999999999", "c")),
    # the bounds themselves are exact: the first past them is named
    (b'{"a": [18446744073709551615, -9223372036854775808, 18446744073709551616]}',
     ("18446744073709551616", "a[2]")),
    # a duplicate key's earlier value is dropped by orjson too: nothing changed
    (b'{"a": 123456789012345678901234567890, "a": 1}', None),
])
def test_the_integers_orjson_would_change(body: bytes, expected: tuple[str, str | None] | None,
                                          ) -> None:
    orjson.loads(body)  # a body orjson takes
    assert inexact_integer(body) == expected


def test_bounds_are_what_orjson_decodes_exactly() -> None:
    for n in (EXACT_INT_MIN, EXACT_INT_MAX):
        assert orjson.loads(str(n)) == n and isinstance(orjson.loads(str(n)), int)
    for n in (EXACT_INT_MIN - 1, EXACT_INT_MAX + 1):
        assert isinstance(orjson.loads(str(n)), float)
        assert inexact_integer(str(n).encode()) == (str(n), None)


def test_nesting_past_the_standard_decoder_is_still_scanned() -> None:
    """orjson takes 1024 levels; the standard library's decoder recurses out
    sooner, so such a body is scanned for the literals themselves."""
    deep = b"[" * 1000 + BIG.encode() + b"]" * 1000
    assert inexact_integer(deep) == (BIG, None)
    in_strings = (b'{"j": ' + b"[" * 1000 + b'"123456789012345678901234567890", 1.2345678901234'
                  b"56789012e5" + b"]" * 1000 + b', "s": "\\"99999999999999999999\\""}')
    orjson.loads(in_strings)
    assert inexact_integer(in_strings) is None
    for n in (EXACT_INT_MAX, EXACT_INT_MIN, 12345678901234567):  # long, yet exact
        within = b"[" * 1000 + str(n).encode() + b"]" * 1000
        assert orjson.loads(within) is not None and inexact_integer(within) is None, n


# -- through the real HTTP API -----------------------------------------------------------


@pytest.fixture
def server(server_factory: Callable[[], ServerProcess]) -> Iterator[ServerProcess]:
    srv = server_factory().start()
    yield srv
    srv.stop()


def send(srv: ServerProcess, key: str, method: str, path: str, raw: str) -> httpx.Response:
    """``raw`` as the body, byte for byte (a JSON encoder here could not write BIG)."""
    with srv.client(key, **SDK) as c:
        return c.request(method, path, content=raw.encode(),
                         headers={"idempotency-key": str(uuid.uuid4())})


def refused(r: httpx.Response, field: str) -> str:
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["code"] == "validation_error" and error["field"] == field
    message: str = error["message"]
    assert message.startswith(f"{field}: the integer ") and "send it as a string" in message
    return message


@pytest.mark.e2e
def test_links_refuse_an_integer_past_64_bits_and_keep_the_others(server: ServerProcess,
                                                                  ) -> None:
    msg = refused(send(server, "sk_test", "POST", "/v1/links",
                       f'{{"path": "/p", "params": {{"big": {BIG}}}}}'), "params.big")
    assert BIG in msg
    refused(send(server, "pk_test", "POST", "/v1/sdk/links",
                 f'{{"path": "/p", "params": {{"big": -{BIG}}}}}'), "params.big")
    made = send(server, "sk_test", "POST", "/v1/links",
                f'{{"path": "/p", "params": {{"max": 9223372036854775807, "s": "{BIG}"}}}}')
    assert made.status_code == 201, made.text
    link = made.json()
    refused(send(server, "sk_test", "PATCH", f"/v1/links/{link['id']}",
                 f'{{"params": {{"n": {BIG}}}}}'), "params.n")
    with server.client("sk_test") as c:
        listed = c.get("/v1/links").json()["data"]
        raw = c.get(f"/v1/links/{link['id']}").content
    assert [x["id"] for x in listed] == [link["id"]]  # the refused ones made nothing
    assert b'"params":{"max":9223372036854775807,"s":"' + BIG.encode() + b'"}' in raw


@pytest.mark.e2e
def test_events_refuse_an_integer_past_64_bits_and_keep_the_others(server: ServerProcess,
                                                                   ) -> None:
    install = new_install()
    with server.client("pk_test", **SDK) as c:
        assert c.post("/v1/sdk/init", json=init_body(install, "ios")).status_code == 200

    def batch(properties: str) -> str:
        return (f'{{"installId": "{install}", "events": [{{"id": "{uuid.uuid4()}", '
                f'"name": "buy", "occurredAt": "2026-01-02T03:04:05Z", '
                f'"properties": {properties}}}]}}')

    refused(send(server, "pk_test", "POST", "/v1/sdk/events", batch(f'{{"n": {BIG}}}')),
            "events[0].properties.n")
    refused(send(server, "pk_test", "POST", "/v1/sdk/events",
                 batch(f'{{"revenue": {BIG}, "currency": "EUR"}}')),
            "events[0].properties.revenue")
    kept = send(server, "pk_test", "POST", "/v1/sdk/events",
                batch('{"u": 18446744073709551615, "i": -9223372036854775808, '
                      f'"s": "{BIG}", "revenue": 12, "currency": "EUR"}}'))
    assert kept.status_code == 200
    assert kept.json() == {"accepted": 1, "duplicates": 0, "rejected": []}
    with server.client("sk_test") as c:
        exported = c.get("/v1/export/conversions", params={"from": "2026-01-01"}).text
        summary: dict[str, Any] = c.get("/v1/analytics/summary",
                                        params={"from": "2026-01-01", "to": "2026-01-03"}).json()
    (line,) = exported.splitlines()  # only the accepted batch was stored
    assert (b'"properties":{"u":18446744073709551615,"i":-9223372036854775808,"s":"'
            + BIG.encode() + b'","revenue":12,"currency":"EUR"}') in line.encode()
    assert summary["conversions"]["total"] == 1
    assert summary["conversions"]["revenue"] == {"EUR": "12"}


@pytest.mark.e2e
def test_events_check_only_the_properties_they_keep(server: ServerProcess) -> None:
    """The batch reads its body again only when the kept properties, encoded,
    hold a ``+`` (web/api_events.py ``validated``): a float of an exponent or a
    ``+`` in a text is kept as sent, a long integer refuses its own event only,
    and one in a field the batch ignores
    (not stored) refuses nothing."""
    install = new_install()
    with server.client("pk_test", **SDK) as c:
        assert c.post("/v1/sdk/init", json=init_body(install, "ios")).status_code == 200

    def event(properties: str, extra: str = "", name: str = '"buy"') -> str:
        return (f'{{"id": "{uuid.uuid4()}", "name": {name}, '
                f'"occurredAt": "2026-01-02T03:04:05Z", "properties": {properties}{extra}}}')

    def batch(*events: str, extra: str = "") -> str:
        return f'{{"installId": "{install}", "events": [{", ".join(events)}]{extra}}}'

    # an event refused for its name: the reference check runs; the other is
    # refused for its integer, alone, and with no event left the batch is 400
    # on the first refused
    both = send(server, "pk_test", "POST", "/v1/sdk/events",
                batch(event("{}", name='""'), event(f'{{"n": [1, {BIG}]}}')))
    assert both.status_code == 400 and both.json()["error"]["field"] == "events[0].name"
    alone = send(server, "pk_test", "POST", "/v1/sdk/events",
                 batch(event('{"k": 2}'), event(f'{{"n": [1, {BIG}]}}')))
    assert alone.status_code == 200, alone.text
    assert alone.json()["accepted"] == 1
    assert [r["field"] for r in alone.json()["rejected"]] == ["events[1].properties.n[1]"]
    plus = send(server, "pk_test", "POST", "/v1/sdk/events",
                batch(event('{"f": 1e20, "phone": "+44 20 7946 0000"}'),
                      event('{"g": 1.5E+300}')))
    assert plus.json() == {"accepted": 2, "duplicates": 0, "rejected": []}, plus.text
    ignored = send(server, "pk_test", "POST", "/v1/sdk/events",
                   batch(event('{"k": 1}', extra=f', "x": {BIG}'), extra=f', "y": {BIG}'))
    assert ignored.json() == {"accepted": 1, "duplicates": 0, "rejected": []}, ignored.text
    with server.client("sk_test") as c:
        exported = c.get("/v1/export/conversions", params={"from": "2026-01-01"}).text
    properties = sorted(orjson.dumps(orjson.loads(line)["properties"]).decode()
                        for line in exported.splitlines())
    assert properties == ['{"f":1e+20,"phone":"+44 20 7946 0000"}', '{"g":1.5e+300}',
                          '{"k":1}', '{"k":2}'], properties
    assert BIG not in exported and "e+29" not in exported


@pytest.mark.e2e
def test_any_body_refuses_it(server: ServerProcess) -> None:
    refused(send(server, "sk_test", "PATCH", "/v1/deferred/settings",
                 f'{{"probabilisticWindowMinutes": {BIG}}}'), "probabilisticWindowMinutes")
    refused(send(server, "pk_test", "POST", "/v1/sdk/init",
                 f'{{"installId": "{new_install()}", "isFirstLaunch": true, "x": [0, {BIG}]}}'),
            "x[1]")
    whole = send(server, "sk_test", "POST", "/v1/links", BIG)
    assert whole.status_code == 400 and "field" not in whole.json()["error"]
    assert whole.json()["error"]["message"].startswith("the request body: the integer ")
    long_key = "k" * 5_000  # the sender's to make: not echoed whole
    answer = send(server, "sk_test", "PATCH", "/v1/deferred/settings",
                  f'{{"{long_key}": {BIG}}}')
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["field"] == "k" * 96 + "..." and len(error["message"]) < 300


def test_a_refused_integer_and_its_field_are_shown_shortened_past_their_bounds() -> None:
    """The error quotes the integer whole up to 32 characters (and its
    first 24 with its length past that), and the field whole up to 100
    characters (a key is the sender's to make long; its first 96 past that)."""
    assert "the integer " + "9" * 32 + " cannot" in inexact_error("9" * 32, "a").message
    longer = inexact_error("9" * 33, "a").message
    assert "the integer " + "9" * 24 + "... (33 characters) cannot" in longer
    field = "events[0].properties." + "k" * 79  # 100 characters
    assert inexact_error("9" * 20, field).field == field
    assert inexact_error("9" * 20, field + "k").field == field[:96] + "..."
