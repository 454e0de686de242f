"""First-launch attribution (SPEC.md "Deferred deep linking" flows, "Install
attribution" and "Handoff and token lifecycle" tables, "Limits")."""

from __future__ import annotations

import hashlib
import hmac
import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.attribution import (
    LANDING_OPEN_TTL_MS,
    NET_HASH_TTL_MS,
    TOKEN_TTL_MS,
    ClickWindowEntry,
    Confidence,
    Flow,
    FlowTrial,
    LandingOpen,
    LaunchFacts,
    Matched,
    Method,
    Outcome,
    Token,
    TokenState,
    Unattributed,
    decide_first_launch,
    first_launch_again,
    in_window,
    net_hash,
    token_state,
    window_entry_stale,
    window_retention_ms,
)
from svc_engine.keys import Mode
from svc_engine.sdk_requests import parse_init, parse_install_referrer
from svc_engine.settings import DeferredSettings

NOW = 1_795_000_000_000
MIN = 60_000
DAY = 24 * 60 * MIN
LINK_A = "aaaaaaaa-0000-4000-8000-000000000001"
LINK_B = "bbbbbbbb-0000-4000-8000-000000000002"
NET = b"n" * 32
OTHER_NET = b"o" * 32
LIVE, TEST = Mode.LIVE, Mode.TEST

OFF = DeferredSettings()
PROB = DeferredSettings(probabilistic_matching=True)
PROB_IP = DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True)

IOS = LaunchFacts(mode=LIVE, platform="ios", os_major=17, country="DE")
ANDROID = LaunchFacts(mode=LIVE, platform="android", os_major=14, country="DE",
                      referrer_token="tok")


def tap(click_id: str, link_id: str = LINK_A, *, ago_ms: int = 5 * MIN, os_major: int = 17,
        country: str | None = "DE", net: bytes | None = None,
        mode: Mode = LIVE) -> ClickWindowEntry:
    return ClickWindowEntry(click_id=click_id, link_id=link_id, mode=mode, os_major=os_major,
                            country=country, at_ms=NOW - ago_ms, net_hash=net)


def token(**over: object) -> Token:
    fields: dict[str, object] = {"token": "tok", "link_id": LINK_A, "mode": LIVE,
                                 "issued_at_ms": NOW - DAY,
                                 "expires_at_ms": NOW - DAY + TOKEN_TTL_MS, "used": False}
    fields.update(over)
    return Token(**fields)  # type: ignore[arg-type]


def decide(launch: LaunchFacts = IOS, *, tok: Token | None = None,
           window: list[ClickWindowEntry] | None = None,
           settings: DeferredSettings = PROB, net: bytes | None = None,
           now_ms: int = NOW) -> Matched | Unattributed:
    return decide_first_launch(launch, token=tok, window=window or [], settings=settings,
                               net_hashes=(net,) if net else (), now_ms=now_ms)


def outcomes(result: Matched | Unattributed) -> list[tuple[Flow, Outcome]]:
    return [(t.flow, t.outcome) for t in result.trials]


# --- tokens ----------------------------------------------------------------------------


@pytest.mark.parametrize(("tok", "now_ms", "state"), [
    (None, NOW, TokenState.MISSING),
    (token(), NOW, TokenState.VALID),
    (token(expires_at_ms=NOW + 1), NOW, TokenState.VALID),
    (token(expires_at_ms=NOW), NOW, TokenState.EXPIRED),  # 7 days elapsed: expired exactly
    (token(used=True), NOW, TokenState.USED),
    (token(used=True, expires_at_ms=NOW - 1), NOW, TokenState.USED),
])
def test_token_state(tok: Token | None, now_ms: int, state: TokenState) -> None:
    assert token_state(tok, now_ms) is state


