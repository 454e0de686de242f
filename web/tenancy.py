"""Creating organizations, projects, keys and users: shared by the CLI
(``svc bootstrap``, ``svc project create``, ``svc keys ...``, ``svc user create``)
and the dashboard."""

from __future__ import annotations

from collections.abc import Callable

import argon2
import cbor2
import lmdb
import trio

from storage import accounts
from storage.links_store import LinksStore
from storage.lmdb_store import LmdbStore
from storage.writer import Op, in_one
from svc_engine.errors import Conflict, Forbidden, NotFound, ValidationError
from svc_engine.ids import new_id
from svc_engine.keys import ApiKey, KeyKind, Mode, base62, make_key
from svc_engine.links import default_domain
from svc_engine.plans import QUOTAS, Plan, within
from svc_engine.records import Membership, Organization, Project, Role, User, normalize_email

Random = Callable[[int], bytes]
_hasher = argon2.PasswordHasher()
KEY_NAMES = {
    (KeyKind.PUBLISHABLE, Mode.TEST): "pk_test",
    (KeyKind.PUBLISHABLE, Mode.LIVE): "pk_live",
    (KeyKind.SECRET, Mode.TEST): "sk_test",
    (KeyKind.SECRET, Mode.LIVE): "sk_live",
}


def hash_password(password: str) -> str:
    return _hasher.hash(password)


def verify_password(stored_hash: str, password: str) -> bool:
    try:
        return _hasher.verify(stored_hash, password)
    except (argon2.exceptions.VerificationError, argon2.exceptions.InvalidHashError):
        return False


def new_password(random: Random) -> str:
    return base62(random(16), 22)


def domain_of(public_url: str) -> str:
    """The default link domain, as short links show it (host and any port)."""
    return default_domain(public_url)


async def create_key(store: LmdbStore, project_id: str, kind: KeyKind, mode: Mode, name: str,
                     random: Random, now_ms: int) -> tuple[str, str]:
    """Create a key; returns (key id, key value). The value of a secret key is
    shown this once: only its hash is kept."""
    key_id, raw, record = _new_key(project_id, kind, mode, name, random, now_ms)
    await store.create_key(record)
    return key_id, raw


def _new_key(project_id: str, kind: KeyKind, mode: Mode, name: str, random: Random,
             now_ms: int) -> tuple[str, str, ApiKey]:
    if not name.isprintable():
        raise ValidationError("a key name has no control characters", field="name")
    key_id = new_id(random(16))
    raw, record = make_key(key_id, project_id, kind, mode, name, random(24), now_ms)
    return key_id, raw, record


async def create_project(store: LmdbStore, org_id: str, name: str, random: Random,
                         now_ms: int, *, default_domain: str | None = None
                         ) -> tuple[Project, dict[str, str]]:
    """A project with its four keys (publishable and secret, test and live),
    written together (a project was written, then each key: a stop between
    left a project without some of its keys).
    ``default_domain``: the default link domain to record with it (bootstrap
    records the one it was made for, and ``svc serve`` the one it serves:
    :func:`record_served_domain`, so a later report need not guess)."""
    org = store.get_org(org_id)
    if org is None:
        raise NotFound(f"no organization {org_id}")
    project, keys, ops = _project_ops(store, org, name, random, now_ms,
                                      default_domain=default_domain)
    await store.write(in_one(ops))
    return project, keys


def _project_ops(store: LmdbStore, org: Organization, name: str, random: Random, now_ms: int,
                 *, default_domain: str | None
                 ) -> tuple[Project, dict[str, str], list[Op[None]]]:
    """A new project of ``org`` and its keys, and the ops that store them."""
    org_id = org.id
    if not within(QUOTAS[org.plan].projects, len(store.list_projects(org_id))):
        raise ValidationError(f"the {org.plan.value} plan allows no more projects", field="plan")
    if not name.strip() or len(name) > 100 or not name.isprintable():
        raise ValidationError("a project name is 1 to 100 characters, no control characters",
                              field="name")
    project = Project(id=new_id(random(16)), org_id=org_id, name=name.strip(),
                      salt=random(32), created_at_ms=now_ms, default_domain=default_domain)
    ops = [store.create_project_op(project, at_most=QUOTAS[org.plan].projects)]
    keys = {}
    for (kind, mode), label in KEY_NAMES.items():
        _, raw, record = _new_key(project.id, kind, mode, f"default {label}", random, now_ms)
        ops.append(store.create_key_op(record))
        keys[label] = raw
    return project, keys, ops


