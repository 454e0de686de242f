"""The probabilistic click window's pure rules (svc_engine/click_window.py) and the
decision from summarized candidates (SPEC.md "Probabilistic matching flow",
"Limits": window 15 to 360 minutes)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.attribution import (
    Candidates,
    ClickWindowEntry,
    Flow,
    LaunchFacts,
    Matched,
    Outcome,
    Unattributed,
    cohort_skip,
    decide_first_launch,
    decide_from_candidates,
    network_skip,
    window_bounds,
)
from svc_engine.click_window import COHORT_TAPS_COUNTED
from svc_engine.keys import Mode
from svc_engine.settings import DeferredSettings

NOW = 1_795_000_000_000
MIN = 60_000
LINK_A, LINK_B = "link-a", "link-b"
NET = b"n" * 32
IOS = LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country="DE")
PROB = DeferredSettings(probabilistic_matching=True)
PROB_IP = DeferredSettings(probabilistic_matching=True, probabilistic_ip_matching=True)


def tap(click_id: str, link_id: str = LINK_A, *, ago_ms: int = 5 * MIN,
        net: bytes | None = None) -> ClickWindowEntry:
    return ClickWindowEntry(click_id=click_id, link_id=link_id, mode=Mode.LIVE, os_major=17,
                            country="DE", at_ms=NOW - ago_ms, net_hash=net)


@pytest.mark.parametrize(("minutes", "bounds"), [
    (15, (NOW - 15 * MIN, NOW)), (120, (NOW - 120 * MIN, NOW)), (360, (NOW - 360 * MIN, NOW)),
])
def test_window_bounds_include_both_edges(minutes: int, bounds: tuple[int, int]) -> None:
    assert window_bounds(minutes, NOW) == bounds


def test_candidates_of_lists_oldest_first_then_by_click_id() -> None:
    found = Candidates.of([tap("c3", ago_ms=MIN), tap("c2", LINK_B, ago_ms=9 * MIN),
                           tap("c1", ago_ms=9 * MIN)])
    assert found == Candidates(links=2)  # a conflict: nothing else is needed
    one = [tap("c3", ago_ms=MIN), tap("c2", ago_ms=9 * MIN), tap("c1", ago_ms=9 * MIN)]
    assert Candidates.of(one) == Candidates(taps=3, links=1, link_id=LINK_A,
                                            click_ids=("c1", "c2", "c3"))
    assert Candidates.of(one, list_all=False, tap_cap=2) == Candidates(
        taps=2, links=1, link_id=LINK_A, click_ids=("c1",), more=True)
    assert Candidates.of(one, tap_cap=3).more is False
    assert Candidates.of([]) == Candidates()


@pytest.mark.parametrize(("launch", "settings", "net", "network", "cohort"), [
    (IOS, PROB_IP, NET, None, None),
    (IOS, PROB, NET, "probabilisticIpMatching is off", None),
    (IOS, PROB_IP, None, "no network hash for this launch", None),
    (IOS, DeferredSettings(), NET, "probabilisticMatching is off",
     "probabilisticMatching is off"),
    (LaunchFacts(mode=Mode.LIVE, platform="android", os_major=14, country="DE"), PROB_IP, NET,
     "iOS only", "iOS only"),
    (LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=None, country="DE"), PROB_IP, NET,
     "the launch did not report its iOS version", "the launch did not report its iOS version"),
    (LaunchFacts(mode=Mode.LIVE, platform="ios", os_major=17, country=None), PROB_IP, NET,
     None, "the launch's country is unknown"),
])
def test_which_groups_a_launch_needs(launch: LaunchFacts, settings: DeferredSettings,
                                     net: bytes | None, network: str | None,
                                     cohort: str | None) -> None:
    assert network_skip(launch, settings, (net,) if net else ()) == network
    assert cohort_skip(launch, settings) == cohort


@given(st.lists(st.tuples(st.sampled_from([LINK_A, LINK_B]),
                          st.integers(min_value=0, max_value=30 * MIN)), max_size=8))
def test_a_cohort_summary_listing_only_the_oldest_decides_the_same(
        drawn: list[tuple[str, int]]) -> None:
    window = [tap(f"c{i}", link, ago_ms=ago) for i, (link, ago) in enumerate(drawn)]
    short = Candidates.of(window, list_all=False)
    decided = decide_from_candidates(IOS, token=None, network=Candidates(), cohort=short,
                                     settings=PROB, net_hashes=(), now_ms=NOW)
    assert decided == decide_first_launch(IOS, token=None, window=window, settings=PROB,
                                          net_hashes=(), now_ms=NOW)


def test_the_counts_reach_the_debugger() -> None:
    decided = decide_from_candidates(
        IOS, token=None, network=Candidates(links=2),
        cohort=Candidates(links=2), settings=PROB_IP, net_hashes=(NET,), now_ms=NOW)
    assert isinstance(decided, Unattributed)
    assert decided.reasons[1:] == (
        "probabilistic_network: conflict: taps from this network point to more than one link",
        "probabilistic_cohort: conflict: taps from iOS 17 in DE point to more than one link")
    counted = [decide_from_candidates(
        IOS, token=None, network=Candidates(), settings=PROB, net_hashes=(), now_ms=NOW,
        cohort=Candidates(taps=taps, links=1, link_id=LINK_A, click_ids=("c1",), more=more))
        for taps, more in ((3, False), (COHORT_TAPS_COUNTED, True))]
    assert [d.trials[-1].detail for d in counted] == [
        "3 tap(s) from iOS 17 in DE; the oldest is consumed",
        f"{COHORT_TAPS_COUNTED} or more taps from iOS 17 in DE; the oldest is consumed"]


def test_a_network_match_consumes_every_listed_tap() -> None:
    found = Candidates.of([tap("n2", net=NET, ago_ms=MIN), tap("n1", net=NET, ago_ms=2 * MIN)])
    decided = decide_from_candidates(IOS, token=None, network=found, cohort=Candidates(),
                                     settings=PROB_IP, net_hashes=(NET,), now_ms=NOW)
    assert isinstance(decided, Matched)
    assert (decided.consume_click_ids, decided.delete_net_hashes) == (("n1", "n2"), (NET,))
    assert decided.trials[-1].flow is Flow.PROBABILISTIC_NETWORK
    assert decided.trials[-1].outcome is Outcome.MATCHED


@pytest.mark.parametrize(("network", "cohort"), [
    (Candidates(taps=2, links=1, link_id=LINK_A, click_ids=("n1",)), Candidates()),
    (Candidates(), Candidates(taps=1, links=1, link_id=LINK_A)),
    (Candidates(), Candidates(taps=1, links=1, click_ids=("c1",))),
])
def test_a_summary_missing_what_a_match_needs_is_refused(network: Candidates,
                                                         cohort: Candidates) -> None:
    with pytest.raises(ValueError, match="group with one link"):
        decide_from_candidates(IOS, token=None, network=network, cohort=cohort,
                               settings=PROB_IP, net_hashes=(NET,), now_ms=NOW)