def test_token_issue_lives_seven_days_and_fits_a_referrer() -> None:
    t = Token.issue(bytes(range(16)), link_id=LINK_A, mode=TEST, now_ms=NOW)
    assert TOKEN_TTL_MS == 7 * DAY
    assert (t.issued_at_ms, t.expires_at_ms, t.used) == (NOW, NOW + 7 * DAY, False)
    assert t.token == f"{NOW:012x}" + "AAECAwQFBgcICQoLDA0ODw" and len(t.token) == 34
    assert parse_install_referrer(f"svc_token={t.token}&utm_source=x") == t.token
    assert token_state(t, NOW + 7 * DAY - 1) is TokenState.VALID
    assert token_state(t, NOW + 7 * DAY) is TokenState.EXPIRED
    assert token_state(t.consumed(), NOW) is TokenState.USED
    with pytest.raises(ValueError, match="16 random bytes"):
        Token.issue(b"short", link_id=LINK_A, mode=TEST, now_ms=NOW)


def test_tokens_sort_by_issue_time_whatever_their_random_part() -> None:
    """The store keys tokens by their text: a token issued later sorts after,
    so tokens issued together are written together."""
    times = [0, 9, 10, 255, 256, NOW - 1, NOW, NOW + 1, 16 ** 12 - 1]
    issued = [Token.issue(bytes([255 - i] * 24), link_id=LINK_A, mode=TEST, now_ms=ms)
              for i, ms in enumerate(times)]
    assert [t.token for t in issued] == sorted(t.token for t in issued)
    assert all(len(t.token) == 44 and t.token[:12] == f"{t.issued_at_ms:012x}"
               for t in issued)
    assert len({t.token[12:] for t in issued}) == len(times)
    for ms in (-1, 16 ** 12):
        with pytest.raises(ValueError, match="issue time"):
            Token.issue(bytes(24), link_id=LINK_A, mode=TEST, now_ms=ms)


# --- Android install referrer ----------------------------------------------------------


def test_android_valid_token_is_deterministic_install_referrer() -> None:
    result = decide(ANDROID, tok=token())
    assert result == Matched(link_id=LINK_A, confidence=Confidence.DETERMINISTIC,
                             method=Method.INSTALL_REFERRER, consume_token="tok",
                             trials=(FlowTrial(Flow.INSTALL_REFERRER, Outcome.MATCHED,
                                               "token valid"),))


@pytest.mark.parametrize(("launch", "tok", "detail"), [
    (ANDROID, None, "token missing"),
    (ANDROID, token(used=True), "token used"),
    (ANDROID, token(expires_at_ms=NOW), "token expired"),
    (ANDROID, token(mode=TEST), "token missing"),  # another mode's token does not exist here
    (ANDROID, token(token="other"), "token missing"),
])
def test_android_token_rejected(launch: LaunchFacts, tok: Token | None, detail: str) -> None:
    result = decide(launch, tok=tok, window=[tap("c1")], settings=PROB_IP, net=NET)
    assert isinstance(result, Unattributed)
    assert result.trials[0] == FlowTrial(Flow.INSTALL_REFERRER, Outcome.REJECTED, detail)
    # iPhone taps never attribute an Android install
    assert outcomes(result)[1:] == [(Flow.PROBABILISTIC_NETWORK, Outcome.SKIPPED),
                                    (Flow.PROBABILISTIC_COHORT, Outcome.SKIPPED)]
    assert result.reasons[0] == f"install_referrer: rejected: {detail}"


def test_android_without_referrer_token_is_unattributed() -> None:
    launch = LaunchFacts(mode=LIVE, platform="android", os_major=14, country="DE")
    result = decide(launch, tok=token())
    assert isinstance(result, Unattributed)
    assert result.reasons == (
        "install_referrer: skipped: no svc_token in the install referrer",
        "probabilistic_network: skipped: iOS only",
        "probabilistic_cohort: skipped: iOS only",
    )


def test_ios_launch_ignores_tokens() -> None:
    launch = LaunchFacts(mode=LIVE, platform="ios", os_major=17, country="DE",
                         referrer_token="tok")
    result = decide(launch, tok=token(), settings=OFF)
    assert isinstance(result, Unattributed)
    assert result.trials[0] == FlowTrial(Flow.INSTALL_REFERRER, Outcome.SKIPPED, "Android only")


