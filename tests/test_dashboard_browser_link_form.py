"""The link form in headless Chromium against the real service on a real
socket: a parameter type the form's select does not offer (a page altered in
the browser, or one left open across a change of the form) is refused as a
field error, with the form shown again as typed and nothing saved; choosing
a type from the select then saves the link.

Playwright's sync API runs its own event loop, so these are plain test
functions (not trio). A failed test leaves a screenshot under
test-output/screenshots/.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.server_process import ServerProcess
from tests.test_dashboard_browser import Save, launched_chromium, signed_in_page

pytestmark = pytest.mark.browser


@pytest.fixture
def server(server_factory: Callable[[], ServerProcess]) -> ServerProcess:
    return server_factory().start()


@pytest.fixture
def page(server: ServerProcess, failure_screenshot: Save) -> Iterator[Any]:
    with launched_chromium() as browser, signed_in_page(
            browser, server, failure_screenshot, "page",
            viewport={"width": 1280, "height": 900}) as p:
        yield p


def links_of(server: ServerProcess) -> list[dict[str, Any]]:
    with server.client("sk_test") as c:
        r = c.get("/v1/links")
    assert r.status_code == 200, r.text
    return r.json()["data"]  # type: ignore[no-any-return]


def test_a_parameter_type_the_select_does_not_offer_is_a_field_error(
        page: Any, server: ServerProcess) -> None:
    page.goto("/dashboard/links/new")
    page.get_by_label("In-app path").fill("/product/42")
    page.get_by_label("Parameter 1 name").fill("color")
    page.get_by_label("Parameter 1 value").fill("red")
    # The select given a value it never offered, as a tampered or stale page sends it.
    page.get_by_label("Parameter 1 type").evaluate(
        "s => { s.add(new Option('JSON', 'json')); s.value = 'json'; }")
    page.get_by_role("button", name="Create link").click()

    error = page.locator("#f-params-error")
    expect(error).to_have_text("The parameter 'color' has a type this form does not offer "
                               "('json'): choose Text, Number, true or false")
    assert page.url.endswith("/dashboard/links/new")
    expect(page.get_by_text("The link was not created: check")).to_be_visible()
    expect(page.get_by_label("Parameter 1 name")).to_have_value("color")
    expect(page.get_by_label("Parameter 1 value")).to_have_value("red")
    expect(page.get_by_label("In-app path")).to_have_value("/product/42")
    assert links_of(server) == []

    page.get_by_label("Parameter 1 type").select_option("text")
    page.get_by_role("button", name="Create link").click()
    page.wait_for_url(re.compile(r"/dashboard/links/[0-9a-f-]{36}\?done=link-created$"))
    (saved,) = links_of(server)
    assert saved["params"] == {"color": "red"} and saved["path"] == "/product/42"
