"""The Idempotency-Key guard for API writes.

For a write with ``Idempotency-Key``: a lock per (project and mode, key) makes
a retry that arrives while the first attempt is still running wait for it; the
stored response of an earlier attempt with the same request is replayed byte
for byte (with ``Idempotent-Replayed: true``); another request under the same
key is 409 ``idempotency_key_reused``. The handler records its response in the
same transaction as its effect (``IdemWrite``), so a crash cannot separate them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import orjson
import trio

from svc_engine.idempotency import (
    StoredResponse,
    check_key,
    fingerprint,
    replay_or_conflict,
)
from svc_engine.store import IdemWrite
from web.http import Request, Response
from web.services import Services

Render = Callable[[object], tuple[int, str, bytes]]


class IdemSlot:
    """Given to a write handler: builds the IdemWrite for its store operation,
    then answers with :meth:`respond`.

    The writer renders the answer it stores for replays; the slot remembers
    that rendering, and :meth:`respond` sends the same bytes to the first
    request when they were rendered from the very value the write returned
    (an op may run twice: only its last run's value is returned). So the
    first answer and its replays are one rendering, made once.
    """

    def __init__(self, scope: str, key: str | None, fp: bytes, now_ms: int) -> None:
        self.scope, self.key, self.fp, self.now_ms = scope, key, fp, now_ms
        self._rendered: tuple[object, tuple[int, str, bytes]] | None = None

    def write(self, render: Render) -> IdemWrite | None:
        if self.key is None:
            return None

        def remembered(value: object) -> tuple[int, str, bytes]:
            out = render(value)
            self._rendered = (value, out)  # in the writer's thread, before the commit
            return out

        return IdemWrite(scope=self.scope, key=self.key, fingerprint=self.fp,
                         now_ms=self.now_ms, render=remembered)

    def respond(self, value: object, render: Render) -> Response:
        """The answer for ``value``, the result of the write given this slot's
        IdemWrite: the stored rendering when it is of ``value``, else ``render``'s."""
        kept = self._rendered
        status, ctype, body = kept[1] if kept is not None and kept[0] is value else render(value)
        return Response(status, body, [(b"content-type", ctype.encode())])


def json_render(status: int) -> Render:
    def render(value: object) -> tuple[int, str, bytes]:
        return status, "application/json", orjson.dumps(value)

    return render


class IdempotencyGuard:
    def __init__(self, services: Services) -> None:
        self._services = services
        self._locks: dict[tuple[str, str], tuple[trio.Lock, int]] = {}

    def replay(self, req: Request, scope: str, body: bytes) -> Response | None:
        """The stored answer to this very request, when there is one: for a
        handler whose checks before ``run`` read the time or the store (an
        ``expiresAt`` that has passed since, a link deleted since), which
        would otherwise turn the retry of a request that succeeded into an
        error. None otherwise (no key, nothing stored, or another request
        under the key: ``run`` decides, after the body's own checks)."""
        key = check_key(req.header("idempotency-key"))
        if key is None:
            return None
        stored = self._services.store.get_response(scope, key)
        if stored is None or stored.fingerprint != fingerprint(req.method, req.path, body):
            return None
        return _replayed(stored)

    async def run(self, req: Request, scope: str, body: bytes,
                  handler: Callable[[IdemSlot], Awaitable[Response]], *,
                  rerun_other: bool = False) -> Response:
        """``handler`` under the request's Idempotency-Key, if any.
        ``rerun_other``: another request under a stored key runs the handler
        instead of a 409 (``replay_or_conflict``); its answer is then stored
        under the key in place of the earlier one."""
        key = check_key(req.header("idempotency-key"))
        now = self._services.clock.now_ms()
        if key is None:  # nothing to record: no fingerprint (a body can be 1 MiB)
            return await handler(IdemSlot(scope, None, b"", now))
        fp = fingerprint(req.method, req.path, body)
        lock_key = (scope, key)
        lock, users = self._locks.get(lock_key, (trio.Lock(), 0))
        self._locks[lock_key] = (lock, users + 1)
        try:
            async with lock:
                stored = replay_or_conflict(self._services.store.get_response(scope, key), fp,
                                            rerun_other=rerun_other)
                if stored is not None:
                    return _replayed(stored)
                return await handler(IdemSlot(scope, key, fp, self._services.clock.now_ms()))
        finally:
            lock, users = self._locks[lock_key]
            if users <= 1:
                del self._locks[lock_key]
            else:
                self._locks[lock_key] = (lock, users - 1)


def _replayed(stored: StoredResponse) -> Response:
    return Response(stored.status, stored.body,
                    [(b"content-type", stored.content_type.encode()),
                     (b"idempotent-replayed", b"true")])