def test_launch_facts_from_init() -> None:
    req = parse_init({"installId": "3f2b8c1e-9d4a-4b6e-8f00-1234567890ab",
                      "isFirstLaunch": True, "sdkVersion": "0.2.0", "platform": "android",
                      "osVersion": "14.1", "installReferrer": "svc_token=tok"})
    assert LaunchFacts.from_init(req, mode=LIVE, country="DE") == ANDROID


# --- probabilistic: cohort -------------------------------------------------------------


def test_cohort_single_link_matches_and_consumes_the_oldest_tap() -> None:
    window = [tap("c2", ago_ms=2 * MIN), tap("c1", ago_ms=9 * MIN), tap("c3", ago_ms=1 * MIN)]
    result = decide(window=window)
    assert isinstance(result, Matched)
    assert (result.link_id, result.confidence, result.method) == (
        LINK_A, Confidence.PROBABILISTIC, Method.PROBABILISTIC_MATCH)
    assert result.consume_click_ids == ("c1",)
    assert result.delete_net_hashes == () and result.consume_token is None
    assert result.attribution.method is Method.PROBABILISTIC_MATCH


def test_cohort_conflict_returns_nothing() -> None:
    result = decide(window=[tap("c1"), tap("c2", LINK_B)])
    assert isinstance(result, Unattributed)
    assert result.trials[-1] == FlowTrial(Flow.PROBABILISTIC_COHORT, Outcome.CONFLICT,
                                          "taps from iOS 17 in DE point to more than one link")


@pytest.mark.parametrize("other", [
    tap("x", LINK_B, os_major=16),  # another iOS major version
    tap("x", LINK_B, country="FR"),  # another country
    tap("x", LINK_B, country=None),
    tap("x", LINK_B, mode=TEST),  # another mode
    tap("x", LINK_B, ago_ms=121 * MIN),  # out of the window
    tap("x", LINK_B, ago_ms=-1),  # in the future
])
def test_taps_outside_the_cohort_do_not_conflict(other: ClickWindowEntry) -> None:
    result = decide(window=[tap("c1"), other])
    assert isinstance(result, Matched) and result.link_id == LINK_A
    assert result.consume_click_ids == ("c1",)


@pytest.mark.parametrize(("launch", "settings", "detail"), [
    (IOS, OFF, "probabilisticMatching is off"),
    (LaunchFacts(mode=LIVE, platform="ios", os_major=None, country="DE"), PROB,
     "the launch did not report its iOS version"),
    (LaunchFacts(mode=LIVE, platform="ios", os_major=17, country=None), PROB,
     "the launch's country is unknown"),
    (LaunchFacts(mode=LIVE, platform="other", os_major=17, country="DE"), PROB, "iOS only"),
])
def test_cohort_skipped(launch: LaunchFacts, settings: DeferredSettings, detail: str) -> None:
    result = decide(launch, window=[tap("c1", country=launch.country)], settings=settings)
    assert isinstance(result, Unattributed)
    assert result.trials[-1] == FlowTrial(Flow.PROBABILISTIC_COHORT, Outcome.SKIPPED, detail)


def test_no_taps_is_unattributed_with_reasons() -> None:
    result = decide(settings=PROB_IP, net=NET)
    assert isinstance(result, Unattributed)
    assert result.reasons == (
        "install_referrer: skipped: Android only",
        "probabilistic_network: no_candidates: no tap from this network in the last 120 minutes",
        "probabilistic_cohort: no_candidates: no tap from iOS 17 in DE in the last 120 minutes",
    )


