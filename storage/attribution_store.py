"""Clicks, tokens, the probabilistic window, installs, opens and handoffs.

Each write is one atomic op run by the single writer: it reads what it needs
inside the write transaction, calls the pure decision, and writes the outcome
(records, analytics counters and the webhook outbox) in the same commit. Since
the writer runs ops one after another, a token is consumed at most once and
"newest pending handoff wins" holds however many requests race; the
ProjectActor submits these ops in order for its project.
"""

from __future__ import annotations

import attrs
import lmdb

from storage import counters, layout
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore
from storage.writer import Op
from svc_engine.attribution import (
    ClickWindowEntry,
    LaunchFacts,
    Matched,
    Token,
    TokenState,
    Unattributed,
    decide_first_launch,
    token_state,
)
from svc_engine.clicks import Click
from svc_engine.errors import (
    InstallIdConflict,
    InstallNotRegistered,
    NotFound,
    ValidationError,
)
from svc_engine.event_payloads import install_data, open_data
from svc_engine.events import click_keys, install_keys, open_keys
from svc_engine.handoffs import Handoff, pick_handoff
from svc_engine.installs import Confidence, Install, InstallAttribution, Method
from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.outbox import EventType, OutboxEvent
from svc_engine.settings import DeferredSettings
from svc_engine.store import IdemWrite
from svc_engine.webhook_envelope import click_data

WINDOW_KEEP_MS = 360 * 60_000  # the longest window; hashes go with their entries (< 7 h)


@attrs.frozen
class LaunchResult:
    install: Install
    link: Link | None
    decision: Matched | Unattributed | None  # None: not a first launch
    created: bool


@attrs.frozen
class OpenResult:
    link: Link
    method: Method
    is_deferred: bool


