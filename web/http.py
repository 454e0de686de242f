"""Minimal request and response objects for the lean ASGI front.

The API and the redirector are served without a framework's per-request
machinery (see bench/README.md for why); the dashboard is a Quart-Trio app
mounted behind the same front. Bodies are read with a cap: a declared or
actual body over the limit is 413 ``payload_too_large`` without reading more.

A JSON body holding an integer that orjson cannot decode exactly (below
-2^63 or above 2^64-1: orjson makes it a float and drops digits, so
123456789012345678901234567890 would be stored as 1.2345678901234568e+29) is
400 ``validation_error`` naming the field, whatever the endpoint: no value
is ever kept other than as sent (see :func:`inexact_integer`). The events
batch checks only the properties it keeps, and reads the body again only
when they may hold one (web/api_events.py ``validated``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import (
    AsyncIterable,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Sequence,
)
from typing import Any
from urllib.parse import parse_qsl

import orjson
import trio

from svc_engine.errors import (
    CallerError,
    DestinationBlocked,
    MethodNotAllowed,
    Overloaded,
    PayloadTooLarge,
    RateLimited,
    RequestTimeout,
    StorageUnavailable,
    SvcError,
    UnsupportedMediaType,
    ValidationError,
)
from svc_engine.event_columns import text_too_deep
from web.request_head import BODY_EXTENSION

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
JSON_TYPE = "application/json"
log = logging.getLogger("svc.web")
MAX_JSON_DEPTH = 32


class Request:
    __slots__ = ("_body", "_headers", "_json", "_receive", "method", "params", "path",
                 "query_string", "raw_headers", "scope")

    def __init__(self, scope: Scope, receive: Receive) -> None:
        self.scope = scope
        self._receive = receive
        self.method: str = scope["method"]
        self.path: str = scope["path"]
        self.query_string: bytes = scope.get("query_string", b"")
        self.raw_headers: list[tuple[bytes, bytes]] = scope["headers"]
        self._headers: dict[str, str] | None = None
        self._body: bytes | None = None
        self._json: Any = None
        self.params: dict[str, str] = {}

    @property
    def headers(self) -> dict[str, str]:
        if self._headers is None:
            h: dict[str, str] = {}
            for k, v in self.raw_headers:
                h[k.decode("latin-1").lower()] = v.decode("latin-1")
            self._headers = h
        return self._headers

    def header(self, name: str) -> str | None:
        return self.headers.get(name)

    def query(self) -> dict[str, str]:
        try:
            return dict(parse_qsl(self.query_string.decode("utf-8"), keep_blank_values=True))
        except UnicodeDecodeError:
            raise ValidationError("the query string is not valid UTF-8") from None

    body_timeout_s: float = 30.0

    async def body(self, limit: int) -> bytes:
        """The whole body, at most ``limit`` bytes, within ``body_timeout_s``."""
        if self._body is not None:
            return self._body
        buffered: bytes | None = (self.scope.get("extensions") or {}).get(BODY_EXTENSION)
        if buffered is not None:  # the server has it all: no wait, no timeout
            if len(buffered) > limit:
                raise PayloadTooLarge(f"request body over {limit} bytes")
            self._body = buffered
            return buffered
        with trio.move_on_after(self.body_timeout_s):
            return await self._read_body(limit)
        raise RequestTimeout("the request body did not arrive in time")

    async def _read_body(self, limit: int) -> bytes:
        declared = self.header("content-length")
        if declared is not None:
            try:
                if int(declared) > limit:
                    raise PayloadTooLarge(f"request body over {limit} bytes")
            except ValueError:
                raise ValidationError("malformed Content-Length") from None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":  # never act on a cut-off body
                raise ValidationError("the connection closed before the whole body arrived")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise PayloadTooLarge(f"request body over {limit} bytes")
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        self._body = b"".join(chunks)
        return self._body

    async def json(self, limit: int, *, depth_checked: bool = True,
                   exact_checked: bool = True) -> Any:
        """Decode a JSON body; errors are 400 (415 for a non-JSON content type
        or a content encoding).

        ``depth_checked=False`` skips the nesting check (:func:`too_deep`:
        C passes over a body with more than ``MAX_JSON_DEPTH`` brackets) for
        a parser that bounds nesting itself, such as the events batch's;
        orjson refuses documents nested over 1024 levels anyway.
        ``exact_checked=False`` skips :func:`refuse_inexact` for a caller that
        calls it when what it keeps may hold a rounded integer (the events
        batch: web/api_events.py)."""
        body = await self.body(limit)
        ctype = (self.header("content-type") or "").split(";")[0].strip().lower()
        if ctype and ctype != JSON_TYPE and not ctype.endswith("+json"):
            raise UnsupportedMediaType("send Content-Type: application/json")
        coding = (self.header("content-encoding") or "identity").strip().lower()
        if coding != "identity":  # a gzip body read as JSON would be "not valid JSON"
            raise UnsupportedMediaType(f"Content-Encoding {coding} is not accepted: send the "
                                       "body as it is")
        if not body:
            raise ValidationError("the request body must be JSON")
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            raise ValidationError("the request body is not valid JSON (UTF-8)") from None
        if depth_checked and too_deep(body, value):
            raise ValidationError(f"JSON nested deeper than {MAX_JSON_DEPTH} levels")
        if exact_checked:
            refuse_inexact(body)
        return value


EXACT_INT_MIN, EXACT_INT_MAX = -(2**63), 2**64 - 1
"""The integers orjson decodes as ``int`` (and encodes back). Past them it
decodes an integer as the nearest float, without an error; it refuses a
number past a double's range (309 digits), so no integer of a body it took
is longer than ``int()`` converts."""
_DIGITS_TO_ZEROS = bytes(0x30 if 0x30 <= b <= 0x39 else 0x2E for b in range(256))
_INEXACT_RUN = b"0" * 19  # every integer past the bounds has 19 digits or more
_LONG_INTEGER = re.compile(
    rb'"[^"\\]*+(?:\\.[^"\\]*+)*+"|(?<![-+.0-9eE])(-?[0-9]{19,})(?![.0-9eE])')
"""A string (skipped whole), or an integer of 19 digits or more: the scan of
a body nested past the standard library's decoder."""

