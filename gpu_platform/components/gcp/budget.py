"""A Cloud Billing budget on the stack's project: e-mail at 25/50/75/100 % of actual spend and at
100 % of forecast spend, through Cloud Monitoring notification channels (one per alertEmails entry).

The Budget API bills its quota to a project, so this component has its own gcp provider with
`user_project_override` and `billing_project` set to the stack's project; without them, `pulumi up`
with user credentials fails with "billingbudgets.googleapis.com requires a quota project".
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

import pulumi
import pulumi_gcp
from pulumi_gcp import billing, monitoring, organizations

# (fraction of the budget, what it is compared with)
THRESHOLDS: tuple[tuple[float, str], ...] = (
    (0.25, "CURRENT_SPEND"),
    (0.50, "CURRENT_SPEND"),
    (0.75, "CURRENT_SPEND"),
    (1.00, "CURRENT_SPEND"),
    (1.00, "FORECASTED_SPEND"),
)


@dataclass(frozen=True)
class BudgetArgs:
    project: str
    billing_account: str
    monthly_budget_usd: float
    alert_emails: Sequence[str]
    resource_prefix: str
    labels: Mapping[str, str] = field(default_factory=dict)


def threshold_rules() -> list[dict[str, Any]]:
    return [{"threshold_percent": pct, "spend_basis": basis} for pct, basis in THRESHOLDS]


def budget_amount(usd: float) -> dict[str, Any]:
    """A fixed monthly amount in USD (units + nanos, as the Budget API wants money)."""
    cents = round(usd * 100)
    return {"specified_amount": {"currency_code": "USD", "units": str(cents // 100),
                                 "nanos": (cents % 100) * 10_000_000}}


def budget_display_name(prefix: str, project: str) -> str:
    return f"gpu-platform {prefix} ({project})"[:60]


class GcpBudget(pulumi.ComponentResource):
    """Outputs: budget_name; `alerts` lists the budget and its notification channels."""

    def __init__(self, name: str, args: BudgetArgs, opts: Optional[pulumi.ResourceOptions] = None):
        super().__init__("gpu-platform:gcp:BillingBudget", name, None, opts)
        self.gcp_provider = pulumi_gcp.Provider(
            f"{name}-gcp", project=args.project, billing_project=args.project, user_project_override=True,
            opts=pulumi.ResourceOptions(parent=self))
        child = pulumi.ResourceOptions(parent=self, provider=self.gcp_provider)
        self.channels = [
            monitoring.NotificationChannel(
                f"{name}-email-{i}",
                project=args.project,
                type="email",
                display_name=f"gpu-platform {args.resource_prefix} budget: {email}",
                labels={"email_address": email},
                user_labels=dict(args.labels),
                opts=child)
            for i, email in enumerate(args.alert_emails)
        ]
        # The budget filter names the project by number; look it up rather than ask the user for it.
        project = organizations.get_project_output(
            project_id=args.project,
            opts=pulumi.InvokeOutputOptions(parent=self, provider=self.gcp_provider))
        self.budget = billing.Budget(
            f"{name}-budget",
            billing_account=args.billing_account,
            display_name=budget_display_name(args.resource_prefix, args.project),
            budget_filter={
                "projects": [project.number.apply(lambda n: f"projects/{n}")],
                "calendar_period": "MONTH",
                "credit_types_treatment": "INCLUDE_ALL_CREDITS",
            },
            amount=budget_amount(args.monthly_budget_usd),
            threshold_rules=threshold_rules(),
            all_updates_rule={
                "monitoring_notification_channels": [c.name for c in self.channels],
                # Billing admins still get the e-mails too.
                "disable_default_iam_recipients": False,
            },
            opts=child)
        self.alerts: list[pulumi.Resource] = [self.budget, *self.channels]
        self.register_outputs({"budgetName": self.budget.name})