@attrs.frozen
class ClaimResult:
    link: Link | None
    cleared: int


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
            b"clicks", b"click_window", b"click_window_by_time", b"tokens", b"tokens_by_time",
            b"installs", b"installs_by_time", b"install_decisions", b"opens", b"handoffs",
            b"handoffs_by_time", b"counters", b"links")}

    # -- reads ------------------------------------------------------------------

    def get_install(self, project_id: str, mode: str, install_id: str) -> Install | None:
        with self.store.read() as txn:
            raw = txn.get(_install_key(project_id, mode, install_id), db=self._db[b"installs"])
        return decode(Install, bytes(raw)) if raw is not None else None

    def get_token(self, token: str) -> Token | None:
        with self.store.read() as txn:
            raw = txn.get(token.encode(), db=self._db[b"tokens"])
        return decode(Token, bytes(raw)) if raw is not None else None

    def window(self, project_id: str, mode: str, since_ms: int) -> list[ClickWindowEntry]:
        with self.store.read() as txn:
            return self._window(txn, project_id, mode, since_ms)

    def decision(self, project_id: str, mode: str, install_id: str) -> DecisionRecord | None:
        with self.store.read() as txn:
            raw = txn.get(_install_key(project_id, mode, install_id),
                          db=self._db[b"install_decisions"])
        return decode(DecisionRecord, bytes(raw)) if raw is not None else None

    def recent_clicks(self, project_id: str, mode: str, limit: int = 50) -> list[Click]:
        rows = self.store.scan(b"clicks", layout.scope(project_id, mode), reverse=True,
                               limit=limit)
        return [decode(Click, v) for _, v in rows]

    def pending_handoffs(self, project_id: str, mode: str, user_hash: bytes) -> list[Handoff]:
        rows = self.store.scan(b"handoffs", layout.scope(project_id, mode) + user_hash)
        return [decode(Handoff, v) for _, v in rows]

    # -- the redirect's write -----------------------------------------------------

    def click_op(self, click: Click, link: Link, *, window: ClickWindowEntry | None,
                 token: Token | None) -> Op[None]:
        """The op recording a click (with its token and window entry, if any)."""
        db = self._db

        def op(txn: lmdb.Transaction) -> None:
            scope = layout.scope(click.project_id, click.mode.value)
            at = layout.ms(click.at_ms)
            cid = layout.uid(click.id)
            txn.put(scope + at + cid, encode(click), db=db[b"clicks"])
            counters.increment(txn, db[b"counters"], click.project_id, click.mode.value,
                               click_keys(link_id=click.link_id, at_ms=click.at_ms,
                                          platform=click.platform, country=click.country,
                                          referrer_host=click.referrer_host))
            if window is not None:
                txn.put(scope + at + cid, encode(window), db=db[b"click_window"])
                txn.put(at + scope + cid, b"", db=db[b"click_window_by_time"])
            if token is not None:
                self._put_token(txn, token)
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

    def _put_token(self, txn: lmdb.Transaction, token: Token) -> None:
        txn.put(token.token.encode(), encode(token), db=self._db[b"tokens"])
        txn.put(layout.ms(token.expires_at_ms) + token.token.encode(), b"",
                db=self._db[b"tokens_by_time"])

    # -- the launch report ----------------------------------------------------------

    def first_launch_op(self, *, project_id: str, mode: Mode, install: Install,
                        is_first_launch: bool, launch: LaunchFacts,
                        settings: DeferredSettings, net_hash: bytes | None, now_ms: int,
                        event_id: str, idem: IdemWrite | None) -> Op[LaunchResult]:
        db = self._db

        def op(txn: lmdb.Transaction) -> LaunchResult:
            key = _install_key(project_id, mode.value, install.install_id)
            raw = txn.get(key, db=db[b"installs"])
            if raw is not None:
                existing = decode(Install, bytes(raw))
                if is_first_launch:
                    raise InstallIdConflict(
                        "this install ID already reported its first launch; "
                        "create a fresh install ID")
                result = LaunchResult(existing, None, None, created=False)
                self.store.record_response(txn, idem, result)
                return result
            decision: Matched | Unattributed | None = None
            link: Link | None = None
            new = install
            if is_first_launch:
                decision = self._decide(txn, project_id, mode, launch, settings, net_hash,
                                        now_ms)
                if isinstance(decision, Matched):
                    link = self._link(txn, decision.link_id)
                    if link is None:  # deleted since the tap: nothing to deliver
                        decision = Unattributed(trials=decision.trials)
                    else:
                        self._consume(txn, project_id, mode.value, decision)
                        new = attrs.evolve(install, attribution=decision.attribution)
                txn.put(layout.scope(project_id, mode.value) + layout.uid(install.install_id),
                        encode(DecisionRecord.of(decision, now_ms)),
                        db=db[b"install_decisions"])
                self._count_install(txn, new, event_id, now_ms)
            txn.put(key, encode(new), db=db[b"installs"])
            txn.put(layout.scope(project_id, mode.value) + layout.ms(new.created_at_ms)
                    + layout.uid(new.install_id), b"", db=db[b"installs_by_time"])
            result = LaunchResult(new, link, decision, created=True)
            self.store.record_response(txn, idem, result)
            return result

        return op

    def _decide(self, txn: lmdb.Transaction, project_id: str, mode: Mode, launch: LaunchFacts,
                settings: DeferredSettings, net_hash: bytes | None,
                now_ms: int) -> Matched | Unattributed:
        token = None
        if launch.referrer_token is not None:
            raw = txn.get(launch.referrer_token.encode(), db=self._db[b"tokens"])
            token = decode(Token, bytes(raw)) if raw is not None else None
        window: list[ClickWindowEntry] = []
        if launch.platform == "ios" and settings.probabilistic_matching:
            window = self._window(txn, project_id, mode.value, now_ms - settings.window_ms)
        return decide_first_launch(launch, token=token, window=window, settings=settings,
                                   net_hash=net_hash, now_ms=now_ms)

    def _consume(self, txn: lmdb.Transaction, project_id: str, mode: str,
                 decision: Matched) -> None:
        db = self._db
        if decision.consume_token is not None:
            raw = txn.get(decision.consume_token.encode(), db=db[b"tokens"])
            if raw is not None:
                txn.put(decision.consume_token.encode(),
                        encode(decode(Token, bytes(raw)).consumed()), db=db[b"tokens"])
        consumed = set(decision.consume_click_ids)
        hashes = set(decision.delete_net_hashes)
        if not consumed and not hashes:
            return
        scope = layout.scope(project_id, mode)
        for k, v in self.store.scan_in(txn, b"click_window", scope):
            entry = decode(ClickWindowEntry, v)
            if entry.click_id in consumed:
                txn.delete(k, db=db[b"click_window"])
                txn.delete(k[17:25] + scope + k[25:], db=db[b"click_window_by_time"])
            elif entry.net_hash is not None and entry.net_hash in hashes:
                txn.put(k, encode(attrs.evolve(entry, net_hash=None)), db=db[b"click_window"])

    def _count_install(self, txn: lmdb.Transaction, install: Install, event_id: str,
                       now_ms: int) -> None:
        a = install.attribution
        counters.increment(txn, self._db[b"counters"], install.project_id, install.mode.value,
                           install_keys(link_id=a.link_id if a else None, at_ms=now_ms,
                                        platform=install.platform,
                                        confidence=install.confidence.value,
                                        method=a.method.value if a else None))
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
            raw = txn.get(_install_key(project_id, mode.value, install_id),
                          db=self._db[b"installs"])
            platform = decode(Install, bytes(raw)).platform if raw else (platform_hint or "other")
            if landing:
                method = Method.LANDING_PAGE
            else:
                method = Method.UNIVERSAL_LINK if platform == "ios" else Method.APP_LINK
            self._record_open(txn, project_id, mode, link, install_id, platform, method,
                              landing, now_ms, open_id)
            if landing:
                self._upgrade(txn, project_id, mode.value, install_id,
                              InstallAttribution(link.id, Confidence.DETERMINISTIC, method),
                              now_ms)
            result = OpenResult(link, method, landing)
            self.store.record_response(txn, idem, result)
            return result

        return op

    def _record_open(self, txn: lmdb.Transaction, project_id: str, mode: Mode, link: Link,
                     install_id: str, platform: str, method: Method, is_deferred: bool,
                     now_ms: int, open_id: str) -> None:
        rec = OpenRecord(open_id, link.id, install_id, method.value, platform, now_ms)
        txn.put(layout.scope(project_id, mode.value) + layout.ms(now_ms) + layout.uid(open_id),
                encode(rec), db=self._db[b"opens"])
        counters.increment(txn, self._db[b"counters"], project_id, mode.value,
                           open_keys(link_id=link.id, at_ms=now_ms, platform=platform,
                                     method=method.value))
        self.store.append_outbox(txn, OutboxEvent(
            id=open_id, type=EventType.OPEN, project_id=project_id, mode=mode.value,
            created_at_ms=now_ms,
            data=open_data(link_id=link.id, url=link.url(public_url=self.public_url),
                           platform=platform, method=method.value, is_deferred=is_deferred,
                           install_id=install_id, at_ms=now_ms)))

    def _upgrade(self, txn: lmdb.Transaction, project_id: str, mode: str, install_id: str,
                 offered: InstallAttribution, now_ms: int) -> None:
        key = _install_key(project_id, mode, install_id)
        raw = txn.get(key, db=self._db[b"installs"])
        if raw is None:
            return
        install = decode(Install, bytes(raw))
        upgraded = install.with_upgrade(offered, now_ms)
        if upgraded is not install:
            txn.put(key, encode(upgraded), db=self._db[b"installs"])

    # -- handoffs ------------------------------------------------------------------------

    async def create_handoff(self, project_id: str, handoff: Handoff, idem: IdemWrite | None,
                             *, svc_token: str | None = None) -> Handoff:
        """Store a pending handoff. With ``svc_token`` (a web fallback redirect's
        token) the token is consumed and names the link."""

        def op(txn: lmdb.Transaction) -> Handoff:
            nonlocal handoff
            if svc_token is not None:
                raw = txn.get(svc_token.encode(), db=self._db[b"tokens"])
                token = decode(Token, bytes(raw)) if raw is not None else None
                if (token is None or token.mode is not handoff.mode
                        or token_state(token, handoff.created_at_ms) is not TokenState.VALID):
                    raise ValidationError("svcToken is unknown, already used or expired",
                                          field="svcToken")
                txn.put(svc_token.encode(), encode(token.consumed()), db=self._db[b"tokens"])
                handoff = attrs.evolve(handoff, link_id=token.link_id)
            if self._link(txn, handoff.link_id) is None:
                raise NotFound("the handoff's link does not exist")
            key = _handoff_key(project_id, handoff)
            txn.put(key, encode(handoff), db=self._db[b"handoffs"])
            txn.put(layout.ms(handoff.expires_at_ms) + key, b"", db=self._db[b"handoffs_by_time"])
            self.store.record_response(txn, idem, handoff)
            return handoff

        return await self.store.write(op)  # type: ignore[no-any-return]

    def claim_op(self, *, project_id: str, mode: Mode, user_hash: bytes, install_id: str,
                 now_ms: int, open_id: str,
                 idem: IdemWrite | None) -> Op[ClaimResult]:
        db = self._db

        def op(txn: lmdb.Transaction) -> ClaimResult:
            installed = txn.get(_install_key(project_id, mode.value, install_id),
                                db=db[b"installs"])
            if installed is None:
                raise InstallNotRegistered(
                    "the install has not reported a launch yet; call after initialize")
            prefix = layout.scope(project_id, mode.value) + user_hash
            rows = self.store.scan_in(txn, b"handoffs", prefix)
            pending = [decode(Handoff, v) for _, v in rows]
            winner, _ = pick_handoff(pending, now_ms)
            for k, v in rows:  # every pending handoff of the user is cleared
                txn.delete(k, db=db[b"handoffs"])
                txn.delete(layout.ms(decode(Handoff, v).expires_at_ms) + k,
                           db=db[b"handoffs_by_time"])
            link = self._link(txn, winner.link_id) if winner is not None else None
            if link is not None:
                platform = decode(Install, bytes(installed)).platform
                method = Method.AUTHENTICATED_HANDOFF
                self._record_open(txn, project_id, mode, link, install_id, platform, method,
                                  True, now_ms, open_id)
                self._upgrade(txn, project_id, mode.value, install_id,
                              InstallAttribution(link.id, Confidence.DETERMINISTIC, method),
                              now_ms)
            result = ClaimResult(link, len(rows))
            self.store.record_response(txn, idem, result)
            return result

        return op

    # -- expiry sweep ------------------------------------------------------------------

    async def sweep(self, now_ms: int, limit: int = 10_000) -> dict[str, int]:
        """Delete window entries (and so network hashes) older than the longest
        window, and tokens and handoffs past their expiry."""
        db = self._db

        def op(txn: lmdb.Transaction) -> dict[str, int]:
            done = {"window": 0, "tokens": 0, "handoffs": 0}
            for k in self._due(txn, b"click_window_by_time", now_ms - WINDOW_KEEP_MS, limit):
                txn.delete(k[8:25] + k[:8] + k[25:], db=db[b"click_window"])
                txn.delete(k, db=db[b"click_window_by_time"])
                done["window"] += 1
            for k in self._due(txn, b"tokens_by_time", now_ms + 1, limit):
                txn.delete(k[8:], db=db[b"tokens"])
                txn.delete(k, db=db[b"tokens_by_time"])
                done["tokens"] += 1
            for k in self._due(txn, b"handoffs_by_time", now_ms + 1, limit):
                txn.delete(k[8:], db=db[b"handoffs"])
                txn.delete(k, db=db[b"handoffs_by_time"])
                done["handoffs"] += 1
            return done

        return await self.store.write(op)  # type: ignore[no-any-return]

    def _due(self, txn: lmdb.Transaction, name: bytes, before_ms: int, limit: int) -> list[bytes]:
        out: list[bytes] = []
        for k in txn.cursor(db=self._db[name]).iternext(values=False):
            if len(out) >= limit or layout.from_ms(bytes(k)) >= before_ms:
                break
            out.append(bytes(k))
        return out

    # -- plumbing -----------------------------------------------------------------------

    def _window(self, txn: lmdb.Transaction, project_id: str, mode: str,
                since_ms: int) -> list[ClickWindowEntry]:
        scope = layout.scope(project_id, mode)
        cur = txn.cursor(db=self._db[b"click_window"])
        out = []
        ok = cur.set_range(scope + layout.ms(max(0, since_ms)))
        while ok:
            k = bytes(cur.key())
            if not k.startswith(scope):
                break
            out.append(decode(ClickWindowEntry, bytes(cur.value())))
            ok = cur.next()
        return out

    def _link(self, txn: lmdb.Transaction, link_id: str) -> Link | None:
        raw = txn.get(layout.uid(link_id), db=self._db[b"links"])
        link = decode(Link, bytes(raw)) if raw is not None else None
        return None if link is None or link.deleted else link


