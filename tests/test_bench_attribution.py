"""The attribution benchmark's pure parts: precision/recall, the population,
and the in-memory ENGINE replay (bench/attribution_score.py, population.py,
attribution_engine.py)."""

from __future__ import annotations

import random

import pytest

from bench import attribution_engine
from bench.attribution_score import OVERALL, Observation, score, score_one
from bench.population import (
    DEFAULT_MIX,
    LANDING,
    MAIN,
    T0_MS,
    Device,
    Flow,
    Population,
    Step,
    build,
    flow_counts,
    group_sizes,
    schedule,
)

# -- precision and recall -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("observations", "attributed", "correct", "false", "precision", "recall"),
    [
        ([], 0, 0, 0, None, None),
        ([("a", "a"), ("b", "b")], 2, 2, 0, 1.0, 1.0),
        ([("a", "a"), ("b", None)], 1, 1, 0, 1.0, 0.5),
        ([("a", "b"), ("b", "b")], 2, 1, 0, 0.5, 0.5),
        ([("a", None), ("b", None)], 0, 0, 0, None, 0.0),
        ([(None, None), (None, "x")], 1, 0, 1, 0.0, None),
        ([("a", "a"), (None, "a"), (None, None)], 2, 1, 1, 0.5, 1.0),
    ],
)
def test_precision_and_recall(observations: list[tuple[str | None, str | None]],
                              attributed: int, correct: int, false: int,
                              precision: float | None, recall: float | None) -> None:
    s = score_one("f", [Observation("f", truth, got) for truth, got in observations])
    assert (s.attributed, s.correct, s.false_attributions) == (attributed, correct, false)
    assert s.wrong == attributed - correct
    assert s.precision == precision
    assert s.recall == recall


def test_scores_per_flow_in_order_then_overall() -> None:
    obs = [Observation("b", "1", "1"), Observation("a", "2", None), Observation("b", None, "3")]
    scores = score(obs, ["a", "c"])
    assert [s.flow for s in scores] == ["a", "c", "b", OVERALL]
    a, c, b, overall = scores
    assert (a.devices, a.recall) == (1, 0.0)
    assert c.devices == 0 and c.precision is None and c.recall is None
    assert (b.attributed, b.correct, b.false_attributions) == (2, 1, 1)
    assert (overall.devices, overall.with_truth, overall.correct) == (3, 2, 1)
    assert overall.to_json()["precision"] == 0.5


# -- the population ------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, 1, 7, 100, 1001])
def test_flow_counts_sum_to_n(n: int) -> None:
    counts = flow_counts(n, DEFAULT_MIX)
    assert sum(counts.values()) == n
    for flow, weight in DEFAULT_MIX.items():
        assert abs(counts[flow] - n * weight) < 1


def test_flow_counts_reject_bad_mixes() -> None:
    with pytest.raises(ValueError):
        flow_counts(10, {Flow.ORGANIC: 0.0})
    with pytest.raises(ValueError):
        flow_counts(10, {Flow.ORGANIC: -1.0, Flow.HANDOFF: 2.0})


@pytest.mark.parametrize("total", [0, 1, 2, 3, 5, 8, 13, 100])
def test_group_sizes_cover_the_total_without_lone_members(total: int) -> None:
    sizes = group_sizes(total, 2, 3, random.Random(total))
    assert sum(sizes) == total
    if total >= 2:
        assert min(sizes) >= 2


def test_population_is_seeded_and_follows_the_mix() -> None:
    a, b = build(500, seed=3), build(500, seed=3)
    assert a == b
    assert build(500, seed=4) != a
    counts = flow_counts(500, DEFAULT_MIX)
    for flow in Flow:
        assert len(a.of_flow(flow)) == counts[flow]


def test_population_builds_each_flow_as_described() -> None:
    pop = build(2000, seed=9)
    devices = pop.devices
    cohorts: dict[tuple[str | None, int], set[Flow]] = {}
    for d in devices:
        if d.platform == "ios" and d.app == MAIN:
            cohorts.setdefault((d.launch_country, d.os_major), set()).add(d.flow)
    tap_ips = [d.tap_ip for d in devices if d.tap_ip]
    assert len(set(tap_ips)) == len(tap_ips)
    for d in devices:
        if d.flow is Flow.ANDROID_REFERRER:
            assert d.platform == "android" and d.taps and d.link is not None
        elif d.flow is Flow.IOS_LANDING:
            assert d.app == LANDING and d.platform == "ios" and d.taps
        elif d.flow is Flow.IOS_NETWORK:
            assert d.tap_ip == d.launch_ip
        elif d.flow in (Flow.IOS_COHORT, Flow.COHORT_CONFLICT):
            assert d.tap_ip != d.launch_ip and d.tap_country == d.launch_country
        elif d.flow is Flow.HANDOFF:
            assert d.user_id and not d.taps and d.link is not None
        elif d.flow is Flow.ORGANIC:
            assert d.link is None and d.tap_at_ms is None
            if d.platform == "ios":  # a cohort nobody taps in
                assert cohorts[(d.launch_country, d.os_major)] == {Flow.ORGANIC}
        elif d.flow is Flow.ORGANIC_SHARED_COHORT:
            assert Flow.IOS_COHORT in cohorts[(d.launch_country, d.os_major)]
        if d.tap_at_ms is not None and d.flow is not Flow.ORGANIC_SHARED_COHORT:
            assert d.launch_at_ms > d.tap_at_ms
    conflict_links: dict[tuple[str | None, int], set[int | None]] = {}
    for d in pop.of_flow(Flow.COHORT_CONFLICT):
        conflict_links.setdefault((d.tap_country, d.os_major), set()).add(d.link)
    assert all(len(links) >= 2 for links in conflict_links.values())


