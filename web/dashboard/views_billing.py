"""Settings > Billing: everyone sees the plan, usage against its quotas and what
each plan includes; owners change the plan (SPEC.md rule 6).

A change that would leave the organization over a quota of the new plan is
refused with what to remove first (svc_engine/billing.py). There is no payment
provider: the plan is a setting of the organization, also set by
``svc plan set``.
"""

from __future__ import annotations

from quart import Response, request, url_for
from quart.typing import ResponseReturnValue

from svc_engine.billing import Usage, check_plan_change, meters
from svc_engine.errors import ValidationError
from svc_engine.plans import QUOTAS, Plan, parse_plan
from svc_engine.records import Organization
from svc_engine.roles import Action
from web.dashboard.context import Dashboard, Viewer, see_other


def register(dash: Dashboard) -> None:
    dash.notices.update({"plan-changed": "The plan was changed."})

    def usage(org: Organization) -> Usage:
        projects = dash.store.list_projects(org.id)
        # the organization's live links as link creation counts them for the
        # quota (one read, where counting the listing read every link)
        return Usage(links=dash.services.links.org_link_count(org.id),
                     projects=len(projects), members=len(dash.store.members_of(org.id)))

    async def billing_page(viewer: Viewer, *, status: int = 200,
                           error: str | None = None) -> Response:
        assert viewer.org is not None
        return await dash.render("billing.html", viewer, status=status, error=error,
                                 meters=meters(viewer.org.plan, usage(viewer.org)),
                                 plans=list(Plan), quotas=QUOTAS)

    @dash.page("/dashboard/settings/billing", Action.BILLING_VIEW)
    async def billing(viewer: Viewer) -> ResponseReturnValue:
        return await billing_page(viewer)

    @dash.page("/dashboard/settings/billing/plan", Action.BILLING_MANAGE, methods=("POST",))
    async def change_plan(viewer: Viewer) -> ResponseReturnValue:
        assert viewer.org is not None
        try:
            plan = parse_plan((await request.form).get("plan", ""))
            check_plan_change(plan, usage(viewer.org))
        except ValidationError as e:
            return await billing_page(viewer, status=400, error=e.message)
        await dash.store.set_plan(viewer.org.id, plan)
        return see_other(url_for("billing", done="plan-changed"))
