"""What users type is shown as text on every dashboard page, never as markup
(Jinja's autoescape, and no ``|safe`` on user text): a link's fields, a
project's and a key's names, a webhook endpoint's description. A mutation
audit (session 38) marked a title and a project name ``|safe`` and no test
failed; the CSP would stop the script, but the page's HTML was the visitor's."""

from __future__ import annotations

import re
from pathlib import Path

from tests.conftest import App
from tests.dashboard_support import owner, signed_in
from tests.dashboard_webhook_support import make_endpoint

HOSTILE = '<script>alert(1)</script><img src=x onerror=alert(2)>'
ESCAPED = "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;"


def _shown_as_text(page: str, where: str) -> None:
    assert HOSTILE not in page, where
    assert "<img src=x" not in page and "<script>alert" not in page, where


async def test_user_text_is_escaped_on_every_page_that_shows_it(app: App) -> None:
    async with app.client("sk_test") as c:
        r = await c.post("/v1/links", json={
            "path": "/p", "title": HOSTILE, "campaign": HOSTILE, "channel": HOSTILE,
            "tags": ["<b>tag</b>"], "ogTitle": HOSTILE, "ogDescription": HOSTILE,
            "params": {"k": HOSTILE}})
        assert r.status_code == 201, r.text
        link = r.json()
    await make_endpoint(app, description=HOSTILE)
    m = await signed_in(app, owner(app))
    try:
        r = await m.post("/dashboard/settings/keys", {"kind": "secret", "name": HOSTILE})
        assert r.status_code in (200, 303)
        pages = {
            "links": "/dashboard/links",
            "link": f"/dashboard/links/{link['id']}",
            "edit": f"/dashboard/links/{link['id']}/edit",
            "debugger": f"/dashboard/build/debugger?link={link['slug']}",
            "keys": "/dashboard/settings/keys",
            "webhooks": "/dashboard/settings/webhooks",
            "live": "/dashboard/live",
        }
        shown = {}
        for where, path in pages.items():
            r = await m.get(path)
            assert r.status_code == 200, where
            _shown_as_text(r.text, where)
            shown[where] = r.text.count(ESCAPED)
        # each page that names the text shows it, escaped (the live page has no event yet)
        assert all(shown[w] >= 1 for w in pages if w != "live"), shown
        r = await m.post("/dashboard/projects/new", {"name": HOSTILE})
        assert r.status_code == 200
        _shown_as_text(r.text, "project created")
        assert ESCAPED in r.text
        # the project switcher of every page names it, escaped
        for where in ("links", "keys"):
            page = (await m.get(pages[where])).text
            _shown_as_text(page, f"{where} in the new project")
            assert ESCAPED in page, where
    finally:
        await m.aclose()


def test_no_template_or_view_marks_text_safe_but_the_icons() -> None:
    """The one ``|safe`` is the icon set's SVG paths (constants in code); a new
    one, a ``Markup(...)`` in a view or an ``autoescape false`` block has to be
    looked at and added here."""
    root = Path(__file__).resolve().parent.parent / "web"
    found = []
    for path in sorted(root.rglob("*")):
        if path.suffix not in (".html", ".py") or "__pycache__" in path.parts:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if re.search(r"\|\s*safe\b|\bMarkup\(|autoescape\s+false", line):
                found.append(f"{path.relative_to(root)}:{n}")
    assert found == ["dashboard/templates/macros.html:47"], found

