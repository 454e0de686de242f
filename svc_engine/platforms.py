"""Per-project app platforms and the domain-association files built from them.

A project describes its iOS app (App Store ID, bundle ID, team ID, custom URL
scheme), its Android app (package name, signing-certificate SHA-256
fingerprints, custom scheme) and its web fallback URL. The redirector reads
them, and every domain of the project serves two files made from them:

- ``/.well-known/apple-app-site-association``: Apple's current format
  (iOS 13 and later): ``applinks.details[]`` with ``appIDs`` (``TEAMID.bundle``)
  and ``components``. The components first exclude the service's own top-level
  paths (API, dashboard, ``.well-known``...) and the bare root, then match every
  other path, so every short link opens the app and nothing else does. No
  ``webcredentials`` section: short-link domains are not where people sign in,
  and claiming them for password autofill would be wrong. No ``appclips``
  (SPEC.md: not supported). Without a team ID and bundle ID the file lists no
  apps (a valid, empty association).
- ``/.well-known/assetlinks.json``: Google's Digital Asset Links statement list
  granting ``delegate_permission/common.handle_all_urls`` to the
  ``android_app`` target; an empty list without a package name and at least one
  fingerprint.

``PATCH`` semantics: the body is an object with any of ``ios``, ``android``,
``web``; each an object with any subset of its fields; null clears a field.
Unknown keys are a ``ValidationError`` naming the field (``ios.appId``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from svc_engine.decode import RecordError, opt_str, req_int
from svc_engine.errors import ValidationError
from svc_engine.hosts import distinct
from svc_engine.link_input import RESERVED_SLUGS, check_destination_url

_APP_STORE_ID_RE = re.compile(r"[1-9][0-9]{0,14}")
_TEAM_ID_RE = re.compile(r"[A-Z0-9]{10}")
_BUNDLE_ID_RE = re.compile(r"[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+")
_PACKAGE_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*(\.[A-Za-z][A-Za-z0-9_]*)+")
_SCHEME_RE = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
_HEX_RE = re.compile(r"[0-9A-F]{64}")
BUNDLE_ID_MAX = 155
PACKAGE_MAX = 255
SCHEME_MAX = 64
FINGERPRINTS_MAX = 10

BLOCKED_SCHEMES: frozenset[str] = frozenset({
    "http", "https", "javascript", "vbscript", "data", "file", "blob", "about", "ftp",
    "ws", "wss", "mailto", "tel", "sms", "intent", "content", "filesystem",
})
"""Schemes an app's custom scheme may not be: web schemes (use universal links or
App Links for those), and schemes a browser would act on itself."""


@attrs.frozen
class IosPlatform:
    app_store_id: str | None = None
    bundle_id: str | None = None
    team_id: str | None = None
    scheme: str | None = None

    @property
    def app_id(self) -> str | None:
        """``TEAMID.bundle.id`` as Apple's association file names the app."""
        if self.team_id is None or self.bundle_id is None:
            return None
        return f"{self.team_id}.{self.bundle_id}"


@attrs.frozen
class AndroidPlatform:
    package_name: str | None = None
    sha256_cert_fingerprints: tuple[str, ...] = ()
    scheme: str | None = None


@attrs.frozen
class WebPlatform:
    fallback_url: str | None = None


@attrs.frozen
class Platforms:
    VERSION = 1
    ios: IosPlatform = IosPlatform()
    android: AndroidPlatform = AndroidPlatform()
    web: WebPlatform = WebPlatform()

    def to_json(self) -> dict[str, dict[str, object]]:
        return {
            "ios": {"appStoreId": self.ios.app_store_id, "bundleId": self.ios.bundle_id,
                    "teamId": self.ios.team_id, "scheme": self.ios.scheme},
            "android": {"packageName": self.android.package_name,
                        "sha256CertFingerprints": list(self.android.sha256_cert_fingerprints),
                        "scheme": self.android.scheme},
            "web": {"fallbackUrl": self.web.fallback_url},
        }

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, **self.to_json()}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Platforms:
        if req_int(m, "v") != cls.VERSION:
            raise RecordError(f"platforms record version {m['v']} is not {cls.VERSION}")
        ios, android, web = (_section(m, key) for key in ("ios", "android", "web"))
        prints = android.get("sha256CertFingerprints", [])
        if not isinstance(prints, list | tuple) or not all(isinstance(p, str) for p in prints):
            raise RecordError("android.sha256CertFingerprints: expected a list of str")
        return cls(
            ios=IosPlatform(app_store_id=opt_str(ios, "appStoreId"),
                            bundle_id=opt_str(ios, "bundleId"), team_id=opt_str(ios, "teamId"),
                            scheme=opt_str(ios, "scheme")),
            android=AndroidPlatform(package_name=opt_str(android, "packageName"),
                                    sha256_cert_fingerprints=tuple(prints),
                                    scheme=opt_str(android, "scheme")),
            web=WebPlatform(fallback_url=opt_str(web, "fallbackUrl")),
        )