Parts = Callable[[Any], tuple[Sequence[Any], Callable[[int], str]]]
"""Which parts of a decoded body :func:`inexact_integer` checks, in order,
and the field of the n-th (asked for only when reporting)."""


def refuse_inexact(body: bytes, parts: Parts | None = None) -> None:
    """ValidationError naming the first integer of ``body`` (JSON that orjson
    decoded) that orjson does not decode exactly (:func:`inexact_integer`)."""
    found = inexact_integer(body, parts)
    if found is not None:
        raise inexact_error(*found)


def inexact_error(text: str, field: str | None) -> ValidationError:
    """The error for the integer ``text`` at ``field`` that cannot be kept."""
    shown = text if len(text) <= 32 else f"{text[:24]}... ({len(text)} characters)"
    if field is not None and len(field) > 100:  # a key is the sender's to make long
        field = f"{field[:96]}..."
    return ValidationError(
        f"{field or 'the request body'}: the integer {shown} cannot be kept exactly "
        "(integers lie within -2^63 and 2^64-1); send it as a string", field=field)


def inexact_integer(body: bytes, parts: Parts | None = None,
                    ) -> tuple[str, str | None] | None:
    """The first integer of ``body`` (JSON that orjson decoded) that orjson
    does not decode exactly, as its text and the field holding it
    (``params.big``, ``events[0].properties.revenue``; None for the body
    itself, or when not known); None when every integer is decoded exactly.
    ``parts``: only those parts of the decoded body, in their order (the
    events batch: the properties it keeps); by default the whole body.

    A body without a run of 19 digits has no such integer and is only
    scanned, in C (about 0.8 ns a byte: 13 µs for a batch of 100 events,
    whose orjson decode takes 40). Otherwise the standard library's decoder
    reads it again, in C, with exact integers (40 ms for a MiB of small
    ones: no Python call per integer), and orjson encodes what is checked,
    in C, refusing it only for an integer past 64 bits; only then is it
    walked for the field (:func:`first_inexact`). A long number in a string,
    a phone number say, costs the second read and the encoding."""
    if _INEXACT_RUN not in body.translate(_DIGITS_TO_ZEROS):
        return None
    try:
        value = json.loads(body)
    except (RecursionError, ValueError):  # nested past that decoder (orjson takes 1024 levels)
        return _scan_inexact(body)
    if parts is None:
        return first_inexact(value)
    checked, field_of = parts(value)
    if first_inexact(checked) is None:  # one encoding for them all
        return None
    for n, part in enumerate(checked):
        found = first_inexact(part, field_of(n))
        if found is not None:
            return found
    return None


