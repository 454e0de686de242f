"""The README sections beyond the hot-path table, one per benchmark step.

Each step (attribution, scale, memory, overload, webhooks) writes its raw
results to ``bench/out/<step>.json`` and its section is rendered from them.
Sections sit between markers in bench/README.md, so a step run on its own
(``python -m bench.scale``) replaces only its own section, and a harness run
that skipped a step carries that step's last section over unchanged (each
section says when and how it was measured).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.report_render import (
    render_attribution,
    render_memory,
    render_overload,
    render_scale,
    render_webhooks,
)

SECTIONS: tuple[str, ...] = ("attribution", "overload", "scale", "scale_lite", "memory",
                             "webhooks")
TITLES = {"attribution": "Attribution throughput, precision and recall",
          "overload": "Overload: 256 connections and load shedding",
          "scale": "Scale: 1 million links, 10 million clicks",
          "scale_lite": "Scale, smaller step (run by make bench)",
          "memory": "Memory",
          "webhooks": "Webhook deliveries"}
HOW = {"attribution": "python -m bench.attribution [--quick]",
       "overload": "python -m bench.overload [--quick]",
       "scale": "python -m bench.scale",
       "scale_lite": "python -m bench.scale --lite",
       "memory": "python -m bench.memory [--quick]",
       "webhooks": "python -m bench.webhooks_bench"}
_RENDER: Mapping[str, Callable[[Mapping[str, Any]], str]] = {
    "attribution": render_attribution, "overload": render_overload, "scale": render_scale,
    "scale_lite": render_scale, "memory": render_memory, "webhooks": render_webhooks}
KEEP_HEADING = "## What each change bought"


def start_marker(name: str) -> str:
    return f"<!-- section: {name} (generated; bench/report_sections.py) -->"


def end_marker(name: str) -> str:
    return f"<!-- /section: {name} -->"


def render(name: str, data: Mapping[str, Any]) -> str:
    """The section's body (its heading included), from the step's raw results."""
    return f"## {TITLES[name]}\n\n" + _RENDER[name](data).strip("\n")


def placeholder(name: str) -> str:
    make = "make bench-scale" if name == "scale" else "make bench"
    return (f"## {TITLES[name]}\n\nNot measured yet: run `.venv/bin/{HOW[name]}` "
            f"(or `{make}`).")


def extract(existing: str | None) -> dict[str, str]:
    """Each marked section's body found in an existing README."""
    found: dict[str, str] = {}
    if not existing:
        return found
    for name in SECTIONS:
        pattern = re.escape(start_marker(name)) + r"\n(.*?)\n" + re.escape(end_marker(name))
        m = re.search(pattern, existing, re.S)
        if m:
            found[name] = m.group(1).strip("\n")
    return found


def block(name: str, body: str) -> str:
    return f"{start_marker(name)}\n{body.strip(chr(10))}\n{end_marker(name)}"


def blocks(new: Mapping[str, str], existing: str | None,
           names: Sequence[str] = SECTIONS) -> list[str]:
    """Every section in order: the new body, else the existing one, else a placeholder."""
    old = extract(existing)
    return [block(n, new.get(n) or old.get(n) or placeholder(n)) for n in names]


def replace_in(text: str, new: Mapping[str, str]) -> str:
    """``text`` with the named sections replaced (or inserted, in order, before
    the "What each change bought" heading, or at the end)."""
    for name in SECTIONS:
        if name not in new:
            continue
        pattern = re.escape(start_marker(name)) + r"\n.*?\n" + re.escape(end_marker(name))
        fresh = block(name, new[name])
        if re.search(pattern, text, re.S):
            m = re.search(pattern, text, re.S)
            assert m is not None
            text = text[:m.start()] + fresh + text[m.end():]
            continue
        later = [n for n in SECTIONS[SECTIONS.index(name) + 1:] if start_marker(n) in text]
        anchor = start_marker(later[0]) if later else KEEP_HEADING
        if anchor in text:
            at = text.index(anchor)
            text = text[:at] + fresh + "\n\n" + text[at:]
        else:
            text = text.rstrip("\n") + "\n\n" + fresh + "\n"
    return text


def update_readme(path: Path, new: Mapping[str, str]) -> None:
    """Replace the named sections of the README at ``path`` (created if missing)."""
    existing = path.read_text() if path.exists() else "# svc benchmarks\n"
    path.write_text(replace_in(existing, new))
