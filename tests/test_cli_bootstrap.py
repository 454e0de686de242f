"""``svc bootstrap`` through the real CLI: on a data dir that exists it
reports the link domains stored for the project, not the ones its own
invocation's settings (SVC_PUBLIC_URL, --public-url) would give. ``svc
serve`` records the default domain it serves (so ``serve --bootstrap``
prints it, and a later ``svc bootstrap`` reports it), and warns when links
were made on the one it replaces."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import lmdb
import pytest
import trio

from storage import layout
from storage.codec import encode
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore
from svc_engine.keys import Mode
from svc_engine.links import Link
from tests.server_process import ServerProcess
from web import serve_lock, tenancy

pytestmark = pytest.mark.e2e

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def bootstrap(data: str, *args: str, public_url: str | None = None
              ) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SVC_PUBLIC_URL"}
    if public_url is not None:
        env["SVC_PUBLIC_URL"] = public_url
    done = subprocess.run([sys.executable, "-m", "web.cli", "bootstrap", "--data", data, *args],
                          capture_output=True, text=True, timeout=60, check=False, env=env,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    return done


def report(data: str, *args: str, public_url: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(bootstrap(data, "--json", *args,
                                               public_url=public_url).stdout)
    return out


def with_store(data: str, fn: Callable[[LmdbStore], Awaitable[None]]) -> None:
    async def main() -> None:
        store = LmdbStore(data, map_size=64 << 20)
        try:
            async with trio.open_nursery() as n:
                await n.start(store.writer.run)
                try:
                    await fn(store)
                finally:
                    store.writer.close()
        finally:
            store.close()

    trio.run(main)


def test_a_second_bootstrap_reports_the_stored_domain_not_its_own_settings(
        tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "d")
    first = report(data, public_url="https://go.example.com")
    assert first["created"] is True and first["domain"] == "go.example.com"
    for url, args in (("https://other.example", ()), (None, ()),  # default: 127.0.0.1:8080
                      (None, ("--public-url", "http://elsewhere.example:9000"))):
        again = report(data, *args, public_url=url)
        assert again["created"] is False and again["projectId"] == first["projectId"]
        assert again["domain"] == "go.example.com", (url, args)
        assert again["customDomains"] == []
    text = bootstrap(data, public_url="https://other.example").stdout
    assert "domains      go.example.com\n" in text and "other.example" not in text


def test_custom_domains_and_a_data_dir_bootstrapped_before_the_domain_was_recorded(
        tmp_path: os.PathLike[str]) -> None:
    """Such a project (its record has no default domain) has its newest link
    not on a custom domain tell the domain its links are served on; with no
    such link the domain is null, never the invocation's."""
    data = os.path.join(str(tmp_path), "d")
    pid = report(data, public_url="https://go.example.com")["projectId"]

    async def forget_domain_add_custom(store: LmdbStore) -> None:
        project = store.get_project(pid)
        assert project is not None and project.default_domain == "go.example.com"
        old = attrs.evolve(project, default_domain=None)

        def put(txn: lmdb.Transaction) -> None:
            txn.put(layout.uid(pid), encode(old), db=store.db(b"projects"))

        await store.write(put)
        await LinksStore(store).add_domain(pid, "links.shop.example", set())

    with_store(data, forget_domain_add_custom)
    legacy = report(data, public_url="https://other.example")
    assert legacy["domain"] is None
    assert legacy["customDomains"] == ["links.shop.example"]
    assert "domains      (default domain not recorded) links.shop.example\n" in bootstrap(
        data, public_url="https://other.example").stdout

    async def make_links(store: LmdbStore) -> None:
        links = LinksStore(store)
        project = store.get_project(pid)
        assert project is not None
        made = [("old.example:8080", Mode.LIVE, 1), ("served.example", Mode.TEST, 2),
                ("links.shop.example", Mode.LIVE, 3)]  # the newest is on the custom domain
        for domain, mode, at in made:
            link = Link(id=str(uuid.uuid4()), project_id=pid, mode=mode, domain=domain,
                        slug=f"s{at}", path="/p", created_at_ms=at, updated_at_ms=at)
            await links.create(link, org_id=project.org_id, quota=None, idem=None)

    with_store(data, make_links)
    for url in ("https://other.example", None):
        got = report(data, public_url=url)
        assert got["domain"] == "served.example", url
        assert got["customDomains"] == ["links.shop.example"]


CHANGED = "the default link domain is now"


def serve(factory: type[ServerProcess], data: str, public_url: str, *,
          bootstrap: bool = True) -> ServerProcess:
    return factory(data, bootstrap=bootstrap, env={"SVC_PUBLIC_URL": public_url}).start()


