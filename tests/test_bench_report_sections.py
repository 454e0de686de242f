"""The README's step sections: markers, carry-over, insertion, and each
renderer on a step's raw results (bench/report_sections.py, report_render.py),
plus the bookkeeping of consumable state (bench/wrk_mint.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from bench import attribution_engine, report_sections, wrk_mint
from bench.attribution_score import Observation, score
from bench.population import build
from bench.report import KEEP_END, KEEP_START

S = report_sections


def test_sections_are_extracted_by_their_markers() -> None:
    body = "## O\n\nbody"
    text = f"# x\n{S.block('overload', body)}\n\n{S.block('memory', 'm')}\n"
    assert S.extract(text) == {"overload": "## O\n\nbody", "memory": "m"}
    assert S.extract(None) == {}
    assert S.extract("no markers") == {}


def test_blocks_prefer_new_then_existing_then_placeholder() -> None:
    existing = S.block("memory", "old memory") + "\n" + S.block("overload", "old overload")
    out = S.blocks({"overload": "new overload"}, existing)
    assert len(out) == len(S.SECTIONS)
    joined = "\n".join(out)
    assert "new overload" in joined and "old overload" not in joined
    assert "old memory" in joined
    assert "Not measured yet" in out[S.SECTIONS.index("attribution")]
    assert joined.index("new overload") < joined.index("old memory")  # SECTIONS order


def test_replace_in_replaces_one_section_and_keeps_the_rest() -> None:
    text = (f"# t\n\n{S.block('attribution', 'A1')}\n\n{S.block('memory', 'M1')}\n\n"
            f"## What each change bought\n\n{KEEP_START}\nkept \\1 text\n{KEEP_END}\n")
    out = S.replace_in(text, {"memory": "M2 with \\1 and $1"})
    assert "M2 with \\1 and $1" in out and "M1" not in out
    assert "A1" in out and "kept \\1 text" in out
    assert out.count(S.start_marker("memory")) == 1


def test_replace_in_inserts_missing_sections_in_order() -> None:
    text = (f"# t\n\n{S.block('memory', 'M')}\n\n## What each change bought\n\n"
            f"{KEEP_START}\nk\n{KEEP_END}\n")
    out = S.replace_in(text, {"webhooks": "W", "attribution": "A"})
    assert out.index("A") < out.index(S.start_marker("memory")) < out.index("W")
    assert out.index("W") < out.index("## What each change bought")
    bare = S.replace_in("# only a title\n", {"scale": "SC"})
    assert bare.endswith(S.block("scale", "SC") + "\n")


def test_update_readme_creates_and_rewrites(tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    S.update_readme(readme, {"overload": "first"})
    S.update_readme(readme, {"overload": "second"})
    text = readme.read_text()
    assert "second" in text and "first" not in text
    assert text.startswith("# svc benchmarks")


# -- renderers ------------------------------------------------------------------------------

def _http_like(engine: dict[str, Any]) -> dict[str, Any]:
    return {"devices": engine["devices"], "devices_planned": engine["devices"],
            "requests": 2 * engine["devices"], "concurrency": 32, "setup_seconds": 1.0,
            "wall_seconds": 2.0, "requests_per_s": 100.0, "launches_per_s": 50.0,
            "attributed": engine["attributed"], "attributions_per_s": 40.0,
            "server_cpu_seconds": 1.0, "server_cpu_us_per_request": 900.0,
            "client_cpu_seconds": 1.5, "other_load": 0.5, "pinned": True,
            "errors": ["device 1 (handoff): claim -> 500 boom"], "stopped_cleanly": True,
            "exit_status": 0, "scores": engine["scores"]}


def test_attribution_section_has_rates_and_every_flow() -> None:
    engine = attribution_engine.run(build(200, seed=2))
    data = {"started_at": "2026-11-22 05:00 UTC", "command": "c", "profile": "quick",
            "seed": 2, "mix": {"organic": 1.0}, "links": {"main": 200, "landing": 50},
            "engine": engine, "engine_same_population": engine, "http": _http_like(engine),
            "elapsed_s": 3.0}
    text = S.render("attribution", data)
    assert text.startswith("## Attribution")
    for flow in ("android_referrer", "ios_landing", "ios_cohort", "ios_network",
                 "cohort_conflict", "handoff", "organic", "organic_shared_cohort", "overall"):
        assert f"| {flow} |" in text
    assert "decisions/s" in text and "100.0 % / 100.0 %" in text
    assert "claim -> 500 boom" in text and "Noisy" in text
    assert "kept its core 75% busy" in text


def test_overload_section_counts_refusals() -> None:
    row = {"variant": "tight", "max_lag_ms": 25, "connections": 256, "requests": 1000,
           "duration_s": 4.0, "rps": 250.0, "goodput_rps": 200.0, "p50_ms": 5.0,
           "p99_ms": 120.0, "percentiles_ms": {"p99.9": 300.0}, "status_503": 200,
           "socket_errors": 0, "cpu_us_per_request": 700.0, "other_load": 0.0,
           "wrk": "wrk", "stopped_cleanly": True}
    data = {"started_at": "t", "command": "c", "profile": "p", "pinning": "pinned",
            "path": "redirect-desktop", "rows": [{**row, "variant": "default",
                                                  "max_lag_ms": 50}, row],
            "elapsed_s": 9.0}
    text = S.render("overload", data)
    assert "SVC_MAX_LAG_MS=50 (default)" in text and "SVC_MAX_LAG_MS=25 |" in text
    assert "200 of 1,000" in text and "120 ms" in text and "20% of the answers" in text


def test_scale_memory_and_webhooks_sections_render() -> None:
    phase = {"connections": 32, "rps": 1000.0, "p50_ms": 30.0, "p99_ms": 40.0, "errors": 0,
             "cpu_us_per_request": 900.0, "other_load": 0.3}
    scale = {"started_at": "t", "command": "c", "size": "lite", "load_average": "1 1 1",
             "pinning": "p", "elapsed_s": 5.0,
             "build": {"links": 100, "clicks": 1000, "links_s": 1.0, "clicks_s": 2.0,
                       "links_per_s": 100.0, "clicks_per_s": 500.0,
                       "data_mdb_bytes": 3 << 20, "data_mdb_disk_bytes": 3 << 20,
                       "entries": {"clicks": 1000}},
             "start_big": {"runs": [{}, {}, {}], "healthz_s": 0.8, "first_redirect_s": 0.82},
             "start_empty": {"runs": [{}], "healthz_s": 0.7, "first_redirect_s": None},
             "redirect": {"profile": "p", "loaded": phase, "unloaded": {**phase, "errors": 2}}}
    text = S.render("scale_lite", scale)
    assert "3.00 MiB" in text and "0.80 s" in text and "2 errors" in text
    rss = {"VmRSS": 100 << 20, "RssAnon": 80 << 20, "RssFile": 20 << 20, "RssShmem": 0}
    more = {k: v + (10 << 20) for k, v in rss.items()}
    memory = {"started_at": "t", "command": "c", "pinning": "p", "elapsed_s": 1.0,
              "projects": {"projects": 1000, "rss_started": rss, "rss_one_active": rss,
                           "rss_all_active": more, "rss_second_round": more,
                           "first_round_s": 1.0,
                           "per_project_bytes": {k: 10 * 1024.0 for k in rss}},
              "window": {"entries": 1000, "launches": 3,
                         "runs": {"without": {"entries": 0, "write_s": 0.0, "rss_idle": rss,
                                              "rss_after_launches": rss,
                                              "launch_s": [0.004]},
                                  "with": {"entries": 1000, "write_s": 0.5, "rss_idle": rss,
                                           "rss_after_launches": more, "launch_s": [0.09]}},
                         "per_entry_idle_bytes": {k: 0.0 for k in rss},
                         "per_entry_after_launch_bytes": {k: 1024.0 for k in rss}}}
    text = S.render("memory", memory)
    assert "**10.0 KiB**" in text and "**1,024 B**" in text and "| 90 |" in text
    hooks = {"started_at": "t", "command": "c", "tls": False, "pinned": True,
             "body_bytes": 462,
             "sender": {"posts_per_s": 6000, "p50_ms": 1.3, "p99_ms": 2.3,
                        "cpu_us_per_post": 165, "attempts": 100, "failed": 0,
                        "concurrency": 8},
             "end_to_end": {"deliveries_per_s": 1700, "events": 1000, "seconds": 0.6,
                            "cpu_us_per_delivery": 557, "failed_attempts": 0, "senders": 32}}
    text = S.render("webhooks", hooks)
    assert "6,000 POSTs/s" in text and "1,700 deliveries/s" in text


def test_scores_round_trip_through_json_shape() -> None:
    (one, overall) = score([Observation("f", "a", "a")])
    assert one.to_json()["precision"] == overall.to_json()["recall"] == 1.0


# -- consumable state -----------------------------------------------------------------------

@pytest.mark.parametrize(("pos", "fresh"), [("100", True), ("1000", True), ("1700", False)])
def test_coverage_note_says_whether_every_request_was_fresh(tmp_path: Path, pos: str,
                                                            fresh: bool) -> None:
    (tmp_path / "pos.txt").write_text(pos)
    note = wrk_mint.coverage_note(tmp_path / "pos.txt", 1000, "token", "reused a token")
    assert ("every request found a fresh token" in note) is fresh
    assert ("about 700 requests" in note) is not fresh
    assert "was not written" in wrk_mint.coverage_note(tmp_path / "none", 5, "tap", "x")


def test_mint_scripts_stop_and_sequences_skip(tmp_path: Path) -> None:
    lua = wrk_mint.count_lua(5, tmp_path / "done")
    assert "mint_want, mint_got, mint_done = 5, 0, false" in lua
    assert "wrk.thread:stop()" in lua and str(tmp_path / "done") in lua
    seq = wrk_mint.sequence_lua(tmp_path / "pos.txt", 300)
    assert f"+ {wrk_mint.SKIP}" in seq and "seq_pos % 16 == 0" in seq


def test_a_sequence_walks_its_items_through_the_shuffled_order(tmp_path: Path) -> None:
    """Every load script that consumes minted items gets its item numbers from
    ``seq_next()``, which reads them through the order file the same call wrote."""
    seq = wrk_mint.sequence_lua(tmp_path / "pos.txt", 300)
    order = tmp_path / "order.txt"
    assert [int(n) for n in order.read_text().split()] == [
        int(n) for n in wrk_mint.shuffled([str(i) for i in range(1, 301)])]
    assert f"io.lines({wrk_mint.lua_string(str(order))})" in seq
    assert "return seq_order[(seq_pos - 1) % #seq_order + 1]" in seq
    assert "return seq_pos\n" not in seq  # not the position itself: that is minting order


def test_consumed_items_are_walked_in_a_fixed_shuffled_order(tmp_path: Path) -> None:
    """Not in minting order (a best case for the store's time-ordered trees),
    the same order in every run, and every item once."""
    items = [f"t{i}" for i in range(1000)]
    order = wrk_mint.shuffled(items)
    assert sorted(order) == sorted(items) and order == wrk_mint.shuffled(items)
    assert items == [f"t{i}" for i in range(1000)]  # the caller's list is left as it was
    adjacent = sum(abs(int(a[1:]) - int(b[1:])) == 1 for a, b in itertools.pairwise(order))
    assert adjacent < 20  # ~2 expected for a shuffle; 999 for minting order
    path = wrk_mint.order_file(tmp_path / "order.txt", 500)
    numbers = [int(line) for line in path.read_text().splitlines()]
    assert sorted(numbers) == list(range(1, 501)) and numbers != sorted(numbers)


def test_load_seconds_come_from_the_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(wrk_mint.LOAD_SECONDS_ENV, "6")
    assert wrk_mint.load_seconds() == 6
    monkeypatch.setenv(wrk_mint.LOAD_SECONDS_ENV, "x")
    assert wrk_mint.load_seconds(15) == 15
    monkeypatch.delenv(wrk_mint.LOAD_SECONDS_ENV)
    assert wrk_mint.load_seconds(9) == 9
