"""Clicks, tokens, installs and opens; the probabilistic window
(storage/click_window_store.py) and handoffs (storage/handoffs_store.py) are
reached through it.

Each write is one atomic op run by the single writer: it reads what it needs
inside the write transaction, calls the pure decision, and writes the outcome
(records, analytics counters and the webhook outbox) in the same commit. Since
the writer runs ops one after another, a token is consumed at most once and
"newest pending handoff wins" holds however many requests race; the
ProjectActor submits these ops in order for its project.
"""

from __future__ import annotations

from typing import Any

import attrs
import lmdb

from storage import counters, install_rows, layout
from storage.click_window_store import ClickWindow
from storage.codec import decode, encode
from storage.handoffs_store import ClaimResult, HandoffsStore
from storage.install_rows import DecisionRecord, InstallRow
from storage.lmdb_store import LmdbStore
from storage.writer import Op
from svc_engine.attribution import (
    LANDING_OPEN_TTL_MS,
    ClickWindowEntry,
    LandingOpen,
    LaunchFacts,
    Matched,
    Token,
    Unattributed,
    decide_from_candidates,
    first_launch_again,
)
from svc_engine.clicks import Click
from svc_engine.errors import InstallIdConflict
from svc_engine.event_payloads import install_data, open_data
from svc_engine.events import click_keys, install_keys, open_keys
from svc_engine.handoffs import Handoff
from svc_engine.installs import Confidence, Install, InstallAttribution, Method
from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.settings import DeferredSettings
from svc_engine.store import IdemWrite
from svc_engine.tokens import VIA_STORE_REFERRER
from svc_engine.webhook_envelope import click_data

__all__ = ["AttributionStore", "ClaimResult", "DecisionRecord", "LaunchResult", "OpenRecord",
           "OpenResult"]


@attrs.frozen
class LaunchResult:
    install: Install
    link: Link | None
    decision: Matched | Unattributed | None  # None: not a first launch


@attrs.frozen
class OpenResult:
    link: Link
    method: Method
    is_deferred: bool


@attrs.frozen
class OpenRecord:
    VERSION = 1
    id: str
    link_id: str
    install_id: str
    method: str
    platform: str
    at_ms: int

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "id": self.id, "link_id": self.link_id,
                "install_id": self.install_id, "method": self.method,
                "platform": self.platform, "at_ms": self.at_ms}

    @classmethod
    def from_map(cls, m: dict[str, object]) -> OpenRecord:
        return cls(id=str(m["id"]), link_id=str(m["link_id"]), install_id=str(m["install_id"]),
                   method=str(m["method"]), platform=str(m["platform"]),
                   at_ms=int(m["at_ms"]))  # type: ignore[call-overload]


