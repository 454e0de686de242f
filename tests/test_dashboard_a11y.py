"""Accessibility audit of every dashboard page, in headless Chromium against the
real service on a real socket.

axe-core (bundled by axe-playwright-python) runs the WCAG 2.0, 2.1 and 2.2
level A and AA rules on each page a user can reach, with every confirmation
and data table (<details>) opened, and on each menu, open, on its own. The
pages are checked in the light theme, and their colours again in the dark
one; the "system" theme must paint exactly like the explicit theme of the
same scheme, so that this checks all four. A violation of impact serious or
critical fails the test, which names the page, the theme, the rule and the
elements; so does a contrast ratio axe measured but left undecided (1:1,
invisible text). Colour pairs axe could not measure are printed for review:
on the signed-out pages the logo's name and the theme label sit on a
gradient, and the charts' SVG axis labels are too short for it; measured by
hand, all are 5:1 or more in both themes.

The data is seeded first (links with real taps, an install and a conversion,
a custom domain, a webhook endpoint with a delivery), so lists, charts and
detail pages are not empty. Pages that only answer a form (a key or an
invitation shown once, a field error, a refusal, a 404) are reached the way
a person reaches them. The pages a GET shows are checked again on a phone
(the layout rules: there the sidebar is a bar on top, and tables and code
blocks scroll sideways, so they must take focus).

Also: signing in and creating a link with the keyboard alone, with a visible
focus indicator on everything that takes focus on the way.

Playwright's sync API runs its own event loop, so these are plain test
functions (not trio). A failed test leaves a screenshot under
test-output/screenshots/.
"""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from axe_playwright_python.base import AXE_SCRIPT  # type: ignore[import-untyped]
from playwright.sync_api import expect

from tests.deferred_helpers import ANDROID_UA, IOS_UA, PLATFORMS, SDK, init_body, new_install
from tests.server_process import ServerProcess
from tests.test_dashboard_browser import Save, launched_chromium, new_page, owner_of, sign_in

pytestmark = pytest.mark.browser

# Every WCAG 2 success criterion of level A and AA that axe checks. The dark
# theme changes only colours, so there axe runs only its colour rules; a phone
# changes only the layout (the markup is the same), so there it runs the rules
# that depend on the layout.
WCAG_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]
COLOUR_RULES = ["color-contrast", "link-in-text-block"]
LAYOUT_RULES = [*COLOUR_RULES, "scrollable-region-focusable", "target-size", "meta-viewport",
                "css-orientation-lock", "avoid-inline-spacing"]
RESULTS = ["violations", "incomplete"]
PASSES = {
    "light": {"runOnly": {"type": "tag", "values": WCAG_A_AA}, "resultTypes": RESULTS},
    "dark": {"runOnly": {"type": "rule", "values": COLOUR_RULES}, "resultTypes": RESULTS},
    "phone": {"runOnly": {"type": "rule", "values": LAYOUT_RULES}, "resultTypes": RESULTS},
}
FAILING = ("serious", "critical")
UNREACHABLE = "https://localhost:9/hook"  # nothing listens on the discard port


