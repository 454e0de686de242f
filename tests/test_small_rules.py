"""Idempotency, rate limiting, config and error-tree rules (pure)."""

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import config as config_mod
from svc_engine import errors
from svc_engine.idempotency import StoredResponse, check_key, fingerprint, replay_or_conflict
from svc_engine.ids import is_uuid, new_id
from svc_engine.invites import INVITE_TTL_MS, check_email, new_invite
from svc_engine.keys import KeyKind, Mode
from svc_engine.plans import Plan
from svc_engine.ratelimit import Bucket, Verdict, take
from svc_engine.records import Role


@pytest.mark.parametrize("key", ["a", "x" * 255, "8d7f-uuid-like", "~!@#"])
def test_idempotency_key_accepted(key: str) -> None:
    assert check_key(key) == key


@pytest.mark.parametrize("key", ["", "x" * 256, "has space", "tab\t", "é", "\x00"])
def test_idempotency_key_malformed(key: str) -> None:
    with pytest.raises(errors.ValidationError):
        check_key(key)


@pytest.mark.parametrize("code", range(256))
def test_idempotency_key_character_by_character(code: int) -> None:
    """Visible ASCII (33-126) and nothing else, alone and inside a key."""
    for key in (chr(code), f"a{chr(code)}b"):
        if 33 <= code <= 126:
            assert check_key(key) == key
        else:
            with pytest.raises(errors.ValidationError):
                check_key(key)


@given(st.text(max_size=300))
def test_idempotency_key_rule_as_written(key: str) -> None:
    ok = 1 <= len(key) <= 255 and all(33 <= ord(c) <= 126 for c in key)
    if ok:
        assert check_key(key) == key
    else:
        with pytest.raises(errors.ValidationError):
            check_key(key)


def test_replay_same_request_conflict_other() -> None:
    fp = fingerprint("POST", "/v1/x", b"{}")
    stored = StoredResponse(fp, 201, "application/json", b'{"a":1}', 5)
    assert replay_or_conflict(None, fp) is None
    assert replay_or_conflict(stored, fp) is stored
    with pytest.raises(errors.IdempotencyKeyReused) as e:
        replay_or_conflict(stored, fingerprint("POST", "/v1/x", b'{"b":1}'))
    assert e.value.status == 409
    with pytest.raises(errors.IdempotencyKeyReused):
        replay_or_conflict(stored, fingerprint("POST", "/v1/y", b"{}"))


def test_rate_limit_bucket_refills() -> None:
    v = take(None, rate=1, burst=2, now_ms=0)
    v = take(v.bucket, rate=1, burst=2, now_ms=0)
    assert v.allowed
    v = take(v.bucket, rate=1, burst=2, now_ms=0)
    assert not v.allowed and v.retry_after_s == 1
    v = take(v.bucket, rate=1, burst=2, now_ms=1000)
    assert v.allowed


def test_rate_limit_bucket_arithmetic() -> None:
    """Refill at ``rate`` a second up to ``burst``; a refusal's Retry-After is
    the whole seconds until the next token (at least 1); a clock that steps
    back refills nothing."""
    first = take(None, rate=2, burst=3, now_ms=5_000)
    assert first == Verdict(True, Bucket(2.0, 5_000))
    empty = Bucket(0.0, 5_000)
    assert take(empty, rate=2, burst=3, now_ms=5_250) == Verdict(False, Bucket(0.5, 5_250), 1)
    assert take(empty, rate=2, burst=3, now_ms=5_500) == Verdict(True, Bucket(0.0, 5_500))
    # a long pause fills the bucket to its burst, no further
    assert take(empty, rate=2, burst=3, now_ms=60_000) == Verdict(True, Bucket(2.0, 60_000))
    # slow refill: 0.1 a second, so 10 s from empty, 6 s from 0.4
    assert take(empty, rate=0.1, burst=1, now_ms=5_000).retry_after_s == 10
    assert take(Bucket(0.4, 0), rate=0.1, burst=1, now_ms=0).retry_after_s == 6
    # no refill at all: an hour
    assert take(empty, rate=0, burst=1, now_ms=9_000) == Verdict(False, Bucket(0.0, 9_000), 3600)
    # the wall clock stepped back a minute: no tokens made or taken away
    assert take(Bucket(0.5, 60_000), rate=1, burst=3, now_ms=0) == Verdict(
        False, Bucket(0.5, 0), 1)


@given(st.binary(min_size=16, max_size=16))
def test_new_ids_are_uuid4(rb: bytes) -> None:
    assert is_uuid(new_id(rb), v4=True)