@pytest.mark.parametrize("minutes", [15, 120, 360])
@pytest.mark.parametrize("use_network", [False, True])
def test_window_edges(minutes: int, use_network: bool) -> None:
    settings = DeferredSettings(probabilistic_matching=True,
                                probabilistic_ip_matching=use_network,
                                probabilistic_window_minutes=minutes)
    net = NET if use_network else None
    expected_flow = Flow.PROBABILISTIC_NETWORK if use_network else Flow.PROBABILISTIC_COHORT

    def matches(ago_ms: int) -> bool:
        result = decide(window=[tap("c1", ago_ms=ago_ms, net=net)], settings=settings, net=net)
        if isinstance(result, Matched):
            assert (result.trials[-1].flow, result.trials[-1].outcome) == (
                expected_flow, Outcome.MATCHED)
            return True
        return False

    assert matches(minutes * MIN)  # exactly the window old: in
    assert not matches(minutes * MIN + 1)  # one millisecond older: out
    assert matches(0)  # a tap at the very same millisecond
    assert not matches(-1)  # a tap in the future never matches


@pytest.mark.parametrize(("at_ms", "inside"), [
    (NOW - 120 * MIN - 1, False), (NOW - 120 * MIN, True), (NOW, True), (NOW + 1, False),
])
def test_in_window(at_ms: int, inside: bool) -> None:
    assert in_window(tap("c", ago_ms=NOW - at_ms), window_minutes=120, now_ms=NOW) is inside


# --- probabilistic: network ------------------------------------------------------------


def test_network_match_wins_over_a_cohort_conflict() -> None:
    window = [tap("n1", net=NET, ago_ms=3 * MIN), tap("n2", net=NET, ago_ms=4 * MIN),
              tap("c1", LINK_B, net=OTHER_NET), tap("c2", LINK_B)]
    result = decide(window=window, settings=PROB_IP, net=NET)
    assert isinstance(result, Matched)
    assert (result.link_id, result.confidence, result.method) == (
        LINK_A, Confidence.PROBABILISTIC, Method.PROBABILISTIC_MATCH)
    assert result.consume_click_ids == ("n2", "n1")  # every tap of the network, oldest first
    assert result.delete_net_hashes == (NET,)
    assert outcomes(result) == [(Flow.INSTALL_REFERRER, Outcome.SKIPPED),
                                (Flow.PROBABILISTIC_NETWORK, Outcome.MATCHED)]


def test_network_conflict_falls_through_and_ends_unattributed() -> None:
    window = [tap("n1", net=NET), tap("n2", LINK_B, net=NET)]
    result = decide(window=window, settings=PROB_IP, net=NET)
    assert isinstance(result, Unattributed)
    assert outcomes(result)[1:] == [(Flow.PROBABILISTIC_NETWORK, Outcome.CONFLICT),
                                    (Flow.PROBABILISTIC_COHORT, Outcome.CONFLICT)]


def test_no_network_candidate_falls_through_to_the_cohort() -> None:
    result = decide(window=[tap("c1", net=OTHER_NET)], settings=PROB_IP, net=NET)
    assert isinstance(result, Matched)
    assert result.consume_click_ids == ("c1",) and result.delete_net_hashes == ()
    assert outcomes(result)[1:] == [(Flow.PROBABILISTIC_NETWORK, Outcome.NO_CANDIDATES),
                                    (Flow.PROBABILISTIC_COHORT, Outcome.MATCHED)]


def test_network_ignores_other_ios_versions() -> None:
    # same network, other iOS major version: another device behind the same NAT
    window = [tap("n1", LINK_B, net=NET, os_major=16), tap("c1", net=OTHER_NET)]
    result = decide(window=window, settings=PROB_IP, net=NET)
    assert isinstance(result, Matched) and result.link_id == LINK_A
    assert result.consume_click_ids == ("c1",)


@pytest.mark.parametrize(("settings", "net", "detail"), [
    (PROB, NET, "probabilisticIpMatching is off"),
    (PROB_IP, None, "no network hash for this launch"),
    (OFF, NET, "probabilisticMatching is off"),
])
def test_network_skipped(settings: DeferredSettings, net: bytes | None, detail: str) -> None:
    result = decide(window=[tap("n1", LINK_B, net=NET), tap("c1")], settings=settings, net=net)
    assert result.trials[1] == FlowTrial(Flow.PROBABILISTIC_NETWORK, Outcome.SKIPPED, detail)