def run_axe(page: Any, options: dict[str, Any], within: str | None = None) -> dict[str, Any]:
    """axe-core's results for the page (or the part matching ``within``). The
    script, as axe-playwright-python bundles it, is loaded once per document:
    its ``Axe.run`` loads it again on every call, which cost seconds here."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(AXE_SCRIPT)
    result: dict[str, Any] = page.evaluate(
        "([within, options]) => axe.run(within || document, options)", [within, options])
    return result


# The colours of every element, to compare the "system" theme with the explicit
# one of the same scheme (so that checking one checks both).
PAINT = """theme => {
  const root = document.documentElement, served = root.dataset.theme;
  const paint = () => Array.from(document.querySelectorAll('body *'), el => {
    const s = getComputedStyle(el);
    return [s.color, s.backgroundColor, s.backgroundImage, s.borderTopColor,
            s.borderBottomColor, s.outlineColor, s.fill, s.stroke].join(' ');
  });
  root.dataset.theme = 'system';
  const system = paint();
  root.dataset.theme = theme;
  const explicit = paint();
  root.dataset.theme = served;
  const all = Array.from(document.querySelectorAll('body *'));
  const i = system.findIndex((p, n) => p !== explicit[n]);
  return i < 0 ? null : [all[i].outerHTML.slice(0, 120), system[i], explicit[i]];
}"""


@dataclass
class Finding:
    page: str
    url: str
    run: str          # light, dark (the theme) or phone
    rule: str
    impact: str
    help: str
    targets: list[str] = field(default_factory=list)
    why: list[str] = field(default_factory=list)

    def line(self) -> str:
        where = ", ".join(self.targets[:8]) + (" …" if len(self.targets) > 8 else "")
        because = f" ({'; '.join(self.why)})" if self.why else ""
        return (f"{self.page} [{self.run}] {self.url}: {self.rule} ({self.impact}, "
                f"{len(self.targets)}x) {self.help}{because} -> {where}")


class Audit:
    """Runs axe on a page in the light and the dark theme and keeps what it found:
    violations, and the colour pairs it could not measure (printed for review)."""

    def __init__(self, passes: tuple[str, ...] = ("light", "dark")) -> None:
        self.passes = {name: PASSES[name] for name in passes}
        self.findings: list[Finding] = []
        self.unmeasured: list[Finding] = []
        self.pages: list[str] = []

    def visit(self, page: Any, path: str, label: str) -> None:
        """Go to ``path`` and check the page there."""
        page.goto(path)
        self.check(page, label)

    def check(self, page: Any, label: str, *, within: str | None = None) -> None:
        """Check the page, or only the part matching ``within`` (an open menu)."""
        page.wait_for_load_state()
        if within is None:
            # Confirmations and data tables are <details>: open them so their content
            # is checked too (axe skips what is hidden). The menus overlay the page:
            # each is checked on its own, open (``within``).
            page.evaluate("document.querySelectorAll('details:not(.menu-wrap)')"
                          ".forEach(d => { d.open = true; })")
        url = "/" + page.url.split("://", 1)[-1].split("/", 1)[-1]
        self.pages.append(label)
        for name, options in self.passes.items():
            scheme = "dark" if name == "dark" else "light"
            page.emulate_media(color_scheme=scheme)     # the "system" theme follows it
            differs = page.evaluate(PAINT, scheme)
            if differs is not None:      # then checking "system" would not check both
                self.findings.append(Finding(
                    label, url, name, "svc-theme-mismatch", "serious",
                    f"The system theme is not the {scheme} theme (system: {differs[1]}; "
                    f"{scheme}: {differs[2]})", [differs[0]]))
            result = run_axe(page, options, within)
            for v in result["violations"]:
                self.findings.append(self._finding(label, url, name, v))
            for v in result["incomplete"]:
                if v["id"] not in COLOUR_RULES:
                    continue
                # A ratio axe measured but would not judge (1:1: text as invisible as
                # the skip link's once was) is a finding; the rest is printed.
                measured = [n for n in v["nodes"] if any(
                    "contrast ratio" in c.get("message", "") for c in n["any"])]
                if measured:
                    self.findings.append(self._finding(label, url, name,
                                                       {**v, "nodes": measured}))
                rest = [n for n in v["nodes"] if n not in measured]
                if rest:
                    self.unmeasured.append(self._finding(label, url, name, {**v, "nodes": rest}))
        page.emulate_media(color_scheme="light")

    @staticmethod
    def _finding(label: str, url: str, run: str, v: dict[str, Any]) -> Finding:
        why = sorted({c["message"] for n in v["nodes"] for c in n["any"] + n["all"] + n["none"]
                      if c.get("message")})
        return Finding(label, url, run, v["id"], v["impact"] or "unknown", v["help"],
                       [" ".join(str(t) for t in n["target"]) for n in v["nodes"]], why)

    def failing(self) -> list[Finding]:
        return [f for f in self.findings if f.impact in FAILING]

    def verdict(self) -> None:
        """Print everything found; fail on what is serious or critical."""
        report = "\n".join(f.line() for f in self.findings)
        print(f"axe: {len(self.pages)} pages, {len(self.findings)} findings\n{report}")
        unmeasured = "\n".join(f.line() for f in self.unmeasured)
        print(f"colours axe could not measure (review by hand):\n{unmeasured}")
        if self.findings:
            print(json.dumps(self.summary(), indent=1))
        failing = self.failing()
        assert not failing, (f"{len(failing)} serious or critical accessibility violations:\n"
                             + "\n".join(f.line() for f in failing))

    def summary(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for f in self.findings:
            key = f"{f.rule} ({f.impact}, {f.run})"
            out.setdefault(f.page, {})[key] = out.get(f.page, {}).get(key, 0) + len(f.targets)
        return out


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with launched_chromium() as b:
        yield b


@dataclass
class Seeded:
    server: ServerProcess
    link: dict[str, Any]
    install_id: str
    endpoint: dict[str, Any]
    delivery: dict[str, Any]


def tap(server: ServerProcess, slug: str, user_agent: str) -> None:
    with httpx.Client(base_url=server.url, timeout=10) as c:
        assert c.get(f"/{slug}", headers={"user-agent": user_agent}).status_code == 302


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    """The service with data on every page: links and real taps, an install and a
    conversion, a custom domain, a webhook endpoint with a delivery."""
    tmp = tmp_path_factory.mktemp("dashboard-a11y")
    srv = ServerProcess(str(tmp / "data"), log_dir=str(tmp)).start()
    try:
        with srv.client("sk_test") as c:
            assert c.patch("/v1/platforms", json=PLATFORMS).status_code == 200
            assert c.post("/v1/domains", json={"domain": "go.example.com"}).status_code in (
                200, 201)
            link = c.post("/v1/links", json={
                "path": "/product/42", "title": "Spring sale", "campaign": "spring",
                "channel": "newsletter", "tags": ["shoes", "q2"],
                "params": {"ref": "qr", "discount": 20, "vip": True}}).json()
            other = c.post("/v1/links", json={"path": "/docs", "title": "Docs"}).json()
            c.post("/v1/links", json={"path": "/about"}).raise_for_status()
            endpoint = c.post("/v1/webhooks/endpoints", json={
                "url": UNREACHABLE, "description": "Order system"}).json()
            assert "id" in endpoint, endpoint
            delivery = c.post(f"/v1/webhooks/endpoints/{endpoint['id']}/test").json()
            assert "id" in delivery, delivery
        tap(srv, link["slug"], IOS_UA)
        tap(srv, link["slug"], ANDROID_UA)
        tap(srv, other["slug"], IOS_UA)
        install = new_install()
        with srv.client("pk_test", **SDK) as c:
            r = c.post("/v1/sdk/init", json=init_body(install, "ios"))
            assert r.status_code == 200, r.text
            when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            r = c.post("/v1/sdk/events", json={"installId": install, "events": [
                {"id": str(uuid.uuid4()), "name": "purchase", "occurredAt": f"{when}.000Z",
                 "properties": {"revenue": 20, "currency": "EUR"}}]},
                headers={"idempotency-key": str(uuid.uuid4())})
            assert r.status_code == 200, r.text
        yield Seeded(srv, link, install, endpoint, delivery)
    finally:
        srv.kill()


def new_context(chromium: Any, server: ServerProcess, **options: Any) -> tuple[Any, Any]:
    """A browser context on the server: desktop size unless told, no motion (so no
    colour is read mid-transition), light colour scheme (the dark one is emulated
    per check)."""
    options = {"viewport": {"width": 1280, "height": 900}, **options}
    return new_page(chromium, server.url, reduced_motion="reduce", color_scheme="light",
                    **options)


HOOKS = "/dashboard/settings/webhooks"


def build_pages(seeded: Seeded) -> list[tuple[str, str]]:
    """Links, Live events and Build: the pages a GET shows, and their labels."""
    link, slug = seeded.link["id"], seeded.link["slug"]
    return [("/dashboard/links", "links"),
            ("/dashboard/links?q=no-such-link", "links, nothing found"),
            ("/dashboard/links/new", "new link"),
            (f"/dashboard/links/{link}/edit", "edit link"),
            (f"/dashboard/links/{link}", "link detail"),
            (f"/dashboard/links/{link}?days=90", "link detail, 90 days"),
            ("/dashboard/live", "live events"),
            ("/dashboard/build/debugger", "debugger"),
            (f"/dashboard/build/debugger?link={slug}", "debugger, link"),
            (f"/dashboard/build/debugger?install={seeded.install_id}", "debugger, install"),
            ("/dashboard/build/debugger?install=nobody", "debugger, unknown install"),
            (f"/dashboard/build/debugger/simulate?link={slug}&device=android",
             "debugger, simulated tap"),
            ("/dashboard/build/platforms", "platforms"),
            ("/dashboard/build/domains", "domains")]


def webhook_pages(seeded: Seeded) -> list[tuple[str, str]]:
    """Settings > Webhooks: the pages a GET shows, and their labels."""
    hook, delivery = seeded.endpoint["id"], seeded.delivery["id"]
    return [(HOOKS, "webhooks"),
            (f"{HOOKS}/new", "new webhook endpoint"),
            (f"{HOOKS}/{hook}", "webhook endpoint"),
            (f"{HOOKS}/{hook}/edit", "edit webhook endpoint"),
            (f"{HOOKS}/{hook}/delete", "delete webhook endpoint"),
            (f"{HOOKS}/deliveries", "webhook deliveries"),
            (f"{HOOKS}/deliveries?status=failed", "webhook deliveries, filtered"),
            (f"{HOOKS}/deliveries/{delivery}", "webhook delivery")]


SETTINGS_PAGES = [("/dashboard/build/sdk", "SDK"), ("/dashboard/settings/keys", "API keys"),
                  ("/dashboard/settings/team", "team"),
                  ("/dashboard/settings/billing", "billing")]


def check_menus(audit: Audit, page: Any, who: str) -> None:
    """The workspace switcher and the account menu, each open on its own."""
    for menu in ("switcher", "account"):
        summary = page.locator(f".{menu} > summary")
        summary.click()
        audit.check(page, f"{menu} menu ({who})", within=f".{menu} .menu")
        summary.click()


# What has focus, and why it does not show if it does not. The dashboard draws
# focus as a 2px outline (dashboard.css); box shadows are not focus rings there.
FOCUS = r"""() => {
  const el = document.activeElement;
  if (!el || el === document.body) return {what: 'nothing', problem: 'nothing has focus'};
  const s = getComputedStyle(el), r = el.getBoundingClientRect();
  const what = el.outerHTML.slice(0, 100);
  const ring = s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2
    && !/rgba\(.*, 0\)$/.test(s.outlineColor);
  if (!ring) return {what, problem: 'no focus indicator'};
  if (r.width === 0 || r.height === 0) return {what, problem: 'not on screen'};
  if (r.bottom < 0 || r.top > innerHeight || r.right < 0 || r.left > innerWidth)
    return {what, problem: 'outside the viewport'};
  return {what, problem: null};
}"""


class Keyboard:
    """Drives a page with Tab and Enter only, checking the focus indicator of
    everything that takes focus on the way."""

    def __init__(self, page: Any) -> None:
        self.page = page
        self.problems: list[str] = []
        self.stops = 0

    def focused(self, selector: str) -> bool:
        return bool(self.page.evaluate("s => !!document.activeElement?.matches(s)", selector))

    def tab_to(self, selector: str, *, limit: int = 60) -> None:
        """Press Tab until the element matching ``selector`` has focus."""
        presses = 0
        while not self.focused(selector):
            assert presses < limit, (
                f"{limit} presses of Tab did not reach {selector} on {self.page.url}")
            self.page.keyboard.press("Tab")
            presses += 1
            self.stops += 1
            seen = self.page.evaluate(FOCUS)
            if seen["problem"]:
                self.problems.append(f"{self.page.url}: {seen['problem']}: {seen['what']}")


def test_pages_on_a_phone_pass_axe(chromium: Any, seeded: Seeded,
                                   failure_screenshot: Save) -> None:
    """The pages a GET shows, on a phone: the sidebar is a bar on top, tables and
    code blocks scroll sideways (so they must take focus)."""
    server, audit = seeded.server, Audit(passes=("phone",))
    ctx, page = new_context(chromium, server, viewport={"width": 390, "height": 844},
                            is_mobile=True)
    try:
        sign_in(page, *owner_of(server))
        for path, label in [*build_pages(seeded), *webhook_pages(seeded), *SETTINGS_PAGES]:
            audit.visit(page, path, f"{label} (phone)")
        check_menus(audit, page, "phone")
    finally:
        failure_screenshot(page, "phone")
        ctx.close()
    audit.verdict()


def test_sign_in_and_create_a_link_with_the_keyboard_alone(chromium: Any, seeded: Seeded,
                                                           failure_screenshot: Save) -> None:
    server = seeded.server
    email, password = owner_of(server)
    ctx, page = new_context(chromium, server)
    keys = Keyboard(page)
    try:
        page.goto("/dashboard")
        keys.tab_to("#email")
        page.keyboard.type(email)
        keys.tab_to("#password")
        page.keyboard.type(password)
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/dashboard/build/sdk"))

        # The first Tab reaches the skip link, shown on top and readable.
        keys.tab_to(".skip-link", limit=1)
        box = page.locator(".skip-link").bounding_box()
        assert box is not None and box["y"] >= 0, box
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            found = run_axe(page, PASSES["dark"], ".skip-link")
            # axe files text of 1:1 contrast (invisible, as this link's once was)
            # as "incomplete": here that is a failure too.
            assert not found["violations"] and not found["incomplete"], (scheme, found)
        page.emulate_media(color_scheme="light")

        keys.tab_to('.nav a[href$="/dashboard/links"]')
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/dashboard/links$"))
        keys.tab_to(".skip-link", limit=1)                     # past the sidebar
        page.keyboard.press("Enter")
        assert keys.focused("main#main")
        keys.tab_to('a[href$="/dashboard/links/new"]', limit=1)  # the page's first action
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/dashboard/links/new$"))
        assert keys.focused("#f-path")                          # the form's first field
        page.keyboard.type("/keyboard")
        keys.tab_to("#f-title")
        page.keyboard.type("Typed with the keyboard")
        keys.tab_to("#f-campaign")
        page.keyboard.type("a11y")
        keys.tab_to(".form-actions .btn-primary")              # Create link
        page.keyboard.press("Enter")
        page.wait_for_url(re.compile(r"/dashboard/links/[0-9a-f-]{36}\?done=link-created$"))
        expect(page.get_by_role("heading", name="Typed with the keyboard", level=1)
               ).to_be_visible()
    finally:
        failure_screenshot(page, "keyboard")
        ctx.close()
    assert not keys.problems, "focus not visible:\n" + "\n".join(keys.problems)
    assert keys.stops > 20, keys.stops       # the walk went through the sidebar and the form
    with server.client("sk_test") as c:
        made = [x for x in c.get("/v1/links", params={"q": "keyboard"}).json()["data"]
                if x["path"] == "/keyboard"]
    assert len(made) == 1 and made[0]["campaign"] == "a11y", made


def test_every_dashboard_page_passes_axe_wcag_a_and_aa(chromium: Any, seeded: Seeded,
                                                       failure_screenshot: Save) -> None:
    server, audit = seeded.server, Audit()
    email, password = owner_of(server)
    ctx, page = new_context(chromium, server)
    guest_ctx, guest = new_context(chromium, server)
    try:
        # -- signed out ------------------------------------------------------------
        audit.visit(page, "/dashboard", "sign-in")
        page.get_by_label("E-mail").fill(email)
        page.get_by_label("Password").fill("not the password")
        page.get_by_role("button", name="Sign in").click()
        expect(page.get_by_role("alert")).to_be_visible()
        audit.check(page, "sign-in, wrong password")
        audit.visit(guest, "/dashboard/no-such-page", "404, signed out")

        # -- signed in: Links, Live events, Build ----------------------------------
        sign_in(page, email, password)
        audit.check(page, "SDK")
        check_menus(audit, page, "owner")
        for path, label in build_pages(seeded):
            audit.visit(page, path, label)
        page.goto("/dashboard/build/debugger")
        page.get_by_role("link", name=re.compile(r"^Replay the click")).first.click()
        page.locator("#click-result").wait_for()
        audit.check(page, "debugger, click")

        page.goto("/dashboard/links/new")
        page.get_by_label("In-app path").fill("no slash")
        page.get_by_role("button", name="Create link").click()
        expect(page.locator(".field-error")).to_be_visible()
        audit.check(page, "new link, field error")

        # -- Settings: keys, webhooks, team, billing --------------------------------
        audit.visit(page, "/dashboard/settings/keys", "API keys")
        page.get_by_label("Name").fill("CI server")
        page.get_by_label("Secret").check()
        page.get_by_role("button", name="Create test key").click()
        expect(page.get_by_label("Key value")).to_be_visible()
        audit.check(page, "API keys, new key shown")

        for path, label in webhook_pages(seeded):
            audit.visit(page, path, label)
        page.goto(f"{HOOKS}/new")
        page.get_by_label("Endpoint URL").fill("http://not-https.example.com/")
        page.get_by_role("button", name="Add endpoint").click()
        expect(page.get_by_role("alert")).to_be_visible()
        audit.check(page, "new webhook endpoint, field error")
        page.get_by_label("Endpoint URL").fill("https://hooks.example.com/svc")
        page.get_by_role("button", name="Add endpoint").click()
        expect(page.get_by_role("textbox", name="Signing secret")).to_be_visible()
        audit.check(page, "webhook endpoint, secret shown")

        audit.visit(page, "/dashboard/settings/team", "team")
        page.get_by_label("E-mail").fill("marketer@example.com")
        page.get_by_label("Role", exact=True).select_option("marketer")
        page.get_by_role("button", name="Create invitation").click()
        invite = page.get_by_label("Invitation link").input_value()
        audit.check(page, "team, invitation shown")

        audit.visit(page, "/dashboard/settings/billing", "billing")
        page.get_by_role("button", name="Switch to Starter").click()
        page.wait_for_url(re.compile(r"done=plan-changed"))
        audit.check(page, "billing, plan changed")
        audit.visit(page, HOOKS, "webhooks, below the plan")
        page.goto("/dashboard/settings/billing")
        page.get_by_role("button", name="Switch to Growth").click()
        page.wait_for_url(re.compile(r"done=plan-changed"))

        # -- an invitee: the invitation, refusals, no organization -----------------
        audit.visit(guest, invite, "invitation")
        guest.get_by_label("Choose a password").fill("correct horse battery")
        guest.get_by_label("Repeat the password").fill("correct horse battery")
        guest.get_by_role("button", name="Create account and join").click()
        guest.wait_for_url(re.compile(r"done=joined"))
        audit.check(guest, "SDK, just joined (marketer)")
        check_menus(audit, guest, "marketer")
        audit.visit(guest, HOOKS, "webhooks, refused to a marketer")
        audit.visit(guest, "/dashboard/projects/new", "new project, refused to a marketer")
        page.goto("/dashboard/settings/team")
        row = page.get_by_role("row").filter(has_text="marketer@example.com")
        row.get_by_text("Remove…").click()
        row.get_by_role("button", name=re.compile("^Remove")).click()
        page.wait_for_load_state()
        audit.visit(guest, "/dashboard/links", "no organization")
        guest_ctx.clear_cookies()
        audit.visit(guest, invite, "invitation, used")

        # -- workspaces and errors --------------------------------------------------
        audit.visit(page, "/dashboard/no-such-page", "404")
        audit.visit(page, f"/dashboard/links/{uuid.uuid4()}", "link not found")
        audit.visit(page, "/dashboard/orgs/new", "new organization")
        audit.visit(page, "/dashboard/projects/new", "new project")
        page.get_by_label("Project name").fill("Second app")
        page.get_by_role("button", name="Create project").click()
        expect(page.get_by_role("heading", name="Second app is ready")).to_be_visible()
        audit.check(page, "project created")
        audit.visit(page, "/dashboard/links", "links, empty project")
    finally:
        failure_screenshot(page, "owner")
        failure_screenshot(guest, "guest")
        ctx.close()
        guest_ctx.close()

    audit.verdict()
