"""tests/conftest.py ``failure_screenshot``: a page is saved when the test
fails, whether asked from a fixture's teardown or from a ``finally`` the
test's own failure passes through (before any report of the test exists)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


class _Page:
    def __init__(self) -> None:
        self.paths: list[str] = []

    def screenshot(self, *, path: str, full_page: bool) -> None:
        self.paths.append(path)


def test_saved_from_a_finally_the_failure_passes_through(
        failure_screenshot: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SVC_TEST_OUTPUT", str(tmp_path))
    page = _Page()
    assert failure_screenshot(page, "fine") is None  # nothing failed: nothing saved
    saved = None
    with pytest.raises(AssertionError):
        try:
            raise AssertionError("the test's own failure")
        finally:
            saved = failure_screenshot(page, "failing")
    assert saved is not None and page.paths == [saved]
    assert saved.startswith(str(tmp_path / "screenshots")) and saved.endswith("-failing.png")