def test_network_match_does_not_need_the_country() -> None:
    launch = LaunchFacts(mode=LIVE, platform="ios", os_major=17, country=None)
    result = decide(launch, window=[tap("n1", net=NET, country=None)], settings=PROB_IP, net=NET)
    assert isinstance(result, Matched) and result.delete_net_hashes == (NET,)


# --- properties ------------------------------------------------------------------------

links = st.sampled_from([LINK_A, LINK_B, "cccccccc-0000-4000-8000-000000000003"])
minutes_st = st.integers(min_value=15, max_value=360)


@st.composite
def taps_outside(draw: st.DrawFn, minutes: int) -> list[ClickWindowEntry]:
    window_ms = minutes * MIN
    ages = st.one_of(st.integers(min_value=window_ms + 1, max_value=window_ms + 10 * DAY),
                     st.integers(min_value=-DAY, max_value=-1))
    n = draw(st.integers(min_value=1, max_value=8))
    return [tap(f"c{i}", draw(links), ago_ms=draw(ages), net=draw(st.sampled_from([NET, None])))
            for i in range(n)]


@given(minutes_st, st.data())
def test_property_a_tap_outside_the_window_never_matches(minutes: int, data: st.DataObject) -> None:
    window = data.draw(taps_outside(minutes))
    settings = DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True,
                                probabilistic_window_minutes=minutes)
    assert isinstance(decide(window=window, settings=settings, net=NET), Unattributed)


@given(minutes_st, st.lists(st.tuples(links, st.integers(min_value=0, max_value=15 * MIN)),
                            min_size=2, max_size=10))
def test_property_conflicting_links_never_match(minutes: int,
                                                drawn: list[tuple[str, int]]) -> None:
    window = [tap(f"c{i}", link, ago_ms=ago) for i, (link, ago) in enumerate(drawn)]
    window.append(tap("z", LINK_A if window[0].link_id != LINK_A else LINK_B))
    settings = DeferredSettings(probabilistic_matching=True, probabilistic_window_minutes=minutes)
    result = decide(window=window, settings=settings)
    assert isinstance(result, Unattributed)
    assert result.trials[-1].outcome is Outcome.CONFLICT


@given(st.lists(st.integers(min_value=0, max_value=15 * MIN), min_size=1, max_size=10, unique=True))
def test_property_one_link_matches_and_consumes_the_oldest(ages: list[int]) -> None:
    window = [tap(f"c{i}", ago_ms=ago) for i, ago in enumerate(ages)]
    result = decide(window=window)
    assert isinstance(result, Matched) and result.link_id == LINK_A
    oldest = max(window, key=lambda e: NOW - e.at_ms)
    assert result.consume_click_ids == (oldest.click_id,)


# --- retention and network hashes ------------------------------------------------------


@pytest.mark.parametrize(("settings", "ms"), [
    (OFF, 0), (PROB, 120 * MIN),
    (DeferredSettings(probabilistic_matching=True, probabilistic_window_minutes=360), 360 * MIN),
    (DeferredSettings(probabilistic_matching=True, probabilistic_window_minutes=15), 15 * MIN),
])
def test_window_retention(settings: DeferredSettings, ms: int) -> None:
    assert window_retention_ms(settings) == ms
    assert ms < NET_HASH_TTL_MS == 7 * 60 * MIN  # window entries never outlive the hash limit
    assert not window_entry_stale(tap("c", ago_ms=ms), settings, NOW)
    assert window_entry_stale(tap("c", ago_ms=ms + 1), settings, NOW)


SECRET = b"k" * 32


def expected_hash(material: bytes) -> bytes:
    return hmac.new(SECRET, material, hashlib.sha256).digest()