async def create_org(store: LmdbStore, name: str, plan: Plan, random: Random,
                     now_ms: int) -> Organization:
    org = _new_org(name, plan, random, now_ms)
    await store.create_org(org)
    return org


def _new_org(name: str, plan: Plan, random: Random, now_ms: int) -> Organization:
    if not name.strip() or len(name) > 100 or not name.isprintable():
        raise ValidationError("an organization name is 1 to 100 characters, no control "
                              "characters", field="name")
    return Organization(id=new_id(random(16)), name=name.strip(), plan=plan,
                        created_at_ms=now_ms)


MIN_PASSWORD = 10
MAX_PASSWORD = 1000  # the sign-in form reads at most this many characters


async def create_user(store: LmdbStore, email: str, password: str, random: Random,
                      now_ms: int) -> User:
    user = _new_user(email, password, random, now_ms)
    await store.create_user(user)
    return user


def _new_user(email: str, password: str, random: Random, now_ms: int) -> User:
    """A new user, its password hashed (argon2: tens of milliseconds)."""
    email = normalize_email(email)
    if "@" not in email or len(email) > 254:
        raise ValidationError("a valid e-mail address is needed", field="email")
    if not MIN_PASSWORD <= len(password) <= MAX_PASSWORD:
        raise ValidationError(f"a password has {MIN_PASSWORD} to {MAX_PASSWORD} characters "
                              "(sign-in reads no more)", field="password")
    return User(id=new_id(random(16)), email=email, password_hash=hash_password(password),
                created_at_ms=now_ms)


def check_room(store: LmdbStore, org_id: str, now_ms: int) -> None:
    """NotFound without the organization; Forbidden when its plan's team is
    full (members and open invitations, as the dashboard counts)."""
    org = store.get_org(org_id)
    if org is None:
        raise NotFound(f"no organization {org_id}")
    limit = QUOTAS[org.plan].members
    seats = len(store.members_of(org_id)) + len(accounts.list_invites(store, org_id, now_ms))
    if not within(limit, seats):
        raise Forbidden(f"the {org.plan.value} plan allows {limit} team members, counting "
                        "open invitations; `svc plan set` changes the plan")


async def add_member(store: LmdbStore, org_id: str, user_id: str, role: Role,
                     now_ms: int) -> Membership:
    check_room(store, org_id, now_ms)
    m = Membership(org_id=org_id, user_id=user_id, role=role, created_at_ms=now_ms)
    await store.set_member(m)
    return m


OWNER_EMAIL = "owner@localhost"


class BootstrapInterrupted(Conflict):
    """The data dir has the owner a bootstrap makes but not its record: an
    svc before 2026-11-28 stopped part way through its first start."""


async def bootstrap(store: LmdbStore, public_url: str, random: Random,
                    now_ms: int, *, serving: bool = False) -> dict[str, object]:
    """Create the first organization, project, owner and keys on an empty data dir;
    on a data dir that has them, report what exists (no password or secret keys).

    ``public_url`` is used only to create: its host is the default link
    domain recorded with the new project, unless ``serving`` (a ``svc
    serve`` holds the data dir now) and it recorded the domain it serves
    (:func:`record_served_domain`): a bootstrap run beside the service
    records the domain its links are made on, not its own settings' one.
    A report of an existing data dir
    tells what is stored (:func:`link_domains`: the domain ``svc serve`` last
    served, which it records at start), whatever the ``public_url`` of this
    invocation (``svc bootstrap`` run without the service's
    ``SVC_PUBLIC_URL`` reported ``127.0.0.1:8080``)."""
    existing = store.meta("bootstrap")
    if existing is not None:
        info = cbor2.loads(existing)
        keys = {KEY_NAMES[(k.kind, k.mode)]: k.public_value or k.hint
                for k in store.list_keys(info["project_id"]) if k.active
                and k.name.startswith("default ")}
        domain, custom = link_domains(store, info["project_id"])
        return {"created": False, "organizationId": info["org_id"],
                "projectId": info["project_id"], "domain": domain, "customDomains": custom,
                "keys": keys, "owner": {"email": info["email"]}}
    if store.find_user(OWNER_EMAIL) is not None and store.meta("bootstrap") is None:
        raise BootstrapInterrupted(
            f"{OWNER_EMAIL} exists but no bootstrap finished here (an older svc stopped "
            "during its first start): serve without --bootstrap and make an owner with "
            "`svc user create --email E --org ID --role owner`, or use a new data dir")
    served = store.meta(SERVED_DOMAIN) if serving else None
    domain = served.decode() if served is not None else domain_of(public_url)
    # Everything is made first, then written in one transaction with the
    # record that says it is done: a stop part way (Ctrl-C during the first
    # `svc serve --bootstrap`) left an organization, a project and an owner
    # without the record, and every later bootstrap failed on the owner.
    org = _new_org("My organization", Plan.GROWTH, random, now_ms)
    password = new_password(random)
    email = OWNER_EMAIL
    user = await trio.to_thread.run_sync(_new_user, email, password, random, now_ms)
    member = Membership(org_id=org.id, user_id=user.id, role=Role.OWNER, created_at_ms=now_ms)
    project, keys, ops = _project_ops(store, org, "My app", random, now_ms,
                                      default_domain=domain)
    record = cbor2.dumps({"org_id": org.id, "project_id": project.id, "email": email})
    meta = store.db(b"meta")

    def first_time(txn: lmdb.Transaction) -> bool:
        if txn.get(b"bootstrap", db=meta) is not None:
            return False  # another process bootstrapped meanwhile: report theirs
        in_one([store.create_org_op(org), store.create_user_op(user),
                store.set_member_op(member), *ops])(txn)
        txn.put(b"bootstrap", record, db=meta)
        return True

    if not await store.write(first_time):
        return await bootstrap(store, public_url, random, now_ms)
    return {"created": True, "organizationId": org.id, "projectId": project.id,
            "domain": domain, "customDomains": [], "keys": keys,
            "owner": {"email": email, "password": password}}