def test_schedule_puts_every_launch_after_its_own_tap() -> None:
    events = schedule(build(300, seed=5).devices)
    seen: set[int] = set()
    for e in events:
        if e.step is Step.LAUNCH:
            assert e.device.tap_at_ms is None or e.device.index in seen
        else:
            seen.add(e.device.index)
    assert [e.at_ms for e in events] == sorted(e.at_ms for e in events)


# -- the ENGINE replay ---------------------------------------------------------------------


def _ios(index: int, flow: Flow, link: int | None, *, tap: int | None, launch: int,
         country: str = "SE", major: int = 26, tap_ip: str | None = None,
         launch_ip: str = "10.9.9.9") -> Device:
    return Device(index=index, flow=flow, app=MAIN, platform="ios", os_major=major,
                  install_id=f"00000000-0000-4000-8000-{index:012d}", launch_at_ms=T0_MS + launch,
                  launch_ip=launch_ip, launch_country=country, link=link,
                  tap_at_ms=None if tap is None else T0_MS + tap,
                  tap_ip=tap_ip or (f"10.0.0.{index}" if tap is not None else None),
                  tap_country=country if tap is not None else None)


def _replay(devices: list[Device]) -> dict[str, dict[str, object]]:
    result = attribution_engine.run(Population(seed=1, devices=tuple(devices),
                                               links={MAIN: 10, LANDING: 1}))
    return {s["flow"]: s for s in result["scores"]}


def test_engine_ties_one_cohort_and_abstains_on_a_conflict() -> None:
    scores = _replay([
        _ios(1, Flow.IOS_COHORT, 3, tap=0, launch=60_000, country="NO"),
        _ios(2, Flow.COHORT_CONFLICT, 4, tap=0, launch=60_000, country="FI"),
        _ios(3, Flow.COHORT_CONFLICT, 5, tap=1_000, launch=70_000, country="FI"),
    ])
    assert scores[Flow.IOS_COHORT.value]["correct"] == 1
    assert scores[Flow.COHORT_CONFLICT.value]["attributed"] == 0


def test_engine_network_hash_wins_over_a_conflicting_cohort_and_is_consumed() -> None:
    scores = _replay([
        _ios(1, Flow.IOS_NETWORK, 3, tap=0, launch=60_000, tap_ip="10.1.1.1",
             launch_ip="10.1.1.1"),
        _ios(2, Flow.IOS_NETWORK, 4, tap=0, launch=60_000, tap_ip="10.1.1.2",
             launch_ip="10.1.1.2"),
        # a later launch from the first network in the same cohort: both taps are
        # consumed, so neither the network nor the cohort ties it
        _ios(3, Flow.ORGANIC_SHARED_COHORT, None, tap=None, launch=90_000,
             launch_ip="10.1.1.1"),
    ])
    assert scores[Flow.IOS_NETWORK.value]["correct"] == 2
    assert scores[Flow.ORGANIC_SHARED_COHORT.value]["attributed"] == 0


def test_engine_an_earlier_organic_launch_steals_a_network_tap() -> None:
    scores = _replay([
        _ios(1, Flow.IOS_NETWORK, 3, tap=0, launch=60_000, tap_ip="10.1.1.1",
             launch_ip="10.1.1.1"),
        _ios(2, Flow.IOS_NETWORK, 4, tap=0, launch=60_000, tap_ip="10.1.1.2",
             launch_ip="10.1.1.2"),
        # launches before device 1, behind the same NAT, same iOS version
        _ios(3, Flow.ORGANIC_SHARED_COHORT, None, tap=None, launch=50_000,
             launch_ip="10.1.1.1"),
    ])
    assert scores[Flow.ORGANIC_SHARED_COHORT.value]["false_attributions"] == 1
    # then device 1 falls through to the cohort and takes device 2's tap; device 2
    # finds nothing left: one wrong attribution, one miss
    network = scores[Flow.IOS_NETWORK.value]
    assert (network["attributed"], network["correct"]) == (1, 0)


def test_engine_referrer_landing_and_handoff_are_exact() -> None:
    pop = build(400, seed=11)
    result = attribution_engine.run(pop)
    scores = {s["flow"]: s for s in result["scores"]}
    for flow in (Flow.ANDROID_REFERRER, Flow.IOS_LANDING, Flow.HANDOFF, Flow.IOS_NETWORK):
        assert scores[flow.value]["precision"] == 1.0
        assert scores[flow.value]["recall"] == 1.0
    assert scores[Flow.ORGANIC.value]["attributed"] == 0
    assert result["decisions"] == 400
