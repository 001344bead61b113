"""Budget guardrail: the idle floor (what the stack costs with no job running) should not eat the monthly
budget. Advisory by default; a stack makes it mandatory in stacks/policy.<stack>.yaml:
    idle-floor-budget-share: mandatory          # or {enforcementLevel: mandatory, maxIdleShare: 0.3}
The budget is the stack's gpu-platform:monthlyBudgetUsd (validated by the config model from the stack config the
pack is handed: gpu_platform/policies/stack_settings.py); the idle floor comes from gpu_platform/costs/estimator over the resources the stack registers."""

from __future__ import annotations

from typing import Any, Optional

from pulumi_policy import EnforcementLevel, PolicyConfigSchema, StackValidationPolicy

from gpu_platform.policies.cost_rules import stack_estimates
from gpu_platform.policies.pools import stack_nodes

DEFAULT_MAX_IDLE_SHARE = 0.5
BUDGET_KEY = "gpu-platform:monthlyBudgetUsd"


def monthly_budget() -> Optional[float]:
    """The stack's monthlyBudgetUsd, validated by the config model from the config the pack was handed
    (gpu_platform/policies/stack_settings.py; None when the pack runs without one)."""
    from gpu_platform.policies.stack_settings import stack_settings

    budget = stack_settings().monthly_budget_usd
    return float(budget) if budget else None


def _validate_idle_share(args: Any, report_violation) -> None:
    from gpu_platform.costs.estimator import EstimateError

    share = float((args.get_config() or {}).get("maxIdleShare", DEFAULT_MAX_IDLE_SHARE))
    budget = monthly_budget()
    if budget is None:
        return  # no budget to compare with; budget-alerts-required covers a stack without one
    try:
        estimates = stack_estimates(stack_nodes(args.resources))
    except (EstimateError, ValueError) as exc:
        report_violation(f"Cannot estimate the stack's idle floor: {exc}.")
        return
    idle = sum(e.idle_monthly_usd for e in estimates)
    if idle > share * budget:
        lines = sorted((ln for e in estimates for ln in e.lines if ln.idle_monthly_usd > 0),
                       key=lambda ln: -ln.idle_monthly_usd)
        top = "; ".join(f"{ln.name}: ${ln.idle_monthly_usd:,.0f}" for ln in lines[:3])
        report_violation(f"With no job running the stack costs about ${idle:,.0f}/month, {100 * idle / budget:.0f} % of "
                         f"its monthly budget of ${budget:,.0f} (monthlyBudgetUsd); at most {100 * share:.0f} % is allowed "
                         f"(maxIdleShare). Largest idle items: {top}. Lower GPU pools' minNodes, shrink the always-on "
                         "parts, or raise the budget.")


idle_floor_budget_share = StackValidationPolicy(
    name="idle-floor-budget-share",
    description="The idle floor (pools at minNodes, control plane, system nodes, fees; priced by gpu_platform/costs/estimator) "
                "stays under a share of the stack's monthlyBudgetUsd. Advisory unless the stack's policy config "
                "makes it mandatory.",
    enforcement_level=EnforcementLevel.ADVISORY,
    config_schema=PolicyConfigSchema(properties={
        "maxIdleShare": {"type": "number", "minimum": 0, "maximum": 1, "default": DEFAULT_MAX_IDLE_SHARE,
                         "description": "Largest share of the monthly budget the idle floor may take."},
    }),
    validate=_validate_idle_share,
)

POLICIES = [idle_floor_budget_share]
