"""Build > SDK: installing the Flutter SDK (``svc_flutter`` 0.2.0, SPEC.md
Versioning) with the project's publishable keys for the current mode and the
service's base URL filled in.

Everyone may read the guide; the key values are shown to the roles that may
see API keys (marketers get a placeholder and a note).
"""

from __future__ import annotations

from quart.typing import ResponseReturnValue

from svc_engine.keys import KeyKind
from svc_engine.roles import Action
from web.dashboard.context import Dashboard, Viewer

SDK_PACKAGE = "svc_flutter"
SDK_VERSION = "0.2.0"


def register(dash: Dashboard) -> None:
    @dash.page("/dashboard/build/sdk", Action.SDK_VIEW)
    async def sdk(viewer: Viewer) -> ResponseReturnValue:
        keys = []
        if viewer.project is not None and viewer.can(Action.KEYS_VIEW):
            keys = [k for k in dash.store.list_keys(viewer.project.id)
                    if k.kind is KeyKind.PUBLISHABLE and k.mode is viewer.mode and k.active]
        sample = keys[0].public_value if keys else f"pk_{viewer.mode.value}_…"
        return await dash.render("sdk.html", viewer, keys=keys, sample_key=sample,
                                 base_url=dash.base_url(), package=SDK_PACKAGE,
                                 version=SDK_VERSION)