def first_inexact(value: Any, field: str | None = None) -> tuple[str, str | None] | None:
    """The first integer in ``value`` (decoded with exact integers, by the
    standard library's decoder) that orjson does not decode exactly, in
    document order, with its field (the path from ``field``, the field of
    ``value`` itself; a duplicate key's earlier value is gone, as it is from
    orjson's); None if there is none.

    orjson encodes ``value`` first, in C: it refuses an integer past 64 bits
    (or a value nested past its 254 levels), and only a refused value is
    walked, a Python step per value. The walk keeps an iterator a level and
    the keys leading to it, so its memory is the depth's, not the width's,
    and it builds only the field it answers (before, the path of every
    sibling was built as they were stacked: a key of 100,000 characters
    above 5,000 others took 478 MiB)."""
    try:
        orjson.dumps(value)
    except orjson.JSONEncodeError:
        pass
    else:
        return None
    if type(value) is int:
        return None if EXACT_INT_MIN <= value <= EXACT_INT_MAX else (str(value), field)
    if type(value) is dict:
        top: Iterator[tuple[Any, Any]] = iter(value.items())
    elif type(value) is list:
        top = enumerate(value)
    else:
        return None
    levels = [top]
    keys: list[str | int] = []  # the key, in its parent, of each level but the top
    while levels:
        for key, child in levels[-1]:
            kind = type(child)
            if kind is int:
                if not EXACT_INT_MIN <= child <= EXACT_INT_MAX:
                    return str(child), _path(field, [*keys, key])
            elif (kind is dict or kind is list) and child:
                keys.append(key)
                levels.append(iter(child.items()) if kind is dict else enumerate(child))
                break
        else:
            levels.pop()
            if keys:
                keys.pop()
    return None


def _path(field: str | None, keys: Iterable[str | int]) -> str | None:
    """The field ``keys`` lead to from ``field``: ``params.big``, ``x[1]``
    (a key is joined by a dot unless the path so far is empty)."""
    parts = [field] if field else []
    empty = not field
    for key in keys:
        if isinstance(key, int):
            parts.append(f"[{key}]")
            empty = False
        else:
            if not empty:
                parts.append(".")
            parts.append(key)
            empty = empty and not key
    return "".join(parts) or None


def _scan_inexact(body: bytes) -> tuple[str, None] | None:
    """The first integer literal of ``body`` past the bounds, from its text
    alone (no field): for a body nested past the standard library's decoder."""
    for literal in _LONG_INTEGER.findall(body):  # (b"" for a string)
        # "-18446744073709551616" is the shortest text past both bounds
        if literal and (len(literal) > 21 or not EXACT_INT_MIN <= int(literal) <= EXACT_INT_MAX):
            return literal.decode(), None
    return None


def too_deep(body: bytes, value: Any) -> bool:
    """Whether ``value``, decoded from ``body``, nests deeper than
    ``MAX_JSON_DEPTH``. Every level opens a bracket, so a body with no more
    brackets than that cannot, and is not measured (a launch report has
    one: 0.26 µs). Otherwise the body's text is measured, in C passes
    (``text_too_deep``: 5 ms for a MiB of ``[]``, which a walk of the value
    took 400 for); only a text too deep has the value's own text measured
    too (orjson's, which a repeated key's earlier value is not in, as it is
    not in the value)."""
    if not text_too_deep(body, MAX_JSON_DEPTH):
        return False
    try:
        text = orjson.dumps(value)
    except orjson.JSONEncodeError:  # orjson writes no more than 254 levels
        return True
    return text_too_deep(text, MAX_JSON_DEPTH)


