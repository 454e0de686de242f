"""Settings > Webhooks in headless Chromium against the real service on a real
socket, delivering to a real HTTPS receiver on loopback (a trustme CA the
service trusts through SVC_WEBHOOK_CA_BUNDLE): add an endpoint, copy its
secret, send a test, watch the delivery become Delivered, open it from the
list; and the pages on a phone.

Playwright's sync API runs its own event loop, so these are plain test
functions (not trio) and the receiver runs in a thread. A failed test leaves a
screenshot under test-output/screenshots/.
"""

from __future__ import annotations

import http.server
import json
import re
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import standardwebhooks
import trustme
from playwright.sync_api import expect

from tests.server_process import ServerProcess
from tests.test_dashboard_browser import Save, launched_chromium, signed_in_page

pytestmark = pytest.mark.browser
DELIVERED_WITHIN_S = 10.0


class Receiver(http.server.ThreadingHTTPServer):
    """An HTTPS webhook receiver on 127.0.0.1 (certificate for localhost) that
    keeps every request and answers 200."""

    def __init__(self, ca: trustme.CA) -> None:
        self.hits: list[tuple[dict[str, str], bytes]] = []
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("localhost", "127.0.0.1").configure_cert(ctx)
        self.socket = ctx.wrap_socket(self.socket, server_side=True)

    @property
    def url(self) -> str:
        return f"https://localhost:{self.server_address[1]}/svc-hook"


class _Handler(http.server.BaseHTTPRequestHandler):
    server: Receiver

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("content-length", "0")))
        with self.server.lock:
            self.server.hits.append(({k.lower(): v for k, v in self.headers.items()}, body))
        reply = b'{"received": true}'
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def receiver_and_server(tmp_path_factory: pytest.TempPathFactory
                        ) -> Iterator[tuple[Receiver, ServerProcess]]:
    tmp = tmp_path_factory.mktemp("dashboard-webhooks")
    ca = trustme.CA()
    ca_path = Path(tmp) / "webhook-ca.pem"
    ca.cert_pem.write_to_path(str(ca_path))
    receiver = Receiver(ca)
    threading.Thread(target=receiver.serve_forever, daemon=True).start()
    srv = ServerProcess(str(tmp / "data"), log_dir=str(tmp),
                        env={"SVC_WEBHOOK_CA_BUNDLE": str(ca_path)}).start()
    yield receiver, srv
    srv.kill()
    receiver.shutdown()
    receiver.server_close()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    with launched_chromium() as b:
        yield b


def test_add_an_endpoint_send_a_test_and_see_it_delivered(
        chromium: Any, receiver_and_server: tuple[Receiver, ServerProcess],
        failure_screenshot: Save) -> None:
    receiver, server = receiver_and_server
    with signed_in_page(chromium, server, failure_screenshot, "desktop",
                        viewport={"width": 1280, "height": 900}) as page:
        page.get_by_role("navigation", name="Dashboard").get_by_role(
            "link", name="Webhooks").click()
        expect(page.get_by_role("heading", name="Webhooks", level=1)).to_be_visible()
        expect(page.get_by_text("No endpoints in test mode yet")).to_be_visible()
        page.get_by_role("link", name="Add endpoint").first.click()
        page.get_by_label("Endpoint URL").fill(receiver.url)
        page.get_by_label("Description").fill("Browser receiver")
        for event in ("click", "open", "install", "conversion"):   # all four by default
            assert page.get_by_role("checkbox", name=re.compile(f"^{event} ")).is_checked()
        page.get_by_role("button", name="Add endpoint").click()

        secret = page.get_by_role("textbox", name="Signing secret").input_value()
        assert re.fullmatch(r"whsec_[A-Za-z0-9+/=]+", secret)
        expect(page.get_by_text("Copy this secret now.")).to_be_visible()
        copy = page.get_by_role("button", name="Copy")
        expect(copy).to_be_visible()                                  # the script showed it
        copy.click()
        # the label changes when the clipboard promise settles: wait for it
        # (an immediate check failed under load)
        expect(page.get_by_role("button", name="Copied")).to_be_visible(timeout=5_000)

        page.get_by_role("button", name="Send test").click()
        page.wait_for_url(re.compile(r"/dashboard/settings/webhooks/deliveries/[0-9a-f-]{36}"))
        expect(page.get_by_text("Test event sent.")).to_be_visible()
        status = page.locator("h1 .wh-delivery-status")
        deadline = time.monotonic() + DELIVERED_WITHIN_S
        while True:                     # the page refreshes itself; reload if it stopped
            try:
                expect(status).to_have_text("Delivered", timeout=2_000)
                break
            except AssertionError:
                assert time.monotonic() < deadline, "the test delivery was not Delivered"
                page.reload()
        delivery_id = page.url.split("/deliveries/", 1)[1].split("?", 1)[0]

        with receiver.lock:
            [(headers, body)] = receiver.hits
        assert headers["webhook-id"] == delivery_id and headers["svc-event"] == "test"
        event = standardwebhooks.Webhook(secret).verify(body, headers)
        assert event["type"] == "test" and event == json.loads(body)

        page.get_by_role("link", name="Webhooks", exact=True).first.click()
        row = page.get_by_role("row").filter(has_text="Browser receiver")
        expect(row.get_by_text("Active")).to_be_visible()
        expect(row.get_by_text(re.compile(r"^Last success \d"))).to_be_visible()
        assert secret not in page.content()                       # shown once
        page.get_by_role("link", name=f"test delivery {delivery_id}").click()
        page.wait_for_url(re.compile(f"/deliveries/{delivery_id}$"))
        assert page.locator("h1").inner_text().startswith("Test event")
        response = page.get_by_role("region", name="Response")
        expect(response.get_by_text("HTTP 200")).to_be_visible()
        assert '"received": true' in page.get_by_label("Response body", exact=True).inner_text()
        sent = page.get_by_label("Request body", exact=True).inner_text()
        assert '"type": "test"' in sent and json.loads(sent) == json.loads(body)
        attempts = page.get_by_role("region", name="Attempts")
        assert attempts.get_by_role("row").filter(has_text="Delivered").count() == 1
        expect(page.get_by_role("button", name="Resend")).to_be_visible()


def test_webhook_pages_fit_a_phone(chromium: Any,
                                   receiver_and_server: tuple[Receiver, ServerProcess],
                                   failure_screenshot: Save) -> None:
    receiver, server = receiver_and_server
    with server.client("sk_test") as c:
        endpoint = c.post("/v1/webhooks/endpoints", json={
            "url": receiver.url + "/" + "long-path-segment" * 6,
            "description": "A description long enough to wrap on a phone " * 3}).json()
        delivery = c.post(f"/v1/webhooks/endpoints/{endpoint['id']}/test").json()
    with signed_in_page(chromium, server, failure_screenshot, "phone",
                        viewport={"width": 390, "height": 844}, is_mobile=True) as page:
        base = "/dashboard/settings/webhooks"
        for path in (base, base + "/new", f"{base}/{endpoint['id']}",
                     f"{base}/{endpoint['id']}/edit", f"{base}/{endpoint['id']}/delete",
                     base + "/deliveries", f"{base}/deliveries/{delivery['id']}"):
            page.goto(path)
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= 390, (path, width)
