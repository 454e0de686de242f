"""Documentation stays true: every setting is in README.md's table, and the
README shows the two commands."""

import pathlib
import re

from svc_engine.config import SETTINGS

ROOT = pathlib.Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def _table() -> dict[str, tuple[str, str]]:
    block = README.split("<!-- settings-table")[1].split("<!-- /settings-table -->")[0]
    rows = {}
    for line in block.splitlines():
        m = re.match(r"\| `(SVC_\w+)` \| `(.*?)` \| (.*) \|$", line)
        if m:
            rows[m.group(1)] = (m.group(2), m.group(3))
    return rows


def test_every_setting_is_documented_with_its_default() -> None:
    rows = _table()
    assert set(rows) == {s.env for s in SETTINGS}
    for s in SETTINGS:
        default, doc = rows[s.env]
        assert default == str(s.default), s.env
        assert doc == s.doc, s.env


def test_readme_first_screen_shows_the_two_commands() -> None:
    first_screen = "\n".join(README.splitlines()[:20])
    assert "make run" in first_screen and "make test" in first_screen


def test_ci_runs_only_make_test() -> None:
    ci = (ROOT / ".ci" / "run").read_text()
    commands = [ln for ln in ci.splitlines() if ln.strip() and not ln.startswith("#")
                and not ln.startswith(("set ", "cd "))]
    assert commands == ["make test"]
