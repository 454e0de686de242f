"""The common form of a request head, parsed without h11.

h11's request side (a receive buffer, a state machine, an event object and
a regular expression per header line) was about 20 µs of every request, a
tenth of a redirect's CPU. Nearly every request a client sends has the same
plain shape: CRLF line ends, a method and an origin-form target, HTTP/1.1 or
HTTP/1.0, ``name: value`` lines, at most one all-digit ``content-length`` and
no ``transfer-encoding`` or ``expect``. :func:`parse_head` reads exactly that
shape and nothing else: for any other head it answers ``None`` and the server
hands the bytes to h11, which parses the unusual (chunked bodies,
``100-continue``, bare LF line ends, folded lines) and refuses the malformed
with its own diagnosis.

So the rule this module keeps is one-sided: every head it accepts, h11
accepts too, with the same method, target, version, headers (names lower
case, values without surrounding blanks) and body length. A property test
(tests/test_request_head.py) checks that against h11 on generated heads.
"""

from __future__ import annotations

import re
from typing import NamedTuple

# Where h11 ends a head: the first blank line, with or without its CR.
_HEAD_END = re.compile(rb"\n\r?\n")
_TOKEN = re.compile(rb"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_TARGET = re.compile(rb"[\x21-\x7e]+")
# Anything but visible characters, obs-text, space and tab (h11 lets a few
# more control characters through; those heads go to h11).
_NOT_VALUE = re.compile(rb"[^\x21-\x7e\x80-\xff \t]")
_DIGITS = re.compile(rb"[0-9]{1,18}")
_VERSIONS = {b"HTTP/1.1": b"1.1", b"HTTP/1.0": b"1.0"}
# The ASGI scope extension under which web/connection.py hands over a request
# body that arrived whole with its head (read by web/http.py).
BODY_EXTENSION = "svc.body"


class Head(NamedTuple):
    """A request head. ``content_length`` is -1 when h11 frames the body."""

    method: bytes
    target: bytes
    http_version: bytes
    headers: list[tuple[bytes, bytes]]
    content_length: int


def head_end(buffer: bytes | bytearray) -> int:
    """The length of the head at the start of ``buffer``, or -1 while it is
    incomplete; 0 when the buffer cannot start a request (a blank or control
    byte first: h11 refuses it without waiting for more)."""
    if buffer and buffer[0] < 0x21:
        return 0
    match = _HEAD_END.search(buffer)
    return match.end() if match is not None else -1


def parse_head(head: bytes) -> Head | None:
    """``head`` (up to and including its blank line) in the common form, or
    ``None`` for h11 to parse."""
    if not head.endswith(b"\r\n\r\n"):
        return None
    lines = head[:-4].split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3:
        return None
    method, target, version = parts
    http_version = _VERSIONS.get(version)
    if http_version is None or _TOKEN.fullmatch(method) is None \
            or _TARGET.fullmatch(target) is None:
        return None
    headers = []
    length: int | None = None
    hosts = 0
    for line in lines[1:]:
        name, colon, value = line.partition(b":")
        if not colon or _TOKEN.fullmatch(name) is None:
            return None  # also a folded line, which starts with a blank
        value = value.strip(b" \t")
        if _NOT_VALUE.search(value) is not None:
            return None  # a bare CR or LF, NUL or another control character
        name = name.lower()
        if name == b"content-length":
            if length is not None or _DIGITS.fullmatch(value) is None:
                return None  # a second one, or not a plain number
            length = int(value)
        elif name == b"host":
            hosts += 1
        elif name == b"transfer-encoding" or name == b"expect":
            return None
        headers.append((name, value))
    if hosts > 1 or (hosts == 0 and http_version == b"1.1"):
        return None  # h11 refuses these
    return Head(method, target, http_version, headers, length or 0)
