"""idle-floor-budget-share: advisory when the idle floor alone takes more than a share of monthlyBudgetUsd,
mandatory when the stack's policy config says so. Run through the real pack process (gpu_platform.preflight.analyzer)."""

from __future__ import annotations

import pytest

from gpu_platform.preflight.analyzer import Analyzer
from tests.test_policy_pack import gke, plan_of

POLICY = "idle-floor-budget-share"


def _idle_floor(program) -> float:
    """The idle floor the policy computes, from the same plan (gpu_platform.costs.estimator via gpu_platform.policies.cost_rules)."""
    from gpu_platform.costs.estimator import estimate
    from gpu_platform.policies.cost_rules import stack_shapes
    from gpu_platform.policies.pools import stack_nodes

    class R:  # the shape of a pulumi_policy resource that stack_nodes reads
        def __init__(self, r):
            self.resource_type, self.urn, self.name, self.props = r.type, r.urn, r.name, r.plain_inputs
            self.dependencies, self.provider = [], None

    plan = plan_of(program)
    return sum(estimate(s).idle_monthly_usd for s in stack_shapes(stack_nodes([R(r) for r in plan.resources])))


@pytest.fixture(scope="module")
def budget_400():
    with Analyzer(stack_config={"gpu-platform:monthlyBudgetUsd": "400"}) as a:
        yield a


WARM = gke(pool={"autoscaling": {"total_min_node_count": 1, "total_max_node_count": 8}})  # one A100 always on


def test_idle_floor_over_half_the_budget_is_advisory_by_default(budget_400):
    report = budget_400.analyze(plan_of(WARM))
    res = report.result(POLICY)
    assert res.status == "advisory" and all(m.level == "advisory" for m in res.messages)
    msg = res.messages[0].message
    assert "% of its monthly budget of $400" in msg and "maxIdleShare" in msg and "gpu pool" in msg


def test_scale_to_zero_pool_passes_and_the_share_is_configurable(budget_400):
    assert budget_400.analyze(plan_of(gke())).result(POLICY).status == "pass"  # only the GKE fee and NAT idle
    # the same stack with a 10 % share: the $73 cluster fee alone is 18 % of $400
    report = budget_400.analyze(plan_of(gke()), {POLICY: {"maxIdleShare": 0.1}})
    assert report.result(POLICY).status == "advisory"


def test_the_stack_config_makes_it_mandatory(budget_400):
    report = budget_400.analyze(plan_of(WARM), {POLICY: "mandatory"})
    assert report.result(POLICY).status == "mandatory"


def test_message_numbers_are_the_estimators(budget_400):
    idle = _idle_floor(WARM)
    msg = budget_400.analyze(plan_of(WARM)).result(POLICY).messages[0].message
    assert f"about ${idle:,.0f}/month, {100 * idle / 400:.0f} %" in msg


def test_no_budget_in_the_stack_config_means_nothing_to_compare():
    with Analyzer(stack_config={}) as a:
        assert a.analyze(plan_of(WARM)).result(POLICY).status == "pass"
