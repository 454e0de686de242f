"""The redirector's pages, rendered with Jinja2 as Quart does (autoescape on).

Required: no script anywhere; inline CSS; responsive (viewport meta) with light
and dark colours; the landing page has the app name, an App Store button, the
'I already have the app, open it' button and the apple-itunes-app banner tag;
the OG page has Open Graph and Twitter card tags.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jinja2
import pytest

from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.redirect import (
    app_store_url,
    landing_open_url,
    landing_universal_link,
    page_meta,
    play_store_url,
)

TEMPLATES = Path(__file__).resolve().parent.parent / "web" / "templates"
NAMES = ["landing.html", "og.html", "notfound.html", "gone.html"]
SHORT = "https://go.example.com/Ab3dE6gH9"
HOSTILE = '<script>alert("x")</script> & "quotes"'


class Page(HTMLParser):
    """Collects what the tests look at: tags, meta, links and visible text."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.meta: dict[str, str] = {}
        self.links: list[tuple[str, str]] = []
        self.text: list[str] = []
        self.html_lang: str | None = None
        self.style = ""
        self._href: str | None = None
        self._in_style = False
        self.feed(source)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        a = {k: v or "" for k, v in attrs}
        if tag == "html":
            self.html_lang = a.get("lang")
        if tag == "meta" and ("name" in a or "property" in a):
            self.meta[a.get("name") or a["property"]] = a.get("content", "")
        if tag == "a":
            self._href = a.get("href", "")
            self.links.append((self._href, ""))
        self._in_style = tag == "style"

    def handle_endtag(self, tag: str) -> None:
        if tag == "a":
            self._href = None
        self._in_style = False

    def handle_data(self, data: str) -> None:
        if self._in_style:
            self.style += data
            return
        if data.strip():
            self.text.append(" ".join(data.split()))
        if self._href is not None:
            href, text = self.links[-1]
            self.links[-1] = (href, (text + " " + " ".join(data.split())).strip())

    @property
    def visible(self) -> str:
        return " ".join(self.text)


@pytest.fixture(scope="module")
def env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=jinja2.select_autoescape(["html"]),
        undefined=jinja2.StrictUndefined,
    )


def make_link(**overrides: Any) -> Link:
    fields: dict[str, Any] = dict(
        id="3b241101-e2bb-4255-8caf-4136c566a962", project_id="p1", mode=Mode.LIVE,
        domain="go.example.com", slug="Ab3dE6gH9", path="/product/42", created_at_ms=0,
        updated_at_ms=0, title="Red shoes", og_description="Our best red shoes, 20% off.",
        og_image_url="https://cdn.example.com/shoes.png",
    )
    fields.update(overrides)
    return Link(**fields)


def landing_context(link: Link, scheme: str | None = "exampleapp",
                    app_name: str = "Example Shop") -> dict[str, object]:
    return {
        "app_name": app_name,
        "meta": page_meta(link, short_url=SHORT, site_name=app_name),
        "app_store_id": "1234567890",
        "app_store_url": app_store_url("1234567890"),
        "open_url": landing_open_url(scheme, SHORT),
        "banner_url": landing_universal_link(SHORT),
    }


def og_context(link: Link, **extra: object) -> dict[str, object]:
    return {"meta": page_meta(link, short_url=SHORT, site_name="Example Shop"),
            "app_store_url": None, "play_store_url": None, **extra}


def contexts() -> dict[str, dict[str, object]]:
    return {
        "landing.html": landing_context(make_link()),
        "og.html": og_context(make_link()),
        "notfound.html": {"site_name": "Example Shop"},
        "gone.html": {"site_name": "Example Shop"},
    }


@pytest.mark.parametrize("name", NAMES)
def test_no_script_and_self_contained(env: jinja2.Environment, name: str) -> None:
    source = (TEMPLATES / name).read_text()
    assert "<script" not in source.lower()
    html = env.get_template(name).render(contexts()[name])
    assert "<script" not in html.lower()
    assert "javascript:" not in html.lower()
    page = Page(html)
    assert page.html_lang == "en"
    assert "script" not in page.tags and "iframe" not in page.tags
    assert "link" not in page.tags  # no external stylesheet, fonts or icons
    assert not any(t.startswith("on") for t in source.split() if "=" in t)  # no handlers
    # Responsive and light/dark.
    assert page.meta["viewport"].startswith("width=device-width")
    assert page.meta["color-scheme"] == "light dark"
    assert "@media (prefers-color-scheme: dark)" in page.style
    assert page.meta["robots"].startswith("noindex")
    assert "h1" in page.tags and "main" in page.tags