def test_is_uuid() -> None:
    assert is_uuid("123e4567-e89b-42d3-a456-426614174000", v4=True)
    assert not is_uuid("123e4567-e89b-12d3-a456-426614174000", v4=True)
    assert not is_uuid("123e4567e89b42d3a456426614174000")
    assert not is_uuid(5)


def test_config_precedence_and_parsing() -> None:
    cfg = config_mod.load({"SVC_PORT": "9000", "SVC_MAP_SIZE": "1GiB", "SVC_ACCESS_LOG": "off",
                           "SVC_HOST": "0.0.0.0"}, {"host": "127.0.0.2"})
    assert cfg.port == 9000 and cfg.map_size == 1 << 30 and cfg.access_log is False
    assert cfg.host == "127.0.0.2"
    assert cfg.base_url == "http://127.0.0.2:9000"
    assert config_mod.load({"SVC_MAP_SIZE": "1TiB"}, {}).map_size == 1 << 40
    assert config_mod.load({}, {}).webhook_local_receivers is True  # SPEC allows them
    assert config_mod.load({"SVC_WEBHOOK_LOCAL_RECEIVERS": "false"},
                           {}).webhook_local_receivers is False
    assert config_mod.load({"SVC_MAP_SIZE": "2t"}, {}).map_size == 2 << 40
    with pytest.raises(errors.ValidationError):
        config_mod.load({"SVC_PORT": "eighty"}, {})


@pytest.mark.parametrize(("env", "named"), [
    ({"SVC_PORT": "99999"}, "SVC_PORT"),
    ({"SVC_PORT": "-1"}, "SVC_PORT"),
    ({"SVC_MAX_CONNECTIONS": "-1"}, "SVC_MAX_CONNECTIONS"),
    ({"SVC_MAX_IN_FLIGHT": "0"}, "SVC_MAX_IN_FLIGHT"),
    ({"SVC_SHUTDOWN_GRACE": "-5"}, "SVC_SHUTDOWN_GRACE"),
    ({"SVC_BODY_TIMEOUT": "0"}, "SVC_BODY_TIMEOUT"),
    ({"SVC_MAP_SIZE": "1K"}, "SVC_MAP_SIZE"),
    ({"SVC_LOG_LEVEL": "verbose"}, "SVC_LOG_LEVEL"),
    ({"SVC_CERTFILE": "/etc/cert.pem"}, "SVC_KEYFILE"),
    ({"SVC_KEYFILE": "/etc/key.pem"}, "SVC_KEYFILE"),
    ({"SVC_PUBLIC_URL": "notaurl"}, "SVC_PUBLIC_URL"),
    ({"SVC_PUBLIC_URL": "ftp://go.example.com"}, "SVC_PUBLIC_URL"),
    ({"SVC_PUBLIC_URL": "https://go.example.com:99999"}, "SVC_PUBLIC_URL"),
    ({"SVC_MAP_SIZE": "infG"}, "SVC_MAP_SIZE"),  # an OverflowError traceback, once
    ({"SVC_HOST": ""}, "SVC_HOST"),  # listened everywhere, links on "http://:8080"
    ({"SVC_MAP_SIZE": "nanT"}, "SVC_MAP_SIZE"),
    ({"SVC_MAP_SIZE": "1e9T"}, "SVC_MAP_SIZE"),  # past what LMDB can take
    ({"SVC_WEBHOOK_RETRY_SCALE": "inf"}, "SVC_WEBHOOK_RETRY_SCALE"),
    ({"SVC_WEBHOOK_ALLOW_CIDRS": "10.0.0.0/8,notacidr"}, "SVC_WEBHOOK_ALLOW_CIDRS"),
    # a public origin: no query (every short link would carry it), no user info
    ({"SVC_PUBLIC_URL": "https://go.example.com/?a=b"}, "SVC_PUBLIC_URL"),
    ({"SVC_PUBLIC_URL": "https://admin:pw@go.example.com"}, "SVC_PUBLIC_URL"),
    ({"SVC_PUBLIC_URL": "https://go.example.com/#x"}, "SVC_PUBLIC_URL"),
    ({"SVC_MAX_BODY_BYTES": "0"}, "SVC_MAX_BODY_BYTES"),  # every body a 413
    ({"SVC_RATE_LIMIT_PER_CLIENT": "-1"}, "SVC_RATE_LIMIT_PER_CLIENT"),  # 0 is "off"
    ({"SVC_RATE_LIMIT_PER_KEY": "-1"}, "SVC_RATE_LIMIT_PER_KEY"),
    ({"SVC_EVENT_RETENTION_DAYS": "-1"}, "SVC_EVENT_RETENTION_DAYS"),
    ({"SVC_ACCESS_LOG": "maybe"}, "SVC_ACCESS_LOG"),  # a switch is on or off, never guessed
    ({"SVC_WEBHOOK_LOCAL_RECEIVERS": "2"}, "SVC_WEBHOOK_LOCAL_RECEIVERS"),
])
def test_a_value_a_setting_cannot_take_is_refused_naming_it(env: dict[str, str],
                                                            named: str) -> None:
    with pytest.raises(errors.ValidationError) as info:
        config_mod.load(env, {})
    assert info.value.field == named and named in info.value.message
    with pytest.raises(errors.ValidationError):  # a flag is checked as its variable is
        config_mod.load({}, {"port": 70000})