class AttributionStore:
    def __init__(self, store: LmdbStore, public_url: str) -> None:
        self.store = store
        self.public_url = public_url
        self._db = {name: store.db(name) for name in (
            b"clicks", b"tokens", b"tokens_by_time", b"installs", b"installs_by_time",
            b"opens", b"counters", b"links", b"landing_opens")}
        self.click_window = ClickWindow(store)
        self.handoffs = HandoffsStore(store, self)

    # -- reads ------------------------------------------------------------------

    def get_install(self, project_id: str, mode: str, install_id: str) -> Install | None:
        with self.store.read() as txn:
            row = self._row(txn, install_rows.index_key(project_id, mode, install_id))
        return row.install if row is not None else None

    def get_token(self, token: str) -> Token | None:
        with self.store.read() as txn:
            raw = txn.get(token.encode(), db=self._db[b"tokens"])
        return decode(Token, bytes(raw)) if raw is not None else None

    def window(self, project_id: str, mode: str, since_ms: int) -> list[ClickWindowEntry]:
        with self.store.read() as txn:
            return self.click_window.entries(txn, project_id, mode, since_ms)

    def newest_in_window(self, project_id: str, mode: str, since_ms: int,
                         limit: int) -> list[ClickWindowEntry]:
        with self.store.read() as txn:
            return self.click_window.newest(txn, project_id, mode, since_ms, limit)

    def decision(self, project_id: str, mode: str, install_id: str) -> DecisionRecord | None:
        with self.store.read() as txn:
            row = self._row(txn, install_rows.index_key(project_id, mode, install_id))
        return row.decision if row is not None else None

    def _row(self, txn: lmdb.Transaction, key: bytes) -> InstallRow | None:
        return install_rows.get(txn, self._db[b"installs"], self._db[b"installs_by_time"], key)

    def recent_clicks(self, project_id: str, mode: str, limit: int = 50) -> list[Click]:
        rows = self.store.scan(b"clicks", layout.scope(project_id, mode), reverse=True,
                               limit=limit)
        return [decode(Click, v) for _, v in rows]

    def pending_handoffs(self, project_id: str, mode: str, user_hash: bytes) -> list[Handoff]:
        return self.handoffs.pending(project_id, mode, user_hash)

    # -- the redirect's write -----------------------------------------------------

    def click_op(self, click: Click, link: Link, *, window: ClickWindowEntry | None,
                 token: Token | None) -> Op[None]:
        """The op recording a click (with its token and window entry, if any).

        Keys and values are made here, in the request's thread; the op only
        stores them. A lazy click is committed while the next requests are
        served, and the writer holds the GIL for as long as its ops run Python
        (bench/README.md, session 7)."""
        db = self._db
        scope = layout.scope(click.project_id, click.mode.value)
        puts = [(scope + layout.ms(click.at_ms) + layout.uid(click.id), encode(click),
                 db[b"clicks"])]
        if window is not None:
            puts += self.click_window.puts(click.project_id, window)
        if token is not None:
            puts += self._token_puts(token)
        counted = counters.keys_of(scope, click_keys(
            link_id=click.link_id, at_ms=click.at_ms, platform=click.platform,
            country=click.country, referrer_host=click.referrer_host))
        counter_db = db[b"counters"]

        def op(txn: lmdb.Transaction) -> None:
            for key, value, into in puts:
                txn.put(key, value, db=into)
            counters.add_to(txn, counter_db, counted, 1)
            if self.store.wants_webhooks(txn, click.project_id, click.mode.value):
                self.store.append_outbox(txn, OutboxEvent(
                    id=click.id, type=EventType.CLICK, project_id=click.project_id,
                    mode=click.mode.value, created_at_ms=click.at_ms,
                    data=click_data(link_id=link.id, url=link.url(public_url=self.public_url),
                                    domain=link.domain, slug=link.slug,
                                    campaign=link.campaign, channel=link.channel,
                                    platform=click.platform, country=click.country,
                                    referrer_host=click.referrer_host,
                                    clicked_at_ms=click.at_ms)))

        return op

    def _token_puts(self, token: Token) -> list[tuple[bytes, bytes, Any]]:
        return [(token.token.encode(), encode(token), self._db[b"tokens"]),
                (layout.ms(token.expires_at_ms) + token.token.encode(), b"",
                 self._db[b"tokens_by_time"])]

    # -- the launch report ----------------------------------------------------------

    def first_launch_op(self, *, project_id: str, mode: Mode, install: Install,
                        is_first_launch: bool, launch: LaunchFacts,
                        settings: DeferredSettings, net_hashes: tuple[bytes, ...],
                        now_ms: int, event_id: str, idem: IdemWrite | None
                        ) -> Op[LaunchResult]:
        db = self._db

        def op(txn: lmdb.Transaction) -> LaunchResult:
            stored = self._row(txn, install_rows.index_key(project_id, mode.value,
                                                           install.install_id))
            this = install
            if stored is not None and is_first_launch and stored.decision is None:
                # Registered by a later launch's report, which came before this
                # retry of the failed first one: no first launch was judged, so
                # this one is, not refused as a second. The install is counted
                # now, so its row moves to now: at the registration's time it
                # was exported on a day whose summary counted no install.
                key = install_rows.index_key(project_id, mode.value, install.install_id)
                txn.delete(install_rows.row_key(key, layout.ms(stored.install.created_at_ms)),
                           db=db[b"installs_by_time"])
                stored = None
            if stored is not None:
                existing = stored.install
                if is_first_launch:
                    if idem is None or existing.first_idem_key != idem.key:
                        raise InstallIdConflict(
                            "this install ID already reported its first launch; "
                            "create a fresh install ID")
                    result = self._first_launch_again(txn, stored)
                else:
                    result = LaunchResult(existing, None, None)
                self.store.record_response(txn, idem, result)
                return result
            decision: Matched | Unattributed | None = None
            link: Link | None = None
            new = this
            if is_first_launch:
                found = self.click_window.candidates(txn, project_id, launch, settings,
                                                     net_hashes, now_ms)
                token = self.project_token(txn, launch.referrer_token, project_id,
                                           via=VIA_STORE_REFERRER)
                landing = self._take_landing_open(txn, project_id, mode, this.install_id)
                decision = decide_from_candidates(
                    launch, token=token,
                    network=found.network, cohort=found.cohort, settings=settings,
                    net_hashes=net_hashes, now_ms=now_ms, landing=landing)
                if isinstance(decision, Matched):
                    link = self.live_link(txn, decision.link_id)
                    if link is None:  # deleted since the tap: nothing to deliver
                        decision = Unattributed(trials=decision.trials)
                    else:
                        if token is not None and decision.consume_token == token.token:
                            txn.put(token.token.encode(), encode(token.consumed()),
                                    db=db[b"tokens"])
                        self.click_window.consume(txn, project_id, mode.value, decision, found)
                        new = attrs.evolve(this, attribution=decision.attribution)
                self._count_install(txn, new, event_id, now_ms)
            # the install's time row holds its first launch's decision: no tree of its own
            judged = DecisionRecord.of(decision, now_ms) if decision is not None else None
            install_rows.put(txn, db[b"installs"], db[b"installs_by_time"],
                             InstallRow(new, judged))
            result = LaunchResult(new, link, decision)
            self.store.record_response(txn, idem, result)
            return result

        return op

    def _take_landing_open(self, txn: lmdb.Transaction, project_id: str, mode: Mode,
                           install_id: str) -> LandingOpen | None:
        """The install's 'Continue in app' open made before its first launch,
        if any, removed: the launch judges it once."""
        key = _landing_key(project_id, mode, install_id)
        db = self._db[b"landing_opens"]
        raw = txn.get(key, db=db)
        if raw is None:
            return None
        txn.delete(key, db=db)
        raw = bytes(raw)
        return LandingOpen(link_id=layout.from_uid(raw[:16]), at_ms=layout.from_ms(raw[16:24]))

    def _first_launch_again(self, txn: lmdb.Transaction, row: InstallRow) -> LaunchResult:
        """The answer to a first launch's retry under its own Idempotency-Key
        after the stored answer was swept: the link it was given then (as the
        link is now; none if deleted since), nothing counted or consumed again."""
        judged = row.decision
        decision = (first_launch_again(judged.link_id, judged.method) if judged is not None
                    else Unattributed())
        link = self.live_link(txn, decision.link_id) if isinstance(decision, Matched) else None
        if not isinstance(decision, Matched) or link is None:
            return LaunchResult(row.install, None, None)
        install = attrs.evolve(row.install, attribution=decision.attribution)
        return LaunchResult(install, link, decision)

    def project_token(self, txn: lmdb.Transaction, text: str | None,
                      project_id: str, *, via: str) -> Token | None:
        """The stored token ``text``, when a link of ``project_id`` issued it
        for the flow that reads tokens put ``via`` (``Token.taken_by``).

        Tokens are keyed by their text alone, and a token names its link, not
        its project: another project's token is unknown here (None), so a
        project can neither take another's link nor use up its token. The
        link is read whether or not it was deleted since (it still names its
        project)."""
        raw = txn.get(text.encode(), db=self._db[b"tokens"]) if text is not None else None
        if raw is None:
            return None
        token = decode(Token, bytes(raw))
        if not token.taken_by(via):
            return None
        link = txn.get(layout.uid(token.link_id), db=self._db[b"links"])
        if link is None or self.store.cache.decode(Link, bytes(link)).project_id != project_id:
            return None
        return token

    def _count_install(self, txn: lmdb.Transaction, install: Install, event_id: str,
                       now_ms: int) -> None:
        a = install.attribution
        counters.increment(txn, self._db[b"counters"], install.project_id, install.mode.value,
                           install_keys(link_id=a.link_id if a else None, at_ms=now_ms,
                                        platform=install.platform,
                                        confidence=install.confidence.value,
                                        method=a.method.value if a else None))
        if not self.store.wants_webhooks(txn, install.project_id, install.mode.value):
            return  # no endpoint: build no event (its data costs more than the check)
        self.store.append_outbox(txn, OutboxEvent(
            id=event_id, type=EventType.INSTALL, project_id=install.project_id,
            mode=install.mode.value, created_at_ms=now_ms,
            data=install_data(install_id=install.install_id, platform=install.platform,
                              link_id=a.link_id if a else None,
                              confidence=install.confidence.value,
                              method=a.method.value if a else None, at_ms=now_ms)))

    # -- opens (resolve) ----------------------------------------------------------------

    def open_op(self, *, project_id: str, mode: Mode, link: Link, install_id: str,
                platform_hint: str | None, landing: bool, now_ms: int, open_id: str,
                idem: IdemWrite | None) -> Op[OpenResult]:
        """Record an open of ``link`` in the app. The method follows the platform
        (``universal_link`` on iOS, ``app_link`` elsewhere) unless the open came
        from the 'Continue in app' page (``landing_page``, deferred), which also
        upgrades an unattributed install."""

        def op(txn: lmdb.Transaction) -> OpenResult:
            row = self._row(txn, install_rows.index_key(project_id, mode.value, install_id))
            platform = row.install.platform if row is not None else (platform_hint or "other")
            if landing:
                method = Method.LANDING_PAGE
            else:
                method = Method.UNIVERSAL_LINK if platform == "ios" else Method.APP_LINK
            self.record_open(txn, project_id, mode, link, install_id, platform, method,
                              landing, now_ms, open_id)
            if landing and row is not None:
                install_rows.upgrade(txn, self._db[b"installs_by_time"], row,
                                     InstallAttribution(link.id, Confidence.DETERMINISTIC,
                                                        method), now_ms)
            elif landing:  # before the launch report (the two race): it will judge it
                txn.put(_landing_key(project_id, mode, install_id),
                        layout.uid(link.id) + layout.ms(now_ms), db=self._db[b"landing_opens"])
            result = OpenResult(link, method, landing)
            self.store.record_response(txn, idem, result)
            return result

        return op

    def record_open(self, txn: lmdb.Transaction, project_id: str, mode: Mode, link: Link,
                     install_id: str, platform: str, method: Method, is_deferred: bool,
                     now_ms: int, open_id: str) -> None:
        rec = OpenRecord(open_id, link.id, install_id, method.value, platform, now_ms)
        txn.put(layout.scope(project_id, mode.value) + layout.ms(now_ms) + layout.uid(open_id),
                encode(rec), db=self._db[b"opens"])
        counters.increment(txn, self._db[b"counters"], project_id, mode.value,
                           open_keys(link_id=link.id, at_ms=now_ms, platform=platform,
                                     method=method.value))
        if not self.store.wants_webhooks(txn, project_id, mode.value):
            return
        self.store.append_outbox(txn, OutboxEvent(
            id=open_id, type=EventType.OPEN, project_id=project_id, mode=mode.value,
            created_at_ms=now_ms,
            data=open_data(link_id=link.id, url=link.url(public_url=self.public_url),
                           platform=platform, method=method.value, is_deferred=is_deferred,
                           install_id=install_id, at_ms=now_ms)))

    # -- handoffs (storage/handoffs_store.py) -----------------------------------------

    async def create_handoff(self, project_id: str, handoff: Handoff, idem: IdemWrite | None,
                             *, svc_token: str | None = None) -> Handoff:
        """Store a pending handoff. With ``svc_token`` (a web fallback redirect's
        token) the token is consumed and names the link."""
        return await self.handoffs.create(project_id, handoff, idem, svc_token=svc_token)

    def claim_op(self, *, project_id: str, mode: Mode, user_hash: bytes, install_id: str,
                 now_ms: int, open_id: str,
                 idem: IdemWrite | None) -> Op[ClaimResult]:
        return self.handoffs.claim_op(project_id=project_id, mode=mode, user_hash=user_hash,
                                      install_id=install_id, now_ms=now_ms, open_id=open_id,
                                      idem=idem)

    # -- expiry sweep ------------------------------------------------------------------

    async def sweep(self, now_ms: int, limit: int = 10_000,
                    latest_ms: int | None = None) -> dict[str, int]:
        """Delete window entries (and so network hashes) older than the longest
        window, tokens and handoffs past their expiry, and 'Continue in app'
        opens whose install's first launch did not come in 7 days (a read of
        them all: there are only as many as such opens of unknown installs)."""
        tokens, by_time = self._db[b"tokens"], self._db[b"tokens_by_time"]
        landing = self._db[b"landing_opens"]

        def op(txn: lmdb.Transaction) -> dict[str, int]:
            due: list[bytes] = []
            for k in txn.cursor(db=by_time).iternext(values=False):
                if len(due) >= limit or layout.from_ms(bytes(k)) > now_ms:
                    break
                due.append(bytes(k))
            for k in due:
                txn.delete(k[8:], db=tokens)
                txn.delete(k, db=by_time)
            stale: list[bytes] = []
            for k, v in txn.cursor(db=landing).iternext():
                if len(stale) >= limit:
                    break
                if now_ms - layout.from_ms(bytes(v)[16:24]) > LANDING_OPEN_TTL_MS:
                    stale.append(bytes(k))
            for k in stale:
                txn.delete(k, db=landing)
            return {"window": self.click_window.sweep(txn, now_ms, limit, latest_ms),
                    "tokens": len(due),
                    "handoffs": self.handoffs.sweep(txn, now_ms, limit),
                    "landing_opens": len(stale)}

        return await self.store.write(op)  # type: ignore[no-any-return]

    # -- plumbing -----------------------------------------------------------------------

    def live_link(self, txn: lmdb.Transaction, link_id: str) -> Link | None:
        """The link, unless it does not exist or was deleted."""
        raw = txn.get(layout.uid(link_id), db=self._db[b"links"])
        link = self.store.cache.decode(Link, bytes(raw)) if raw is not None else None
        return None if link is None or link.deleted else link


def _landing_key(project_id: str, mode: Mode, install_id: str) -> bytes:
    return layout.scope(project_id, mode.value) + layout.uid(install_id)
