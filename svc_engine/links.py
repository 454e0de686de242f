"""Short links: the stored record, its JSON forms, and the rules for new slugs.

A ``Link`` is what the redirector resolves and what ``POST /v1/sdk/links`` and the
server link API create. Its JSON form is SPEC.md's ``SvcShortLink`` plus the
fallback and Open Graph fields and ``mode``; ``resolved_link_json`` is the object
``SvcLink.fromJson`` reads. Validation of request bodies lives in
``svc_engine.link_input``; its entry points are re-exported here, and
``new_link`` / ``apply_link_patch`` turn their results into records.

Decisions where SPEC.md is silent:

- Generated slugs are 9 base62 characters drawn from 8 random bytes: about 53.6
  bits, so guessing one live slug among a million takes ~13 billion tries on
  average. Custom slugs are 1 to 64 characters of ``[A-Za-z0-9_-]``. Slugs are
  case-sensitive; reserved words (the service's own top-level paths) are refused
  whatever their case.
- The short URL of a link on the default domain is ``<public url>/<slug>`` (so a
  development ``http://localhost:8000`` works); on a custom domain it is
  ``https://<domain>/<slug>``.
- Times in JSON are ISO 8601 UTC with milliseconds and a ``Z``
  (``2025-01-02T03:04:05.678Z``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

import attrs

from svc_engine.decode import RecordError, opt_int, opt_str, req_bool, req_int, req_str
from svc_engine.keys import Mode, base62
from svc_engine.link_input import (
    LAST_MS,
    RESERVED_SLUGS,
    LinkDraft,
    LinkPatch,
    ParamValue,
    check_destination_url,
    is_reserved_slug,
    is_valid_custom_slug,
    normalize_domain,
    parse_iso_ms,
    parse_link_create,
    parse_link_update,
)

__all__ = [
    "LAST_MS", "RESERVED_SLUGS", "Link", "LinkDraft", "LinkPatch", "ParamValue", "apply_link_patch",
    "check_destination_url", "default_domain", "is_reserved_slug", "is_valid_custom_slug",
    "iso_utc", "new_link", "new_slug", "normalize_domain", "parse_iso_ms", "parse_link_create",
    "parse_link_update", "resolved_link_json", "short_url",
]

SLUG_RANDOM_BYTES = 8
SLUG_LENGTH = 9


def new_slug(random_bytes: bytes) -> str:
    """A random slug of 9 base62 characters from 8 random bytes.

    The caller checks that the slug is free on the domain and draws again if not
    (and, in theory, if ``is_reserved_slug`` holds; 'dashboard' is the only
    reserved word of that length, one chance in 10**16).
    """
    if len(random_bytes) < SLUG_RANDOM_BYTES:
        raise ValueError(f"a slug needs {SLUG_RANDOM_BYTES} random bytes")
    return base62(random_bytes[:SLUG_RANDOM_BYTES], SLUG_LENGTH)


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_utc(ms: int) -> str:
    """Milliseconds since the epoch as ``YYYY-MM-DDTHH:MM:SS.mmmZ``; a time
    past year 9999 (an expiry stored before input was bounded by
    :data:`LAST_MS`) as the last one there is, so reading it cannot fail."""
    ms = min(ms, LAST_MS)
    return f"{_iso_second(ms // 1000)}.{ms % 1000:03d}Z"


@functools.lru_cache(maxsize=4096)
def _iso_second(second: int) -> str:
    """The date and time of one second (datetime arithmetic and strftime cost
    several µs; records made in the same second share it)."""
    return f"{_EPOCH + timedelta(seconds=second):%Y-%m-%dT%H:%M:%S}"


# -- URLs of links ---------------------------------------------------------------


def default_domain(public_url: str) -> str:
    """The default domain named by ``--public-url``: its host[:port], lower-case."""
    return urlsplit(public_url).netloc.lower()


def slug_in(path: str, *, under: str = "") -> str | None:
    """The slug a short URL's ``path`` names, or None when it names none. A
    link on the default domain is served under the public URL's path
    (``under``; ``short_url``): ``/go/abc`` with ``SVC_PUBLIC_URL`` of
    ``https://x.example/go`` is ``abc``; ``/abc`` there is none."""
    prefix = under.rstrip("/") + "/"
    if not path.startswith(prefix):
        return None
    slug = path[len(prefix):]
    return slug if slug and "/" not in slug else None


def short_url(domain: str, slug: str, *, public_url: str) -> str:
    """The full short URL of ``slug`` on ``domain``."""
    parts = urlsplit(public_url)
    if domain == parts.netloc.lower():
        return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/')}/{slug}"
    return f"https://{domain}/{slug}"


# -- the record --------------------------------------------------------------------


def _params(value: Mapping[str, ParamValue]) -> dict[str, ParamValue]:
    return dict(value)


def _tags(value: tuple[str, ...] | list[str]) -> tuple[str, ...]:
    return tuple(value)


