"""SECURITY.md points only at tests that exist: every promise line names a
test file, and every ``file::test`` it names is a test function there."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
TEXT = (ROOT / "SECURITY.md").read_text()


def _references() -> list[tuple[str, str | None]]:
    refs: list[tuple[str, str | None]] = []
    for line in TEXT.splitlines():
        if not line.startswith("|") or "tests/" not in line:
            continue
        current: str | None = None
        for token in re.findall(r"`([^`]+)`", line):
            m = re.fullmatch(r"(tests/[\w/]+\.py)(?:::(\w+))?", token)
            if m:
                current = m.group(1)
                refs.append((current, m.group(2)))
            elif token.startswith("::") and current:
                refs.append((current, token[2:]))
    return refs


def test_every_referenced_test_exists() -> None:
    refs = _references()
    assert len(refs) > 20
    for path, name in refs:
        source = (ROOT / path).read_text()
        if name is not None:
            assert re.search(rf"^(async )?def {name}\(", source, re.M), f"{path}::{name}"


def test_every_promise_row_names_a_test() -> None:
    rows = [ln for ln in TEXT.split("## Limits")[0].splitlines()
            if ln.startswith("| ") and not ln.startswith(("| promise", "|---"))]
    assert rows and all("tests/" in r for r in rows), [r for r in rows if "tests/" not in r]
