"""Plans and their quotas.

| plan    | links per org | projects per org | webhooks | team members |
|---------|---------------|------------------|----------|--------------|
| starter | 1,000         | 1                | no       | 3            |
| growth  | 100,000       | 10               | yes      | 25           |
| scale   | unlimited     | unlimited        | yes      | unlimited    |

Counts cover both modes. ``None`` means unlimited. The bootstrap organization
starts on Growth. Webhooks need Growth or higher (SPEC.md Limits): below it,
endpoints are kept but cannot be listed and nothing is sent.
"""

from __future__ import annotations

import enum

import attrs

from svc_engine.errors import ValidationError


class Plan(enum.StrEnum):
    STARTER = "starter"
    GROWTH = "growth"
    SCALE = "scale"


@attrs.frozen
class Quota:
    links: int | None
    projects: int | None
    webhooks: bool
    members: int | None
    price: str


QUOTAS: dict[Plan, Quota] = {
    Plan.STARTER: Quota(links=1_000, projects=1, webhooks=False, members=3, price="free"),
    Plan.GROWTH: Quota(links=100_000, projects=10, webhooks=True, members=25, price="$49/month"),
    Plan.SCALE: Quota(links=None, projects=None, webhooks=True, members=None, price="contact us"),
}


def parse_plan(value: str) -> Plan:
    try:
        return Plan(value.strip().lower())
    except ValueError:
        raise ValidationError(
            f"unknown plan {value!r}; one of starter, growth, scale", field="plan"
        ) from None


def within(limit: int | None, used: int) -> bool:
    """True while one more fits under ``limit`` (None is unlimited)."""
    return limit is None or used < limit
