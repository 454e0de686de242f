"""Build > Platforms: the project's iOS app, Android app and web fallback, and
the association files they produce. Everyone sees them; owners, admins and
developers change them (svc_engine/roles.py).

The same page holds the hosts links made with the publishable key may point
at (``sdkAllowedHosts``, svc_engine/destinations.py): a form of its own,
one host a line, validated by ``apply_destinations_patch`` and saved with
``LinksStore.patch_link_destinations``, as ``PATCH /v1/link-destinations``
does. They are app settings like the others here, so the same roles change
them.

The form is the ``PATCH /v1/platforms`` body with every field (an empty one
as null), validated by ``apply_platforms_patch`` and saved with
``LinksStore.patch_platforms``, so the rules are the API's. The page shows
this project's ``apple-app-site-association`` and ``assetlinks.json`` as
generated now, and where every domain of the project serves them.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlsplit

from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from svc_engine.destinations import FIELD as HOSTS_FIELD
from svc_engine.destinations import apply_destinations_patch
from svc_engine.errors import CallerError
from svc_engine.platforms import (
    Platforms,
    apple_app_site_association,
    apply_platforms_patch,
    assetlinks,
)
from svc_engine.roles import Action
from web.dashboard.context import Dashboard, Viewer, see_other
from web.dashboard.nav import NavEntry
from web.wellknown import AASA, ASSETLINKS

# form field -> (section, PATCH key)
FIELDS: dict[str, tuple[str, str]] = {
    "ios_app_store_id": ("ios", "appStoreId"), "ios_bundle_id": ("ios", "bundleId"),
    "ios_team_id": ("ios", "teamId"), "ios_scheme": ("ios", "scheme"),
    "android_package": ("android", "packageName"),
    "android_fingerprints": ("android", "sha256CertFingerprints"),
    "android_scheme": ("android", "scheme"), "web_fallback": ("web", "fallbackUrl"),
}
_BY_API = {f"{section}.{key}": name for name, (section, key) in FIELDS.items()}
LABELS = {"ios_app_store_id": "the App Store ID", "ios_bundle_id": "the Bundle ID",
          "ios_team_id": "the Team ID", "ios_scheme": "the iOS URL scheme",
          "android_package": "the package name",
          "android_fingerprints": "the certificate fingerprints",
          "android_scheme": "the Android URL scheme", "web_fallback": "the web fallback URL",
          "sdk_allowed_hosts": "the allowed hosts"}
HOSTS = "sdk_allowed_hosts"  # the form field of the destination hosts


def register(dash: Dashboard) -> None:
    dash.nav.append(NavEntry("Platforms", "platforms", "Build", icon="phone", order=20))
    dash.notices.update({"platforms-saved": "Saved. The association files and the next taps "
                                            "use the new settings.",
                         "destinations-saved": "Saved. Links the app makes from now on are "
                                               "checked against these hosts."})
    links = dash.services.links

    async def platforms_page(viewer: Viewer, *, status: int = 200, error: str | None = None,
                             error_field: str | None = None,
                             values: dict[str, str] | None = None) -> Response:
        current = links.platforms(viewer.project.id) if viewer.project else Platforms()
        rules = links.link_destinations(viewer.project.id) if viewer.project else None
        shown = {**form_values(current),
                 HOSTS: "\n".join(rules.sdk_allowed_hosts) if rules else "",
                 **(values or {})}
        base = urlsplit(dash.services.config.base_url)  # the files are at the domain's root
        domains = [f"{base.scheme}://{base.netloc}"]
        if viewer.project is not None:
            domains += [f"https://{d}" for d in links.domains_of(viewer.project.id)]
        summary = error
        if error is not None and error_field is not None:
            summary = f"Not saved: check {LABELS[error_field]} below."
        return await dash.render(
            "platforms.html", viewer, status=status, error=summary, error_field=error_field,
            field_message=error,
            values=shown, current=current,
            aasa=pretty(apple_app_site_association(current, base_path=base.path)),
            assetlinks=pretty(
                assetlinks(current)), hosts=domains, aasa_path=AASA,
            assetlinks_path=ASSETLINKS)

    @dash.page("/dashboard/build/platforms", Action.PLATFORMS_VIEW, endpoint="platforms")
    async def platforms_view(viewer: Viewer) -> ResponseReturnValue:
        return await platforms_page(viewer)

    @dash.page("/dashboard/build/platforms", Action.PLATFORMS_MANAGE, methods=("POST",),
               endpoint="save_platforms")
    async def save_platforms(viewer: Viewer) -> ResponseReturnValue:
        form = await request.form
        values = {name: form.get(name, "") for name in FIELDS}
        if viewer.project is None:
            return await platforms_page(viewer, status=400, values=values,
                                        error="Create a project first.")
        patch = patch_of(values)
        try:
            apply_platforms_patch(links.platforms(viewer.project.id), patch)
        except CallerError as e:
            field, message = field_of(e)
            return await platforms_page(viewer, status=e.status, values=values,
                                        error=message, error_field=field)
        await links.patch_platforms(viewer.project.id,
                                    lambda now: apply_platforms_patch(now, patch), None)
        return see_other(url_for("platforms", done="platforms-saved"))

    @dash.page("/dashboard/build/platforms/destinations", Action.PLATFORMS_MANAGE,
               methods=("POST",), endpoint="save_destinations")
    async def save_destinations(viewer: Viewer) -> ResponseReturnValue:
        values = {HOSTS: (await request.form).get(HOSTS, "")}
        if viewer.project is None:
            return await platforms_page(viewer, status=400, values=values,
                                        error="Create a project first.")
        patch = {HOSTS_FIELD: hosts_of(values[HOSTS])}
        try:
            apply_destinations_patch(links.link_destinations(viewer.project.id), patch)
        except CallerError as e:
            return await platforms_page(viewer, status=e.status, values=values,
                                        error=e.message, error_field=HOSTS)
        await links.patch_link_destinations(
            viewer.project.id, lambda now: apply_destinations_patch(now, patch), None)
        return see_other(url_for("platforms", done="destinations-saved"))


def form_values(p: Platforms) -> dict[str, str]:
    return {
        "ios_app_store_id": p.ios.app_store_id or "", "ios_bundle_id": p.ios.bundle_id or "",
        "ios_team_id": p.ios.team_id or "", "ios_scheme": p.ios.scheme or "",
        "android_package": p.android.package_name or "",
        "android_fingerprints": "\n".join(p.android.sha256_cert_fingerprints),
        "android_scheme": p.android.scheme or "", "web_fallback": p.web.fallback_url or "",
    }


def patch_of(values: dict[str, str]) -> dict[str, dict[str, Any]]:
    """The PATCH body of the form: every field, an empty one as null; the
    fingerprints one a line (commas and spaces also separate them)."""
    body: dict[str, dict[str, Any]] = {"ios": {}, "android": {}, "web": {}}
    for name, (section, key) in FIELDS.items():
        text = values.get(name, "").strip()
        if name == "android_fingerprints":
            body[section][key] = text.replace(",", " ").split()
        else:
            body[section][key] = text or None
    return body


def hosts_of(text: str) -> list[str]:
    """The destination hosts of the form: one a line (commas and spaces also
    separate them); an empty field is the empty list (any host)."""
    return text.replace(",", " ").split()


def field_of(e: CallerError) -> tuple[str | None, str]:
    """The form field an error is about (``ios.teamId`` or a message naming it)."""
    api = getattr(e, "field", None) or e.message.split(" ", 1)[0].rstrip(":")
    return _BY_API.get(str(api)), e.message


def pretty(document: object) -> str:
    return json.dumps(document, indent=2)