def test_serve_records_and_prints_the_domain_it_serves(
        tmp_path: os.PathLike[str], server_factory: type[ServerProcess]) -> None:
    """A new SVC_PUBLIC_URL: ``serve --bootstrap`` prints the domain served,
    a later ``svc bootstrap`` reports it, and the log says that the links
    made on the former domain no longer answer (they do not)."""
    data = os.path.join(str(tmp_path), "d")
    first = serve(server_factory, data, "https://go.example.com")
    assert first.info["created"] is True and first.info["domain"] == "go.example.com"
    with first.client("sk_live") as c:
        made = c.post("/v1/links", json={"path": "/p", "slug": "kept"}).json()
        assert made["url"] == "https://go.example.com/kept"
        assert c.get("/kept", headers={"host": "go.example.com"}).status_code != 404
    assert first.stop() == 0 and CHANGED not in first.logs()

    moved = serve(server_factory, data, "https://new.example.com")
    assert moved.info["created"] is False
    assert moved.info["projectId"] == first.info["projectId"]
    assert moved.info["domain"] == "new.example.com"
    assert (f"{CHANGED} new.example.com (it was go.example.com): links made on "
            "go.example.com do not answer here") in moved.logs()
    with moved.client(first.info["keys"]["sk_live"]) as c:  # a secret is printed once
        assert c.get("/kept", headers={"host": "go.example.com"}).status_code == 404
        assert c.get(f"/v1/links/{made['id']}").json()["url"] == "https://go.example.com/kept"
    assert moved.stop() == 0
    assert report(data)["domain"] == "new.example.com"  # run apart, without SVC_PUBLIC_URL

    again = serve(server_factory, data, "https://new.example.com", bootstrap=False)
    assert again.stop() == 0 and CHANGED not in again.logs()  # nothing changed this time
    assert report(data, public_url="https://other.example")["domain"] == "new.example.com"


def test_svc_bootstrap_beside_a_service_started_empty_takes_its_domain(
        tmp_path: os.PathLike[str], server_factory: type[ServerProcess]) -> None:
    """``svc serve`` on an empty data dir, then ``svc bootstrap`` (the real
    CLI, with its default public URL) beside it: the project's domain is the
    one the service serves."""
    data = os.path.join(str(tmp_path), "d")
    running = serve(server_factory, data, "https://served.example", bootstrap=False)
    try:
        made = report(data)
        assert made["created"] is True and made["domain"] == "served.example"
    finally:
        assert running.stop() == 0


def test_a_bootstrap_beside_a_service_records_the_domain_it_serves(
        tmp_path: os.PathLike[str]) -> None:
    """``svc serve`` started on an empty data dir, then ``svc bootstrap`` run
    beside it with its own (default) public URL: the project gets the domain
    the service serves, which its links are made on."""
    data = os.path.join(str(tmp_path), "d")
    rnd = random.Random(8).randbytes

    async def scenario(store: LmdbStore) -> None:
        assert await tenancy.record_served_domain(store, "https://links.example") is None
        made = await tenancy.bootstrap(store, "http://127.0.0.1:8080", rnd, 1, serving=True)
        assert made["created"] is True and made["domain"] == "links.example"
        project = store.get_project(str(made["projectId"]))
        assert project is not None and project.default_domain == "links.example"
        assert await tenancy.record_served_domain(store, "https://links.example") is None

    with_store(data, scenario)


def test_a_bootstrap_after_the_service_stopped_takes_its_own_public_url(
        tmp_path: os.PathLike[str]) -> None:
    """The domain a stopped service served is not what the operator asks for
    now: ``svc bootstrap --public-url`` (through the real CLI) records its own."""
    data = os.path.join(str(tmp_path), "d")

    async def served(store: LmdbStore) -> None:
        assert await tenancy.record_served_domain(store, "http://127.0.0.1:8080") is None

    with_store(data, served)
    assert serve_lock.is_served(data) is False
    assert report(data, public_url="https://go.example.com")["domain"] == "go.example.com"


def test_is_served_while_a_serve_holds_the_lock(tmp_path: os.PathLike[str]) -> None:
    data = os.path.join(str(tmp_path), "d")
    assert serve_lock.is_served(data) is False  # no data dir yet
    held = serve_lock.hold(data)
    try:
        assert serve_lock.is_served(data) is True
    finally:
        held.close()
    assert serve_lock.is_served(data) is False


