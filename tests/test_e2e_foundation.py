"""The real service process on a real socket: durability across SIGKILL,
graceful shutdown, the CLI, and logs without client addresses."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import App
from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e


def _cli(data_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "web.cli", *args, "--data", data_dir],
                          capture_output=True, text=True, timeout=60, check=False)


def test_settings_patch_survives_sigkill(server_factory: type[ServerProcess]) -> None:
    srv = server_factory().start()
    with srv.client("sk_live") as c:
        r = c.patch("/v1/deferred/settings", json={"iosLandingPage": True,
                                                    "probabilisticWindowMinutes": 45})
        assert r.status_code == 200
    srv.kill()  # right after the acknowledgement, no chance to flush anything
    again = server_factory(srv.data_dir, bootstrap=False).start()
    again.info = srv.info
    with again.client("sk_test") as c:
        body = c.get("/v1/deferred/settings").json()
    assert body["iosLandingPage"] is True and body["probabilisticWindowMinutes"] == 45


def test_idempotent_replay_survives_restart(server_factory: type[ServerProcess]) -> None:
    srv = server_factory().start()
    with srv.client("sk_test", **{"idempotency-key": "restart-1"}) as c:
        first = c.patch("/v1/deferred/settings", json={"webFallbackTokens": True})
    srv.kill()
    again = server_factory(srv.data_dir, bootstrap=False).start()
    again.info = srv.info
    with again.client("sk_test", **{"idempotency-key": "restart-1"}) as c:
        replay = c.patch("/v1/deferred/settings", json={"webFallbackTokens": True})
        conflict = c.patch("/v1/deferred/settings", json={"webFallbackTokens": False})
    assert replay.content == first.content and replay.headers["idempotent-replayed"] == "true"
    assert conflict.status_code == 409


async def test_a_stop_commits_every_write_still_queued(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """README, Stopping: SIGTERM commits what is queued, then closes the store.
    Thousands of lazy writes (the clicks behind redirects, answered before
    their commit) are still queued when serving ends: every one is stored."""
    import trio

    from actors.clock import SystemClock
    from storage.lmdb_store import LmdbStore
    from svc_engine.config import Config
    from web import main

    queued = 2_000

    async def serve_then_stop(config: Config, store: LmdbStore, *args: Any) -> None:
        db = store.db(b"meta")
        for i in range(queued):
            def op(txn: Any, i: int = i) -> None:
                txn.put(b"queued-%05d" % i, b"1", db=db)
            await store.submit(op, lazy=True)  # answered: not waited for

    monkeypatch.setattr(main, "_serve_with_store", serve_then_stop)
    data = str(tmp_path / "data")
    await main._serve_data(Config(data_dir=data, map_size=64 << 20), SystemClock(), False,
                           trio.Event(), None)
    store = LmdbStore(data, map_size=64 << 20)
    try:
        assert sum(store.meta(f"queued-{i:05d}") is not None for i in range(queued)) == queued
    finally:
        store.close()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_graceful_shutdown(server_factory: type[ServerProcess], sig: int) -> None:
    srv = server_factory().start()
    with srv.client("sk_test") as c:
        assert c.patch("/v1/deferred/settings", json={"iosLandingPage": True}).status_code == 200
    assert srv.stop(sig) == 0
    logs = srv.logs()
    assert "shutting down" in logs and "data is closed" in logs
    assert "Traceback" not in logs


def test_logs_never_carry_the_client_address(server_factory: type[ServerProcess]) -> None:
    srv = server_factory().start()
    with srv.client("sk_test", **{"user-agent": "DistinctiveAgent/9.9 (UniqueDevice)",
                                  "referer": "https://ref.example/secret-path?x=1",
                                  "x-forwarded-for": "203.0.113.77"}) as c:
        c.get("/v1/deferred/settings")
        c.get("/v1/deferred/settings?token=abc123")
        c.get("/nope")
    srv.stop()
    logs = srv.logs()
    assert "GET /v1/deferred/settings 200" in logs
    for needle in ("127.0.0.1:", "203.0.113.77", "DistinctiveAgent", "secret-path",
                   "abc123"):
        # The listening line names the bind address; no request line may.
        request_lines = [ln for ln in logs.splitlines() if "svc.access" in ln]
        assert not any(needle in ln for ln in request_lines), needle
    assert "203.0.113.77" not in logs and "DistinctiveAgent" not in logs


@pytest.mark.parametrize("path", ["/x\rforged", "/x\x00cut", "/a\u2028b", "/a\x1b[31mred",
                                  "/a\x85b", "/x\nforged"])
def test_each_unprintable_character_of_a_path_is_escaped_in_the_log(path: str) -> None:
    """SECURITY.md: a path's unprintable characters are escaped (one request,
    one line); the test below sends them together, so escaping a newline
    alone escaped them all."""
    from web.logs import loggable
    logged = loggable(path)
    assert logged.isprintable() and logged.isascii()
    assert logged.encode().decode("unicode_escape") == path


@pytest.mark.parametrize("error", ["service", "bug"])
async def test_a_path_cannot_forge_the_error_line_of_a_failed_request(
        app: App, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        error: str) -> None:
    """A request that fails with a 5xx (an error of the service's, or a bug)
    is logged with its path, escaped as in the access line: one request, one
    line."""
    from svc_engine.errors import SvcError

    async def failing(req: object) -> object:
        raise SvcError("boom") if error == "service" else RuntimeError("boom")

    monkeypatch.setattr(app.front.redirector, "handle", failing)
    caplog.set_level(logging.ERROR)
    async with app.client() as c:
        r = await c.get("/x%0a2026-11-27 10:20:45,829 ERROR svc forged")
    assert r.status_code == 500
    [line] = [rec.getMessage() for rec in caplog.records
              if "boom" in rec.getMessage() or rec.exc_info]
    assert "\n" not in line and "GET /x\\n2026-11-27" in line, line


def test_a_path_cannot_forge_or_break_an_access_line(server_factory: type[ServerProcess]
                                                     ) -> None:
    """The logged path is the decoded one: its control characters (a newline,
    a NUL, a carriage return, U+2028) are written escaped, on the one line.
    An invitation's token (it opens an account) is not logged."""
    srv = server_factory().start()
    with srv.client() as c:
        c.get("/x%0a2026-11-27 10:20:45,829 ERROR svc forged%0d%00%E2%80%A8end")
        c.get("/dashboard/invite/SeCrEtInViTeToKeN0123456789")
        # logged before the dashboard redirects it to the tidy path
        c.get("/dashboard//invite/SeCrEtInViTeToKeN0123456789")
    srv.stop()
    logs = srv.logs()
    assert "SeCrEtInViTeToKeN" not in logs and "GET /dashboard/invite/<token> 410" in logs
    assert "GET /dashboard//invite/<token> 308" in logs
    lines = [ln for ln in logs.splitlines() if "forged" in ln]
    assert len(lines) == 1 and "svc.access GET /x\\n2026-11-27" in lines[0], lines
    assert "\\r\\x00\\u2028end 404" in lines[0] and "\x00" not in logs


def test_bootstrap_is_idempotent_and_hides_secrets_the_second_time(tmp_path: os.PathLike[str]
                                                                    ) -> None:
    data = os.path.join(str(tmp_path), "d")
    first = _cli(data, "bootstrap", "--json")
    assert first.returncode == 0, first.stderr
    info = json.loads(first.stdout)
    assert set(info) >= {"organizationId", "projectId", "domain", "keys", "owner"}
    assert set(info["keys"]) == {"pk_test", "pk_live", "sk_test", "sk_live"}
    assert info["keys"]["sk_live"].startswith("sk_live_") and info["owner"]["password"]
    second = json.loads(_cli(data, "bootstrap", "--json").stdout)
    assert second["projectId"] == info["projectId"]
    assert second["keys"]["pk_test"] == info["keys"]["pk_test"]
    assert info["keys"]["sk_test"] not in json.dumps(second)
    assert "password" not in second["owner"]
    # the secret key is nowhere on disk, only its hash
    for root, _, files in os.walk(data):
        for f in files:
            with open(os.path.join(root, f), "rb") as fh:
                blob = fh.read()
            assert info["keys"]["sk_test"].encode() not in blob
            assert info["owner"]["password"].encode() not in blob


def test_cli_keys_plan_project_backup(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "d")
    info = json.loads(_cli(data, "bootstrap", "--json").stdout)
    pid, org = info["projectId"], info["organizationId"]
    created = json.loads(_cli(data, "keys", "create", "--project", pid, "--kind", "secret",
                              "--mode", "live", "--name", "ci").stdout)
    assert created["key"].startswith("sk_live_")
    listed = json.loads(_cli(data, "keys", "list", "--project", pid).stdout)
    assert len(listed) == 5 and any(k["name"] == "ci" for k in listed)
    revoked = json.loads(_cli(data, "keys", "revoke", "--project", pid, created["id"]).stdout)
    assert revoked["revoked"] is True
    plan = json.loads(_cli(data, "plan", "set", org, "scale").stdout)
    assert plan["plan"] == "scale"
    bad = _cli(data, "plan", "set", org, "platinum")
    assert bad.returncode == 2 and "validation_error" in bad.stderr
    proj = json.loads(_cli(data, "project", "create", "--org", org, "--name", "Second").stdout)
    assert set(proj["keys"]) == {"pk_test", "pk_live", "sk_test", "sk_live"}
    dest = os.path.join(str(tmp_path), "backup")
    assert _cli(data, "backup", dest).returncode == 0
    copied = json.loads(_cli(dest, "keys", "list", "--project", proj["projectId"]).stdout)
    assert len(copied) == 4


def test_cli_suspends_and_resumes_a_project_while_it_serves(
        server_factory: type[ServerProcess]) -> None:
    """The running service sees it at once: every key of the project is 403
    ``project_suspended`` (SPEC's error codes tied to keys) until resumed;
    its links go on redirecting."""
    srv = server_factory().start()
    pid = srv.info["projectId"]
    with srv.client("sk_test") as c:
        link = c.post("/v1/links", json={"path": "/p", "webFallbackUrl": "https://example.com/w"})
        assert link.status_code == 201, link.text
    slug_path = "/" + link.json()["url"].rsplit("/", 1)[1]
    said = _cli(srv.data_dir, "project", "suspend", pid)
    assert said.returncode == 0, said.stderr
    assert json.loads(said.stdout) == {"projectId": pid, "suspended": True}
    for key, method, path in (("sk_live", "GET", "/v1/links"),
                              ("pk_test", "POST", "/v1/sdk/links")):
        with srv.client(key) as c:
            r = c.request(method, path, json={} if method == "POST" else None)
        assert r.status_code == 403 and r.json()["error"]["code"] == "project_suspended", r.text
    desktop = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 Chrome/130.0 Safari/537.36"
    with srv.client(**{"user-agent": desktop}) as c:
        tap = c.get(slug_path)
    assert tap.status_code == 302 and tap.headers["location"] == "https://example.com/w"
    said = _cli(srv.data_dir, "project", "resume", pid)
    assert json.loads(said.stdout) == {"projectId": pid, "suspended": False}
    with srv.client("sk_live") as c:
        assert c.get("/v1/links").status_code == 200
    nobody = "00000000-0000-4000-8000-000000000000"
    refused = _cli(srv.data_dir, "project", "suspend", nobody)
    assert refused.returncode == 2 and f"svc: not_found: no project {nobody}" in refused.stderr


def test_start_warns_when_probabilistic_matching_has_no_country_source(
        server_factory: type[ServerProcess]) -> None:
    """Cohort matching needs each tap's country: a start without
    SVC_COUNTRY_HEADER or SVC_GEOIP_DB names the projects that have
    probabilistic matching on; with a source, or with it off, nothing."""
    quiet = {"SVC_COUNTRY_HEADER": "", "SVC_GEOIP_DB": ""}
    srv = server_factory(env=quiet).start()
    pid = srv.info["projectId"]
    with srv.client("sk_test") as c:
        r = c.patch("/v1/deferred/settings", json={"probabilisticMatching": True})
        assert r.status_code == 200, r.text
    srv.stop()
    assert "no country source" not in srv.logs()  # it was off at this start
    again = server_factory(srv.data_dir, bootstrap=False, env=quiet).start()
    again.stop()
    said = [ln for ln in again.logs().splitlines() if "no country source" in ln]
    assert len(said) == 1 and f"for 1 project(s) ({pid})" in said[0], said
    sourced = server_factory(srv.data_dir, bootstrap=False,
                             env={"SVC_COUNTRY_HEADER": "CF-IPCountry"}).start()
    sourced.stop()
    assert "no country source" not in sourced.logs()


def test_refused_commands_say_why_in_one_line_and_change_nothing(
        tmp_path: os.PathLike[str]) -> None:
    """Exit 2 and ``svc: <code>: <message>`` (argparse's usage error for an ID
    that is no UUID), no traceback, and nothing made by a refused command."""
    data = os.path.join(str(tmp_path), "d")
    info = json.loads(_cli(data, "bootstrap", "--json").stdout)
    pid, org = info["projectId"], info["organizationId"]
    nobody = "00000000-0000-4000-8000-000000000000"
    missing = os.path.join(str(tmp_path), "typo")
    cases = [
        ((data, "plan", "set", nobody, "scale"), f"svc: not_found: no organization {nobody}"),
        ((data, "project", "create", "--org", nobody, "--name", "X"), "svc: not_found"),
        ((data, "project", "create", "--org", org, "--name", ""), "svc: validation_error"),
        ((data, "keys", "create", "--project", nobody, "--kind", "sk", "--mode", "live"),
         f"svc: not_found: no project {nobody}"),
        ((data, "keys", "revoke", "--project", pid, nobody), "svc: not_found"),
        ((data, "keys", "list", "--project", "nope"), "not an ID (a UUID): 'nope'"),
        ((data, "user", "create", "--email", "a@example.com", "--password", "short"),
         "svc: validation_error: a password has 10 to 1000 characters"),
        ((data, "user", "create", "--email", "b@example.com", "--password", "x" * 1001),
         "svc: validation_error"),
        ((data, "user", "create", "--email", "c@example.com", "--org", nobody),
         "svc: not_found: no organization"),
        ((data, "user", "create", "--email", "d@example.com", "--role", "admin"),
         "svc: validation_error: --role needs --org"),  # was a user of no organization
        ((data, "backup", data), "svc: conflict: backup destination"),
        ((data, "backup", os.path.join(data, "data.mdb")), "svc: validation_error: cannot make"),
        ((missing, "keys", "list", "--project", pid), f"svc: not_found: no svc data in {missing}"),
        ((missing, "backup", os.path.join(str(tmp_path), "empty-copy")), "svc: not_found"),
    ]
    for (where, *args), said in cases:
        done = _cli(where, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert said in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
    assert not os.path.exists(missing)
    assert not os.path.exists(os.path.join(str(tmp_path), "empty-copy"))
    made = _cli(data, "user", "create", "--email", "c@example.com", "--org", org)
    assert made.returncode == 0, made.stderr  # the refused attempt made no user
    # the starter plan's team is 3: the owner, c and d
    assert _cli(data, "plan", "set", org, "starter").returncode == 0
    assert _cli(data, "user", "create", "--email", "d@example.com", "--org", org).returncode == 0
    full = _cli(data, "user", "create", "--email", "e@example.com", "--org", org)
    assert full.returncode == 2
    assert "svc: forbidden: the starter plan allows 3 team members, counting open" in full.stderr
    assert _cli(data, "user", "create", "--email", "e@example.com").returncode == 0  # not made


def test_backup_while_serving(server_factory: type[ServerProcess],
                              tmp_path: os.PathLike[str]) -> None:
    srv = server_factory().start()
    with srv.client("sk_test") as c:
        c.patch("/v1/deferred/settings", json={"probabilisticMatching": True})
    dest = os.path.join(str(tmp_path), "live-backup")
    r = _cli(srv.data_dir, "backup", dest)
    assert r.returncode == 0, r.stderr
    srv.stop()
    copy = server_factory(dest, bootstrap=False).start()
    copy.info = srv.info
    with copy.client("sk_test") as c:
        assert c.get("/v1/deferred/settings").json()["probabilisticMatching"] is True


def test_doctor_reports_a_healthy_and_a_missing_data_dir(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "d")
    missing = _cli(data, "doctor", "--json")
    assert missing.returncode == 1
    assert json.loads(missing.stdout)[0]["verdict"] == "fail"
    _cli(data, "bootstrap", "--json")
    ok = _cli(data, "doctor", "--json")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    checks = {f["check"]: f for f in json.loads(ok.stdout)}
    assert checks["schema"]["verdict"] == "ok" and checks["map space"]["verdict"] == "ok"
    assert checks["bootstrap"]["verdict"] == "ok"
    assert "GiB free of" in checks["disk space"]["detail"]  # the data dir's file system
    text = _cli(data, "doctor")
    assert "map space" in text.stdout and "webhooks" in text.stdout
    assert "disk flush" not in text.stdout  # only when asked: it writes
    # --disk times real flushes in the data dir and leaves no file behind
    before = sorted(os.listdir(data))
    disk = _cli(data, "doctor", "--json", "--disk")
    assert disk.returncode == 0, disk.stdout + disk.stderr
    flush = {f["check"]: f for f in json.loads(disk.stdout)}["disk flush"]
    assert flush["verdict"] in ("ok", "warn") and "one page" in flush["detail"]
    assert sorted(os.listdir(data)) == before


def test_doctor_warns_when_the_map_is_nearly_full(tmp_path: os.PathLike[str]) -> None:
    import lmdb

    data = os.path.join(str(tmp_path), "d")
    _cli(data, "bootstrap", "--json")
    env = lmdb.open(data, map_size=1 << 20, max_dbs=64)
    db = env.open_db(b"filler")
    i = 0
    while True:
        try:
            with env.begin(write=True) as txn:
                txn.put(f"k{i}".encode(), b"x" * 4000, db=db)
        except lmdb.MapFullError:
            break
        i += 1
    env.close()
    out = _cli(data, "doctor", "--json", "--map-size", "1MiB")
    checks = {f["check"]: f for f in json.loads(out.stdout)}
    assert checks["map space"]["verdict"] in ("warn", "fail")
    assert "SVC_MAP_SIZE" in checks["map space"]["remedy"]


def _schema_of(data_dir: str) -> int:
    import lmdb

    env = lmdb.open(data_dir, max_dbs=128, readonly=True, lock=False)
    try:
        with env.begin() as txn:
            raw = txn.get(b"schema_version", db=env.open_db(b"meta", txn=txn, create=False))
        assert raw is not None
        return int(bytes(raw))
    finally:
        env.close()


def _set_schema(data_dir: str, version: int) -> None:
    import lmdb

    env = lmdb.open(data_dir, max_dbs=128)
    try:
        with env.begin(write=True) as txn:
            txn.put(b"schema_version", str(version).encode(),
                    db=env.open_db(b"meta", txn=txn))
    finally:
        env.close()


def test_only_serve_upgrades_a_data_dir_and_a_newer_one_is_refused_in_one_line(
        tmp_path: os.PathLike[str], server_factory: type[ServerProcess]) -> None:
    """Every command migrated the data dir in place, so a backup taken after
    installing a new svc ("take a backup first") was already upgraded, and a
    newer dir was refused with a traceback. Now only ``svc serve`` upgrades;
    the others refuse an older dir unchanged, ``svc backup`` copies it as it
    is, and a newer one is one line."""
    from storage.schema import SCHEMA_VERSION

    data = os.path.join(str(tmp_path), "d")
    info = json.loads(_cli(data, "bootstrap", "--json").stdout)
    older = SCHEMA_VERSION - 1
    _set_schema(data, older)
    listed = _cli(data, "keys", "list", "--project", info["projectId"])
    assert listed.returncode == 2 and "Traceback" not in listed.stderr
    assert f"data dir has schema {older}" in listed.stderr and "svc serve" in listed.stderr
    dest = os.path.join(str(tmp_path), "before-upgrade")
    assert _cli(data, "backup", dest).returncode == 0
    assert _schema_of(data) == older and _schema_of(dest) == older
    _set_schema(data, SCHEMA_VERSION + 1)
    for done in (_cli(data, "keys", "list", "--project", info["projectId"]),
                 subprocess.run([sys.executable, "-m", "web.cli", "serve", "--data", data,
                                 "--port", "0"], capture_output=True, text=True, timeout=60,
                                check=False)):
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
        assert "this svc knows up to" in done.stderr
    _set_schema(dest, older)
    upgraded = server_factory(dest, bootstrap=False).start()  # serve upgrades it
    upgraded.stop()
    assert _schema_of(dest) == SCHEMA_VERSION


def test_doctor_fails_on_one_failed_check_and_the_cli_keeps_what_it_is_asked(
        tmp_path: os.PathLike[str]) -> None:
    """README: `svc doctor` exits 1 on a failed check (one, among others
    that pass: a data dir one schema ahead); `svc user create --role` gives
    that role; `svc keys create --kind pk` makes a publishable key; a user
    made without `--password` is told the one made for it."""
    import lmdb

    data = os.path.join(str(tmp_path), "d")
    info = json.loads(_cli(data, "bootstrap", "--json").stdout)
    pid, org = info["projectId"], info["organizationId"]
    made = _cli(data, "user", "create", "--email", "m@example.com", "--org", org,
                "--role", "marketer")
    assert made.returncode == 0, made.stderr
    shown = json.loads(made.stdout)
    assert shown["role"] == "marketer" and len(shown["password"]) >= 16
    given = json.loads(_cli(data, "user", "create", "--email", "d@example.com", "--org", org,
                            "--password", "a-given-password-1").stdout)
    assert given["role"] == "developer" and "password" not in given  # never echoed
    pk = json.loads(_cli(data, "keys", "create", "--project", pid, "--kind", "pk",
                         "--mode", "live", "--name", "app").stdout)
    assert pk["key"].startswith("pk_live_")
    from storage.lmdb_store import LmdbStore
    store = LmdbStore(data)
    try:
        user = store.find_user("m@example.com")
        assert user is not None
        assert [m.role.value for m in store.memberships_of(user.id)] == ["marketer"]
    finally:
        store.close()
    env = lmdb.open(data, max_dbs=128)
    with env.begin(write=True) as txn:
        meta = env.open_db(b"meta", txn=txn)
        version = int(bytes(txn.get(b"schema_version", db=meta)))
        txn.put(b"schema_version", str(version + 1).encode(), db=meta)
    env.close()
    doctor = _cli(data, "doctor", "--json")
    verdicts = {f["check"]: f["verdict"] for f in json.loads(doctor.stdout)}
    assert verdicts["schema"] == "fail" and "ok" in verdicts.values()
    assert doctor.returncode == 1