@pytest.mark.parametrize(("text", "value"), [
    ("1", True), ("true", True), ("YES", True), (" On ", True),
    ("0", False), ("false", False), ("No", False), ("OFF", False), ("", False),
])
def test_a_switch_takes_the_usual_spellings_of_on_and_off(text: str, value: bool) -> None:
    for env in ("SVC_ACCESS_LOG", "SVC_WEBHOOK_LOCAL_RECEIVERS"):
        cfg = config_mod.load({env: text}, {})
        assert (cfg.access_log if env == "SVC_ACCESS_LOG" else cfg.webhook_local_receivers) \
            is value, (env, text)


@pytest.mark.parametrize(("given", "kept"), [
    ("http://bücher.example", "http://xn--bcher-kva.example"),
    ("HTTPS://Go.Example.COM.:8443/links/", "https://go.example.com:8443/links/"),
    ("http://[::1]:8080", "http://[::1]:8080"),
    ("http://127.0.0.1:8000/x", "http://127.0.0.1:8000/x"),
    ("http://svc.example\u3002", "http://svc.example"),  # IDNA makes it a dot
    ("http://b\u00fccher.example\uff0e/x", "http://xn--bcher-kva.example/x"),
])
def test_the_public_url_is_kept_as_browsers_send_its_host(given: str, kept: str) -> None:
    assert config_mod.load({"SVC_PUBLIC_URL": given}, {}).public_url == kept
    assert config_mod.load({}, {"public_url": given}).public_url == kept


@pytest.mark.parametrize("url", ["http://./", "http://a\u200db.example"])
def test_a_public_url_whose_host_is_no_name_is_refused(url: str) -> None:
    with pytest.raises(errors.ValidationError) as info:
        config_mod.load({"SVC_PUBLIC_URL": url.encode().decode("unicode_escape")}, {})
    assert info.value.field == "SVC_PUBLIC_URL"


def test_values_at_the_edges_are_taken() -> None:
    cfg = config_mod.load({"SVC_PORT": "0", "SVC_MAX_LAG_MS": "0", "SVC_LOG_LEVEL": "WARNING",
                           "SVC_PUBLIC_URL": "https://go.example.com/links",
                           "SVC_WEBHOOK_ALLOW_CIDRS": "10.0.0.0/8, fd00::/8"}, {})
    assert cfg.port == 0 and cfg.webhook_allow_cidrs == ("10.0.0.0/8", "fd00::/8")


@pytest.mark.parametrize("text", ["a\x00b", "a\x01b", "line\nbreak", "tab\there"])
def test_names_descriptions_and_invited_emails_have_no_control_characters(text: str) -> None:
    """A NUL in an organization's name was written into every dashboard page."""
    from svc_engine.webhook_endpoint import validate_description

    with pytest.raises(errors.ValidationError):
        validate_description(text)
    with pytest.raises(errors.ValidationError):
        check_email(f"{text}@example.com")
    assert validate_description("Orders -> CRM, café ☕") == "Orders -> CRM, café ☕"


async def test_org_project_and_key_names_have_no_control_characters(store: Any) -> None:
    from web import tenancy
    from web.services import system_random

    for bad in ("a\x00b", "a\x1bb"):
        with pytest.raises(errors.ValidationError):
            await tenancy.create_org(store, bad, Plan.STARTER, system_random, 1)
    org = await tenancy.create_org(store, "Ünïcode Org ✓", Plan.GROWTH, system_random, 1)
    with pytest.raises(errors.ValidationError):
        await tenancy.create_project(store, org.id, "p\x07", system_random, 1)
    project, _ = await tenancy.create_project(store, org.id, "App", system_random, 1)
    with pytest.raises(errors.ValidationError):
        await tenancy.create_key(store, project.id, KeyKind.SECRET, Mode.TEST, "k\x00",
                                 system_random, 1)


