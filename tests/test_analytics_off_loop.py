"""The analytics API reads its counters in a worker thread (Services.off_loop)."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from storage.analytics_store import AnalyticsStore
from tests.conftest import App


async def test_analytics_routes_read_off_the_event_loop(
        app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    loop_thread = threading.get_ident()
    threads: list[tuple[str, int]] = []
    for name in ("summary", "funnel"):
        real = getattr(AnalyticsStore, name)

        def spy(self: AnalyticsStore, *args: Any, _real: Any = real, _name: str = name,
                **kwargs: Any) -> Any:
            threads.append((_name, threading.get_ident()))
            return _real(self, *args, **kwargs)

        monkeypatch.setattr(AnalyticsStore, name, spy)
    async with app.client("sk_test") as c:
        link = (await c.post("/v1/links", json={"path": "/p"})).json()
        for path in ("/v1/analytics/summary", f"/v1/analytics/summary?linkId={link['id']}",
                     f"/v1/analytics/links/{link['id']}",
                     f"/v1/analytics/links/{link['id']}/funnel"):
            assert (await c.get(path)).status_code == 200, path
    assert [n for n, _ in threads] == ["summary", "summary", "summary", "funnel"]
    # summaries in a worker thread; the funnel (four exact reads a day) on the loop
    assert [t != loop_thread for _, t in threads] == [True, True, True, False]
