"""bench/ab.py: sides, the alternating order, the summary, and the checkouts."""

from __future__ import annotations

import argparse
import subprocess
from pathlib import Path

import pytest

from bench.ab import (
    Sample,
    Side,
    add_side_arguments,
    checkouts,
    parse_side,
    round_order,
    sides_and_targets,
    summarize,
)


def test_a_side_is_a_label_a_revision_and_settings() -> None:
    assert parse_side("base=HEAD~1") == Side("base", "HEAD~1")
    assert parse_side("knob=.:SVC_A=1:SVC_B=x=y") == Side(
        "knob", ".", (("SVC_A", "1"), ("SVC_B", "x=y")))


@pytest.mark.parametrize("text", ["base", "=HEAD", "base=", "base=:A=1", "b=HEAD:novalue",
                                  "b=HEAD:=1"])
def test_a_malformed_side_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_side(text)


def _parsed(argv: list[str], least: int) -> tuple[list[Side], list[str]]:
    parser = argparse.ArgumentParser(prog="t", exit_on_error=False)
    add_side_arguments(parser)
    sides, targets = sides_and_targets(parser, parser.parse_args(argv), least=least)
    return sides, [t.name for t in targets]


def test_sides_and_targets_are_parsed_for_both_tools() -> None:
    assert _parsed(["--target", "resolve", "--side", "a=.", "--side", "b=HEAD:K=1"], 2) == (
        [Side("a", "."), Side("b", "HEAD", (("K", "1"),))], ["resolve"])
    assert _parsed(["--target", "resolve", "--side", "a=."], 1)[0] == [Side("a", ".")]


@pytest.mark.parametrize(("argv", "least"), [
    (["--target", "resolve", "--side", "a=."], 2),  # bench.ab needs two sides
    (["--target", "resolve", "--side", "a=.", "--side", "a=HEAD"], 1),  # one label twice
    (["--target", "hypercorn-trio-302", "--side", "a=."], 1),  # a baseline is not the service
    (["--target", "resolve", "--side", "a"], 1),  # malformed side
])
def test_a_bad_command_line_is_a_usage_error(argv: list[str], least: int,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parsed(argv, least)
    assert exited.value.code == 2
    assert "error:" in capsys.readouterr().err


def test_odd_rounds_reverse_the_order() -> None:
    sides = [Side("a", "."), Side("b", "."), Side("c", ".")]
    assert [s.label for s in round_order(sides, 0)] == ["a", "b", "c"]
    assert [s.label for s in round_order(sides, 1)] == ["c", "b", "a"]
    assert [s.label for s in round_order(sides, 2)] == ["a", "b", "c"]


def _sample(round_: int, side: str, rps: float, cpu: float = 300.0,
            pages: float | None = None, pages_c1: float | None = None) -> Sample:
    return Sample(round=round_, side=side, target="init-ios-network", rps=rps, cpu_us=cpu,
                  c1_p50_ms=1.0 + round_ / 10, c1_p99_ms=2.0, server_p99_ms=1.5, pages=pages,
                  pages_c1=pages_c1)


def test_the_summary_gives_medians_and_rounds_won_against_the_first_side() -> None:
    sides = [Side("base", "HEAD~1"), Side("new", "HEAD")]
    samples = [_sample(0, "base", 2000), _sample(0, "new", 2200),
               _sample(1, "new", 2100), _sample(1, "base", 2600),   # drift: base wins
               _sample(2, "base", 2400), _sample(2, "new", 2500),
               _sample(3, "new", 2300, cpu=320), _sample(3, "base", 2200, cpu=310)]
    text = summarize(samples, sides)
    assert text.splitlines()[0] == "init-ios-network:"
    base, new = text.splitlines()[1:]
    assert "median of 4: c32    2,300/s" in base and "CPU 300" in base and "rounds" not in base
    assert "median of 4: c32    2,250/s" in new
    assert "0.98 of base's c32, faster in 3 of 4 rounds" in new
    assert "c1 p50 1.150 ms" in new


def test_this_checkout_is_used_as_it_is_and_a_revision_gets_a_worktree(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True,
                              text=True).stdout

    git("init", "-q")
    git("config", "user.email", "ab@example.com")
    git("config", "user.name", "ab")
    (repo / "version.txt").write_text("one\n")
    git("add", "version.txt")
    git("commit", "-qm", "one")
    (repo / "version.txt").write_text("two\n")
    git("commit", "-qam", "two")
    (repo / "version.txt").write_text("uncommitted\n")
    (repo / ".venv").mkdir()
    with checkouts([Side("here", "."), Side("old", "HEAD~1")], repo) as roots:
        assert roots["here"] == repo
        old = roots["old"]
        assert (old / "version.txt").read_text() == "one\n"
        assert (old / ".venv").resolve() == (repo / ".venv").resolve()
        assert str(old) in git("worktree", "list")
    assert not old.exists()
    assert str(old) not in git("worktree", "list")


def test_the_pages_written_a_request_are_shown_per_round_and_as_a_median() -> None:
    sides = [Side("base", "HEAD~1"), Side("new", "HEAD")]
    samples = [_sample(0, "base", 2000, pages=7.3, pages_c1=30.0),
               _sample(0, "new", 2200, pages=6.0, pages_c1=22.0),
               _sample(1, "new", 2100, pages=6.2, pages_c1=23.0),
               _sample(1, "base", 2600, pages=7.1, pages_c1=31.0)]
    assert "CPU   300 µs/req   6.0 pages/req | c1 p50" in samples[1].line()
    assert "(service 1.50 ms)  22.0 pages/req | steal" in samples[1].line()
    assert "CPU   300 µs/req     - pages/req |" in _sample(0, "base", 1).line()
    assert "(service 1.50 ms)     - pages/req | steal" in _sample(0, "base", 1).line()
    base, new = summarize(samples, sides).splitlines()[1:]
    assert "CPU 300 µs/req, 7.2 pages/req," in base and "30.5 pages/req at c1" in base
    assert "CPU 300 µs/req, 6.1 pages/req," in new and "22.5 pages/req at c1" in new
