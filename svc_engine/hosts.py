"""Host names in the ASCII form browsers send them to, and lists without
duplicates that cannot be made to cost more than their limit.

``ascii_host``: a host as WHATWG URL parsing writes it (UTS #46, not
transitional): ``straße.de`` is ``xn--strae-oqa.de``, as every current
browser sends it. Python's ``"idna"`` codec is IDNA 2003, which maps the
four deviation characters (ß, ς, ZWJ, ZWNJ) away: it made ``strasse.de``
of it, a different registrable domain, so a link written for the first
sent people to the second. Names the IDNA 2008 rules of the ``idna``
package refuse but browsers take (symbols such as ``☃.net``) are encoded
by the codec, whose answer for them is the browsers' as long as no
deviation character is in the name; with one, the name is refused.

``distinct``: the items of a list, checked one by one, duplicates dropped
(the first kept, order kept), at most ``most`` of them. A list longer than
``SLACK`` times ``most`` is refused before any item is checked, and the
count is checked as items come, so a body of a hundred thousand entries
costs what ``most`` of them do (a list with ``in`` tests was quadratic:
seconds of the event loop for one request).

Pure: no I/O, clock or randomness.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TypeVar

import idna

from svc_engine.errors import ValidationError

DEVIATIONS = frozenset("\u00df\u03c2\u200c\u200d")
"""UTS #46 deviation characters: mapped away by IDNA 2003 (and transitional
processing), kept by browsers."""
SLACK = 10
"""How many times its limit a list may be long before its duplicates are dropped."""

T = TypeVar("T", bound=Hashable)


def ascii_host(name: str) -> str:
    """``name`` in ASCII (A-labels) as a browser would send it; ``UnicodeError``
    when it is not a valid internationalized name."""
    if name.isascii():
        return name
    try:
        return idna.encode(name, uts46=True, transitional=False).decode("ascii")
    except idna.IDNAError as exc:
        if DEVIATIONS.intersection(name):
            raise UnicodeError(str(exc)) from exc
        return name.encode("idna").decode("ascii")


def distinct(value: object, item: Callable[[object], T], *, most: int, field: str,
             not_a_list: str, too_many: str) -> tuple[T, ...]:
    """``item`` of every element of the JSON list ``value`` (null: none),
    duplicates dropped, at most ``most``; ``ValidationError`` naming ``field``
    with ``not_a_list`` or ``too_many``."""
    if value is None:
        return ()
    if not isinstance(value, list | tuple):
        raise ValidationError(not_a_list, field=field)
    if len(value) > SLACK * most:
        raise ValidationError(too_many, field=field)
    seen: dict[T, None] = {}
    for element in value:
        seen[item(element)] = None
        if len(seen) > most:
            raise ValidationError(too_many, field=field)
    return tuple(seen)
