"""Key layout: ordered byte keys so range scans give sorted listings.

Identifiers (UUID strings) become their 16 raw bytes; times become 8-byte
big-endian milliseconds, so keys sort by time. A project-scoped key starts
with the project's 16 bytes.
"""

from __future__ import annotations

import functools
import hashlib
import uuid

# Named databases, opened once at startup. Adding one is a schema change only
# when existing data must move; a new empty database needs no migration.
DATABASES = (
    b"meta",             # name -> value (schema version, server secret, bootstrap ids)
    b"orgs",             # org id -> Organization
    b"projects",         # project id -> Project
    b"projects_by_org",  # org id | project id -> b""
    b"keys",             # sha256(key) -> ApiKey
    b"keys_by_project",  # project id | key id -> sha256(key)
    b"users",            # user id -> User
    b"users_by_email",   # email -> user id
    b"members",          # org id | user id -> Membership
    b"members_by_user",  # user id | org id -> b""
    b"settings",         # project id -> DeferredSettings
    b"deadlines",        # due ms | kind | ref -> Deadline
    b"idem",             # empty since schema 10 (moved to responses)
    b"idem_by_time",     # empty since schema 10 (moved to responses_by_time)
    b"outbox",           # created ms | project | mode | event id -> OutboxEvent (webhooks)
    b"sessions",         # sha256(session token) -> dashboard Session
    b"invites",          # sha256(invite token) -> Invite
    b"links",            # link id -> Link
    b"slugs",            # domain NUL slug -> link id
    b"links_by_project", # project | mode | created ms | seq | link id -> b""
    b"domains",          # custom domain -> project id
    b"domains_by_project",  # project id | custom domain -> b"" (schema 9)
    b"platforms",        # project id -> Platforms
    b"tokens",           # token -> Token (single-use svc_token)
    b"handoffs",         # project | mode | user hash | created ms | id -> Handoff
    b"handoffs_by_time",  # expires ms | handoff key -> b"" (expiry sweep)
    b"installs",         # project | mode | install id -> created ms (schema 11; was Install)
    b"install_decisions",  # empty since schema 5 (decisions moved to installs_by_time)
    b"installs_by_time",  # project | mode | created ms | install id -> InstallRow: the
                          # install and how its first launch was judged (schema 11;
                          # 5: the decision alone; storage/install_rows.py)
    b"clicks",           # project | mode | ms | click id -> Click
    b"click_window",     # project | mode | ms | click id -> ClickWindowEntry, without
                         # its net hash (schema 8); kept after a match until the sweep
    b"click_window_by_time",  # empty since schema 6 (the sweep reads click_window)
    b"click_window_by_cohort",  # project | mode | part(iOS major) | part(country) |
                                # quarter hour (ms) | link id | ms | click id -> net
                                # hash or b"", while the tap can be matched (schema 8;
                                # 7: -> b""; 3: ... | ms | click id -> link id)
    b"click_window_by_net",  # project | mode | part(net hash) | part(iOS major) | ms
                             # | click id -> link id (schema 3)
    b"tokens_by_time",   # expires ms | token -> b"" (expiry sweep)
    b"opens",            # project | mode | ms | open id -> Open
    b"events",           # project | mode | second | arrival | ms | event id -> event (v2;
                         #   storage/event_records.py has both versions)
    b"event_ids",        # project | mode | install id | sent ms | event id -> key middle
                         # (dedup; by sent ms since schema 4)
    b"counters",         # analytics counter key -> CBOR number or decimal string
    b"endpoints",        # project | mode | endpoint id -> Endpoint
    b"deliveries",       # delivery id -> Delivery
    b"deliveries_by_project",  # project | mode | created ms | delivery id -> endpoint id
    b"deliveries_by_endpoint",  # endpoint id | created ms | delivery id -> b""
    b"deliveries_by_time",  # created ms | delivery id -> project id
    b"deliveries_open",  # endpoint id | delivery id -> b"" (Queued, Sending, Retrying)
    b"webhook_events",  # project | mode | event id -> WebhookEvent (body, shared)
    b"responses",        # response_key(scope NUL idempotency key) -> created ms
                         # (schema 10)
    b"responses_by_time",  # created ms | response key -> StoredResponse (schema 10)
    b"landing_opens",    # project | mode | install id -> link id | ms: a 'Continue in
                         # app' open of an install whose first launch is not reported
                         # yet (svc_engine/attribution.py, flow 1b); new in session 33
    b"link_destinations",  # project id -> LinkDestinations (hosts links made with the
                           # publishable key may point at; none stored: any host);
                           # new in session 34, empty until set: no migration
)