class Response:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, body: bytes = b"",
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        self.status = status
        self.body = body
        self.headers = list(headers)

    async def send(self, send: Send, *, head: bool = False) -> None:
        headers = [*self.headers, (b"content-length", str(len(self.body)).encode())]
        await send({"type": "http.response.start", "status": self.status, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if head else self.body})


CLIENT_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
"""What sending raises once the client has closed its connection (the
server's connections, web/connection.py, catch the same)."""


class StreamResponse(Response):
    """A response whose body is produced while it is sent, chunk by chunk.

    ``chunks`` is an iterable of byte strings, or an asynchronous one (an
    export's body, each chunk made in a worker thread: web/export.py); each
    non-empty one goes out as an ASGI body message with ``more_body``, so the
    server sends it with chunked transfer encoding and applies backpressure
    between chunks. The producer reads its source a bounded page at a time,
    so memory stays constant however long the body. An error after the first
    chunk cannot change the status any more: it is logged and the connection
    is cut, so the client sees a truncated body rather than a complete-looking
    one. ``chunks.close()``, when it has one, is called however the sending
    ends (HEAD, done, failed, cut or cancelled)."""

    __slots__ = ("chunks",)

    def __init__(self, status: int, chunks: Iterable[bytes] | AsyncIterable[bytes],
                 headers: Iterable[tuple[bytes, bytes]] = ()) -> None:
        super().__init__(status, b"", headers)
        self.chunks = chunks

    async def send(self, send: Send, *, head: bool = False) -> None:
        try:
            await send({"type": "http.response.start", "status": self.status,
                        "headers": self.headers})
            if not head:
                try:
                    await self._send_chunks(send)
                except CLIENT_GONE:
                    # An export closed by its client: no fault of ours, no traceback.
                    log.info("streamed response cut: the client went away")
                    raise
                except Exception:
                    log.exception("streamed response failed after it started")
                    raise
        finally:
            close = getattr(self.chunks, "close", None)
            if close is not None:
                close()
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _send_chunks(self, send: Send) -> None:
        chunks = self.chunks
        if isinstance(chunks, AsyncIterable):
            async for chunk in chunks:
                if chunk:
                    await send({"type": "http.response.body", "body": chunk,
                                "more_body": True})
            return
        for chunk in chunks:
            if chunk:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})


def json_response(status: int, value: Any, headers: Iterable[tuple[bytes, bytes]] = ()
                  ) -> Response:
    return Response(status, orjson.dumps(value),
                    [(b"content-type", b"application/json"), *headers])


def html_response(status: int, html: str, headers: Iterable[tuple[bytes, bytes]] = ()
                  ) -> Response:
    return Response(status, html.encode("utf-8"),
                    [(b"content-type", b"text/html; charset=utf-8"), *headers])


# What a caller is told when the store cannot write (the cause is in the log).
STORAGE_UNAVAILABLE = ("the service could not store this request right now; retry it later "
                       "with the same Idempotency-Key")


def error_response(error: SvcError) -> Response:
    """The DESIGN.md error body: {"error": {"code", "message"}} with the status."""
    body: dict[str, Any] = {"code": error.code, "message": error.message}
    if isinstance(error, ValidationError | DestinationBlocked) and error.field:
        body["field"] = error.field
    headers: list[tuple[bytes, bytes]] = []
    if isinstance(error, RateLimited | Overloaded) or getattr(error, "retry_after", None):
        headers.append((b"retry-after", str(getattr(error, "retry_after", 1)).encode()))
    if isinstance(error, MethodNotAllowed) and error.allowed:
        headers.append((b"allow", ", ".join(error.allowed).encode()))
    if error.status == 401:
        headers.append((b"www-authenticate", b'Bearer realm="svc"'))
    status = error.status if isinstance(error, CallerError | Overloaded
                                        | StorageUnavailable) else 500
    if isinstance(error, StorageUnavailable):
        body = {"code": error.code, "message": STORAGE_UNAVAILABLE}
    elif status == 500:
        body = {"code": "internal_error", "message": "internal error; it has been logged"}
    return json_response(status, {"error": body}, headers)
