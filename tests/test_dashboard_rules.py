"""Pure rules behind the dashboard: the role table against SPEC.md rule 6, team
rules, sessions, CSRF tokens, the sign-in throttle, plan changes, invitations."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine import csrf
from svc_engine.billing import Meter, Usage, check_plan_change, meters
from svc_engine.errors import Conflict, Forbidden, NotFound, ValidationError
from svc_engine.invites import INVITE_TTL_MS, Invite, check_email, is_open, new_invite, parse_role
from svc_engine.plans import Plan
from svc_engine.records import Membership, Role
from svc_engine.roles import (
    CONTACT_NOTE,
    MATRIX,
    WITHOUT_MEMBERSHIP,
    Action,
    allows,
    check_invite,
    check_removal,
    check_role_change,
    who_may,
)
from svc_engine.sessions import (
    ABSOLUTE_MS,
    IDLE_MS,
    TOUCH_MS,
    Session,
    encode_token,
    expires_at_ms,
    is_live,
    new_session,
    token_hash,
    touched,
)
from svc_engine.signin_throttle import (
    CLIENT_LIMIT,
    EMAIL_LIMIT,
    Failures,
    Limit,
    forget_failure,
    record_failure,
    retry_after_s,
)

OWNER, ADMIN, DEV, MKT = Role.OWNER, Role.ADMIN, Role.DEVELOPER, Role.MARKETER
EVERYONE = {OWNER, ADMIN, DEV, MKT}

# SPEC.md, Authentication, rule 6 (copied; the project does not read /work/shared).
SPEC_RULE_6 = ("Dashboard roles: API keys, Webhooks (add, edit, test, view deliveries): owners, "
               "admins, developers (marketers see a note to contact them). Team: everyone views, "
               "owners and admins manage. Billing: everyone views, owners manage. New project: "
               "owners and admins. New organization: anyone.")

# The rule, read literally: each clause of SPEC_RULE_6 and the actions it covers.
SPEC_CLAUSES: list[tuple[str, dict[Action, set[Role]]]] = [
    ("API keys, Webhooks (add, edit, test, view deliveries): owners, admins, developers",
     {Action.KEYS_VIEW: {OWNER, ADMIN, DEV}, Action.KEYS_MANAGE: {OWNER, ADMIN, DEV},
      Action.WEBHOOKS_VIEW: {OWNER, ADMIN, DEV}, Action.WEBHOOKS_MANAGE: {OWNER, ADMIN, DEV}}),
    ("Team: everyone views, owners and admins manage",
     {Action.TEAM_VIEW: EVERYONE, Action.TEAM_MANAGE: {OWNER, ADMIN}}),
    ("Billing: everyone views, owners manage",
     {Action.BILLING_VIEW: EVERYONE, Action.BILLING_MANAGE: {OWNER}}),
    ("New project: owners and admins", {Action.PROJECT_CREATE: {OWNER, ADMIN}}),
    ("New organization: anyone", {Action.ORG_CREATE: EVERYONE}),
]
# Rows the rule leaves open: everyone, except changing Platforms and Domains
# (app-signing and DNS settings: like API keys, owners, admins and developers).
NOT_IN_RULE_6 = {Action.SDK_VIEW: EVERYONE, Action.SESSION: EVERYONE,
                 Action.LINKS_VIEW: EVERYONE, Action.LINKS_MANAGE: EVERYONE,
                 Action.LIVE_VIEW: EVERYONE, Action.DEBUGGER_VIEW: EVERYONE,
                 Action.PLATFORMS_VIEW: EVERYONE, Action.PLATFORMS_MANAGE: {OWNER, ADMIN, DEV},
                 Action.DOMAINS_VIEW: EVERYONE, Action.DOMAINS_MANAGE: {OWNER, ADMIN, DEV}}


# -- the role table ---------------------------------------------------------------

@pytest.mark.parametrize(("clause", "rows"), SPEC_CLAUSES, ids=[c for c, _ in SPEC_CLAUSES])
def test_matrix_matches_spec_rule_6(clause: str, rows: dict[Action, set[Role]]) -> None:
    assert clause in SPEC_RULE_6
    for action, roles in rows.items():
        assert set(MATRIX[action]) == roles, action


def test_matrix_has_exactly_the_spec_rows_and_the_open_ones() -> None:
    covered = {a for _, rows in SPEC_CLAUSES for a in rows} | set(NOT_IN_RULE_6)
    assert set(MATRIX) == covered == set(Action)
    for action, roles in NOT_IN_RULE_6.items():
        assert set(MATRIX[action]) == roles


def test_marketers_get_the_contact_note_on_keys_and_webhooks() -> None:
    assert "marketers see a note to contact them" in SPEC_RULE_6
    assert {Action.KEYS_VIEW, Action.WEBHOOKS_VIEW} == CONTACT_NOTE
    assert all(not allows(MKT, a) for a in CONTACT_NOTE)


@pytest.mark.parametrize("action", list(Action))
@pytest.mark.parametrize("role", [*Role, None])
def test_allows_reads_the_table(action: Action, role: Role | None) -> None:
    if role is None:
        assert allows(None, action) == (action in WITHOUT_MEMBERSHIP)
    else:
        assert allows(role, action) == (role in MATRIX[action])


def test_anyone_needs_no_membership_only_for_new_organization_and_own_session() -> None:
    assert {Action.ORG_CREATE, Action.SESSION} == WITHOUT_MEMBERSHIP


def test_who_may_lists_roles_in_rank_order() -> None:
    assert who_may(Action.KEYS_VIEW) == [OWNER, ADMIN, DEV]
    assert who_may(Action.BILLING_MANAGE) == [OWNER]


# -- team rules --------------------------------------------------------------------

def _team(*roles: Role) -> list[Membership]:
    return [Membership(org_id="o", user_id=f"u{i}", role=r, created_at_ms=i)
            for i, r in enumerate(roles)]


@pytest.mark.parametrize(("actor", "target", "new", "error"), [
    (OWNER, ADMIN, DEV, None),
    (ADMIN, DEV, MKT, None),
    (ADMIN, DEV, ADMIN, None),
    (ADMIN, DEV, OWNER, Forbidden),      # only owners grant the owner role
    (ADMIN, OWNER, ADMIN, Forbidden),    # ... or take it away
    (DEV, MKT, DEV, Forbidden),          # developers do not manage the team
    (MKT, DEV, MKT, Forbidden),
    (OWNER, DEV, OWNER, None),
])
def test_role_change_rules(actor: Role, target: Role, new: Role,
                           error: type[Exception] | None) -> None:
    members = _team(OWNER, target) if target is not OWNER else _team(OWNER, OWNER)
    target_id = members[1].user_id
    if error is None:
        assert check_role_change(members, actor, target_id, new).user_id == target_id
    else:
        with pytest.raises(error):
            check_role_change(members, actor, target_id, new)


def test_last_owner_can_be_neither_demoted_nor_removed() -> None:
    members = _team(OWNER, ADMIN)
    with pytest.raises(Conflict, match="at least one owner"):
        check_role_change(members, OWNER, "u0", ADMIN)
    with pytest.raises(Conflict, match="at least one owner"):
        check_removal(members, OWNER, "u0")
    assert check_role_change(members, OWNER, "u0", OWNER).role is OWNER  # no change: fine
    two = _team(OWNER, OWNER)
    assert check_role_change(two, OWNER, "u0", DEV).user_id == "u0"
    assert check_removal(two, OWNER, "u1").user_id == "u1"


@pytest.mark.parametrize(("actor", "target", "error"), [
    (OWNER, DEV, None), (ADMIN, DEV, None), (ADMIN, ADMIN, None),
    (ADMIN, OWNER, Forbidden), (DEV, MKT, Forbidden), (MKT, DEV, Forbidden),
])
def test_removal_rules(actor: Role, target: Role, error: type[Exception] | None) -> None:
    members = _team(OWNER, OWNER, target) if target is OWNER else _team(OWNER, target)
    target_id = members[-1].user_id
    if error is None:
        assert check_removal(members, actor, target_id).user_id == target_id
    else:
        with pytest.raises(error):
            check_removal(members, actor, target_id)


def test_unknown_member_is_not_found_but_permission_is_checked_first() -> None:
    with pytest.raises(NotFound):
        check_removal(_team(OWNER), OWNER, "nobody")
    with pytest.raises(Forbidden):
        check_role_change(_team(OWNER), MKT, "nobody", DEV)


@pytest.mark.parametrize(("actor", "role", "ok"), [
    (OWNER, OWNER, True), (OWNER, MKT, True), (ADMIN, ADMIN, True), (ADMIN, OWNER, False),
    (DEV, DEV, False), (MKT, MKT, False),
])
def test_invite_rules(actor: Role, role: Role, ok: bool) -> None:
    if ok:
        check_invite(actor, role)
    else:
        with pytest.raises(Forbidden):
            check_invite(actor, role)


# -- sessions ----------------------------------------------------------------------

T0 = 1_790_000_000_000


def test_new_session_stores_only_the_token_hash() -> None:
    token, s = new_session(bytes(range(48)), "user", T0, org_id="org")
    assert len(token) == 43 and "=" not in token
    assert s.token_hash == hashlib.sha256(token.encode()).digest() == token_hash(token)
    assert token not in repr(s.to_map())
    assert s.created_at_ms == s.last_seen_ms == T0 and s.org_id == "org"
    assert Session.from_map(s.to_map()) == s


@pytest.mark.parametrize("text", [None, "", "short", "a" * 42, "a" * 44, "=" * 43, "a+" * 21 + "b"])
def test_malformed_tokens_have_no_hash(text: str | None) -> None:
    assert token_hash(text) is None


@pytest.mark.parametrize(("created", "seen", "now", "live"), [
    (0, 0, IDLE_MS - 1, True),
    (0, 0, IDLE_MS, False),                          # idle 12 h
    (0, ABSOLUTE_MS - 1000, ABSOLUTE_MS - 1, True),
    (0, ABSOLUTE_MS - 1000, ABSOLUTE_MS, False),     # absolute 7 days, however active
])
def test_session_expiry(created: int, seen: int, now: int, live: bool) -> None:
    _, s = new_session(bytes(48), "u", T0 + created)
    s = touched(s, T0 + seen) or s
    assert is_live(s, T0 + now) is live
    assert expires_at_ms(s) == min(T0 + seen + IDLE_MS, T0 + created + ABSOLUTE_MS)


def test_touch_writes_at_most_every_five_minutes() -> None:
    _, s = new_session(bytes(48), "u", T0)
    assert touched(s, T0 + TOUCH_MS - 1) is None
    after = touched(s, T0 + TOUCH_MS)
    assert after is not None and after.last_seen_ms == T0 + TOUCH_MS


@given(st.binary(min_size=32, max_size=32))
def test_encoded_tokens_round_trip_through_the_shape_check(raw: bytes) -> None:
    assert token_hash(encode_token(raw)) is not None


# -- CSRF -----------------------------------------------------------------------

def test_csrf_tokens_bind_to_secret_and_subject() -> None:
    t = csrf.session_token(b"k" * 32, "s1")
    assert csrf.matches(t, t)
    assert not csrf.matches(t, csrf.session_token(b"k" * 32, "s2"))
    assert not csrf.matches(t, csrf.session_token(b"j" * 32, "s1"))
    assert not csrf.matches(t, csrf.anonymous_token(b"k" * 32, "s1"))  # purposes differ
    assert not csrf.matches(t, None) and not csrf.matches(t, "") and not csrf.matches("", "")
    assert not csrf.matches(t, t + "x") and not csrf.matches(t, "é" + t[1:])


# -- sign-in throttle -------------------------------------------------------------

def test_throttle_limits_are_as_documented() -> None:
    assert (EMAIL_LIMIT.max_failures, EMAIL_LIMIT.window_ms) == (5, 15 * 60_000)
    assert (CLIENT_LIMIT.max_failures, CLIENT_LIMIT.window_ms) == (20, 15 * 60_000)


def test_five_failures_lock_until_the_oldest_leaves_the_window() -> None:
    f: Failures | None = None
    for i in range(5):
        assert retry_after_s(f, EMAIL_LIMIT, T0 + i * 1000) == 0
        f = record_failure(f, EMAIL_LIMIT, T0 + i * 1000)
    assert retry_after_s(f, EMAIL_LIMIT, T0 + 5000) == 900 - 5
    assert retry_after_s(f, EMAIL_LIMIT, T0 + 900_000 - 1) == 1
    assert retry_after_s(f, EMAIL_LIMIT, T0 + 900_000) == 0      # the first one aged out
    assert retry_after_s(f, EMAIL_LIMIT, T0 + 901_000) == 0


@given(st.lists(st.integers(min_value=0, max_value=3_600_000), max_size=40),
       st.integers(min_value=1, max_value=8))
def test_throttle_counts_exactly_the_failures_in_the_window(gaps: list[int],
                                                           max_failures: int) -> None:
    limit = Limit(max_failures=max_failures, window_ms=900_000)
    f: Failures | None = None
    times: list[int] = []
    now = T0
    for gap in gaps:
        now += gap
        recent = [t for t in times if now - t < limit.window_ms]
        wait = retry_after_s(f, limit, now)
        assert (wait == 0) == (len(recent) < max_failures)
        if wait:
            assert 0 < wait <= 900
            assert retry_after_s(f, limit, now + wait * 1000) == 0
        else:
            f = record_failure(f, limit, now)
            times.append(now)
        assert f is None or len(f.times) <= max_failures  # bounded memory


# -- plans and invitations ---------------------------------------------------------

def test_meters_show_usage_against_the_plan() -> None:
    ms = meters(Plan.STARTER, Usage(links=500, projects=1, members=4))
    assert [(m.label, m.used, m.limit, m.percent, m.over) for m in ms] == [
        ("Links", 500, 1000, 50, False), ("Projects", 1, 1, 100, False),
        ("Team members", 4, 3, 100, True)]
    assert Meter("Links", 10, None).percent == 0


def test_plan_change_refused_while_over_the_new_quota() -> None:
    check_plan_change(Plan.STARTER, Usage(links=1000, projects=1, members=3))
    with pytest.raises(ValidationError, match="2 projects") as e:
        check_plan_change(Plan.STARTER, Usage(links=0, projects=2, members=1))
    assert e.value.field == "plan"
    check_plan_change(Plan.SCALE, Usage(links=10**9, projects=10**4, members=10**4))


@pytest.mark.parametrize("raw", ["a@b.co", " Name@Example.COM ", "x.y+z@sub.example.org",
                                 "owner@localhost"])
def test_valid_emails_are_normalized(raw: str) -> None:
    assert check_email(raw) == raw.strip().lower()


@pytest.mark.parametrize("raw", ["", "a", "a@", "@b.co", "a@.b", "a@b.", "a b@c.de",
                                 "a@b@c.de", "x" * 250 + "@b.co"])
def test_invalid_emails_are_refused(raw: str) -> None:
    with pytest.raises(ValidationError):
        check_email(raw)


def test_invitations_last_seven_days_and_round_trip() -> None:
    token, inv = new_invite(bytes(range(48)), "org", "Dev@Example.com", Role.DEVELOPER, "u",
                            T0)
    assert inv.email == "dev@example.com" and inv.token_hash == token_hash(token)
    assert inv.expires_at_ms - inv.created_at_ms == INVITE_TTL_MS == 7 * 24 * 3600 * 1000
    assert is_open(inv, T0 + INVITE_TTL_MS - 1) and not is_open(inv, T0 + INVITE_TTL_MS)
    assert Invite.from_map(inv.to_map()) == inv
    assert parse_role(" Admin ") is Role.ADMIN
    with pytest.raises(ValidationError):
        parse_role("boss")


def test_forget_a_failure_counted_before_its_check() -> None:
    """A sign-in counted as failed before its password was checked, which
    turned out right, is taken back: that one time, once."""
    assert forget_failure(None, 5) is None
    state = Failures((1, 5, 5, 9))
    assert forget_failure(state, 7) is state  # never recorded: unchanged
    assert forget_failure(state, 5) == Failures((1, 5, 9))
    assert forget_failure(Failures((9,)), 9) == Failures(())