@pytest.mark.parametrize("name", NAMES)
def test_hostile_text_is_escaped(env: jinja2.Environment, name: str) -> None:
    link = make_link(title=HOSTILE, og_description=HOSTILE)
    context = contexts()[name]
    if name == "landing.html":
        context = landing_context(link, app_name=HOSTILE)
    elif name == "og.html":
        context = og_context(link)
    else:
        context = {"site_name": HOSTILE}
    html = env.get_template(name).render(context)
    assert "<script" not in html.lower()
    assert "&lt;script&gt;" in html


def test_landing_page(env: jinja2.Environment) -> None:
    html = env.get_template("landing.html").render(landing_context(make_link()))
    page = Page(html)
    assert page.meta["apple-itunes-app"] == (
        f"app-id=1234567890, app-argument={SHORT}?svc_open=landing")
    assert "Example Shop" in page.visible
    assert "Red shoes" in page.visible
    links = dict((text, href) for href, text in page.links)
    assert links["Get Example Shop on the App Store"] == "https://apps.apple.com/app/id1234567890"
    assert links["I already have the app, open it"] == (
        "exampleapp://open?svc_link=https%3A%2F%2Fgo.example.com%2FAb3dE6gH9")
    assert "script" not in page.tags and "form" not in page.tags


def test_landing_page_without_scheme_opens_the_universal_link(env: jinja2.Environment) -> None:
    page = Page(env.get_template("landing.html").render(
        landing_context(make_link(), scheme=None)))
    links = dict((text, href) for href, text in page.links)
    assert links["I already have the app, open it"] == f"{SHORT}?svc_open=landing"


def test_og_page_tags(env: jinja2.Environment) -> None:
    page = Page(env.get_template("og.html").render(og_context(make_link())))
    assert page.meta["og:title"] == "Red shoes"
    assert page.meta["og:description"] == "Our best red shoes, 20% off."
    assert page.meta["og:image"] == "https://cdn.example.com/shoes.png"
    assert page.meta["og:url"] == SHORT
    assert page.meta["og:type"] == "website"
    assert page.meta["og:site_name"] == "Example Shop"
    assert page.meta["twitter:card"] == "summary_large_image"
    assert page.meta["twitter:title"] == "Red shoes"
    assert page.meta["twitter:description"] == "Our best red shoes, 20% off."
    assert page.meta["twitter:image"] == "https://cdn.example.com/shoes.png"
    assert page.meta["description"] == "Our best red shoes, 20% off."
    assert page.links == []


def test_og_page_without_optional_data(env: jinja2.Environment) -> None:
    link = make_link(title=None, og_description=None, og_image_url=None)
    page = Page(env.get_template("og.html").render(og_context(link)))
    assert page.meta["og:title"] == "Example Shop"
    assert page.meta["twitter:card"] == "summary"
    for key in ("og:image", "og:description", "twitter:image", "twitter:description",
                "description"):
        assert key not in page.meta
    assert "img" not in page.tags


def test_og_page_offers_the_stores(env: jinja2.Environment) -> None:
    page = Page(env.get_template("og.html").render(og_context(
        make_link(), app_store_url=app_store_url("1"), play_store_url=play_store_url("com.a.b"))))
    assert ("https://apps.apple.com/app/id1", "App Store") in page.links
    assert ("https://play.google.com/store/apps/details?id=com.a.b", "Google Play") in page.links


@pytest.mark.parametrize(("name", "heading", "code"), [
    ("notfound.html", "This link doesn't exist", "404"),
    ("gone.html", "This link has expired", "410"),
])
def test_error_pages(env: jinja2.Environment, name: str, heading: str, code: str) -> None:
    for context in ({"site_name": "Example Shop"}, {"site_name": None}):
        page = Page(env.get_template(name).render(context))
        assert heading in page.visible and code in page.visible
        assert page.links == []
