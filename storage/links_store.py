"""Links, slugs, custom domains, platform settings and link destinations in LMDB.

The redirect's read is ``resolve(host, slug)``: one read transaction, two or
three gets (custom domain, slug, link), no mailbox. Writes are atomic ops;
link creation checks the slug and the organization's plan quota inside the
same transaction that stores the link, so neither can be raced past.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import attrs
import cbor2
import lmdb

from storage import layout
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore, prefix_keys
from svc_engine.destinations import LinkDestinations
from svc_engine.errors import InvalidDomain, LinkQuotaExceeded, NotFound, SlugTaken, ValidationError
from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.platforms import Platforms
from svc_engine.store import IdemWrite

S = TypeVar("S", Platforms, LinkDestinations)  # a project's setting record

_ORG_LINKS = b"org_links:"  # meta counter: live (not deleted) links per organization
LIST_SCAN_CAP = 5_000
"""Listing entries one page of ``list`` reads at most. A filter that matches
little (a search over a project of a million links) stops there and hands
back a cursor to go on from, instead of holding the event loop for the whole
listing (1.9 s for 100,000 links when every link was decoded)."""
_LOWER_TO_ASCII = ("\u0130".encode(), "\u212a".encode())
"""The only characters outside ASCII whose ``str.lower()`` holds ASCII (İ and
the Kelvin sign K): with neither in a record, an ASCII search matches its
text only if the record's bytes, ASCII-lowercased, hold the search."""
_COMBINING_DOT = "\u0307"
"""The one caseless character (``upper() == lower() ==`` itself) that another
character's ``lower()`` yields (İ's, after an ASCII i): see :func:`_kept`."""


def _slug_key(domain: str, slug: str) -> bytes:
    return domain.encode() + b"\x00" + slug.encode()


# A project's listing key is ``scope | created ms | seq | link id``: ``seq``
# (2 bytes, big-endian) numbers the links created in the same millisecond in
# the order the writer committed them, so "newest first" holds for a script
# that makes many links a millisecond. Keys written before the sequence
# existed (``scope | ms | link id``) still list, page and delete; against
# them, in the one millisecond an upgrade could share, the order is arbitrary.
_SEQ_MAX = 0xFFFF


def _listing_key(txn: lmdb.Transaction, db: lmdb._Database, at: bytes, lid: bytes) -> bytes:
    """The key for a new link created at ``at`` (``scope | ms``): one past
    the highest sequence of that millisecond."""
    for k in prefix_keys(txn, db, at, reverse=True):
        if len(k) == len(at) + 2 + 16:  # keys without a sequence are passed over
            seq = min(_SEQ_MAX, int.from_bytes(k[len(at):len(at) + 2], "big") + 1)
            return at + seq.to_bytes(2, "big") + lid
    return at + bytes(2) + lid


def _find_listing_key(txn: lmdb.Transaction, db: lmdb._Database, at: bytes,
                      lid: bytes) -> bytes | None:
    """The listing key of the link ``lid`` created at ``at``, with or without
    a sequence."""
    return next((k for k in prefix_keys(txn, db, at) if k.endswith(lid)), None)


@attrs.frozen
class LinkPage:
    links: list[Link]
    next_cursor: str | None
    partial: bool = False
    """The page stopped at ``LIST_SCAN_CAP`` entries read before it filled:
    ``next_cursor`` goes on with older links (a filtered page may then hold
    few links, or none)."""