def _section(m: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = m.get(key, {})
    if not isinstance(value, Mapping):
        raise RecordError(f"{key}: expected a map")
    return value


# -- validation --------------------------------------------------------------------


def _str_field(value: object, field: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a string or null", field=field)
    return value.strip() or None


def _app_store_id(value: object) -> str | None:
    field = "ios.appStoreId"
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    text = _str_field(value, field)
    if text is None:
        return None
    text = text.removeprefix("id")
    if not _APP_STORE_ID_RE.fullmatch(text):
        raise ValidationError(f"{field} must be the app's numeric App Store ID", field=field)
    return text


def _team_id(value: object) -> str | None:
    field = "ios.teamId"
    text = _str_field(value, field)
    if text is not None and not _TEAM_ID_RE.fullmatch(text):
        raise ValidationError(
            f"{field} must be the 10-character Apple Developer Team ID (A-Z, 0-9)", field=field
        )
    return text


def _bundle_id(value: object) -> str | None:
    field = "ios.bundleId"
    text = _str_field(value, field)
    if text is not None and (len(text) > BUNDLE_ID_MAX or not _BUNDLE_ID_RE.fullmatch(text)):
        raise ValidationError(
            f"{field} must be a reverse-DNS bundle ID such as com.example.app", field=field
        )
    return text


def _package(value: object) -> str | None:
    field = "android.packageName"
    text = _str_field(value, field)
    if text is not None and (len(text) > PACKAGE_MAX or not _PACKAGE_RE.fullmatch(text)):
        raise ValidationError(
            f"{field} must be an Android application ID such as com.example.app", field=field
        )
    return text


def _scheme(value: object, field: str) -> str | None:
    text = _str_field(value, field)
    if text is None:
        return None
    text = text.removesuffix("://").removesuffix(":")
    if len(text) > SCHEME_MAX or not _SCHEME_RE.fullmatch(text):
        raise ValidationError(
            f"{field} must be a URL scheme (a letter, then letters, digits, '+', '-' or '.')",
            field=field,
        )
    text = text.lower()
    if text in BLOCKED_SCHEMES:
        raise ValidationError(f"{field} cannot be {text!r}; give the app's own scheme",
                              field=field)
    return text


def normalize_fingerprint(value: object) -> str:
    """A SHA-256 certificate fingerprint as ``AA:BB:...`` (32 upper-case hex pairs).

    Accepts upper or lower case, with or without colons.
    """
    field = "android.sha256CertFingerprints"
    if not isinstance(value, str):
        raise ValidationError(f"{field} must be a list of strings", field=field)
    digits = value.strip().replace(":", "").upper()
    if not _HEX_RE.fullmatch(digits):
        raise ValidationError(
            f"{field}: {value!r} is not a SHA-256 fingerprint (32 hex bytes, e.g. 14:6D:E9:...)",
            field=field,
        )
    return ":".join(digits[i:i + 2] for i in range(0, 64, 2))


def _fingerprints(value: object) -> tuple[str, ...]:
    field = "android.sha256CertFingerprints"
    return distinct(value, normalize_fingerprint, most=FINGERPRINTS_MAX, field=field,
                    not_a_list=f"{field} must be a list of strings",
                    too_many=f"{field} may hold at most {FINGERPRINTS_MAX} fingerprints")


def _web_fallback(value: object) -> str | None:
    return None if value is None else check_destination_url(value, field="web.fallbackUrl")


_SECTIONS: dict[str, dict[str, str]] = {
    "ios": {"appStoreId": "app_store_id", "bundleId": "bundle_id", "teamId": "team_id",
            "scheme": "scheme"},
    "android": {"packageName": "package_name",
                "sha256CertFingerprints": "sha256_cert_fingerprints", "scheme": "scheme"},
    "web": {"fallbackUrl": "fallback_url"},
}


def _clean(section: str, key: str, value: object) -> object:
    if section == "ios":
        if key == "appStoreId":
            return _app_store_id(value)
        if key == "bundleId":
            return _bundle_id(value)
        if key == "teamId":
            return _team_id(value)
        return _scheme(value, "ios.scheme")
    if section == "android":
        if key == "packageName":
            return _package(value)
        if key == "sha256CertFingerprints":
            return _fingerprints(value)
        return _scheme(value, "android.scheme")
    return _web_fallback(value)


def apply_platforms_patch(current: Platforms, body: object) -> Platforms:
    """Validate a PATCH body (see the module docstring) and return the result."""
    if not isinstance(body, Mapping):
        raise ValidationError("the body must be a JSON object with ios, android or web")
    result = current
    for section, patch in body.items():
        if section not in _SECTIONS:
            raise ValidationError(
                f"unknown platform {section!r}; known: ios, android, web", field=str(section)
            )
        if patch is None:
            patch = dict.fromkeys(_SECTIONS[section])
        if not isinstance(patch, Mapping):
            raise ValidationError(f"{section} must be an object", field=section)
        changes: dict[str, object] = {}
        for key, value in patch.items():
            attr = _SECTIONS[section].get(key)
            if attr is None:
                raise ValidationError(
                    f"unknown field {section}.{key}; known: {', '.join(_SECTIONS[section])}",
                    field=f"{section}.{key}",
                )
            changes[attr] = _clean(section, key, value)
        result = attrs.evolve(result, **{section: attrs.evolve(getattr(result, section),
                                                               **changes)})
    return result


# -- association files -------------------------------------------------------------


def _aasa_components(base_path: str = "") -> list[dict[str, object]]:
    """Every short link, and nothing else: ``base_path`` (the public URL's
    path, on the default domain) and the links below it."""
    base = base_path.rstrip("/")
    excluded: list[dict[str, object]] = [
        {"/": base or "/", "exclude": True, "comment": "the bare domain is not a link"},
    ]
    if base:
        excluded.append({"/": base + "/", "exclude": True})
    for word in sorted(RESERVED_SLUGS):
        excluded.append({"/": f"{base}/{word}", "exclude": True, "caseSensitive": False})
        excluded.append({"/": f"{base}/{word}/*", "exclude": True, "caseSensitive": False})
    return [*excluded, {"/": f"{base}/*", "comment": "every short link opens the app"}]


def apple_app_site_association(platforms: Platforms | Iterable[Platforms], *,
                               base_path: str = "") -> dict[str, object]:
    """The ``apple-app-site-association`` document (serve as application/json)
    of one project's platforms or of several (the default domain's): one
    entry listing every app, as every app's links are matched alike. An
    entry each repeated the same 50 components: about 2.8 KB an app, past
    the 128 KB Apple reads at about 47 apps, and iOS then drops the whole
    file. ``base_path``: the public URL's path, which the links are under
    (``https://example.com/go``: only ``/go/*``; without it the operator's
    whole site opened the apps)."""
    every = [platforms] if isinstance(platforms, Platforms) else list(platforms)
    app_ids = list(dict.fromkeys(p.ios.app_id for p in every if p.ios.app_id is not None))
    details: list[dict[str, object]] = []
    if app_ids:
        details.append({"appIDs": app_ids, "components": _aasa_components(base_path)})
    return {"applinks": {"details": details}}


def assetlinks(platforms: Platforms) -> list[dict[str, object]]:
    """The ``assetlinks.json`` statement list (serve as application/json)."""
    android = platforms.android
    if android.package_name is None or not android.sha256_cert_fingerprints:
        return []
    return [{
        "relation": ["delegate_permission/common.handle_all_urls"],
        "target": {
            "namespace": "android_app",
            "package_name": android.package_name,
            "sha256_cert_fingerprints": list(android.sha256_cert_fingerprints),
        },
    }]
