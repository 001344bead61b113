"""Issue 33 item 5: GKE zones in cluster fit.

A GKE node pool's nodes are in the zones of its nodeLocations and carry topology.kubernetes.io/zone. The
notebooks are held to the zones every GPU profile's pool reaches (a home is a zonal disk:
components/platform/notebooks.py home_zones). Fit modelled a GKE pool as one group without a zone label, so
a stack whose A100 pool reaches two zones beside an L4 pool in three failed every notebook profile with
"required node affinity not satisfied" (a false failure: GKE schedules them). The test stack
tests/data/stacks/Pulumi.gke-zone-sets.yaml is that stack."""

from __future__ import annotations

import copy

import pytest

from gpu_platform.components.platform.notebooks import ZONE_LABEL
from gpu_platform.config.stack import parse_config
from gpu_platform.preflight.fit.checks import check_fit, unmet_node_affinity
from gpu_platform.preflight.fit.nodes import cluster_model
from gpu_platform.preflight.fit.render import render_plan
from gpu_platform.preflight.runner import load_stack_file, run_program
from tests.conftest import ROOT
from tests.fit_support import CHART_DIRS, need_charts

STACK_FILE = ROOT / "tests" / "data" / "stacks" / "Pulumi.gke-zone-sets.yaml"
A, B, C = "europe-west4-a", "europe-west4-b", "europe-west4-c"
NOTEBOOK = "Pod/jupyterhub/jupyter-<user>"


@pytest.fixture(scope="module")
def stack():
    stack_input = load_stack_file(STACK_FILE)
    cfg = parse_config(stack_input.raw, "gke-zone-sets")
    plan = run_program(stack_input)
    return cfg, plan


@pytest.fixture(scope="module")
def releases(stack):
    need_charts()
    cfg, plan = stack
    return [r for r in render_plan(plan, CHART_DIRS, kubernetes_version=cfg.kubernetes_version) if r.rendered]


def _zones(model, name):
    return sorted(g.zone for g in model.node_groups if g.name == name)


def test_each_gke_pool_is_a_group_per_zone_of_its_node_locations(stack):
    cfg, plan = stack
    model = cluster_model(cfg, plan)
    assert _zones(model, "a100") == [A, B]
    assert _zones(model, "l4") == [A, B, C]
    assert _zones(model, "system") == [A, B, C]
    for g in model.node_groups:
        assert g.labels[ZONE_LABEL] == g.zone and g.labels["cloud.google.com/gke-nodepool"] == g.name
    # The pools' total limits are kept: split over the zones, as GKE's BALANCED policy spreads them.
    for pool, lo, hi in (("a100", 0, 4), ("l4", 0, 6), ("system", 1, 3)):
        groups = [g for g in model.node_groups if g.name == pool]
        assert (sum(g.min_nodes for g in groups), sum(g.max_nodes for g in groups)) == (lo, hi)


def test_the_notebooks_are_held_to_the_zones_both_gpu_pools_reach(stack):
    _, plan = stack
    (hub,) = [r for r in plan.by_type("kubernetes:helm.sh/v3:Release") if r.plain_inputs.get("name") == "jupyterhub"]
    assert hub.plain_inputs["values"]["singleuser"]["extraNodeAffinity"]["required"] == [
        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [A, B]}]}]


def test_fit_places_every_notebook_profile_in_the_zones_it_is_held_to(stack, releases):
    """The false failure: before, every profile was 'never schedulable' (required node affinity not satisfied)."""
    cfg, plan = stack
    model = cluster_model(cfg, plan)
    report = check_fit(model, releases)
    assert not [p for p in report.problems if p.object.startswith(NOTEBOOK)], report.problems
    placed = {(pl.object, pl.group, pl.zone) for pl in report.placements if pl.object.startswith(NOTEBOOK)}
    assert placed and {z for _, _, z in placed} <= {A, B}, placed
    for profile in ("cpu", "gpu-a100", "gpu-l4"):
        verdict = report.verdicts[f"{NOTEBOOK} (profile {profile})"]
        assert verdict["outcome"] == "runs", verdict


def test_a_notebook_held_to_a_zone_its_pool_does_not_reach_fails_naming_the_rule(stack, releases):
    """The real unsatisfiable case: homes held to europe-west4-c, where the A100 pool has no node. The
    A100 profile can never start there; fit says so and names the zone rule and what the nodes carry."""
    cfg, plan = stack
    model = cluster_model(cfg, plan)
    releases = [copy.deepcopy(r) for r in releases]
    hub = next(r for r in releases if r.name == "jupyterhub")
    hub.values["singleuser"]["extraNodeAffinity"]["required"] = [
        {"matchExpressions": [{"key": ZONE_LABEL, "operator": "In", "values": [C]}]}]
    report = check_fit(model, releases)
    stuck = [p for p in report.problems if p.object == f"{NOTEBOOK} (profile gpu-a100)" and p.check == "schedulable"]
    assert stuck, report.problems
    reason = stuck[0].reason
    assert f"a100 ({A}): required node affinity not satisfied: {ZONE_LABEL} In [{C}] (its nodes: {ZONE_LABEL}={A})" \
        in reason, reason
    assert f"a100 ({B})" in reason
    # The L4 and CPU profiles still run in C.
    assert not [p for p in report.problems if p.object in (f"{NOTEBOOK} (profile gpu-l4)", f"{NOTEBOOK} (profile cpu)")]


@pytest.mark.parametrize("affinity, labels, expected", [
    (None, {}, None),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["x"]}]}]}}}, {"k": "x"}, None),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["x", "y"]}]}]}}}, {"k": "z"},
     "required node affinity not satisfied: k In [x, y] (its nodes: k=z)"),
    ({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "Exists"}]},
        {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1"]}, {"key": "b", "operator": "NotIn", "values": ["2"]}]}]}}},
     {"a": "1", "b": "2"},
     "required node affinity not satisfied: k Exists (its nodes: no k label) or b NotIn [2] (its nodes: b=2)"),
])
def test_an_unmet_node_affinity_names_its_rule(affinity, labels, expected):
    assert unmet_node_affinity(affinity, labels) == expected