def test_record_served_domain(tmp_path: os.PathLike[str]) -> None:
    """The warning is owed only when links were made on the former domain
    (any project's, deleted ones too); a project bootstrapped before the
    domain was recorded is told by its newest link; no bootstrap, no record."""
    data = os.path.join(str(tmp_path), "d")
    rnd = random.Random(7).randbytes

    async def scenario(store: LmdbStore) -> None:
        assert await tenancy.record_served_domain(store, "https://a.example") is None
        info = await tenancy.bootstrap(store, "https://a.example", rnd, 1)
        pid = str(info["projectId"])

        def recorded() -> str | None:
            project = store.get_project(pid)
            assert project is not None
            return project.default_domain

        # the same domain: nothing written; another with no link on the old one: no warning
        assert await tenancy.record_served_domain(store, "https://a.example/") is None
        assert await tenancy.record_served_domain(store, "http://b.example:8080") is None
        assert recorded() == "b.example:8080"
        project = store.get_project(pid)
        assert project is not None
        link = Link(id=str(uuid.uuid4()), project_id=pid, mode=Mode.LIVE,
                    domain="b.example:8080", slug="s1", path="/p", created_at_ms=2,
                    updated_at_ms=2)
        await LinksStore(store).create(link, org_id=project.org_id, quota=None, idem=None)
        assert await tenancy.record_served_domain(store, "https://c.example") == "b.example:8080"
        assert recorded() == "c.example"
        assert (await tenancy.bootstrap(store, "https://x.example", rnd, 3))["domain"] == \
            "c.example"

        # bootstrapped before the domain was recorded: its newest link tells the former one
        legacy = attrs.evolve(project, default_domain=None)

        def put(txn: lmdb.Transaction) -> None:
            txn.put(layout.uid(pid), encode(legacy), db=store.db(b"projects"))

        await store.write(put)
        assert await tenancy.record_served_domain(store, "https://c.example") == "b.example:8080"
        assert recorded() == "c.example"

    with_store(data, scenario)


def test_a_bootstrap_stopped_part_way_leaves_nothing_and_runs_again(
        tmp_path: os.PathLike[str]) -> None:
    """Everything a bootstrap makes is one transaction with its record: a
    stop part way (Ctrl-C during the first `svc serve --bootstrap`) left an
    organization, a project and an owner without the record, and every
    later bootstrap failed on the owner's e-mail (and added an organization
    each time). Here the transaction fails at its membership write."""
    data = os.path.join(str(tmp_path), "d")
    rnd = random.Random(7).randbytes

    async def scenario(store: LmdbStore) -> None:
        real = store.set_member_op

        def failing(member: Any) -> Any:
            def op(txn: lmdb.Transaction) -> None:
                real(member)(txn)
                raise OSError("the process stops here")
            return op

        store.set_member_op = failing  # type: ignore[method-assign]
        with pytest.raises(OSError):
            await tenancy.bootstrap(store, "https://a.example", rnd, 1)
        for table in (b"orgs", b"projects", b"keys", b"users", b"members"):
            assert store.scan(table, b"") == [], table
        assert store.meta("bootstrap") is None
        store.set_member_op = real  # type: ignore[method-assign]
        info = await tenancy.bootstrap(store, "https://a.example", rnd, 2)
        assert info["created"] is True and len(info["keys"]) == 4  # type: ignore[arg-type]
        assert len(store.scan(b"orgs", b"")) == 1 and len(store.scan(b"keys", b"")) == 4
        again = await tenancy.bootstrap(store, "https://a.example", rnd, 3)
        assert again["created"] is False and again["projectId"] == info["projectId"]

    with_store(data, scenario)


def test_a_data_dir_an_older_svc_left_half_bootstrapped_is_refused_in_one_line(
        tmp_path: os.PathLike[str]) -> None:
    """The owner an interrupted bootstrap of an older svc wrote, without the
    record: `svc serve --bootstrap` says what happened and what to do (it
    printed a traceback ending in "a user with e-mail ... exists")."""
    data = os.path.join(str(tmp_path), "d")

    async def half(store: LmdbStore) -> None:
        await tenancy.create_user(store, tenancy.OWNER_EMAIL, "x" * 12, os.urandom, 1)

    with_store(data, half)
    done = subprocess.run([sys.executable, "-m", "web.cli", "serve", "--bootstrap", "--port",
                           "0", "--data", data], capture_output=True, text=True, timeout=60,
                          check=False, cwd=ROOT)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    last = done.stderr.splitlines()[-1]
    assert last.startswith("svc: ") and "no bootstrap finished here" in last
    assert "svc user create" in last
    assert "svc: listening" not in done.stdout