@pytest.mark.parametrize(("a", "b", "same"), [
    ("203.0.113.7", "203.0.113.7", True),
    ("203.0.113.7", "203.0.113.8", False),  # IPv4: the full address
    ("203.0.113.7", "::ffff:203.0.113.7", True),  # IPv4-mapped IPv6 counts as IPv4
    ("2001:db8:1:2:aaaa::1", "2001:db8:1:2:bbbb:cccc:dddd:eeee", True),  # same /64
    ("2001:db8:1:2::1", "2001:db8:1:3::1", False),  # other /64
    ("[2001:db8:1:2::1]", "2001:db8:1:2::9", True),
    (" 198.51.100.1 ", "198.51.100.1", True),
])
def test_net_hash_scope(a: str, b: str, same: bool) -> None:
    assert (net_hash(SECRET, a) == net_hash(SECRET, b)) is same


def test_net_hash_is_keyed_and_never_the_address() -> None:
    assert net_hash(SECRET, "203.0.113.7") == expected_hash(b"v4:" + bytes([203, 0, 113, 7]))
    assert net_hash(SECRET, "2001:db8::1") == expected_hash(
        b"v6/64:" + bytes.fromhex("20010db800000000"))
    assert net_hash(b"other", "203.0.113.7") != net_hash(SECRET, "203.0.113.7")


@pytest.mark.parametrize("bad", ["", "unknown", "203.0.113", "300.1.1.1", "2001:db8::g"])
def test_net_hash_of_garbage_is_none(bad: str) -> None:
    assert net_hash(SECRET, bad) is None


def reference_net_hash(secret: bytes, ip: str) -> bytes | None:
    """net_hash by ipaddress alone, as it was first written (its IPv4 fast
    path must agree with this on every input)."""
    text = ip.strip()
    if text[:1] == "[" and text[-1:] == "]":
        text = text[1:-1]
    try:
        addr = ipaddress.ip_address(text)
    except ValueError:
        return None
    v4 = addr if addr.version == 4 else addr.ipv4_mapped  # type: ignore[union-attr]
    material = b"v4:" + v4.packed if v4 is not None else b"v6/64:" + addr.packed[:8]
    return hmac.new(secret, material, hashlib.sha256).digest()


_OCTETS = st.one_of(st.integers(0, 300).map(str), st.sampled_from(
    ["00", "01", "007", "255", "256", "1000", "", " 1", "1 ", "+1", "-1", "0x1",
     "\u0661", "\uff11"]))
_QUADS = st.one_of(st.lists(_OCTETS, min_size=4, max_size=4),
                   st.lists(_OCTETS, min_size=3, max_size=5)).map(".".join)


@given(st.one_of(_QUADS, st.text(alphabet="0123456789.:[] abcdef%\n", max_size=24),
                 st.ip_addresses().map(str)))
def test_net_hash_agrees_with_ipaddress_on_every_input(ip: str) -> None:
    assert net_hash(SECRET, ip) == reference_net_hash(SECRET, ip)


@pytest.mark.parametrize("ip", ["0.0.0.0", "255.255.255.255", "10.0.0.1", "192.168.1.100",
                                "01.2.3.4", "1.2.3.04", "256.1.1.1", "1.2.3.4.5", "\u0661.2.3.4"])
def test_net_hash_edge_addresses(ip: str) -> None:
    assert net_hash(SECRET, ip) == reference_net_hash(SECRET, ip)


# --- records ---------------------------------------------------------------------------


@given(st.builds(ClickWindowEntry, click_id=st.text(), link_id=st.text(),
                 mode=st.sampled_from(Mode), os_major=st.integers(1, 99),
                 country=st.none() | st.text(max_size=2), at_ms=st.integers(0, 2**53),
                 net_hash=st.none() | st.binary(min_size=32, max_size=32)))
def test_click_window_entry_round_trip(entry: ClickWindowEntry) -> None:
    assert ClickWindowEntry.from_map(entry.to_map()) == entry
    assert entry.to_map()["v"] == 1


@given(st.builds(Token, token=st.text(), link_id=st.text(), mode=st.sampled_from(Mode),
                 issued_at_ms=st.integers(0, 2**53), expires_at_ms=st.integers(0, 2**53),
                 used=st.booleans()))