@attrs.frozen
class Link:
    """A short link as stored. ``deleted`` links answer 404 and are never listed."""

    VERSION = 1
    id: str
    project_id: str
    mode: Mode
    domain: str
    slug: str
    path: str
    created_at_ms: int
    updated_at_ms: int
    params: dict[str, ParamValue] = attrs.field(factory=dict, converter=_params, hash=False)
    title: str | None = None
    campaign: str | None = None
    channel: str | None = None
    tags: tuple[str, ...] = attrs.field(default=(), converter=_tags)
    ios_fallback_url: str | None = None
    android_fallback_url: str | None = None
    web_fallback_url: str | None = None
    og_title: str | None = None
    og_description: str | None = None
    og_image_url: str | None = None
    expires_at_ms: int | None = None
    deleted: bool = False

    def is_expired(self, now_ms: int) -> bool:
        return self.expires_at_ms is not None and now_ms >= self.expires_at_ms

    def url(self, *, public_url: str) -> str:
        return short_url(self.domain, self.slug, public_url=public_url)

    def to_map(self) -> dict[str, object]:
        return {
            "v": self.VERSION, "id": self.id, "project_id": self.project_id,
            "mode": self.mode.value, "domain": self.domain, "slug": self.slug,
            "path": self.path, "params": dict(self.params), "title": self.title,
            "campaign": self.campaign, "channel": self.channel, "tags": list(self.tags),
            "ios_fallback_url": self.ios_fallback_url,
            "android_fallback_url": self.android_fallback_url,
            "web_fallback_url": self.web_fallback_url, "og_title": self.og_title,
            "og_description": self.og_description, "og_image_url": self.og_image_url,
            "expires_at_ms": self.expires_at_ms, "created_at_ms": self.created_at_ms,
            "updated_at_ms": self.updated_at_ms, "deleted": self.deleted,
        }

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Link:
        if req_int(m, "v") != cls.VERSION:
            raise RecordError(f"link record version {m['v']} is not {cls.VERSION}")
        params = m.get("params", {})
        if not isinstance(params, Mapping) or not all(
            isinstance(k, str) and isinstance(v, str | int | float) for k, v in params.items()
        ):
            raise RecordError("params: expected a map of str to str, number or bool")
        tags = m.get("tags", [])
        if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
            raise RecordError("tags: expected a list of str")
        return cls(
            id=req_str(m, "id"), project_id=req_str(m, "project_id"),
            mode=Mode(req_str(m, "mode")), domain=req_str(m, "domain"),
            slug=req_str(m, "slug"), path=req_str(m, "path"), params=params,
            title=opt_str(m, "title"), campaign=opt_str(m, "campaign"),
            channel=opt_str(m, "channel"), tags=list(tags),
            ios_fallback_url=opt_str(m, "ios_fallback_url"),
            android_fallback_url=opt_str(m, "android_fallback_url"),
            web_fallback_url=opt_str(m, "web_fallback_url"),
            og_title=opt_str(m, "og_title"), og_description=opt_str(m, "og_description"),
            og_image_url=opt_str(m, "og_image_url"),
            expires_at_ms=opt_int(m, "expires_at_ms"),
            created_at_ms=req_int(m, "created_at_ms"),
            updated_at_ms=req_int(m, "updated_at_ms"),
            deleted=req_bool(m, "deleted", False),
        )

    def to_json(self, *, public_url: str) -> dict[str, object]:
        """The ``SvcShortLink`` JSON object (camelCase) returned by the link APIs."""
        return {
            "id": self.id, "url": self.url(public_url=public_url), "domain": self.domain,
            "slug": self.slug, "path": self.path, "params": dict(self.params),
            "title": self.title, "campaign": self.campaign, "channel": self.channel,
            "tags": list(self.tags), "iosFallbackUrl": self.ios_fallback_url,
            "androidFallbackUrl": self.android_fallback_url,
            "webFallbackUrl": self.web_fallback_url, "ogTitle": self.og_title,
            "ogDescription": self.og_description, "ogImageUrl": self.og_image_url,
            "expiresAt": None if self.expires_at_ms is None else iso_utc(self.expires_at_ms),
            "createdAt": iso_utc(self.created_at_ms), "mode": self.mode.value,
        }


def resolved_link_json(
    link: Link, *, public_url: str, is_deferred: bool, confidence: str, method: str | None
) -> dict[str, object]:
    """The resolved-link object ``SvcLink.fromJson`` reads (DESIGN.md's key list)."""
    return {
        "linkId": link.id, "url": link.url(public_url=public_url), "path": link.path,
        "params": dict(link.params), "campaign": link.campaign, "channel": link.channel,
        "isDeferred": is_deferred, "confidence": confidence, "method": method,
    }




def new_link(
    draft: LinkDraft, *, link_id: str, project_id: str, mode: Mode, domain: str, slug: str,
    now_ms: int,
) -> Link:
    """The record for a validated draft. The caller has chosen the id (a UUID),
    the slug (the draft's custom slug or ``new_slug``) and the domain (the
    draft's, checked to belong to the project, or the default domain).
    """
    return Link(
        id=link_id, project_id=project_id, mode=mode, domain=domain, slug=slug,
        path=draft.path, params=draft.params, title=draft.title, campaign=draft.campaign,
        channel=draft.channel, tags=draft.tags, ios_fallback_url=draft.ios_fallback_url,
        android_fallback_url=draft.android_fallback_url,
        web_fallback_url=draft.web_fallback_url, og_title=draft.og_title,
        og_description=draft.og_description, og_image_url=draft.og_image_url,
        expires_at_ms=draft.expires_at_ms, created_at_ms=now_ms, updated_at_ms=now_ms,
    )


def apply_link_patch(link: Link, patch: LinkPatch, *, now_ms: int) -> Link:
    """``link`` with the patch's changes and a new ``updated_at_ms``."""
    changes = dict(patch.changes)
    if "params" in changes and changes["params"] is None:
        changes["params"] = {}
    if "tags" in changes and changes["tags"] is None:
        changes["tags"] = ()
    return attrs.evolve(link, **changes, updated_at_ms=now_ms)
