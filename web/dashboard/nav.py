"""The dashboard's navigation: a registry that view modules add to.

The sidebar lists top-level entries first (section ``None``; Links and Live
events belong there), then the sections in ``SECTIONS`` order, each sorted by
``order``. A view module adds its entries in its ``register`` function::

    dash.nav.append(NavEntry("Webhooks", "webhooks", "Settings", icon="webhook", order=20))

Entries are shown to every role: a page a role may not use answers 403 (with
a note naming who can help), so a menu is never the only guard. The orders
leave room for the later pages: Debugger 10, Platforms 20, Domains 30 before
SDK under Build; Webhooks 20 between API keys and Team under Settings.
"""

from __future__ import annotations

import attrs

SECTIONS: tuple[str, ...] = ("Build", "Settings")


@attrs.frozen
class NavEntry:
    label: str
    endpoint: str           # the Quart endpoint the entry links to
    section: str | None     # one of SECTIONS, or None for a top-level entry
    icon: str               # a name known to the ``icon`` macro in templates/macros.html
    order: int = 50


DEFAULT_NAV: tuple[NavEntry, ...] = (
    NavEntry("SDK", "sdk", "Build", icon="code", order=40),
    NavEntry("API keys", "keys", "Settings", icon="key", order=10),
    NavEntry("Team", "team", "Settings", icon="users", order=30),
    NavEntry("Billing", "billing", "Settings", icon="card", order=40),
)


@attrs.frozen
class NavGroup:
    title: str | None
    entries: tuple[NavEntry, ...]


def grouped(entries: list[NavEntry]) -> list[NavGroup]:
    """The entries as the sidebar shows them: top level, then each section."""
    groups = []
    for title in (None, *SECTIONS):
        mine = sorted((e for e in entries if e.section == title),
                      key=lambda e: (e.order, e.label))
        if mine:
            groups.append(NavGroup(title, tuple(mine)))
    return groups
