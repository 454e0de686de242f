"""Install records and the upgrade rule (SPEC.md "Install attribution" table)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from svc_engine.decode import RecordError
from svc_engine.installs import Confidence, Install, InstallAttribution, Method, upgrade_install
from svc_engine.keys import Mode

D, P = Confidence.DETERMINISTIC, Confidence.PROBABILISTIC
OLD = "aaaaaaaa-0000-4000-8000-000000000001"
NEW = "bbbbbbbb-0000-4000-8000-000000000002"
PAGE = InstallAttribution(NEW, D, Method.LANDING_PAGE)
HANDOFF = InstallAttribution(NEW, D, Method.AUTHENTICATED_HANDOFF)
PROB_OLD = InstallAttribution(OLD, P, Method.PROBABILISTIC_MATCH)
REFERRER_OLD = InstallAttribution(OLD, D, Method.INSTALL_REFERRER)
PAGE_OLD = InstallAttribution(OLD, D, Method.LANDING_PAGE)


@pytest.mark.parametrize(("current", "offered", "after"), [
    (None, PAGE, PAGE),  # unattributed install + open button: upgraded
    (None, HANDOFF, HANDOFF),  # unattributed install + handoff claim: upgraded
    (PROB_OLD, PAGE, PAGE),  # a hint gives way to deterministic evidence
    (PROB_OLD, HANDOFF, HANDOFF),
    (REFERRER_OLD, PAGE, REFERRER_OLD),  # deterministic keeps its first attribution
    (PAGE_OLD, HANDOFF, PAGE_OLD),
    (None, InstallAttribution(NEW, P, Method.PROBABILISTIC_MATCH), None),
    (PROB_OLD, InstallAttribution(NEW, P, Method.PROBABILISTIC_MATCH), PROB_OLD),
])
def test_upgrade_install(current: InstallAttribution | None, offered: InstallAttribution,
                         after: InstallAttribution | None) -> None:
    assert upgrade_install(current, offered) == after


def install(attribution: InstallAttribution | None = None) -> Install:
    return Install(install_id="3f2b8c1e-9d4a-4b6e-8f00-1234567890ab", project_id="p1",
                   mode=Mode.LIVE, platform="ios", created_at_ms=1000, first_idem_key="idem-1",
                   attribution=attribution)


def test_with_upgrade_stamps_the_time() -> None:
    before = install()
    assert before.confidence is Confidence.UNATTRIBUTED
    after = before.with_upgrade(HANDOFF, 5000)
    assert (after.attribution, after.upgraded_at_ms, after.confidence) == (HANDOFF, 5000, D)
    assert after.with_upgrade(PAGE, 6000) is after


attribution_st = st.none() | st.builds(InstallAttribution, link_id=st.text(),
                                       confidence=st.sampled_from(Confidence),
                                       method=st.sampled_from(Method))


@given(st.builds(Install, install_id=st.text(), project_id=st.text(), mode=st.sampled_from(Mode),
                 platform=st.sampled_from(["ios", "android", "other"]),
                 created_at_ms=st.integers(0, 2**53), first_idem_key=st.none() | st.text(),
                 attribution=attribution_st, upgraded_at_ms=st.none() | st.integers(0, 2**53)))
def test_install_round_trip(inst: Install) -> None:
    m = inst.to_map()
    assert m["v"] == 1
    assert Install.from_map(m) == inst


@pytest.mark.parametrize("attribution", ["deterministic", ["x"], {"link_id": 3}])
def test_install_from_bad_map(attribution: object) -> None:
    m = install().to_map() | {"attribution": attribution}
    with pytest.raises(RecordError):
        Install.from_map(m)