def test_config_fields_match_settings_table() -> None:
    import attrs
    names = [f.name for f in attrs.fields(config_mod.Config)]
    assert [s.name for s in config_mod.SETTINGS] == names
    defaults = config_mod.Config()
    for s in config_mod.SETTINGS:
        assert getattr(defaults, s.name) == s.default, s.name


def test_error_tree_statuses() -> None:
    table = {
        errors.ValidationError: (400, "validation_error"),
        errors.InvalidDomain: (400, "invalid_domain"),
        errors.DestinationBlocked: (400, "destination_blocked"),
        errors.InvalidApiKey: (401, "invalid_api_key"),
        errors.WrongKeyKind: (403, "wrong_key_kind"),
        errors.ProjectSuspended: (403, "project_suspended"),
        errors.InstallNotFound: (404, "install_not_found"),
        errors.RateLimited: (429, "rate_limited"),
        errors.LinkQuotaExceeded: (429, "link_quota_exceeded"),
        errors.InternalError: (500, "internal_error"),
        errors.IdempotencyKeyReused: (409, "idempotency_key_reused"),
        errors.InstallIdConflict: (409, "install_id_conflict"),
        errors.InstallNotRegistered: (409, "install_not_registered"),
    }
    for cls, (status, code) in table.items():
        assert (cls.status, cls.code) == (status, code), cls
    assert issubclass(errors.StoreFull, errors.InternalError)
    assert not issubclass(errors.RemoteError, errors.CallerError)


def test_the_dashboard_is_at_the_public_origin_s_root() -> None:
    """With a path in SVC_PUBLIC_URL (a proxy serving the API and links under
    it) the dashboard's pages, forms and cookie still name /dashboard at the
    root: `svc serve` printed, and invitations linked, /go/dashboard, where
    none of it worked."""
    cfg = config_mod.load({"SVC_PUBLIC_URL": "https://example.com/go/"}, {})
    assert cfg.base_url == "https://example.com/go"
    assert cfg.dashboard_url == "https://example.com/dashboard"
    plain = config_mod.load({"SVC_PORT": "9000"}, {})
    assert plain.dashboard_url == "http://127.0.0.1:9000/dashboard"


@pytest.mark.parametrize(("sent", "kept"), [
    ("DE", "DE"), (" fr ", "FR"), ("XX", None), ("T1", None), ("ZZ", None),
    ("EU", None), ("AP", None),  # a GeoIP continent, not a country
    ("", None), (None, None), ("DEU", None),
])
def test_a_country_is_a_two_letter_country_or_none(sent: str | None, kept: str | None) -> None:
    from svc_engine.clicks import clean_country

    assert clean_country(sent) == kept


def test_the_quotas_are_the_readme_s_plans_table() -> None:
    """README's Plans table is what the service enforces, number for number."""
    import re
    from pathlib import Path

    from svc_engine.plans import QUOTAS

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text(encoding="utf-8")
    section = text.split("### Plans", 1)[1]
    rows = re.findall(r"^\| (starter|growth|scale) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$",
                      section, re.M)
    assert [r[0] for r in rows] == ["starter", "growth", "scale"]

    def number(cell: str) -> int | None:
        cell = cell.strip()
        return None if cell == "unlimited" else int(cell.replace(",", ""))

    for plan, links, projects, webhooks, members in rows:
        quota = QUOTAS[Plan(plan)]
        assert (quota.links, quota.projects, quota.webhooks, quota.members) == (
            number(links), number(projects), webhooks.strip() == "yes", number(members)), plan


def test_an_invited_address_is_at_most_254_characters() -> None:
    """RFC 5321's limit on a path: 254 characters of address."""
    longest = "a" * 64 + "@" + ".".join(["b" * 63, "c" * 63, "d" * 61])
    assert len(longest) == 254 and check_email(longest) == longest
    with pytest.raises(errors.ValidationError):
        check_email("a" + longest)


def test_an_invitation_takes_48_random_bytes_and_lasts_a_week() -> None:
    with pytest.raises(ValueError):
        new_invite(b"\x01" * 47, "org", "ana@example.com", Role.DEVELOPER, "u", 0)
    token, invite = new_invite(b"\x01" * 48, "org", "Ana@Example.com", Role.DEVELOPER, "u", 5)
    assert token and invite.email == "ana@example.com"
    assert invite.expires_at_ms - invite.created_at_ms == INVITE_TTL_MS == 7 * 86_400_000
