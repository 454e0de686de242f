"""The dashboard in headless Chromium against the real service on a real socket:
sign in, switch project and mode, create and revoke a key, invite a member (who
accepts in a second browser), switch theme, sign out.

Playwright's sync API runs its own event loop, so these are plain test
functions (not trio). Chromium is Debian's package (``make test`` installs it).
A failed test leaves a screenshot under test-output/screenshots/.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from playwright.sync_api import expect

from tests.server_process import ServerProcess

pytestmark = pytest.mark.browser

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
LIGHT_BG, DARK_BG = "rgb(245, 246, 248)", "rgb(13, 15, 19)"
Save = Callable[[Any, str], Any]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    tmp = tmp_path_factory.mktemp("dashboard-browser")
    srv = ServerProcess(str(tmp / "data"), log_dir=str(tmp)).start()
    yield srv
    srv.kill()


@contextlib.contextmanager
def launched_chromium() -> Iterator[Any]:
    """Debian's Chromium, headless, through Playwright's sync API (closed on leaving)."""
    from playwright.sync_api import sync_playwright

    assert shutil.which(CHROMIUM), "Chromium is missing: run `make browser` (Debian package)"
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


def new_page(browser: Any, base_url: str, **options: Any) -> tuple[Any, Any]:
    """A new browser context on ``base_url`` (10-second timeouts), and a page in it."""
    ctx = browser.new_context(base_url=base_url, **options)
    ctx.set_default_timeout(10_000)
    return ctx, ctx.new_page()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with launched_chromium() as b:
        yield b


class Pages:
    """Browser contexts for one test; each is screenshotted if the test fails."""

    def __init__(self, browser: Any, base: str, save: Save) -> None:
        self.browser, self.base, self.save = browser, base, save
        self.contexts: list[tuple[str, Any, Any]] = []

    def new(self, label: str, **options: Any) -> Any:
        ctx, page = new_page(self.browser, self.base, **options)
        self.contexts.append((label, ctx, page))
        return page

    def close(self) -> None:
        for label, ctx, page in self.contexts:
            self.save(page, label)
            ctx.close()


@pytest.fixture
def pages(browser: Any, server: ServerProcess, failure_screenshot: Save) -> Iterator[Pages]:
    p = Pages(browser, server.url, failure_screenshot)
    yield p
    p.close()


def sign_in(page: Any, email: str, password: str) -> None:
    page.goto("/dashboard")
    page.get_by_label("E-mail").fill(email)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/dashboard/build/sdk"))


def owner_of(server: ServerProcess) -> tuple[str, str]:
    return server.info["owner"]["email"], server.info["owner"]["password"]


@contextlib.contextmanager
def signed_in_page(browser: Any, server: ServerProcess, save: Save, label: str,
                   **options: Any) -> Iterator[Any]:
    """A page of a new context, signed in as the owner; on leaving, screenshotted
    as ``label`` if the test failed, and its context closed."""
    ctx, page = new_page(browser, server.url, **options)
    try:
        sign_in(page, *owner_of(server))
        yield page
    finally:
        save(page, label)
        ctx.close()


def test_sign_in_and_sign_out(pages: Pages, server: ServerProcess) -> None:
    page = pages.new("owner")
    page.goto("/dashboard/settings/team")
    assert "/dashboard?next=/dashboard/settings/team" in page.url
    page.get_by_label("E-mail").fill(owner_of(server)[0])
    page.get_by_label("Password").fill("not the password")
    page.get_by_role("button", name="Sign in").click()
    assert page.get_by_role("alert").inner_text().startswith("That e-mail and password")
    page.get_by_label("Password").fill(owner_of(server)[1])
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(re.compile(r"/dashboard/settings/team$"))
    expect(page.get_by_role("heading", name="Team", level=1)).to_be_visible()
    page.locator(".account-button").click()
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url(re.compile(r"/dashboard\?done=signed-out"))
    expect(page.get_by_text("You are signed out.")).to_be_visible()
    page.goto("/dashboard/settings/keys")
    expect(page.get_by_role("heading", name="Sign in to svc")).to_be_visible()


def test_switch_project_and_mode(pages: Pages, server: ServerProcess) -> None:
    page = pages.new("owner")
    sign_in(page, *owner_of(server))
    page.locator(".switcher-button").click()
    page.get_by_role("link", name="New project").click()
    page.get_by_label("Project name").fill("Second app")
    page.get_by_role("button", name="Create project").click()
    expect(page.get_by_role("heading", name="Second app is ready")).to_be_visible()
    assert page.get_by_label("Secret key · live").input_value().startswith("sk_live_")
    assert page.locator(".switcher-project").inner_text() == "Second app"
    page.locator(".switcher-button").click()
    page.locator(".switcher-menu").get_by_role("button", name="My app").click()
    page.wait_for_load_state()
    assert page.locator(".switcher-project").inner_text() == "My app"
    expect(page.get_by_text("Test mode", exact=True)).to_be_visible()
    page.get_by_role("button", name="Live", exact=True).click()
    page.wait_for_load_state()
    assert page.get_by_role("button", name="Live", exact=True).get_attribute(
        "aria-pressed") == "true"
    assert page.locator(".mode-banner").count() == 0
    page.get_by_role("link", name="API keys").click()
    assert server.info["keys"]["pk_live"] in page.content()
    assert server.info["keys"]["pk_test"] not in page.content()


def test_create_and_revoke_a_key(pages: Pages, server: ServerProcess) -> None:
    page = pages.new("owner")
    sign_in(page, *owner_of(server))
    page.get_by_role("link", name="API keys").click()
    page.get_by_label("Name").fill("Browser CI")
    page.get_by_label("Secret").check()
    page.get_by_role("button", name="Create test key").click()
    value = page.get_by_label("Key value").input_value()
    assert re.fullmatch(r"sk_test_[0-9A-Za-z]{32}", value)
    expect(page.get_by_text("Copy this secret key now.")).to_be_visible()
    page.goto("/dashboard/settings/keys")
    assert value not in page.content()                       # shown once
    row = page.get_by_role("row").filter(has_text="Browser CI")
    expect(row.get_by_text("Active")).to_be_visible()
    row.get_by_text("Revoke…").click()
    row.get_by_role("button", name="Revoke key").click()
    page.wait_for_url(re.compile(r"done=key-revoked"))
    expect(page.get_by_text("The key was revoked.")).to_be_visible()
    row = page.get_by_role("row").filter(has_text="Browser CI")
    expect(row.get_by_text("Revoked")).to_be_visible()


def test_invite_a_member_who_accepts_in_another_browser(pages: Pages,
                                                        server: ServerProcess) -> None:
    page = pages.new("owner")
    sign_in(page, *owner_of(server))
    page.get_by_role("link", name="Team").click()
    page.get_by_label("E-mail").fill("dev@example.com")
    page.get_by_label("Role", exact=True).select_option("developer")
    page.get_by_role("button", name="Create invitation").click()
    link = page.get_by_label("Invitation link").input_value()
    assert "/dashboard/invite/" in link
    expect(page.get_by_text("svc sends no e-mail.")).to_be_visible()

    guest = pages.new("invitee")
    guest.goto(link)
    expect(guest.get_by_role("heading", name="Join My organization")).to_be_visible()
    guest.get_by_label("Choose a password").fill("correct horse battery")
    guest.get_by_label("Repeat the password").fill("correct horse battery")
    guest.get_by_role("button", name="Create account and join").click()
    guest.wait_for_url(re.compile(r"/dashboard/build/sdk\?done=joined"))
    expect(guest.get_by_text("You have joined the organization.")).to_be_visible()
    assert guest.locator(".account-email").inner_text() == "dev@example.com"

    page.reload()
    row = page.get_by_role("row").filter(has_text="dev@example.com")
    expect(row.get_by_text("Developer", exact=True).first).to_be_visible()
    guest.goto(link)
    expect(guest.get_by_role("heading", name="This link no longer works")).to_be_visible()


def test_switch_theme(pages: Pages, server: ServerProcess) -> None:
    page = pages.new("owner", color_scheme="dark")

    def background() -> str:
        return str(page.evaluate("getComputedStyle(document.body).backgroundColor"))

    sign_in(page, *owner_of(server))
    assert background() == DARK_BG                           # System follows the device
    page.locator(".account-button").click()
    page.get_by_role("button", name="Light").click()
    page.wait_for_load_state()
    assert page.locator("html").get_attribute("data-theme") == "light"
    assert background() == LIGHT_BG
    page.locator(".account-button").click()
    page.get_by_role("button", name="Dark").click()
    page.wait_for_load_state()
    assert background() == DARK_BG
    page.emulate_media(color_scheme="light")
    assert background() == DARK_BG                           # an explicit choice sticks
    page.locator(".account-button").click()
    page.get_by_role("button", name="System").click()
    page.wait_for_load_state()
    assert background() == LIGHT_BG
    page.goto("/dashboard/settings/billing")                 # remembered in a cookie
    assert page.locator("html").get_attribute("data-theme") == "system"


def test_phone_layout_has_no_sideways_scroll(pages: Pages, server: ServerProcess) -> None:
    page = pages.new("phone", viewport={"width": 390, "height": 844}, is_mobile=True)
    sign_in(page, *owner_of(server))
    for path in ("/dashboard/build/sdk", "/dashboard/settings/keys",
                 "/dashboard/settings/team", "/dashboard/settings/billing"):
        page.goto(path)
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, (path, width)
