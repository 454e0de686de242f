"""Usage against a plan's quotas (the Billing page) and which plan changes fit.

Usage counts the whole organization, both modes: links in all its projects,
its projects, and its members. A plan change that would leave the organization
over a quota of the new plan (say, a second project on Starter) is refused and
says what to remove first; nothing is deleted on the owner's behalf.
"""

from __future__ import annotations

import attrs

from svc_engine.errors import ValidationError
from svc_engine.plans import QUOTAS, Plan


@attrs.frozen
class Usage:
    links: int
    projects: int
    members: int


@attrs.frozen
class Meter:
    label: str
    used: int
    limit: int | None  # None: unlimited

    @property
    def percent(self) -> int:
        """How full, 0 to 100 (0 when unlimited)."""
        if self.limit is None or self.limit <= 0:
            return 0 if self.limit is None else 100
        return min(100, round(100 * self.used / self.limit))

    @property
    def over(self) -> bool:
        return self.limit is not None and self.used > self.limit


def meters(plan: Plan, usage: Usage) -> list[Meter]:
    q = QUOTAS[plan]
    return [Meter("Links", usage.links, q.links),
            Meter("Projects", usage.projects, q.projects),
            Meter("Team members", usage.members, q.members)]


def check_plan_change(new_plan: Plan, usage: Usage) -> None:
    """Refuse (ValidationError, field "plan") a plan whose quotas the usage exceeds."""
    over = [f"{m.used:,} {m.label.lower()} (the {new_plan.value} plan allows {m.limit:,})"
            for m in meters(new_plan, usage) if m.over]
    if over:
        raise ValidationError(f"this organization has {'; '.join(over)}: remove some first",
                              field="plan")