class LinksStore:
    def __init__(self, store: LmdbStore) -> None:
        self.store = store
        self._links = store.db(b"links")
        self._slugs = store.db(b"slugs")
        self._by_project = store.db(b"links_by_project")
        self._domains = store.db(b"domains")
        self._domains_by_project = store.db(b"domains_by_project")
        self._platforms = store.db(b"platforms")
        self._destinations = store.db(b"link_destinations")
        self._meta = store.db(b"meta")

    # -- reads ----------------------------------------------------------------

    def get(self, link_id: str) -> Link | None:
        with self.store.read() as txn:
            raw = txn.get(layout.uid(link_id), db=self._links)
        return decode(Link, bytes(raw)) if raw is not None else None

    def shown(self, link_id: str, project_id: str, mode: Mode) -> Link | None:
        """The link as a page of ``project_id`` in ``mode`` may show it: None
        unless it is that project's and mode's and not deleted. Records name
        links as sent (an event's ``linkId`` may be any link, another
        organization's too): a page must not show a title it does not own."""
        link = self.get(link_id)
        if (link is None or link.deleted or link.project_id != project_id
                or link.mode is not mode):
            return None
        return link

    def by_slug(self, domain: str, slug: str) -> Link | None:
        """The redirect's read: one read transaction, two gets, cached decoding."""
        with self.store.read() as txn:
            link_id = txn.get(_slug_key(domain, slug), db=self._slugs)
            if link_id is None:
                return None
            raw = txn.get(bytes(link_id), db=self._links)
        return self.store.cache.decode(Link, bytes(raw)) if raw is not None else None

    def any_on(self, domain: str) -> bool:
        """Whether any link, of any project, was made on ``domain`` (deleted
        ones too: their slugs stay taken)."""
        return bool(self.store.scan(b"slugs", domain.encode() + b"\x00", limit=1))

    def domain_owner(self, domain: str) -> str | None:
        """The project that claimed ``domain``; None also for what no domain
        can be (empty, or past LMDB's key size: a Host header is the
        client's to write, and LMDB refuses such a key)."""
        key = domain.encode()
        if not key or len(key) > layout.MAX_KEY:
            return None
        with self.store.read() as txn:
            raw = txn.get(key, db=self._domains)
        return layout.from_uid(bytes(raw)) if raw is not None else None

    def domains_of(self, project_id: str) -> list[str]:
        """The project's custom domains, in order: one range of the index
        (schema 9), whatever the number of domains of other projects."""
        pid = layout.uid(project_id)
        return [k[len(pid):].decode() for k, _ in self.store.scan(b"domains_by_project", pid)]

    def platforms(self, project_id: str) -> Platforms:
        return self._setting(self._platforms, Platforms, project_id)

    def link_destinations(self, project_id: str) -> LinkDestinations:
        """The project's destination rules; a project that never set them
        (every project before session 34) has the empty list: any host."""
        return self._setting(self._destinations, LinkDestinations, project_id)

    def _setting(self, db: Any, cls: type[S], project_id: str) -> S:
        """A project's record of ``cls`` in ``db``; ``cls()`` when none is stored."""
        with self.store.read() as txn:
            raw = txn.get(layout.uid(project_id), db=db)
        return self.store.cache.decode(cls, bytes(raw)) if raw is not None else cls()

    def org_link_count(self, org_id: str) -> int:
        with self.store.read() as txn:
            raw = txn.get(_ORG_LINKS + layout.uid(org_id), db=self._meta)
        return int(cbor2.loads(bytes(raw))) if raw is not None else 0

    def list(self, project_id: str, mode: str, *, limit: int = 50, cursor: str | None = None,
             campaign: str | None = None, channel: str | None = None, tag: str | None = None,
             query: str | None = None) -> LinkPage:
        """Newest first, at most ``limit`` links, reading at most
        ``LIST_SCAN_CAP`` listing entries (``LinkPage.partial``). The cursor is
        the index key of the last entry read. A record that cannot match is
        skipped from its bytes, without decoding it (:func:`_may_match`)."""
        prefix = layout.scope(project_id, mode)
        start = bytes.fromhex(cursor) if cursor else None
        if start is not None and not start.startswith(prefix):
            raise ValidationError("invalid cursor", field="cursor")
        out: list[Link] = []
        last: bytes | None = None
        q = query.lower() if query else None
        needles = [x.encode() for x in (campaign, channel, tag) if x]
        q_runs = _search_runs(q)
        read = 0
        with self.store.read() as txn:
            cur = txn.cursor(db=self._by_project)
            ok = cur.set_range(start) if start is not None else cur.set_range(
                layout.prefix_end(prefix))
            ok = cur.prev() if ok else cur.last()
            while ok and len(out) < limit and read < LIST_SCAN_CAP:
                k = bytes(cur.key())
                if not k.startswith(prefix):
                    break
                read, last = read + 1, k
                raw = txn.get(k[-16:], db=self._links)
                body = bytes(raw) if raw is not None else None
                if body is not None and _may_match(body, needles, q_runs):
                    link = decode(Link, body)
                    if not link.deleted and _matches(link, campaign, channel, tag, q):
                        out.append(link)
                ok = cur.prev()
            more = ok and bytes(cur.key()).startswith(prefix)
        return LinkPage(out, last.hex() if (last is not None and more) else None,
                        partial=more and len(out) < limit)

    # -- writes ---------------------------------------------------------------

    async def create(self, link: Link, *, org_id: str, quota: int | None,
                     idem: IdemWrite | None) -> Link:
        def op(txn: lmdb.Transaction) -> Link:
            if txn.get(_slug_key(link.domain, link.slug), db=self._slugs) is not None:
                raise SlugTaken(f"the slug {link.slug!r} is taken on {link.domain}",
                                field="slug")
            counter = _ORG_LINKS + layout.uid(org_id)
            raw = txn.get(counter, db=self._meta)
            used = int(cbor2.loads(bytes(raw))) if raw is not None else 0
            if quota is not None and used >= quota:
                raise LinkQuotaExceeded(
                    f"the plan allows {quota} links; delete links or upgrade the plan")
            lid = layout.uid(link.id)
            txn.put(lid, encode(link), db=self._links)
            txn.put(_slug_key(link.domain, link.slug), lid, db=self._slugs)
            at = layout.scope(link.project_id, link.mode.value) + layout.ms(link.created_at_ms)
            txn.put(_listing_key(txn, self._by_project, at, lid), b"", db=self._by_project)
            txn.put(counter, cbor2.dumps(used + 1), db=self._meta)
            self.store.record_response(txn, idem, link)
            return link

        return await self.store.write(op)  # type: ignore[no-any-return]

    async def update(self, project_id: str, mode: str, link_id: str,
                     change: Callable[[Link], Link], idem: IdemWrite | None) -> Link:
        def op(txn: lmdb.Transaction) -> Link:
            old = self._owned(txn, project_id, mode, link_id)
            new = change(old)
            txn.put(layout.uid(link_id), encode(new), db=self._links)
            self.store.record_response(txn, idem, new)
            return new

        return await self.store.write(op)  # type: ignore[no-any-return]

    async def delete(self, project_id: str, mode: str, link_id: str, org_id: str, now_ms: int,
                     idem: IdemWrite | None) -> Link:
        """Soft delete: the link answers 404 and leaves listings; its slug stays
        reserved so an old printed link never starts pointing somewhere else."""

        def op(txn: lmdb.Transaction) -> Link:
            old = self._owned(txn, project_id, mode, link_id)
            new = attrs.evolve(old, deleted=True, updated_at_ms=now_ms)
            txn.put(layout.uid(link_id), encode(new), db=self._links)
            key = _find_listing_key(
                txn, self._by_project,
                layout.scope(project_id, mode) + layout.ms(old.created_at_ms),
                layout.uid(link_id))
            if key is not None:
                txn.delete(key, db=self._by_project)
            counter = _ORG_LINKS + layout.uid(org_id)
            raw = txn.get(counter, db=self._meta)
            used = int(cbor2.loads(bytes(raw))) if raw is not None else 1
            txn.put(counter, cbor2.dumps(max(0, used - 1)), db=self._meta)
            self.store.record_response(txn, idem, new)
            return new

        return await self.store.write(op)  # type: ignore[no-any-return]

    def _owned(self, txn: lmdb.Transaction, project_id: str, mode: str, link_id: str) -> Link:
        raw = txn.get(layout.uid(link_id), db=self._links)
        link = decode(Link, bytes(raw)) if raw is not None else None
        if (link is None or link.deleted or link.project_id != project_id
                or link.mode.value != mode):
            raise NotFound(f"no link {link_id}")
        return link

    async def add_domain(self, project_id: str, domain: str, reserved: set[str],
                         idem: IdemWrite | None = None) -> tuple[str, ...]:
        """Claim ``domain`` for the project; its custom domains after, read in
        the same transaction (the answer an Idempotency-Key replays)."""
        def op(txn: lmdb.Transaction) -> tuple[str, ...]:
            if domain in reserved:
                raise InvalidDomain(f"{domain} is the service's own domain")
            pid = layout.uid(project_id)
            if not txn.put(domain.encode(), pid, db=self._domains, overwrite=False):
                raise InvalidDomain(f"{domain} is already in use")
            txn.put(pid + domain.encode(), b"", db=self._domains_by_project)
            self._release_slugs(txn, domain, project_id)
            return self._recorded(txn, pid, idem)

        return await self.store.write(op)  # type: ignore[no-any-return]

    def _release_slugs(self, txn: lmdb.Transaction, domain: str, project_id: str) -> None:
        """A domain another project gave up: the slugs its links held there are
        free for the new owner (those links no longer answer on it)."""
        prefix = domain.encode() + b"\x00"
        cur = txn.cursor(db=self._slugs)
        ok = cur.set_range(prefix)
        while ok and bytes(cur.key()).startswith(prefix):
            raw = txn.get(bytes(cur.value()), db=self._links)
            if raw is not None and decode(Link, bytes(raw)).project_id != project_id:
                ok = cur.delete()  # moves to the next entry
            else:
                ok = cur.next()

    async def remove_domain(self, project_id: str, domain: str,
                            idem: IdemWrite | None = None) -> tuple[str, ...]:
        def op(txn: lmdb.Transaction) -> tuple[str, ...]:
            pid = layout.uid(project_id)
            raw = txn.get(domain.encode(), db=self._domains)
            if raw is None or bytes(raw) != pid:
                raise NotFound(f"no domain {domain} in this project")
            txn.delete(domain.encode(), db=self._domains)
            txn.delete(pid + domain.encode(), db=self._domains_by_project)
            return self._recorded(txn, pid, idem)

        return await self.store.write(op)  # type: ignore[no-any-return]

    def _recorded(self, txn: lmdb.Transaction, pid: bytes,
                  idem: IdemWrite | None) -> tuple[str, ...]:
        """The project's custom domains as this transaction sees them, recorded
        as the write's answer."""
        custom = tuple(k[len(pid):].decode()
                       for k in prefix_keys(txn, self._domains_by_project, pid))
        self.store.record_response(txn, idem, custom)
        return custom

    async def put_platforms(self, project_id: str, platforms: Platforms,
                            idem: IdemWrite | None) -> Platforms:
        return await self.patch_platforms(project_id, lambda _: platforms, idem)

    async def patch_platforms(self, project_id: str, patch: Callable[[Platforms], Platforms],
                              idem: IdemWrite | None) -> Platforms:
        return await self._patch_setting(self._platforms, Platforms, project_id, patch, idem)

    async def patch_link_destinations(
            self, project_id: str, patch: Callable[[LinkDestinations], LinkDestinations],
            idem: IdemWrite | None) -> LinkDestinations:
        return await self._patch_setting(self._destinations, LinkDestinations, project_id,
                                         patch, idem)

    async def _patch_setting(self, db: Any, cls: type[S], project_id: str,
                             patch: Callable[[S], S], idem: IdemWrite | None) -> S:
        """``patch`` applied to the project's stored record inside the write (a
        patch read outside it would undo another one committed between)."""
        def op(txn: lmdb.Transaction) -> S:
            key = layout.uid(project_id)
            raw = txn.get(key, db=db)
            record = patch(decode(cls, bytes(raw)) if raw is not None else cls())
            txn.put(key, encode(record), db=db)
            self.store.record_response(txn, idem, record)
            return record

        return await self.store.write(op)  # type: ignore[no-any-return]


