"""The ``svc`` command line.

    svc serve [--data DIR] [--host H] [--port P] [--public-url URL]
              [--certfile F --keyfile F] [--bootstrap]
    svc bootstrap [--data DIR] [--json]
    svc keys create --project ID --kind publishable|secret --mode test|live [--name N]
    svc keys list --project ID
    svc keys revoke --project ID KEY_ID
    svc project create --org ID --name NAME
    svc project suspend|resume PROJECT
    svc plan set ORG PLAN
    svc user create --email E [--password P] [--org ID --role ROLE]
    svc backup DEST [--data DIR]
    svc doctor [--data DIR] [--json] [--disk]
    svc webhooks listen --secret whsec_... [--port P] [--host H]

Every flag also reads from its ``SVC_*`` environment variable (README.md).
Commands other than ``serve`` may run while the service is serving the same
data dir: LMDB serialises writers across processes.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from actors.clock import SystemClock
from storage.lmdb_store import LmdbStore, has_data
from svc_engine import config as config_mod
from svc_engine.errors import NotFound, SvcError, ValidationError
from svc_engine.ids import is_uuid
from svc_engine.keys import KeyKind, Mode
from svc_engine.plans import parse_plan
from svc_engine.records import Role
from web import serve_lock, tenancy
from web.services import system_random


def _now() -> int:
    return SystemClock().now_ms()


def _config(args: argparse.Namespace) -> config_mod.Config:
    overrides = {k: v for k, v in vars(args).items() if k in {s.name for s in config_mod.SETTINGS}}
    return config_mod.load(os.environ, overrides)


def _with_store(cfg: config_mod.Config, fn: Callable[[LmdbStore], Awaitable[Any]], *,
                create: bool = False, readonly: bool = False) -> Any:
    """Run ``fn`` with the data dir's store open and its writer running. Only
    ``create`` (bootstrap) may start a store where none is: a mistyped
    ``--data`` must not answer "no keys" or back up an empty store. An
    SvcError comes out alone, not inside the nursery's exception group, so
    ``main`` prints its one line. No command but ``svc serve`` upgrades a
    data dir (an older one is refused, unchanged: SchemaTooOld), so a backup
    taken after installing a new svc is the store as it was. ``readonly``:
    nothing is written or created (no writer: ``svc backup``)."""
    if not create and not has_data(cfg.data_dir):
        raise NotFound(f"no svc data in {cfg.data_dir} (check --data or SVC_DATA_DIR; "
                       "`svc bootstrap` or `svc serve` makes a new one)")

    async def main() -> Any:
        store = LmdbStore(cfg.data_dir, map_size=cfg.map_size, upgrade=False,
                          readonly=readonly)
        if readonly:
            try:
                return await fn(store)
            finally:
                store.close()
        try:
            async with trio.open_nursery() as n:
                await n.start(store.writer.run)
                try:
                    return await fn(store)
                finally:
                    store.writer.close()
        finally:
            store.close()

    try:
        return trio.run(main)
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1 and isinstance(leaves[0], SvcError):
            raise leaves[0] from None
        raise


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


def _port_arg(value: str) -> int:
    try:
        port = int(value)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port (0 to 65535): {value!r}")
    return port


def _uuid_arg(value: str) -> str:
    """An organization, project or key ID on the command line."""
    if not is_uuid(value):
        raise argparse.ArgumentTypeError(f"not an ID (a UUID): {value!r}")
    return value.lower()


def _print(value: object) -> None:
    print(json.dumps(value, indent=2))


def cmd_serve(args: argparse.Namespace) -> None:
    from web.main import run

    run(_config(args), bootstrap=args.bootstrap)


def cmd_bootstrap(args: argparse.Namespace) -> None:
    cfg = _config(args)

    async def go(store: LmdbStore) -> dict[str, object]:
        return await tenancy.bootstrap(store, cfg.base_url, system_random, _now(),
                                       serving=serve_lock.is_served(cfg.data_dir))

    info = _with_store(cfg, go, create=True)
    if args.json:
        _print(info)
    else:
        print(f"organization {info['organizationId']}\nproject      {info['projectId']}")
        domains = [info["domain"] or "(default domain not recorded)",
                   *list(info["customDomains"])]
        print(f"domains      {' '.join(map(str, domains))}")
        for k, v in dict(info["keys"]).items():
            print(f"{k:12} {v}")
        owner = dict(info["owner"])
        print(f"owner        {owner['email']} {owner.get('password', '(password set)')}")


def cmd_keys(args: argparse.Namespace) -> None:
    cfg = _config(args)

    async def go(store: LmdbStore) -> object:
        if store.get_project(args.project) is None:
            raise NotFound(f"no project {args.project}")
        if args.keys_cmd == "create":
            kind = KeyKind.PUBLISHABLE if args.kind.startswith("p") else KeyKind.SECRET
            key_id, raw = await tenancy.create_key(store, args.project, kind, Mode(args.mode),
                                                   args.name, system_random, _now())
            return {"id": key_id, "key": raw}
        if args.keys_cmd == "list":
            return [k.to_json() for k in store.list_keys(args.project)]
        key = await store.revoke_key(args.project, args.key_id, _now())
        return key.to_json()

    _print(_with_store(cfg, go))


def cmd_project(args: argparse.Namespace) -> None:
    cfg = _config(args)

    async def go(store: LmdbStore) -> object:
        if args.project_cmd in ("suspend", "resume"):
            # Its API keys get 403 project_suspended at once (every request
            # reads the project); links still redirect (README "Projects").
            project = await store.set_project_suspended(args.project,
                                                        args.project_cmd == "suspend")
            return {"projectId": project.id, "suspended": project.suspended}
        project, keys = await tenancy.create_project(store, args.org, args.name, system_random,
                                                     _now())
        return {"projectId": project.id, "keys": keys}

    _print(_with_store(cfg, go))


def cmd_plan(args: argparse.Namespace) -> None:
    cfg = _config(args)
    plan = parse_plan(args.plan)

    async def go(store: LmdbStore) -> object:
        org = await store.set_plan(args.org, plan)
        return {"organizationId": org.id, "plan": org.plan.value}

    _print(_with_store(cfg, go))


def cmd_user(args: argparse.Namespace) -> None:
    cfg = _config(args)
    if args.role and not args.org:  # it was dropped without a word: a user of no org
        raise ValidationError("--role needs --org: the role is a membership's",
                              field="role")
    role = Role(args.role or Role.DEVELOPER.value)
    password = args.password or tenancy.new_password(system_random)

    async def go(store: LmdbStore) -> object:
        if args.org:  # before the user: both or neither
            tenancy.check_room(store, args.org, _now())
        user = await tenancy.create_user(store, args.email, password, system_random, _now())
        out: dict[str, object] = {"userId": user.id, "email": user.email}
        if not args.password:
            out["password"] = password
        if args.org:
            await tenancy.add_member(store, args.org, user.id, role, _now())
            out["organizationId"], out["role"] = args.org, role.value
        return out

    _print(_with_store(cfg, go))


def cmd_backup(args: argparse.Namespace) -> None:
    cfg = _config(args)

    async def go(store: LmdbStore) -> object:
        await store.backup(args.dest)
        return {"backup": args.dest}

    _print(_with_store(cfg, go, readonly=True))


def cmd_webhooks(args: argparse.Namespace) -> None:
    from web.server import ListenFailed
    from web.webhook_receiver import listen

    try:
        with contextlib.suppress(KeyboardInterrupt):
            trio.run(listen, args.secret, args.host, args.port)
    except ListenFailed as e:  # one line, as `svc serve` says it
        print(f"svc: {e} (choose another --port)", file=sys.stderr)
        sys.exit(1)


def cmd_doctor(args: argparse.Namespace) -> None:
    from web.doctor import diagnose

    cfg = _config(args)
    findings = diagnose(cfg.data_dir, _now(), cfg.map_size, disk=args.disk)
    if args.json:
        _print([f.to_json() for f in findings])
    else:
        for f in findings:
            print(f"{f.verdict.upper():4}  {f.check}: {f.detail}")
            if f.remedy:
                print(f"      -> {f.remedy}")
    if any(f.verdict == "fail" for f in findings):
        sys.exit(1)


def _add_data(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data", dest="data_dir", help="data directory (SVC_DATA_DIR)")
    p.add_argument("--map-size", dest="map_size", type=config_mod.SETTINGS[4].parse,
                   help="LMDB map size (SVC_MAP_SIZE)")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="svc", description="short links, deferred deep "
                                "linking, conversion events and signed webhooks")
    sub = p.add_subparsers(dest="cmd", required=True)

    s = sub.add_parser("serve", help="run the service")
    _add_data(s)
    s.add_argument("--host", help="listen address (SVC_HOST)")
    s.add_argument("--port", type=int, help="listen port (SVC_PORT)")
    s.add_argument("--public-url", dest="public_url", help="public base URL (SVC_PUBLIC_URL)")
    s.add_argument("--certfile", help="TLS certificate (SVC_CERTFILE)")
    s.add_argument("--keyfile", help="TLS key (SVC_KEYFILE)")
    s.add_argument("--bootstrap", action="store_true",
                   help="on a fresh data dir, create and print the first org, project, "
                        "owner and keys")
    s.set_defaults(fn=cmd_serve)

    b = sub.add_parser("bootstrap", help="create (or report) the first org, project and keys")
    _add_data(b)
    b.add_argument("--public-url", dest="public_url")
    b.add_argument("--json", action="store_true", help="print JSON")
    b.set_defaults(fn=cmd_bootstrap)

    k = sub.add_parser("keys", help="API keys")
    ksub = k.add_subparsers(dest="keys_cmd", required=True)
    kc = ksub.add_parser("create")
    _add_data(kc)
    kc.add_argument("--project", required=True, type=_uuid_arg)
    kc.add_argument("--kind", required=True, choices=["publishable", "secret", "pk", "sk"])
    kc.add_argument("--mode", required=True, choices=["test", "live"])
    kc.add_argument("--name", default="")
    kl = ksub.add_parser("list")
    _add_data(kl)
    kl.add_argument("--project", required=True, type=_uuid_arg)
    kr = ksub.add_parser("revoke")
    _add_data(kr)
    kr.add_argument("--project", required=True, type=_uuid_arg)
    kr.add_argument("key_id", type=_uuid_arg)
    k.set_defaults(fn=cmd_keys)

    pr = sub.add_parser("project", help="projects")
    psub = pr.add_subparsers(dest="project_cmd", required=True)
    pc = psub.add_parser("create")
    _add_data(pc)
    pc.add_argument("--org", required=True, type=_uuid_arg)
    pc.add_argument("--name", required=True)
    for verb, words in (("suspend", "refuse the project's API keys (403 project_suspended)"),
                        ("resume", "accept them again")):
        pv = psub.add_parser(verb, help=words)
        _add_data(pv)
        pv.add_argument("project", type=_uuid_arg)
    pr.set_defaults(fn=cmd_project)

    pl = sub.add_parser("plan", help="organization plans")
    plsub = pl.add_subparsers(dest="plan_cmd", required=True)
    ps = plsub.add_parser("set")
    _add_data(ps)
    ps.add_argument("org", type=_uuid_arg)
    ps.add_argument("plan", help="starter, growth or scale")
    pl.set_defaults(fn=cmd_plan)

    u = sub.add_parser("user", help="dashboard users")
    usub = u.add_subparsers(dest="user_cmd", required=True)
    uc = usub.add_parser("create")
    _add_data(uc)
    uc.add_argument("--email", required=True)
    uc.add_argument("--password")
    uc.add_argument("--org", type=_uuid_arg)
    uc.add_argument("--role", choices=[r.value for r in Role],
                    help="with --org (default developer)")
    u.set_defaults(fn=cmd_user)

    bk = sub.add_parser("backup", help="consistent copy of the data dir, safe while serving")
    _add_data(bk)
    bk.add_argument("dest")
    bk.set_defaults(fn=cmd_backup)

    dr = sub.add_parser("doctor", help="check a data dir and say what to do")
    _add_data(dr)
    dr.add_argument("--json", action="store_true")
    dr.add_argument("--disk", action="store_true",
                    help="also time the disk's flushes (writes a 4 MiB scratch file)")
    dr.set_defaults(fn=cmd_doctor)

    wh = sub.add_parser("webhooks", help="webhook tools")
    whsub = wh.add_subparsers(dest="webhooks_cmd", required=True)
    wl = whsub.add_parser("listen", help="a sample receiver that verifies and prints "
                          "each delivery (401 on a bad signature or timestamp)")
    wl.add_argument("--secret", required=True, help="the endpoint's whsec_ signing secret")
    wl.add_argument("--port", type=_port_arg, default=9000)
    wl.add_argument("--host", default="127.0.0.1")
    wh.set_defaults(fn=cmd_webhooks)
    return p


def main(argv: list[str] | None = None) -> None:
    args = parser().parse_args(argv)
    try:
        args.fn(args)
    except SvcError as e:
        print(f"svc: {e.code}: {e.message}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