LINKS_LOOKED_AT = 100  # per mode, newest first, for a project without a recorded domain
SERVED_DOMAIN = "served_domain"  # meta: the default link domain the last ``svc serve`` served


def link_domains(store: LmdbStore, project_id: str) -> tuple[str | None, list[str]]:
    """The project's link domains as stored: its default domain and its
    custom domains.

    The default domain is the one recorded with the project: at bootstrap,
    then by each ``svc serve`` that serves another (:func:`record_served_domain`).
    A project bootstrapped before that was recorded has its newest link on
    a domain that is not one of its custom domains tell it (links are made
    on the serving default domain unless they name a custom one); None when
    none of its ``LINKS_LOOKED_AT`` newest links of either mode is."""
    project = store.get_project(project_id)
    links = LinksStore(store)
    custom = links.domains_of(project_id)
    if project is not None and project.default_domain is not None:
        return project.default_domain, custom
    newest = [link for mode in ("live", "test")
              for link in links.list(project_id, mode, limit=LINKS_LOOKED_AT).links
              if link.domain not in custom]
    found = max(newest, key=lambda link: link.created_at_ms, default=None)
    return (found.domain if found is not None else None), custom


async def record_served_domain(store: LmdbStore, public_url: str) -> str | None:
    """Record the default link domain the service serves (``public_url``'s
    host), at start: in the data dir (``SERVED_DOMAIN``, for a ``svc
    bootstrap`` run beside a service started on an empty one) and with the
    bootstrap project. ``svc serve --bootstrap``
    prints it, and ``svc bootstrap`` run apart from the service reports the
    domain the service makes links on, not one it served before.

    Returns the domain the project had before (as :func:`link_domains` tells
    it) when it is another one and links were made on it: those links keep
    their short URLs, which no longer answer (the redirector looks a slug up
    on the default domain or a custom one). None otherwise, and on a data
    dir without a bootstrap project."""
    served = domain_of(public_url)
    await store.put_meta(SERVED_DOMAIN, served.encode())  # for a bootstrap while serving
    existing = store.meta("bootstrap")
    if existing is None:
        return None
    project_id = cbor2.loads(existing)["project_id"]
    project = store.get_project(project_id)
    if project is None or project.default_domain == served:
        return None
    before, _ = link_domains(store, project_id)
    await store.set_project_default_domain(project_id, served)
    if before is None or before == served or not LinksStore(store).any_on(before):
        return None
    return before


def projects_with_probabilistic_matching(store: LmdbStore) -> list[str]:
    """The IDs of the projects with ``probabilisticMatching`` on (either mode:
    the settings are shared), for the start's check of a country source."""
    return [p.id for org in store.all_orgs() for p in store.list_projects(org.id)
            if store.get_settings(p.id).probabilistic_matching]