MODES = {"test": b"t", "live": b"l"}
UID_CACHE = 1024


def mode_byte(mode: str) -> bytes:
    return MODES[mode]


def scope(project_id: str, mode: str) -> bytes:
    """The 17-byte prefix of a project's records in one mode."""
    return uid(project_id) + MODES[mode]


@functools.lru_cache(maxsize=UID_CACHE)
def uid(value: str) -> bytes:
    """``uuid.UUID(value).bytes``: 32 hex digits (hyphens anywhere) read by
    ``bytes.fromhex`` (0.2 µs), every other form by ``uuid.UUID`` (1.5 µs).
    Cached for the ids every request repeats (projects, keys, endpoints,
    popular links); the ids each request makes (clicks, installs,
    deliveries) pass through once, so the cache is small (~220 bytes an
    entry): at 65,536 entries it held ~14 MiB of ids seen once, which the
    soak (bench/soak.py) read as memory growing with the same keys."""
    digits = value.replace("-", "")
    if len(digits) == 32:
        try:
            raw = bytes.fromhex(digits)
        except ValueError:
            raw = b""
        if len(raw) == 16:
            return raw
    return uuid.UUID(value).bytes


def from_uid(raw: bytes | memoryview) -> str:
    """``str(uuid.UUID(bytes=raw))``, without building the UUID."""
    if len(raw) != 16:
        raise ValueError("a stored id is 16 bytes")
    h = bytes(raw).hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def ms(value: int) -> bytes:
    return value.to_bytes(8, "big")


def from_ms(raw: bytes) -> int:
    return int.from_bytes(raw[:8], "big")


def response_key(idem_key: bytes) -> bytes:
    """The 16-byte key of an idempotency record in ``responses``, from
    ``scope NUL Idempotency-Key`` (schema 10). Short and fixed: a client's
    key is random, so every record lands in a random leaf, and a short key
    keeps the tree shallow and its leaves many to a page."""
    return hashlib.blake2b(idem_key, digest_size=16).digest()


MAX_KEY = 511
"""The longest key LMDB stores (its default ``MDB_MAXKEYSIZE``)."""


def prefix_end(prefix: bytes) -> bytes:
    """The first key after every key that starts with ``prefix``. A prefix of
    0xFF bytes alone has none among LMDB's keys: the key one byte longer than
    the longest it stores stands for it."""
    b = bytearray(prefix)
    while b:
        if b[-1] < 0xFF:
            b[-1] += 1
            return bytes(b)
        b.pop()
    return b"\xff" * (MAX_KEY + 1)


def part(value: bytes | None) -> bytes:
    """One variable-length field of a key, self-delimiting (no value's part is a
    prefix of another's, so a prefix of parts selects exactly those values):
    None is ``00``; up to 255 bytes are ``01``, their length, the bytes; longer
    values are ``02`` and their SHA-256."""
    if value is None:
        return b"\x00"
    if len(value) <= 255:
        return b"\x01" + bytes((len(value),)) + value
    return b"\x02" + hashlib.sha256(value).digest()


def window_cohort_prefix(scope_key: bytes, os_major: int, country: str | None) -> bytes:
    """Where the click-window taps of one cohort (iOS major version, country)
    start in ``click_window_by_cohort``; each key goes on as
    :func:`window_cohort_key` says (schema 7)."""
    return (scope_key + part(str(os_major).encode())
            + part(country.encode() if country is not None else None))


WINDOW_BUCKET_MS = 15 * 60_000
"""The click window's cohort index groups taps by the quarter hour (the
shortest window) before the link: see storage/click_window_store.py."""


def window_cohort_key(cohort_prefix: bytes, link16: bytes, tail: bytes) -> bytes:
    """A tap's key in ``click_window_by_cohort``: its cohort's prefix, the start
    of its quarter hour, its link, then ``tail`` (its ms | click id)."""
    at_ms = int.from_bytes(tail[:8], "big")
    return cohort_prefix + ms(at_ms - at_ms % WINDOW_BUCKET_MS) + link16 + tail


def window_net_prefix(scope_key: bytes, net_hash: bytes, os_major: int | None = None) -> bytes:
    """Where the click-window taps of one network (and iOS major version, if
    given) start in ``click_window_by_net``; each key goes on with ms | click id."""
    prefix = scope_key + part(net_hash)
    return prefix if os_major is None else prefix + part(str(os_major).encode())