def _search_runs(q: str | None) -> list[bytes]:
    """What of the lowercased search ``q`` :func:`_may_match` looks for in a
    record's bytes: the maximal runs of :func:`_kept` characters of each part
    between spaces, as UTF-8. ``_matches`` looks for ``q`` in the fields
    joined by single spaces, so a part without a space lies inside one
    field's lowercased text, and so does each run in it; that text holds the
    run only if the field's own text does, ASCII letters in either case
    (when the record holds none of ``_LOWER_TO_ASCII``). Nothing is looked
    for without a search, or for a part of cased non-ASCII letters only
    ("É" lowercases to "é", which the bytes do not show): every record of
    such a search is decoded (the listings read off the event loop)."""
    if not q:
        return []
    runs: list[bytes] = []
    for part in q.split(" "):
        run: list[str] = []
        for ch in part + " ":  # the space ends the last run
            if ch != " " and _kept(ch):
                run.append(ch)
            elif run:
                runs.append("".join(run).encode())
                run = []
    return list(dict.fromkeys(runs))  # each looked for once in every record


def _kept(ch: str) -> bool:
    """Whether a character of a lowercased search is in a record's text, as
    itself, wherever the lowercased text holds it: an ASCII character (only
    ASCII and ``_LOWER_TO_ASCII`` lowercase to ASCII, an ASCII letter to one
    character), or a caseless one (no other character lowercases to one,
    but the ``_COMBINING_DOT``; tests/test_links_listing.py checks both over
    all of Unicode)."""
    return ch.isascii() or (ch.lower() == ch == ch.upper() and ch != _COMBINING_DOT)


def _may_match(raw: bytes, needles: list[bytes], q_runs: list[bytes]) -> bool:
    """False only when the link stored as ``raw`` cannot match the filters:
    an exact campaign, channel or tag is text of the record, so its bytes are
    in ``raw``; so is each of the search's runs (:func:`_search_runs`),
    ASCII-lowercased, unless ``raw`` holds one of ``_LOWER_TO_ASCII``.
    Anything else is decided by ``_matches``."""
    if not all(n in raw for n in needles):
        return False
    if not q_runs or any(c in raw for c in _LOWER_TO_ASCII):
        return True
    low = raw.lower()
    return all(r in low for r in q_runs)


def _matches(link: Link, campaign: str | None, channel: str | None, tag: str | None,
             query: str | None) -> bool:
    if campaign is not None and link.campaign != campaign:
        return False
    if channel is not None and link.channel != channel:
        return False
    if tag is not None and tag not in link.tags:
        return False
    if query is not None:
        hay = " ".join(filter(None, (link.slug, link.path, link.title, link.campaign,
                                      link.channel, *link.tags))).lower()
        return query in hay
    return True