def test_token_round_trip(tok: Token) -> None:
    assert Token.from_map(tok.to_map()) == tok


# --- a 'Continue in app' open before the launch report --------------------------------


def test_an_open_from_the_page_before_the_launch_is_deterministic_before_the_window() -> None:
    """Rank 1b: after a valid token, before the probabilistic steps; older than
    7 days it is rejected and the steps after it judge the launch."""
    window = [tap("c1", LINK_B)]
    opened = LandingOpen(link_id=LINK_A, at_ms=NOW - 5 * MIN)
    got = decide_first_launch(IOS, token=None, window=window, settings=PROB, net_hashes=(),
                              now_ms=NOW, landing=opened)
    assert isinstance(got, Matched) and (got.link_id, got.method, got.confidence) == (
        LINK_A, Method.LANDING_PAGE, Confidence.DETERMINISTIC)
    assert got.consume_click_ids == () and outcomes(got) == [
        (Flow.INSTALL_REFERRER, Outcome.SKIPPED), (Flow.LANDING_PAGE, Outcome.MATCHED)]
    by_token = decide_first_launch(ANDROID, token=token(link_id=LINK_B), window=[],
                                   settings=PROB, net_hashes=(), now_ms=NOW, landing=opened)
    assert isinstance(by_token, Matched) and by_token.method is Method.INSTALL_REFERRER
    edge = LandingOpen(link_id=LINK_A, at_ms=NOW - LANDING_OPEN_TTL_MS)
    kept = decide_first_launch(IOS, token=None, window=[], settings=PROB, net_hashes=(),
                               now_ms=NOW, landing=edge)
    assert isinstance(kept, Matched) and kept.link_id == LINK_A
    stale = LandingOpen(link_id=LINK_A, at_ms=NOW - LANDING_OPEN_TTL_MS - 1)
    later = decide_first_launch(IOS, token=None, window=window, settings=PROB, net_hashes=(),
                                now_ms=NOW, landing=stale)
    assert isinstance(later, Matched) and later.method is Method.PROBABILISTIC_MATCH
    assert (Flow.LANDING_PAGE, Outcome.REJECTED) in outcomes(later)
    # stored while the launch waited its turn: dated after the launch's clock
    raced = LandingOpen(link_id=LINK_A, at_ms=NOW + 5)
    got = decide_first_launch(IOS, token=None, window=window, settings=PROB, net_hashes=(),
                              now_ms=NOW, landing=raced)
    assert isinstance(got, Matched) and got.method is Method.LANDING_PAGE
    assert all(t.flow is not Flow.LANDING_PAGE for t in decide().trials)  # none: no trial


def test_a_landing_open_waits_as_long_as_a_token() -> None:
    # a failed first launch report is retried on a later launch, days later
    assert LANDING_OPEN_TTL_MS == TOKEN_TTL_MS == 7 * 24 * 3_600_000


@pytest.mark.parametrize(("link_id", "method", "expected"), [
    (None, None, Unattributed()),
    (LINK_A, None, Unattributed()),
    (None, Method.INSTALL_REFERRER.value, Unattributed()),
    (LINK_A, Method.PROBABILISTIC_MATCH.value,
     Matched(link_id=LINK_A, confidence=Confidence.PROBABILISTIC,
             method=Method.PROBABILISTIC_MATCH)),
    (LINK_A, Method.INSTALL_REFERRER.value,
     Matched(link_id=LINK_A, confidence=Confidence.DETERMINISTIC,
             method=Method.INSTALL_REFERRER)),
    (LINK_A, Method.LANDING_PAGE.value,
     Matched(link_id=LINK_A, confidence=Confidence.DETERMINISTIC, method=Method.LANDING_PAGE)),
])
def test_a_first_launch_retried_after_its_answer_expired_gets_its_decision(
        link_id: str | None, method: str | None, expected: Matched | Unattributed) -> None:
    """The stored decision of the install, told again: its confidence follows
    the method (only the probabilistic match is probabilistic)."""
    assert first_launch_again(link_id, method) == expected
