"""The client's address and country as the service reads them (README:
"Behind a proxy", SVC_CLIENT_IP_HEADER, SVC_COUNTRY_HEADER, SVC_GEOIP_DB):
a forwarded address is believed only when the operator named its header; a
country comes from the trusted header, else from the local database, and
a proxy's "unknown" marker falls through to the database."""

from __future__ import annotations

from typing import Any, cast

import attrs
import pytest

from svc_engine.config import Config
from web.client_facts import ClientFacts
from web.http import Request
from web.network_keyring import NetworkKeyring

PEER = "198.51.100.1"
FORGED = "203.0.113.9"


def _request(*headers: tuple[str, str]) -> Request:
    scope = {"method": "GET", "path": "/abc", "query_string": b"", "client": (PEER, 50000),
             "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers]}

    async def receive() -> dict[str, object]:
        raise AssertionError("no body is read")

    return Request(scope, receive)


def _facts(**settings: Any) -> ClientFacts:
    return ClientFacts(attrs.evolve(Config(), **settings), cast(NetworkKeyring, None))


def test_a_forwarded_address_is_believed_only_under_the_named_header() -> None:
    forged = _request(("x-forwarded-for", FORGED), ("x-real-ip", FORGED))
    assert _facts().client_ip(forged) == PEER  # no proxy named: anyone could write these
    behind = _facts(client_ip_header="X-Forwarded-For")
    assert behind.client_ip(forged) == FORGED
    assert behind.client_ip(_request(("x-forwarded-for", f"{FORGED}, 192.0.2.7"))) == "192.0.2.7"
    assert behind.client_ip(_request()) == PEER  # the header not sent: the peer


class _Db:
    """A MaxMind-format reader's ``get``: the record of an address."""

    def __init__(self, records: dict[str, object]) -> None:
        self.records = records

    def get(self, ip: str) -> object:
        return self.records.get(ip)


@pytest.fixture
def geo(monkeypatch: pytest.MonkeyPatch) -> _Db:
    import maxminddb

    db = _Db({PEER: {"country": {"iso_code": "de"}}, FORGED: {"continent": {"code": "EU"}},
              "192.0.2.7": {"country": {"iso_code": "EU"}}})
    monkeypatch.setattr(maxminddb, "open_database", lambda path: db)
    return db


def test_the_country_comes_from_the_header_else_the_database(geo: _Db) -> None:
    facts = _facts(country_header="CF-IPCountry", geoip_db="/geo.mmdb")
    assert facts.country(_request(("cf-ipcountry", "fr"))) == "FR"  # the header wins
    assert facts.country(_request()) == "DE"  # none sent: the database, of the peer
    for unknown in ("XX", "T1", ""):  # a proxy's "unknown": the database still knows
        assert facts.country(_request(("cf-ipcountry", unknown))) == "DE", unknown
    db_only = _facts(geoip_db="/geo.mmdb")
    assert db_only.country(_request(("cf-ipcountry", "fr"))) == "DE"  # header not trusted


def test_the_database_answers_for_the_believed_address_and_only_countries(geo: _Db) -> None:
    behind = _facts(client_ip_header="X-Forwarded-For", geoip_db="/geo.mmdb")
    assert behind.country(_request(("x-forwarded-for", FORGED))) is None  # no country record
    assert behind.country(_request(("x-forwarded-for", "192.0.2.7"))) is None  # a continent
    assert behind.country(_request(("x-forwarded-for", "192.0.2.99"))) is None  # unknown
    assert _facts(geoip_db="/geo.mmdb").country(_request(("x-forwarded-for", FORGED))) == "DE"
    assert _facts().country(_request()) is None  # no source at all
