"""One outcome per rendered form: a second POST of the same form gets the
first POST's answer instead of doing it again.

Every form that creates or sends something (a link, a webhook endpoint, an
API key, an invitation, an organization, a project, a test event, a resent
delivery) carries a ``once`` field: a fresh random key each time a page is
rendered. A double click, or the browser sending the form again after a
dropped connection, posts the same key with the same fields. ``FormOnce``
runs the first such POST and keeps its answer (status, headers, body) for
``KEEP_MS``; a POST with the same key from the same session and the same
fields is answered with that kept answer, and one that arrives while the
first still runs waits for it. The browser shows the answer to the *last*
POST of a double click, so it must be the full first answer: for a new API
key that is the page showing its secret, kept in memory (never stored) for
that session only. At most ``CAPACITY`` answers and ``MAX_BYTES`` of their
bodies are kept; the oldest go first.

Not kept: answers of 400 and above (an invalid form did nothing, so sending
it again does the same nothing), and a POST whose fields differ from the
first's under the same key (Back, edit, submit: the person means a second
one). A POST without a ``once`` field (a form rendered before an upgrade, a
script) is simply run. The keys live in this process only: after a restart
a resent form is run again, as it was before this existed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Awaitable, Callable

import attrs
import trio
from quart import Response
from werkzeug.datastructures import Headers

KEEP_MS = 10 * 60_000
CAPACITY = 10_000
MAX_BYTES = 8 << 20  # most answers are empty redirects; a new key's page is ~30 KiB
KEY_HEX = 32
_NOT_FIELDS = frozenset({"csrf", "once"})
_KEY = re.compile(rf"[0-9a-f]{{{KEY_HEX}}}")  # what new_key makes


@attrs.frozen
class _Answer:
    fields: bytes
    until_ms: int
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes


def fields_digest(items: list[tuple[str, str]]) -> bytes:
    """What a form's fields say, whatever their order (``csrf`` and ``once`` left out)."""
    h = hashlib.sha256()
    for name, value in sorted((n, v) for n, v in items if n not in _NOT_FIELDS):
        for part in (name, value):
            data = part.encode("utf-8", "surrogatepass")
            h.update(b"%d:" % len(data))
            h.update(data)
    return h.digest()


class FormOnce:
    """Owned by the dashboard (one per process); see the module's docstring."""

    def __init__(self, now_ms: Callable[[], int], random: Callable[[int], bytes], *,
                 keep_ms: int = KEEP_MS, capacity: int = CAPACITY,
                 max_bytes: int = MAX_BYTES) -> None:
        self._now_ms = now_ms
        self._random = random
        self._keep_ms = keep_ms
        self._capacity = capacity
        self._max_bytes = max_bytes
        self._bytes = 0
        self._answers: dict[tuple[str, str], _Answer] = {}
        self._running: dict[tuple[str, str], trio.Event] = {}

    def __len__(self) -> int:
        return len(self._answers)

    def new_key(self) -> str:
        """The ``once`` value of a form being rendered."""
        return self._random(KEY_HEX // 2).hex()

    async def run(self, scope: str, key: str | None, fields: bytes,
                  make: Callable[[], Awaitable[Response]]) -> Response:
        """``make()``'s answer, or the kept answer of the same form (``scope``:
        the session; ``fields``: ``fields_digest`` of the POST)."""
        if key is None or not _KEY.fullmatch(key):
            return await make()
        slot = (scope, key)
        while (running := self._running.get(slot)) is not None:
            await running.wait()
        kept = self._answers.get(slot)
        if kept is not None and kept.until_ms > self._now_ms() and kept.fields == fields:
            return Response(kept.body, status=kept.status, headers=Headers(list(kept.headers)))
        done = self._running[slot] = trio.Event()
        try:
            response = await make()
            if response.status_code < 400:
                await self._keep(slot, fields, response)
        finally:
            del self._running[slot]
            done.set()
        return response

    async def _keep(self, slot: tuple[str, str], fields: bytes, response: Response) -> None:
        body = await response.get_data(as_text=False)
        assert isinstance(body, bytes)
        if len(body) > self._max_bytes:
            return
        self._drop(slot)
        # Every answer is kept equally long: the oldest kept expires first.
        while self._answers and (len(self._answers) >= self._capacity
                                 or self._bytes + len(body) > self._max_bytes):
            self._drop(next(iter(self._answers)))
        self._answers[slot] = _Answer(fields, self._now_ms() + self._keep_ms,
                                      response.status_code,
                                      tuple(response.headers.items()), body)
        self._bytes += len(body)

    def _drop(self, slot: tuple[str, str]) -> None:
        gone = self._answers.pop(slot, None)
        if gone is not None:
            self._bytes -= len(gone.body)
