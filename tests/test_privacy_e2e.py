"""Privacy is structural: after real traffic with distinctive client addresses,
user agents and referrer paths, none of them is in any file of the data dir or
in any log line. Only reduced facts (platform, country, referrer host) are."""

from __future__ import annotations

import ipaddress
import os

import httpx
import pytest

from tests.server_process import ServerProcess

pytestmark = pytest.mark.e2e

ADDRESSES = ["203.0.113.197", "198.51.100.23", "2001:db8:abcd:12::7"]
AGENT = ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
         "(KHTML, like Gecko) Version/26.0 Mobile/15E148 Safari/604.1 DistinctAgentMarker/77")
REFERRER = "https://news.example/private-article-slug-4711?utm_secret=needle9931"


def test_no_address_agent_or_referrer_path_is_stored_or_logged(
        server_factory: type[ServerProcess]) -> None:
    srv = server_factory(env={"SVC_COUNTRY_HEADER": "CF-IPCountry",
                              "SVC_CLIENT_IP_HEADER": "X-Forwarded-For"}).start()
    with srv.client("sk_live") as c:
        assert c.patch("/v1/deferred/settings", json={
            "probabilisticMatching": True, "probabilisticIpMatching": True,
            "iosLandingPage": True}).status_code == 200
        assert c.patch("/v1/platforms", json={"ios": {"appStoreId": "1234567890"}}
                       ).status_code == 200
        link = c.post("/v1/links", json={"path": "/p"}).json()
    for ip in ADDRESSES:
        with srv.client(**{"user-agent": AGENT, "referer": REFERRER, "x-forwarded-for": ip,
                           "cf-ipcountry": "NL"}) as c:
            r = c.get(f"/{link['slug']}")
            assert r.status_code == 200  # the landing page
    srv.stop()
    needles = [AGENT.encode(), b"DistinctAgentMarker", b"private-article-slug-4711",
               b"needle9931"]
    for ip in ADDRESSES:
        needles.append(ip.encode())
        if ipaddress.ip_address(ip).version == 6:  # 4 packed bytes could occur by chance
            needles.append(ipaddress.ip_address(ip).packed)
        needles.append(str(ipaddress.ip_address(ip).exploded).encode())
    found_files = 0
    for root, _, files in os.walk(srv.data_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                blob = f.read()
            found_files += 1
            for n in needles:
                assert n not in blob, (name, n)
            assert b"news.example" in blob or name != "data.mdb"  # the host is kept
    assert found_files >= 1
    logs = srv.logs()
    for n in needles:
        assert n.decode("latin-1") not in logs, n


def test_no_secret_is_ever_logged(server_factory: type[ServerProcess]) -> None:
    srv = server_factory().start()
    keys, owner = srv.info["keys"], srv.info["owner"]
    with srv.client("sk_live") as c:
        hook = c.post("/v1/webhooks/endpoints", json={"url": "https://localhost:9/h"}).json()
        rotated = c.post(f"/v1/webhooks/endpoints/{hook['id']}/rotate-secret").json()
        c.patch("/v1/deferred/settings", json={"iosLandingPage": True})
        c.get("/v1/deferred/settings", headers={"authorization": "Bearer sk_live_" + "x" * 32})
    with srv.client("pk_live") as c:
        c.post("/v1/sdk/links", json={"path": "/x"})
    with httpx.Client(base_url=srv.url) as c:  # a failed and a good dashboard sign-in
        page = c.get("/dashboard")
        token = page.text.split('name="csrf" value="')[1].split('"')[0] \
            if 'name="csrf" value="' in page.text else ""
        answers = [c.post("/dashboard/sign-in", data={"email": owner["email"],
                                                        "password": password, "csrf": token})
                   for password in ("wrong-password-123", owner["password"])]
        assert answers[0].status_code in (400, 401, 403) and answers[1].status_code in (302, 303)
    srv.stop()
    logs = srv.logs()
    secrets = [*keys.values(), owner["password"], "wrong-password-123", hook["secret"],
               rotated.get("secret", hook["secret"])]
    for secret in secrets:
        assert secret not in logs, secret[:8]
    assert "POST /v1/webhooks/endpoints 201" in logs  # the requests were logged, safely