@attrs.frozen
class DecisionRecord:
    """How a first launch was judged: what the dashboard's debugger shows."""

    VERSION = 1
    at_ms: int
    matched: bool
    link_id: str | None
    method: str | None
    trials: list[dict[str, object]]

    @classmethod
    def from_map(cls, m: dict[str, object]) -> DecisionRecord:
        trials = m.get("trials")
        return cls(at_ms=int(m["at_ms"]), matched=bool(m["matched"]),  # type: ignore[call-overload]
                   link_id=m.get("link_id"), method=m.get("method"),  # type: ignore[arg-type]
                   trials=trials if isinstance(trials, list) else [])

    @classmethod
    def of(cls, decision: Matched | Unattributed, at_ms: int) -> DecisionRecord:
        matched = isinstance(decision, Matched)
        return cls(at_ms=at_ms, matched=matched,
                   link_id=decision.link_id if isinstance(decision, Matched) else None,
                   method=decision.method.value if isinstance(decision, Matched) else None,
                   trials=[t.to_json() for t in decision.trials])

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "at_ms": self.at_ms, "matched": self.matched,
                "link_id": self.link_id, "method": self.method, "trials": self.trials}


def _install_key(project_id: str, mode: str, install_id: str) -> bytes:
    return layout.scope(project_id, mode) + layout.uid(install_id)


def _handoff_key(project_id: str, h: Handoff) -> bytes:
    return (layout.scope(project_id, h.mode.value) + h.user_hash + layout.ms(h.created_at_ms)
            + layout.uid(h.id))
