"""Shared steps of the deferred linking tests."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import parse_qs, urlsplit

IOS_UA = ("Mozilla/5.0 (iPhone; CPU iPhone OS 18_6 like Mac OS X) AppleWebKit/605.1.15 "
          "(KHTML, like Gecko) Version/26.0 Mobile/15E148 Safari/604.1")
IOS_17_UA = ("Mozilla/5.0 (iPhone; CPU iPhone OS 17_7 like Mac OS X) AppleWebKit/605.1.15 "
             "(KHTML, like Gecko) Version/17.7 Mobile/15E148 Safari/604.1")
ANDROID_UA = ("Mozilla/5.0 (Linux; Android 10; K) AppleWebKit/537.36 (KHTML, like Gecko) "
              "Chrome/142.0.0.0 Mobile Safari/537.36")
SDK = {"x-svc-sdk": "flutter/0.2.0"}
PLATFORMS = {"ios": {"appStoreId": "1234567890", "bundleId": "com.example.shop",
                     "teamId": "ABCDE12345", "scheme": "exampleshop"},
             "android": {"packageName": "com.example.shop"}}


def new_install() -> str:
    return str(uuid.uuid4())


def init_body(install_id: str, platform: str, *, first: bool = True, os_version: str = "26.1",
              referrer: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"installId": install_id, "isFirstLaunch": first,
                            "sdkVersion": "0.2.0", "platform": platform,
                            "osVersion": os_version}
    if referrer is not None:
        body["installReferrer"] = referrer
    return body


def referrer_from_location(location: str) -> str:
    """The install referrer the Play Store hands the app: the decoded
    ``referrer`` parameter of the store URL."""
    return parse_qs(urlsplit(location).query)["referrer"][0]
