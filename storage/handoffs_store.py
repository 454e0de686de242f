"""Authenticated handoffs in LMDB: create (optionally from a web fallback
``svc_token``), claim, expiry.

A pending handoff is ``handoffs`` (project | mode | user hash | created ms |
id -> ``Handoff``) plus ``handoffs_by_time`` (expires ms | that key) for the
sweep. Creating one reads the user's handoffs of the same millisecond inside
the write transaction and gives the new one the next ``seq``
(``next_seq``), so handoffs of one millisecond keep the order the writer
committed them in; the key is unchanged (within a millisecond it still sorts
by the random id), so reads order by ``creation_order``, and records stored
before ``seq`` existed read as ``seq`` 0 (no migration). Claiming reads the
user's pending handoffs inside the write transaction, lets ``pick_handoff``
choose, clears them all, and records the open through the
:class:`OpenRecorder` (the ``AttributionStore``) and the install's upgrade
(storage/install_rows.py) in the same commit.
"""

from __future__ import annotations

from typing import Protocol

import attrs
import lmdb

from storage import install_rows, layout
from storage.codec import decode, encode
from storage.lmdb_store import LmdbStore
from storage.writer import Op
from svc_engine.attribution import Token, TokenState, token_state
from svc_engine.errors import InstallNotRegistered, NotFound, ValidationError
from svc_engine.handoffs import Handoff, creation_order, next_seq, pick_handoff
from svc_engine.installs import Confidence, InstallAttribution, Method
from svc_engine.keys import Mode
from svc_engine.links import Link
from svc_engine.store import IdemWrite
from svc_engine.tokens import VIA_WEB_FALLBACK


@attrs.frozen
class ClaimResult:
    link: Link | None
    cleared: int


class OpenRecorder(Protocol):
    """What a handoff needs of the attribution store, inside its transaction."""

    def live_link(self, txn: lmdb.Transaction, link_id: str) -> Link | None: ...

    def project_token(self, txn: lmdb.Transaction, text: str | None,
                      project_id: str, *, via: str) -> Token | None: ...

    def record_open(self, txn: lmdb.Transaction, project_id: str, mode: Mode, link: Link,
                    install_id: str, platform: str, method: Method, is_deferred: bool,
                    now_ms: int, open_id: str) -> None: ...


class HandoffsStore:
    def __init__(self, store: LmdbStore, opens: OpenRecorder) -> None:
        self.store = store
        self.opens = opens
        self._db = {name: store.db(name) for name in (
            b"handoffs", b"handoffs_by_time", b"tokens", b"installs", b"installs_by_time")}

    def pending(self, project_id: str, mode: str, user_hash: bytes) -> list[Handoff]:
        """The user's stored handoffs (expired ones too, until swept), oldest
        first (``creation_order``)."""
        rows = self.store.scan(b"handoffs", layout.scope(project_id, mode) + user_hash)
        return sorted((decode(Handoff, v) for _, v in rows), key=creation_order)

    async def create(self, project_id: str, handoff: Handoff, idem: IdemWrite | None,
                     *, svc_token: str | None = None) -> Handoff:
        """Store a pending handoff. With ``svc_token`` (a web fallback redirect's
        token) the token is consumed and names the link."""
        db = self._db

        def op(txn: lmdb.Transaction) -> Handoff:
            nonlocal handoff
            if svc_token is not None:
                token = self.opens.project_token(txn, svc_token, project_id,
                                                 via=VIA_WEB_FALLBACK)
                if (token is None or token.mode is not handoff.mode
                        or token_state(token, handoff.created_at_ms) is not TokenState.VALID):
                    raise ValidationError("svcToken is unknown, already used or expired",
                                          field="svcToken")
                txn.put(svc_token.encode(), encode(token.consumed()), db=db[b"tokens"])
                handoff = attrs.evolve(handoff, link_id=token.link_id)
            if self.opens.live_link(txn, handoff.link_id) is None:
                raise NotFound("the handoff's link does not exist")
            same_ms = self.store.scan_in(txn, b"handoffs", _ms_prefix(project_id, handoff))
            handoff = attrs.evolve(handoff, seq=next_seq([decode(Handoff, v)
                                                          for _, v in same_ms]))
            key = _handoff_key(project_id, handoff)
            txn.put(key, encode(handoff), db=db[b"handoffs"])
            txn.put(layout.ms(handoff.expires_at_ms) + key, b"", db=db[b"handoffs_by_time"])
            self.store.record_response(txn, idem, handoff)
            return handoff

        return await self.store.write(op)  # type: ignore[no-any-return]

    def claim_op(self, *, project_id: str, mode: Mode, user_hash: bytes, install_id: str,
                 now_ms: int, open_id: str,
                 idem: IdemWrite | None) -> Op[ClaimResult]:
        db = self._db

        def op(txn: lmdb.Transaction) -> ClaimResult:
            installed = install_rows.get(txn, db[b"installs"], db[b"installs_by_time"],
                                         install_rows.index_key(project_id, mode.value,
                                                                install_id))
            if installed is None:
                raise InstallNotRegistered(
                    "the install has not reported a launch yet; call after initialize")
            prefix = layout.scope(project_id, mode.value) + user_hash
            rows = self.store.scan_in(txn, b"handoffs", prefix)
            pending = [decode(Handoff, v) for _, v in rows]
            winner, _ = pick_handoff(pending, now_ms)
            for (k, _), h in zip(rows, pending, strict=True):  # every pending one is cleared
                txn.delete(k, db=db[b"handoffs"])
                txn.delete(layout.ms(h.expires_at_ms) + k, db=db[b"handoffs_by_time"])
            link = self.opens.live_link(txn, winner.link_id) if winner is not None else None
            if link is not None:
                platform = installed.install.platform
                method = Method.AUTHENTICATED_HANDOFF
                self.opens.record_open(txn, project_id, mode, link, install_id, platform,
                                       method, True, now_ms, open_id)
                install_rows.upgrade(txn, db[b"installs_by_time"], installed,
                                     InstallAttribution(link.id, Confidence.DETERMINISTIC, method),
                                     now_ms)
            result = ClaimResult(link, len(rows))
            self.store.record_response(txn, idem, result)
            return result

        return op

    def sweep(self, txn: lmdb.Transaction, now_ms: int, limit: int) -> int:
        """Delete up to ``limit`` handoffs past their expiry."""
        due: list[bytes] = []
        for k in txn.cursor(db=self._db[b"handoffs_by_time"]).iternext(values=False):
            if len(due) >= limit or layout.from_ms(bytes(k)) > now_ms:
                break
            due.append(bytes(k))
        for k in due:
            txn.delete(k[8:], db=self._db[b"handoffs"])
            txn.delete(k, db=self._db[b"handoffs_by_time"])
        return len(due)


def _ms_prefix(project_id: str, h: Handoff) -> bytes:
    """The keys of the user's handoffs created in the same millisecond as ``h``."""
    return layout.scope(project_id, h.mode.value) + h.user_hash + layout.ms(h.created_at_ms)


def _handoff_key(project_id: str, h: Handoff) -> bytes:
    return _ms_prefix(project_id, h) + layout.uid(h.id)
