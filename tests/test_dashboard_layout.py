"""How every dashboard page frames what it shows: the sidebar's sections and
order, and times (rules a mutation audit, session 38, broke without a
failing test)."""

from __future__ import annotations

import re

from tests.conftest import App
from tests.dashboard_support import owner, signed_in


async def test_the_sidebar_lists_its_pages_in_their_order(app: App) -> None:
    """SPEC's sections: Links and Live events, then Debugger, Platforms,
    Domains and SDK under Build, then Settings (by each entry's order, not
    alphabetically)."""
    m = await signed_in(app, owner(app))
    try:
        page = (await m.get("/dashboard/links")).text
    finally:
        await m.aclose()
    nav = page[page.index('<nav class="nav"'):page.index("</nav>")]
    titles = re.findall(r'<h2 class="nav-title">([^<]+)</h2>', nav)
    labels = re.findall(r'class="nav-link"[^>]*>.*?<span>([^<]+)</span>', nav)
    assert titles == ["Build", "Settings"]
    assert labels == ["Links", "Live events", "Debugger", "Platforms", "Domains", "SDK",
                      "API keys", "Webhooks", "Team", "Billing"], labels


def test_a_time_of_another_day_shows_its_day() -> None:
    """Live events and the delivery list span days: a time of today is its
    clock time, one of another day names the day."""
    from web.dashboard.formats import clock

    now = 1_790_000_000_000  # 2026-09-21T14:13:20Z
    assert clock(now - 3_600_000, now) == "13:13:20"
    assert clock(now - 3 * 86_400_000, now) == "18 Sep, 14:13:20"
    assert clock(now) == "21 Sep, 14:13:20"  # no day to compare with: the day is named
