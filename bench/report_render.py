"""Rendering each benchmark step's raw results (``bench/out/<step>.json``) as
Markdown for bench/README.md. Pure: data in, text out."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

FLOW_NOTES = {
    "android_referrer": "Android tap, token in the Play install referrer",
    "ios_landing": "iPhone tap on the landing page, open button resolved",
    "ios_cohort": "campaign groups of 1-3 in one cohort, new address at launch",
    "ios_network": "same address at tap and launch, crowded cohort",
    "cohort_conflict": "2-3 taps to different links in one cohort (abstain by design)",
    "handoff": "server handoff, claimed after the first launch",
    "organic": "no tap: must stay unattributed",
    "organic_shared_cohort": "no tap, launches in a campaign group's cohort",
    "overall": "all devices",
}


def ms(value: float | None) -> str:
    if value is None:
        return "n/a"
    if value >= 100:
        return f"{value:,.0f} ms"
    if value >= 10:
        return f"{value:.1f} ms"
    return f"{value:.2f} ms"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.1f} %"


def num(value: float | None, digits: int = 0) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head),
            *("| " + " | ".join(r) + " |" for r in rows)]


def _scores(run: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {s["flow"]: s for s in run["scores"]}


def _pr(s: Mapping[str, Any] | None) -> str:
    if s is None:
        return "n/a"
    if s["with_truth"] == 0:
        return f"{s['false_attributions']} false of {s['devices']}"
    return f"{pct(s['precision'])} / {pct(s['recall'])}"


def render_attribution(d: Mapping[str, Any]) -> str:
    eng, same, http = d["engine"], d["engine_same_population"], d["http"]
    mix = ", ".join(f"{k} {v:.0%}" for k, v in d["mix"].items())
    lines = [
        f"- run: {d['started_at']}, `{d['command']}` ({d['profile']}), {d['elapsed_s']:.0f} s;"
        f" seed {d['seed']}; links: main app {d['links']['main']}, landing app "
        f"{d['links']['landing']}",
        f"- mix: {mix}",
        "- ENGINE: `svc_engine.attribution.decide_first_launch` in memory, replaying the "
        "schedule against an in-memory store (tokens, click window, installs, handoffs);",
        "  HTTP: `svc serve` on loopback (pinned to CPU 1, the driver on CPU 0 when "
        "possible), `httpx.AsyncClient` on trio, "
        f"{http['concurrency']} requests in flight, rate limits off.",
        "",
    ]
    lines += table(
        ["driver", "devices", "work", "rate", "attributed/s", "detail"],
        [["ENGINE, decide only", f"{eng['devices']:,}", f"{eng['decisions']:,} decisions in "
          f"{eng['decide_seconds']:.2f} s", f"{num(eng['decisions_per_s'])} decisions/s",
          "", f"mean window scanned {eng['mean_window']:,.0f} entries"],
         ["ENGINE, whole replay", f"{eng['devices']:,}", f"{eng['events']:,} events in "
          f"{eng['replay_seconds']:.2f} s", f"{num(eng['replay_launches_per_s'])} launches/s",
          num(eng["attributions_per_s"]), "taps, window upkeep, consumption, upgrades"],
         ["ENGINE, HTTP's population", f"{same['devices']:,}",
          f"{same['decisions']:,} decisions in {same['decide_seconds']:.3f} s",
          f"{num(same['decisions_per_s'])} decisions/s", num(same["attributions_per_s"]),
          f"mean window {same['mean_window']:,.0f}"],
         ["HTTP", f"{http['devices']:,} of {http['devices_planned']:,}",
          f"{http['requests']:,} requests in {http['wall_seconds']:.1f} s",
          f"{num(http['launches_per_s'])} launches/s ({num(http['requests_per_s'])} req/s)",
          num(http["attributions_per_s"]),
          f"server CPU {num(http['server_cpu_us_per_request'])} µs/req; driver CPU "
          f"{http['client_cpu_seconds']:.1f} s; other processes {http['other_load']:.2f} "
          "cores"]])
    lines += ["", "Precision / recall per flow (precision = correct / attributed, recall = "
              "correct / devices of the flow; organic rows count false attributions):", ""]
    h, s1, s2 = _scores(http), _scores(same), _scores(eng)
    rows = []
    for flow, s in h.items():
        rows.append([flow, FLOW_NOTES.get(flow, ""), f"{s['devices']:,}",
                     f"{s['attributed']:,}", f"{s['correct']:,}", _pr(s),
                     _pr(s1.get(flow)), _pr(s2.get(flow))])
    lines += table(["flow", "what", "devices (HTTP)", "attributed", "correct",
                    "HTTP P / R", f"ENGINE same {same['devices']:,} P / R",
                    f"ENGINE {eng['devices']:,} P / R"], rows)
    notes = [
        "",
        "Reading it: deterministic flows (referrer, landing page, handoff) and the "
        "network hash are exact. Cohort matching is right whenever it answers, but "
        "organic iPhones launching in a campaign's cohort take that campaign's taps "
        "(organic_shared_cohort false attributions), and each such steal leaves a "
        "tapper of the group without its tap (ios_cohort recall). A conflicting cohort "
        "abstains; its devices are tied only when their launch comes before the other "
        "links' taps. HTTP and ENGINE differ only where concurrent requests reorder "
        "launches. The ENGINE rows replay the pure decision over a list of the whole "
        "window (mean window above); the service reads only a launch's candidates "
        "from the window's cohort and network indexes.",
    ]
    busy = http["client_cpu_seconds"] / http["wall_seconds"] if http["wall_seconds"] else 0.0
    if busy > 0.7:
        notes += ["", f"The HTTP driver itself (httpx on trio) kept its core {busy:.0%} busy: "
                  "the HTTP rate is bounded by the client as much as by the service."]
    if http.get("errors"):
        notes += ["", "HTTP errors (first ones): " + "; ".join(http["errors"][:5])]
    if http["other_load"] > 0.1:
        notes += ["", f"Noisy: other processes used {http['other_load']:.2f} cores during "
                  "the HTTP run."]
    return "\n".join(lines + notes)


def render_overload(d: Mapping[str, Any]) -> str:
    lines = [f"- run: {d['started_at']}, `{d['command']}`, {d['elapsed_s']:.0f} s; path "
             f"`{d['path']}` (GET /<slug>, desktop, click recorded); phases: {d['profile']}; "
             f"{d['pinning']}", ""]
    rows = []
    for r in d["rows"]:
        p = r["percentiles_ms"]
        rows.append([f"SVC_MAX_LAG_MS={r['max_lag_ms']}"
                     + (" (default)" if r["variant"] == "default" else "")
                     + (" (shedding off)" if r["max_lag_ms"] == 0 else ""),
                     f"c{r['connections']}", num(r["rps"]), num(r["goodput_rps"]),
                     ms(r["p50_ms"]), ms(r["p99_ms"]), ms(p.get("p99.9")),
                     f"{r['status_503']:,} of {r['requests']:,}",
                     num(r["cpu_us_per_request"]), f"{r['other_load']:.2f}"])
    lines += table(["load shedding", "conns", "req/s", "302/s", "p50", "p99", "p99.9",
                    "503s", "CPU µs/req", "other load (cores)"], rows)
    lines += ["", "Latencies cover every answer, 302s and 503s alike (wrk does not split "
              "them). wrk keeps 256 requests outstanding (a closed loop), so the queue "
              "is 256 requests whatever the service does: a quick 503 shortens it only "
              "by being cheaper than a redirect."]
    for r in d["rows"]:
        share = r["status_503"] / r["requests"] if r["requests"] else 0.0
        lines += ["", f"SVC_MAX_LAG_MS={r['max_lag_ms']}: {share:.0%} of the answers were "
                  f"quick 503s; p99 over all answers {ms(r['p99_ms'])}."]
    noisy = [r for r in d["rows"] if r["other_load"] > 0.1]
    if noisy:
        lines += ["", "Noisy: other processes used more than 0.1 cores during "
                  + ", ".join(f"the SVC_MAX_LAG_MS={r['max_lag_ms']} run" for r in noisy)
                  + "."]
    return "\n".join(lines)


def size(n: float) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return f"{n / div:,.2f} {unit}"
    return f"{n:,.0f} B"


def secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f} s"


def render_scale(d: Mapping[str, Any]) -> str:
    b, big, empty, r = d["build"], d["start_big"], d["start_empty"], d["redirect"]
    per_click = b["data_mdb_bytes"] / max(b["clicks"] + b["links"], 1)
    lines = [f"- run: {d['started_at']}, `{d['command']}` ({d['size']}: {b['links']:,} links, "
             f"{b['clicks']:,} clicks), {d['elapsed_s']:.0f} s; load average at the start "
             f"{d['load_average']}; {d['pinning']}", ""]
    lines += table(["measure", "value", "detail"], [
        ["links written", f"{b['links']:,} in {b['links_s']:.1f} s",
         f"{num(b['links_per_s'])} links/s (`LinksStore.create` in 50k-link transactions)"],
        ["clicks written", f"{b['clicks']:,} in {b['clicks_s']:.1f} s",
         f"{num(b['clicks_per_s'])} clicks/s (`AttributionStore.click_op` with counters, "
         "100k-click transactions)"],
        ["data.mdb", f"{size(b['data_mdb_bytes'])} ({size(b['data_mdb_disk_bytes'])} on disk)",
         f"{per_click:,.0f} bytes per link or click, B-trees and counters included"],
        ["entries", ", ".join(f"{k} {v:,}" for k, v in b["entries"].items()), ""],
        ["ready after restart: /healthz", secs(big["healthz_s"]),
         f"median of {len(big['runs'])} starts; empty store: {secs(empty['healthz_s'])}"],
        ["ready after restart: first redirect", secs(big["first_redirect_s"]),
         "spawn to the first 302 of a stored link"],
        [f"redirect c{r['loaded']['connections']}", f"{num(r['loaded']['rps'])} req/s",
         f"p50 {ms(r['loaded']['p50_ms'])}, p99 {ms(r['loaded']['p99_ms'])}, CPU "
         f"{num(r['loaded']['cpu_us_per_request'])} µs/req"],
        ["redirect c1", f"{num(r['unloaded']['rps'])} req/s",
         f"p50 {ms(r['unloaded']['p50_ms'])}, p99 {ms(r['unloaded']['p99_ms'])}"],
    ])
    lines += ["", f"Redirects: {r['profile']}, over {10_000:,} slugs drawn from all links; "
              "compare with `redirect-desktop` (1,000 links) in the table above. The page "
              "cache was warm: the store had just been written."]
    noisy = [n for n in ("loaded", "unloaded") if r[n]["other_load"] > 0.1]
    if noisy or any(r[n]["errors"] for n in ("loaded", "unloaded")):
        lines += ["", "Redirect runs: " + "; ".join(
            f"{n}: other processes {r[n]['other_load']:.2f} cores, {r[n]['errors']} errors"
            for n in ("loaded", "unloaded")) + "."]
    return "\n".join(lines)


def _mib(n: float) -> str:
    return f"{n / (1 << 20):,.1f} MiB"


def render_memory(d: Mapping[str, Any]) -> str:
    p, w = d["projects"], d["window"]
    lines = [f"- run: {d['started_at']}, `{d['command']}`, {d['elapsed_s']:.0f} s; "
             f"{d['pinning']}", "",
             "RSS of `svc serve` (anonymous: the process's heap; file: mostly LMDB's map):", ""]
    rows = [[f"started, {p['projects']:,} projects stored", _mib(p["rss_started"]["RssAnon"]),
             _mib(p["rss_started"]["RssFile"]), _mib(p["rss_started"]["VmRSS"])],
            ["1 project active (one SDK init)", _mib(p["rss_one_active"]["RssAnon"]),
             _mib(p["rss_one_active"]["RssFile"]), _mib(p["rss_one_active"]["VmRSS"])],
            [f"{p['projects']:,} projects active (one init each, {p['first_round_s']:.1f} s)",
             _mib(p["rss_all_active"]["RssAnon"]), _mib(p["rss_all_active"]["RssFile"]),
             _mib(p["rss_all_active"]["VmRSS"])],
            ["after a second init on every project", _mib(p["rss_second_round"]["RssAnon"]),
             _mib(p["rss_second_round"]["RssFile"]), _mib(p["rss_second_round"]["VmRSS"])]]
    per = p["per_project_bytes"]
    rows.append(["**per active project**", f"**{per['RssAnon'] / 1024:,.1f} KiB**",
                 f"{per['RssFile'] / 1024:,.1f} KiB", f"{per['VmRSS'] / 1024:,.1f} KiB"])
    lines += table(["state", "RssAnon", "RssFile", "VmRSS"], rows)
    lines += ["", f"Click window: the same app with 0 and with {w['entries']:,} iPhone taps in "
              f"its probabilistic window (written in "
              f"{w['runs']['with']['write_s']:.1f} s), then {w['launches']} iOS first launches "
              "(each reads its candidates from the window's indexes):", ""]
    rows = []
    for label in ("without", "with"):
        r = w["runs"][label]
        launches = ", ".join(f"{x * 1000:,.0f}" for x in r["launch_s"])
        rows.append([f"{r['entries']:,} entries", _mib(r["rss_idle"]["RssAnon"]),
                     _mib(r["rss_idle"]["RssFile"]), _mib(r["rss_after_launches"]["RssAnon"]),
                     _mib(r["rss_after_launches"]["RssFile"]), launches])
    idle, after = w["per_entry_idle_bytes"], w["per_entry_after_launch_bytes"]
    rows.append(["**per entry**", f"{idle['RssAnon']:,.0f} B", f"{idle['RssFile']:,.0f} B",
                 f"**{after['RssAnon']:,.0f} B**", f"{after['RssFile']:,.0f} B", ""])
    lines += table(["window", "RssAnon idle", "RssFile idle", "RssAnon after launches",
                    "RssFile after launches", "iOS init latency (ms)"], rows)
    lines += ["", "The window lives in LMDB, not in the heap: at rest an entry costs the "
              "process nothing. An iOS first launch reads its network group and a bounded "
              "part of its cohort group from the window's indexes (keys only, nothing "
              "decoded; a few seeks a quarter hour, at most 100 taps counted) and deletes "
              "the consumed tap by key, so its latency depends neither on the window's "
              "size nor on how crowded its cohort is. The first launches after a start "
              "also fault in the index pages they read (RssFile after launches)."]
    return "\n".join(lines)


def render_webhooks(d: Mapping[str, Any]) -> str:
    sender, e2e = d["sender"], d["end_to_end"]
    lines = [f"- run: {d['started_at']}, `{d['command']}`; receiver: a trio + h11 process "
             "answering 204" + (" over TLS" if d["tls"] else " over plain http on loopback")
             + ("; receiver on CPU 0, sender on CPU 1" if d["pinned"] else "; unpinned")
             + f"; body {d['body_bytes']} bytes", ""]
    lines += table(["measure", "rate", "latency", "CPU", "detail"], [
        ["sender alone (`HttpSender.attempt`: sign, address guard, POST)",
         f"{num(sender['posts_per_s'])} POSTs/s",
         f"p50 {ms(sender['p50_ms'])}, p99 {ms(sender['p99_ms'])}",
         f"{num(sender['cpu_us_per_post'])} µs/POST",
         f"{sender['concurrency']} concurrent, {sender['attempts']:,} attempts, "
         f"{sender['failed']} failed"],
        ["end to end (outbox -> WebhookActor -> Delivered)",
         f"{num(e2e['deliveries_per_s'])} deliveries/s", "",
         f"{num(e2e['cpu_us_per_delivery'])} µs/delivery",
         f"{e2e['events']:,} events in {e2e['seconds']} s, {e2e['senders']} senders, "
         f"{e2e['failed_attempts']} failed attempts"
         + (f", {e2e['commits']:,} LMDB commits" if e2e.get("commits") else "")]])
    lines += ["", "End to end includes the durable writes in LMDB (each delivery queued, "
              "then its result with the endpoint's health, written together about every "
              "10 ms; Sending is shown from memory), in one process with the real actor."]
    return "\n".join(lines)
