"""A user's home is a zonal disk made where their first server ran; every later server of that user can
only start in that zone. So notebooks start only in zones every offered GPU pool reaches (GKE/EKS review:
aws-prod's l4x4 pool has groups in us-east-1a and 1b only, and a home made in 1c could never start the
l4x4 profile: Kueue would admit it and the spawn would time out, every time)."""

from __future__ import annotations

import pytest

from gpu_platform.components.cluster import GpuPoolSpec
from gpu_platform.components.platform.notebooks import ZONE_LABEL, home_zones
from tests.conftest import plan_stack


def pool(name, zones):
    return GpuPoolSpec(name=name, instance_type="t", gpu_model="g", gpus_per_node=1, min_nodes=0, max_nodes=1,
                       capacity="spot", node_labels={}, zones=tuple(zones))


ABC = ("z-a", "z-b", "z-c")


@pytest.mark.parametrize("pools, system, expected", [
    ([pool("a", ABC)], ABC, []),                                  # every pool everywhere: no restriction
    ([pool("a", ABC), pool("b", ABC[:2])], ABC, ["z-a", "z-b"]),  # the two-zone pool decides
    ([pool("a", ABC[1:]), pool("b", ABC[:2])], ABC, ["z-b"]),
    ([pool("a", ["z-a"]), pool("b", ["z-c"])], ABC, []),          # nothing shared: cannot help, none
    ([pool("a", ABC), pool("b", ())], ABC, []),                   # a pool's zones unknown
    ([pool("a", ABC[:2])], (), []),                               # system zones unknown (existing VPC, Linode)
    ([], ABC, []),
    # GKE/EKS review 2026-11-28: a one-zone system pool beside pools in three zones. A first GPU server in
    # z-b makes the home there; the CPU profile (system nodes, z-a only) could never start for that user.
    ([pool("a", ABC)], ("z-a",), ["z-a"]),
    ([pool("a", ABC), pool("b", ABC[:2])], ABC[:2], ["z-a", "z-b"]),   # pool a reaches z-c, nobody else
])
def test_home_zones(pools, system, expected):
    assert home_zones(pools, system) == expected


def _singleuser(stack):
    (hub,) = [r for r in plan_stack(stack).by_type("kubernetes:helm.sh/v3:Release") if "jupyterhub" in r.name]
    return hub.plain_inputs["values"]["singleuser"]


def test_aws_prod_notebooks_start_only_where_the_l4x4_pool_has_nodes():
    required = _singleuser("aws-prod")["extraNodeAffinity"]["required"]
    assert required == [{"matchExpressions": [{"key": ZONE_LABEL, "operator": "In",
                                               "values": ["us-east-1a", "us-east-1b"]}]}]


def test_gcp_prod_notebooks_start_only_in_the_zonal_system_pools_zone():
    """gcp-prod's system pool is in us-central1-a only (the zonal layout), its A100 pool in a, b and c: a
    first GPU notebook in b would make the user's home there, where the CPU profile never runs."""
    required = _singleuser("gcp-prod")["extraNodeAffinity"]["required"]
    assert required == [{"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["us-central1-a"]}]}]


@pytest.mark.parametrize("stack", ["linode-dev"])
def test_no_restriction_where_there_are_no_zones(stack):
    assert _singleuser(stack)["extraNodeAffinity"] == {"required": []}


def test_fit_places_a_zone_restricted_gpu_notebook_on_its_pools_group_in_that_zone():
    """aws-prod's a10g pool is three groups named a10g (one per zone). Fit judged a flavor's groups in a
    dict keyed by name, so only the last zone's group counted: the notebooks held to 1a and 1b were
    'never schedulable' on a10g, which has groups in both."""
    from gpu_platform.config.stack import parse_config
    from gpu_platform.preflight.fit.checks import check_fit
    from gpu_platform.preflight.fit.nodes import cluster_model
    from gpu_platform.preflight.runner import load_stack
    from tests.fit_support import need_charts, rendered, stack_plan

    need_charts()
    cfg = parse_config(load_stack("aws-prod").raw, "aws-prod")
    model = cluster_model(cfg, stack_plan("aws-prod"))
    zones = {g.labels.get(ZONE_LABEL) for g in model.node_groups if g.name == "a10g"}
    assert zones == {"us-east-1a", "us-east-1b", "us-east-1c"}
    report = check_fit(model, [r for r in rendered("aws-prod") if r.rendered])
    assert not [p for p in report.problems if "profile gpu-a10g" in p.object], report.problems


def test_the_rehearsals_zone_drill_homes_the_notebook_where_the_hub_lets_it_start():
    """The zone drill put the drill's home in the pool's second zone; with gcp-prod's notebooks held to
    us-central1-a (home_zones) that notebook could never start there and the drill failed."""
    from gpu_platform.rehearsal.hub import _drop_zone_affinity, _required_zones

    spec = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["z-a"]},
                              {"key": "other", "operator": "Exists"}]}]}}}}
    assert _required_zones(spec, list(ABC)) == {"z-a"}
    assert _required_zones({}, list(ABC)) == set(ABC)
    _drop_zone_affinity(spec)
    assert _required_zones(spec, list(ABC)) == set(ABC)
    assert spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"matchExpressions": [{"key": "other", "operator": "Exists"}]}]
    # gcp-prod's rule is the zone alone: dropping it must not leave an empty term (which matches no node).
    only_zone = {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": ["z-a"]}]}]}}}}
    _drop_zone_affinity(only_zone)
    assert only_zone == {"affinity": {"nodeAffinity": {}}}
