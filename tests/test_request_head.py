"""The common-form request head parser (web/request_head.py): what it takes,
what it leaves to h11, and that whatever it takes h11 reads the same way."""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from web.request_head import Head, head_end, parse_head

SDK_INIT = (b"POST /v1/sdk/init HTTP/1.1\r\nHost: 127.0.0.1:8000\r\n"
            b"Content-Type: application/json\r\nAuthorization: Bearer pk_live_x\r\n"
            b"Idempotency-Key: k1\r\nContent-Length: 12\r\n\r\n")


def via_h11(head: bytes) -> Head | None:
    """What h11 makes of ``head``: None when it refuses it."""
    conn = h11.Connection(h11.SERVER)
    conn.receive_data(head)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    assert isinstance(event, h11.Request), event  # a whole head: never NEED_DATA
    headers = list(event.headers)
    length = dict(headers).get(b"content-length", b"0")
    return Head(event.method, event.target, event.http_version, headers, int(length))


def test_the_sdk_s_request_head_is_read_as_h11_reads_it() -> None:
    head = parse_head(SDK_INIT)
    assert head == via_h11(SDK_INIT)
    assert head is not None and head.content_length == 12
    assert head.headers[0] == (b"host", b"127.0.0.1:8000")  # names lower case


def test_the_head_ends_at_the_first_blank_line() -> None:
    assert head_end(SDK_INIT + b"{}") == len(SDK_INIT)
    assert head_end(b"GET / HTTP/1.1\r\nhost: a\r\n") == -1  # not yet whole
    assert head_end(b"GET / HTTP/1.1\nhost: a\n\nrest") == len(b"GET / HTTP/1.1\nhost: a\n\n")
    assert head_end(b"\r\nGET / HTTP/1.1\r\n") == 0  # h11 refuses a leading blank line
    assert head_end(b"\x16\x03\x01") == 0  # TLS spoken to the plain port
    assert head_end(b" GET / HTTP/1.1\r\n") == 0  # a blank first
    # the first visible byte may start a method (a token): h11 is waited for
    assert head_end(b"!GET / HTTP/1.1\r\nhost: a\r\n") == -1


@pytest.mark.parametrize("raw", [
    b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n",
    b"POST / HTTP/1.1\r\nhost: a\r\nexpect: 100-continue\r\ncontent-length: 1\r\n\r\n",
    b"GET / HTTP/1.1\nhost: a\n\n",  # bare LF line ends
    b"GET / HTTP/1.1\r\nhost: a\r\nx: 1\r\n  folded\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\ncontent-length: 1\r\ncontent-length: 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\ncontent-length: 1, 1\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\ncontent-length: 1234567890123456789\r\n\r\n",
    b"GET / HTTP/1.1\r\n\r\n",  # HTTP/1.1 without host: h11 refuses
    b"GET / HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n",
    b"GET / HTTP/2.0\r\nhost: a\r\n\r\n",
    b"GET  / HTTP/1.1\r\nhost: a\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost: a\r\nx: a\x01b\r\n\r\n",  # h11 lets this control byte in
    b"GET / HTTP/1.1\r\nhost: a\r\nx: a\rb\r\n\r\n",
    b"GET / HTTP/1.1\r\nhost : a\r\n\r\n",
    b"GET /\xff HTTP/1.1\r\nhost: a\r\n\r\n",
])
def test_anything_unusual_is_left_to_h11(raw: bytes) -> None:
    assert parse_head(raw) is None


def test_http_1_0_needs_no_host_and_values_keep_inner_blanks() -> None:
    raw = b"GET /a?b=c HTTP/1.0\r\nuser-agent:  Mozilla/5.0 (X11;\tLinux)  \r\nx-empty:\r\n\r\n"
    head = parse_head(raw)
    assert head == via_h11(raw)
    assert head is not None and head.headers == [
        (b"user-agent", b"Mozilla/5.0 (X11;\tLinux)"), (b"x-empty", b"")]


# Mostly the common form, with rarer odd pieces: the property needs many
# heads taken (about half are) and many odd ones (about half).
_NAMES = st.sampled_from([b"connection", b"x-a", b"User-Agent", b"Accept"] * 8
                         + [b"host", b"Content-Length", b"transfer-encoding", b"expect",
                            b"bad name", b"", b"x\x00", b"\xff"])
_VALUE_BYTES = st.sampled_from([b"a", b"Z", b"0", b"7", b" ", b"\t", b",", b"chunked",
                                b"close", b"100-continue", b"12", b"\x80"] * 4
                               + [b"\x00", b"\x01", b"\r", b"\n", b"\x7f"])
_LINE_ENDS = st.sampled_from([b"\r\n"] * 40 + [b"\n", b"\r"])
_REQUEST_LINES = st.sampled_from([
    b"GET / HTTP/1.1", b"POST /v1/sdk/init HTTP/1.1", b"GET /a?b=c HTTP/1.0",
    b"OPTIONS * HTTP/1.1", b"GET http://h/p HTTP/1.1"] * 3 + [
    b"GET / HTTP/2.0", b"GET /  HTTP/1.1", b"G@T / HTTP/1.1", b"GET /\x7f HTTP/1.1", b"GET",
    b"", b" GET / HTTP/1.1"])


@st.composite
def heads(draw: st.DrawFn) -> bytes:
    out = draw(_REQUEST_LINES) + draw(_LINE_ENDS)
    if draw(st.integers(0, 3)):
        out += b"host: h" + draw(_LINE_ENDS)
    if draw(st.booleans()):
        out += b"Content-Length: " + draw(st.sampled_from([b"0", b"12", b"007", b" 5 "]))
        out += draw(_LINE_ENDS)
    for _ in range(draw(st.integers(0, 4))):
        lead = draw(st.sampled_from([b""] * 30 + [b" ", b"\t"]))  # a folded line
        value = b"".join(draw(st.lists(_VALUE_BYTES, max_size=6)))
        colon = draw(st.sampled_from([b":"] * 4 + [b": ", b" :"]))
        out += lead + draw(_NAMES) + colon + value + draw(_LINE_ENDS)
    return out + draw(_LINE_ENDS)


@settings(max_examples=3000, deadline=None)
@given(heads())
def test_every_head_taken_is_one_h11_reads_the_same_way(raw: bytes) -> None:
    end = head_end(raw)
    if end <= 0:
        return  # incomplete, or h11's to refuse
    head = parse_head(raw[:end])
    if head is not None:
        assert via_h11(raw[:end]) == head
