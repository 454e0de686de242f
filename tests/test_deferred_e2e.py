"""Every deferred linking flow end to end: the real service process on a real
socket, driven the way a phone, a browser and the integrator's server would."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from tests.deferred_helpers import (
    ANDROID_UA,
    IOS_UA,
    PLATFORMS,
    SDK,
    init_body,
    new_install,
    referrer_from_location,
)
from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e
ENV = {"SVC_COUNTRY_HEADER": "CF-IPCountry"}


@pytest.fixture
def srv(server_factory: type[ServerProcess]) -> ServerProcess:
    return server_factory(env=ENV).start()


def configure(srv: ServerProcess, **settings: object) -> None:
    with srv.client("sk_live") as c:
        assert c.patch("/v1/platforms", json=PLATFORMS).status_code == 200
        assert c.patch("/v1/deferred/settings", json=settings).status_code == 200


def make_link(srv: ServerProcess, path: str) -> dict[str, object]:
    with srv.client("sk_live") as c:
        r = c.post("/v1/links", json={"path": path})
        assert r.status_code == 201
        return r.json()  # type: ignore[no-any-return]


def browser(srv: ServerProcess, ua: str, country: str = "SE") -> httpx.Client:
    return httpx.Client(base_url=srv.url, headers={"user-agent": ua, "cf-ipcountry": country},
                        follow_redirects=False, timeout=10)


def sdk(srv: ServerProcess, country: str = "SE") -> httpx.Client:
    return srv.client("pk_live", **SDK, **{"cf-ipcountry": country})


def test_android_tap_then_init_with_the_referrer(srv: ServerProcess) -> None:
    configure(srv)
    link = make_link(srv, "/product/9")
    with browser(srv, ANDROID_UA) as b:
        r = b.get(f"/{link['slug']}")
    assert r.status_code == 302
    referrer = referrer_from_location(r.headers["location"])
    with sdk(srv) as c:
        body = c.post("/v1/sdk/init", json=init_body(new_install(), "android",
                                                     referrer=referrer),
                      headers={"idempotency-key": "first-launch-a"}).json()
    assert body["link"]["linkId"] == link["id"] and body["link"]["path"] == "/product/9"
    assert body["link"]["method"] == "install_referrer" and body["link"]["isDeferred"]


def test_landing_page_button_then_resolve(srv: ServerProcess) -> None:
    configure(srv, iosLandingPage=True)
    link = make_link(srv, "/product/10")
    with browser(srv, IOS_UA) as b:
        page = b.get(f"/{link['slug']}")
    assert page.status_code == 200
    # the scheme URL's path is the link's: the app routes by it if resolving fails
    button = f"exampleshop://product/10?svc_link={quote(str(link['url']), safe='')}"
    assert f'href="{button}"' in page.text
    iid = new_install()
    with sdk(srv) as c:
        assert c.post("/v1/sdk/init", json=init_body(iid, "ios")).json() == {"link": None}
        opened = c.post("/v1/sdk/resolve", json={"url": button, "installId": iid}).json()
    assert opened["link"]["linkId"] == link["id"]
    assert opened["link"]["method"] == "landing_page" and opened["link"]["isDeferred"]


def test_handoff_created_by_server_claimed_by_app(srv: ServerProcess) -> None:
    configure(srv)
    link = make_link(srv, "/invite/7")
    user = "0b9c3c4a-3f55-4c1e-9e0e-7a1d2f6b8c90"
    with srv.client("sk_live") as c:
        r = c.post("/v1/handoffs", json={"linkId": link["id"], "userId": user,
                                         "expiresInSeconds": 600})
        assert r.status_code == 201
    iid = new_install()
    with sdk(srv) as c:
        c.post("/v1/sdk/init", json=init_body(iid, "android"))
        got = c.post("/v1/sdk/handoffs/claim", json={"userId": user, "installId": iid}).json()
    assert got["link"]["linkId"] == link["id"]
    assert got["link"]["method"] == "authenticated_handoff"


def test_probabilistic_one_candidate(srv: ServerProcess) -> None:
    configure(srv, probabilisticMatching=True)
    link = make_link(srv, "/p/1")
    with browser(srv, IOS_UA, "NO") as b:
        assert b.get(f"/{link['slug']}").status_code == 302
    with sdk(srv, "NO") as c:
        body = c.post("/v1/sdk/init", json=init_body(new_install(), "ios")).json()
    assert body["link"]["linkId"] == link["id"]
    assert body["link"]["confidence"] == "probabilistic"


def test_probabilistic_two_conflicting_links(srv: ServerProcess) -> None:
    configure(srv, probabilisticMatching=True)
    a, b = make_link(srv, "/a"), make_link(srv, "/b")
    with browser(srv, IOS_UA, "FI") as br:
        br.get(f"/{a['slug']}")
        br.get(f"/{b['slug']}")
    with sdk(srv, "FI") as c:
        assert c.post("/v1/sdk/init", json=init_body(new_install(), "ios")).json() == {
            "link": None}


def test_probabilistic_network_hash(srv: ServerProcess) -> None:
    configure(srv, probabilisticMatching=True, probabilisticIpMatching=True)
    link = make_link(srv, "/net")
    # The tap's country header is missing: only the network can tie it.
    with httpx.Client(base_url=srv.url, headers={"user-agent": IOS_UA}) as br:
        br.get(f"/{link['slug']}")
    with srv.client("pk_live", **SDK) as c:
        body = c.post("/v1/sdk/init", json=init_body(new_install(), "ios")).json()
    assert body["link"]["linkId"] == link["id"]
    assert body["link"]["method"] == "probabilistic_match"
